//! A task carried sealed in an agent's request and given back with its response.
//!
//! Each response would otherwise cost its scheduler a read of the task (on DynamoDB,
//! five of a five-step task's six reads). A write that sends the task's only call
//! out (a step's, or a creation claimed) seals the task and its order data as
//! written (deflated JSON, encrypted and signed with the deployment's key, bound to
//! the task's id) into the request; the agent, which
//! cannot open it, gives it back. The scheduler decides from it as from an
//! eventually consistent read ([`App::transition`]): its write is conditional on the
//! version and creation it holds, so a task that has moved on since (a cancel, a
//! retry, another response), or whose id now names another task, loses that write
//! and is read again. Anything that does not open is ignored, and the task read.

use std::io::{Read as _, Write as _};

use flate2::Compression;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use tracing::debug;

use super::App;
use super::cursors::Seal;
use sas_domain::decide::Effect;
use sas_domain::ids::TaskId;
use sas_domain::task::{Order, StepState, Task};

/// The most bytes a sealed task may take in a request: ten requests of a batch,
/// with their tasks, stay within one 64 KiB chunk of SQS's billing.
const MAX_SEALED: usize = 4096;

impl Seal {
    /// `task` and `order`, sealed; `None` when they would take more than
    /// [`MAX_SEALED`] bytes.
    fn seal_task(&self, task: &Task, order: &Order) -> Option<String> {
        let json = serde_json::to_vec(&(task, order)).ok()?;
        let mut deflater = DeflateEncoder::new(Vec::new(), Compression::fast());
        deflater.write_all(&json).ok()?;
        let deflated = deflater.finish().ok()?;
        let text = self.seal_bytes(&deflated, &bound_to(&task.id)).ok()?;
        (text.len() <= MAX_SEALED).then_some(text)
    }

    /// The task and order data `sealed` holds, if this deployment sealed them for
    /// the task `id`.
    fn open_task(&self, id: &TaskId, sealed: &str) -> Option<(Task, Order)> {
        let deflated = self.open_bytes(sealed, &bound_to(id))?;
        let mut json = Vec::new();
        DeflateDecoder::new(deflated.as_slice())
            .take(u64::try_from(MAX_SEALED * 64).unwrap_or(u64::MAX))
            .read_to_end(&mut json)
            .ok()?;
        let (task, order): (Task, Order) = serde_json::from_slice(&json).ok()?;
        (task.id == *id && order.task_id == *id).then_some((task, order))
    }
}

/// Whether a write of `task` that performs `effects` carries the task in the
/// request it sends: when it sends one, and that is the task's only call out.
fn carries_itself(effects: &[Effect], task: &Task) -> bool {
    let requests = effects
        .iter()
        .filter(|e| matches!(e, Effect::Dispatch(_)))
        .count();
    let calls_out = task
        .steps
        .iter()
        .filter(|step| matches!(step.state, StepState::Processing | StepState::Compensating))
        .count();
    requests == 1 && calls_out == 1
}

/// What a sealed task is bound to: its id (no listing's cursor is bound so).
fn bound_to(id: &TaskId) -> String {
    format!("task\n{id}")
}

impl App {
    /// `task` and `order`, as written, sealed for the request `effects` send, when
    /// it is the task's only call out, this process carries tasks and the
    /// deployment's key can be read; `None` otherwise (the response then costs a
    /// read). With several calls out (parallel branches, sent together or not), all
    /// but the first response would decide from a task moved on, and lose a write,
    /// which costs more than the read it saves.
    pub(super) async fn sealed_for(
        &self,
        effects: &[Effect],
        task: &Task,
        order: &Order,
    ) -> Option<String> {
        if !self.carries_tasks || !carries_itself(effects, task) {
            return None;
        }
        let seal = self.the_seal().await?;
        let sealed = seal.seal_task(task, order);
        if sealed.is_none() {
            debug!(task_id = %task.id, "task too large to carry in its request: its response reads it");
        }
        sealed
    }

    /// The task and order a response gave back, if this process carries tasks and
    /// they open.
    pub(super) async fn opened_task(&self, id: &TaskId, sealed: &str) -> Option<(Task, Order)> {
        if !self.carries_tasks || sealed.len() > MAX_SEALED {
            return None;
        }
        let opened = self.the_seal().await?.open_task(id, sealed);
        if opened.is_none() {
            debug!(task_id = %id, "a sealed task that does not open: the task is read");
        }
        opened
    }

    async fn the_seal(&self) -> Option<&Seal> {
        self.deployment_seal()
            .await
            .inspect_err(
                |error| debug!(error = %error, "the deployment's key unread: tasks are read"),
            )
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sas_domain::decide::{submit, submit_claimed};
    use sas_domain::submission::Submission;
    use sas_domain::time::Timestamp;
    use sas_domain::workflow::Registry;
    use serde_json::json;

    fn task(id: &str) -> (Task, Order) {
        let drone = Registry::built_in()
            .latest("drone-delivery")
            .expect("drone");
        let id = TaskId::parse(id).expect("id");
        let (task, order, _) = submit(&drone, Submission::new(id, json!({"a": 1})), Timestamp(0));
        (task, order)
    }

    #[test]
    fn a_sealed_task_opens_for_its_id_only_and_nothing_else_opens() {
        let seal = Seal::with_key(&[7; 32]);
        let (task, order) = task("t-1");
        let sealed = seal.seal_task(&task, &order).expect("sealed");
        assert!(!sealed.contains("drone"), "its content hidden: {sealed}");
        assert_eq!(
            seal.open_task(&task.id, &sealed),
            Some((task.clone(), order))
        );
        let other = TaskId::parse("t-2").expect("id");
        assert_eq!(seal.open_task(&other, &sealed), None, "bound to its task");
        let mut tampered = sealed.clone().into_bytes();
        let last = tampered.len() - 1;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).expect("text");
        assert_eq!(seal.open_task(&task.id, &tampered), None, "signed");
        let other_key = Seal::with_key(&[8; 32]);
        assert_eq!(
            other_key.open_task(&task.id, &sealed),
            None,
            "the deployment's"
        );
        assert_eq!(seal.open_task(&task.id, "not sealed"), None);
    }

    #[test]
    fn a_write_carries_its_task_in_its_one_request_only_when_it_is_the_only_call_out() {
        let drone = Registry::built_in()
            .latest("drone-delivery")
            .expect("drone");
        let submission = Submission::new(TaskId::parse("t-2").expect("id"), json!({"a": 1}));
        let (task, _, effects) = submit_claimed(&drone, submission, "s-1", Timestamp(0));
        let dispatch = effects
            .iter()
            .find(|e| matches!(e, Effect::Dispatch(_)))
            .cloned()
            .expect("its first request");
        assert!(carries_itself(&effects, &task), "one request, one call out");

        let mut two_out = task.clone();
        two_out.steps[1].state = StepState::Processing;
        assert!(!carries_itself(&effects, &two_out), "another call out");
        let mut undoing = task.clone();
        undoing.steps[1].state = StepState::Compensating;
        assert!(!carries_itself(&effects, &undoing), "a compensation out");
        let two_requests = [effects.clone(), vec![dispatch]].concat();
        assert!(!carries_itself(&two_requests, &task), "two requests");
        assert!(!carries_itself(&[], &task), "no request");
    }
}
