//! A step that calls a service, through its agent:
//! `{"name": "book-drone", "agent": "drone", "call": "POST /bookings",
//! "compensation": "DELETE /bookings/{results.book-drone.id}"}`, with its budget
//! (`complete_by`), its agent's retries, the supervisor's, its fields, its limit, and
//! a `callback` it may wait for after its service takes the call.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::callback::CallbackView;
use super::{
    CallbackSettings, Kind, KindView, LeaseEnd, NOTHING_TO_UNDO, Reads, Summary, UndoOnFailure,
};
use crate::decide::change::Change;
use crate::flow::Limit;
use crate::messages::Operation;
use crate::services::Directory;
use crate::task::{Order, Step, Waiting};
use crate::workflow::{Endpoint, FieldSource, RetryPolicy, Supervision, Workflow};

mod decide;
pub(crate) mod gates;
mod load;

pub use decide::on_response;
pub use gates::{SLOT_RECHECK, on_granted};
pub(crate) use load::resolve;

/// A step that calls a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallStep {
    /// The agent (remote service) that performs the step.
    pub agent: String,
    /// The service's operation the step calls.
    pub call: Endpoint,
    /// The operation that undoes the step, if it must be undone on failure.
    pub compensation: Option<Endpoint>,
    /// The step changes nothing at its service (a check, a read): it is run again
    /// freely, under a new idempotency key, by any resubmission, and never undone. A
    /// step that is not read-only and has no compensation has an effect that cannot
    /// be undone.
    pub read_only: bool,
    /// The time the step has to complete, from its dispatch.
    pub complete_by: Duration,
    /// The agent's retries.
    pub retry: RetryPolicy,
    /// The supervisor's recovery.
    pub supervision: Supervision,
    /// What the step sends its service, by field name, when the definition says: then
    /// the service sees only these, not the whole input and every earlier result.
    pub fields: Option<BTreeMap<String, FieldSource>>,
    /// With it, the call carries a callback token and the step ends when the token is
    /// used, not when the service answers.
    pub callback: Option<CallbackSettings>,
    /// The step's own limit, narrower than its service's ([`crate::flow`]).
    pub limit: Option<Limit>,
    /// Its service's limit, as the deployment's settings give it
    /// ([`crate::workflow::Registry::limit_services`]).
    pub service_limit: Option<Limit>,
    /// For a call that names its endpoint (a state machine's `http:invoke`), the
    /// deployment's services, when any has a limit: it passes the gate of the one its
    /// endpoint is at too.
    pub endpoints: Option<Arc<Directory>>,
}

impl CallStep {
    /// The gates a call of step `step` of workflow `workflow` passes, in order (its
    /// own, its service's, then for a call to `endpoint` the service it is at), for a
    /// task with `input`: each gate's name and limit.
    #[must_use]
    pub fn gates(
        &self,
        workflow: &str,
        step: &str,
        input: &Value,
        endpoint: Option<&str>,
    ) -> Vec<(String, &Limit)> {
        let own = self
            .limit
            .as_ref()
            .map(|limit| (limit.gate(&format!("step:{workflow}/{step}"), input), limit));
        let service =
            |name: &str, limit| (Limit::gate(limit, &format!("service:{name}"), input), limit);
        let agent = self
            .service_limit
            .as_ref()
            .map(|limit| service(&self.agent, limit));
        let at = endpoint
            .zip(self.endpoints.as_deref())
            .and_then(|(endpoint, services)| {
                let (name, at) = services.serving(endpoint)?;
                Some(service(name, at.limit.as_ref()?))
            });
        own.into_iter().chain(agent).chain(at).collect()
    }
}

impl Kind for CallStep {
    fn start(&self, change: &mut Change, workflow: &Workflow, order: &Order, index: usize) {
        change.dispatch_call(self, workflow, order, index, Operation::Call);
    }

    fn undo(&self, change: &mut Change, workflow: &Workflow, order: &Order, index: usize) {
        change.dispatch_call(self, workflow, order, index, Operation::Compensate);
    }

    fn cancel(&self, _: &mut Change, _: usize) {}

    fn lease_ended(&self, step: &Step) -> LeaseEnd<'_> {
        if step.called_back.is_some() {
            LeaseEnd::Ended
        } else if matches!(step.waiting, Some(Waiting::Slot { .. })) {
            LeaseEnd::SlotsAskedAgain
        } else {
            LeaseEnd::Expired(&self.supervision)
        }
    }

    fn undo_on_failure(&self) -> UndoOnFailure {
        if self.compensation.is_some() {
            UndoOnFailure::Undone
        } else if self.read_only {
            UndoOnFailure::NothingToUndo
        } else {
            UndoOnFailure::LeftInPlace
        }
    }

    fn callback(&self) -> Option<&CallbackSettings> {
        self.callback.as_ref()
    }

    /// Its fields and its path's values where it maps its fields; else all (its
    /// request carries the input and every result so far).
    fn reads(&self) -> Reads<'_> {
        match &self.fields {
            Some(fields) => Reads::only(fields.values().chain(self.call.sources())),
            None => Reads::EVERYTHING,
        }
    }

    fn service(&self) -> Option<&str> {
        Some(&self.agent)
    }

    fn view(&self) -> KindView {
        KindView::Call(Box::new(CallView {
            agent: self.agent.clone(),
            call: self.call.to_string(),
            compensation: self.compensation.as_ref().map(ToString::to_string),
            complete_by: humantime::format_duration(self.complete_by).to_string(),
            retry: serde_json::json!(self.retry),
            supervisor: serde_json::json!(self.supervision),
            fields: self.fields.as_ref().map(super::sources),
            callback: self.callback.as_ref().map(CallbackView::of),
        }))
    }

    fn summary(&self) -> Summary {
        Summary {
            kind: "call",
            does: self.call.to_string(),
            undo: match (&self.compensation, self.read_only) {
                (Some(compensation), _) => Some(compensation.to_string()),
                (None, true) => Some(NOTHING_TO_UNDO.to_owned()),
                (None, false) => None,
            },
        }
    }
}

/// What a caller sees of a call.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CallView {
    /// The agent that calls its service.
    pub agent: String,
    /// Its operation, as `METHOD /path`.
    pub call: String,
    /// The operation that undoes it, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compensation: Option<String>,
    /// The time it has to complete, as written (`"30s"`).
    pub complete_by: String,
    /// Its agent's retries within an attempt.
    pub retry: Value,
    /// The supervisor's retries across attempts.
    pub supervisor: Value,
    /// What its request carries, if not the whole input and results.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<serde_json::Map<String, Value>>,
    /// The callback it waits for after its service takes the call: its timeout, and
    /// its heartbeat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback: Option<CallbackView>,
}

/// The endpoint of a call step's operation: its call, or its compensation (if any).
fn endpoint(call: &CallStep, operation: Operation) -> Option<&Endpoint> {
    match operation {
        Operation::Call => Some(&call.call),
        Operation::Compensate => call.compensation.as_ref(),
    }
}
