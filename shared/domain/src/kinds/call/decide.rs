//! A call's decisions: its request built and sent to its service's agent (through its
//! gates' lines when it has limits, [`super::gates`]), and its agent's answer recorded
//! ([`on_response`]).

use serde_json::{Map, Value};

use super::{CallStep, endpoint};
use crate::callback::Token;
use crate::decide::change::Change;
use crate::decide::steps::{results, task_data};
use crate::decide::{Decision, Effect, Verdict};
use crate::ids::TaskId;
use crate::limits;
use crate::messages::{AgentRequest, AgentResponse, Operation, Outcome, Payload};
use crate::task::{Happened, Order, StepState, Task, TaskState};
use crate::time::Timestamp;
use crate::workflow::{Results, Workflow};

/// The body of a call to a step without a field mapping: the task, the step, the
/// input and the results so far (in the order of their names, as a JSON map has them),
/// and the token of the callback the step waits for, if it does.
#[derive(serde::Serialize)]
struct StepPayload<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    callback_token: Option<&'a str>,
    input: &'a Value,
    results: &'a Results<'a>,
    step: &'a str,
    task_id: &'a TaskId,
}

/// The body of a call to a step with a field mapping: its fields, beside the task,
/// the step and the callback token.
#[derive(serde::Serialize)]
struct MappedPayload<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    callback_token: Option<&'a str>,
    fields: Map<String, Value>,
    step: &'a str,
    task_id: &'a TaskId,
}
impl Change {
    /// Sends step `index`'s call or compensation (`operation`), `call`, to its
    /// agent: at once, or once its gates give it their slots.
    pub(crate) fn dispatch_call(
        &mut self,
        call: &CallStep,
        workflow: &Workflow,
        order: &Order,
        index: usize,
        operation: Operation,
    ) {
        let (path, payload) = match self.request(call, index, order, operation) {
            Ok(request) => request,
            // The operation cannot be called as the workflow builds it: it fails, for
            // good, without a call.
            Err(error) => {
                self.record(index, operation, Outcome::Failed { error });
                self.advance(workflow, order);
                return;
            }
        };
        self.begin(index, operation);
        let gates = super::gates::gates_of(call, workflow, index, order, &self.task);
        if gates.is_empty() {
            self.send(call, index, operation, path, payload, Timestamp(i64::MAX));
        } else {
            self.queue(call, index, operation, gates);
        }
    }
    /// The path and the payload of step `index`'s operation (whose callback token a
    /// call that waits for one carries).
    ///
    /// # Errors
    /// The operation cannot be called as the workflow builds it.
    pub(crate) fn request(
        &self,
        call: &CallStep,
        index: usize,
        order: &Order,
        operation: Operation,
    ) -> Result<(String, Payload), String> {
        if let Some(request) = crate::machine::visit_request(&self.task) {
            return request.map_err(|e| format!("payload: {e}"));
        }
        let name = &self.task.steps[index].name;
        let results = results(&self.task);
        let callback_token = call
            .callback
            .as_ref()
            .filter(|_| operation == Operation::Call)
            .and_then(|_| Token::issue(&self.task, index, true));
        let payload = match &call.fields {
            Some(fields) => Payload::of(&MappedPayload {
                callback_token: callback_token.as_deref(),
                fields: fields
                    .iter()
                    .map(|(name, source)| (name.clone(), source.value(&order.input, &results)))
                    .collect(),
                step: name,
                task_id: &self.task.id,
            }),
            None => Payload::of(&StepPayload {
                callback_token: callback_token.as_deref(),
                input: &order.input,
                results: &results,
                step: name,
                task_id: &self.task.id,
            }),
        };
        endpoint(call, operation)
            .map(|e| e.fill(&order.input, &results))
            .transpose()
            .map(Option::unwrap_or_default)
            .and_then(|path| {
                let payload = payload.map_err(|e| format!("payload: {e}"))?;
                let mapped = call.fields.as_ref().map(|_| payload.as_str());
                limits::request_refusal(&path, mapped).map_or(Ok((path, payload)), Err)
            })
    }
    /// Sends step `index`'s operation, begun, to its agent, with `path` and
    /// `payload`: it must be done a complete-by from now, and by `within` (when its
    /// gates' slots lapse).
    pub(crate) fn send(
        &mut self,
        call: &CallStep,
        index: usize,
        operation: Operation,
        path: String,
        payload: Payload,
        within: Timestamp,
    ) {
        let call_time = crate::machine::call_time(&self.task).unwrap_or(call.complete_by);
        let complete_by = self.now.plus(call_time).min(within);
        let key_name = crate::machine::key_name(&self.task, &self.task.steps[index].name);
        let task = &mut self.task;
        let step = &mut task.steps[index];
        step.complete_by = Some(complete_by);
        let (attempt, key_run) = (step.attempt, step.key_run);
        let key_suffix = match operation {
            Operation::Call => "",
            Operation::Compensate => "/compensate",
        };
        task.complete_by = Some(complete_by);
        self.effects.push(Effect::Dispatch(AgentRequest {
            task_id: task.id.clone(),
            run: task.run,
            step: index,
            step_name: step.name.to_string(),
            attempt,
            operation,
            agent: call.agent.clone(),
            method: endpoint(call, operation)
                .map(|e| e.method)
                .unwrap_or_default(),
            path,
            complete_by,
            idempotency_key: format!("{}/{key_run}/{key_name}{key_suffix}", task.id),
            retry: call.retry.clone(),
            payload,
            sealed_task: None,
            task_created_at: Some(task.created_at),
            parts_apart: false,
        }));
        self.log(Happened::Sent {
            step: index,
            operation,
            attempt,
            complete_by,
        });
    }
}

/// The scheduler, on an agent's response: records the step's result and moves on.
/// A response for another run or attempt, or for a step no longer running, is stale.
#[must_use]
pub fn on_response(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    response: &AgentResponse,
    now: Timestamp,
) -> Decision {
    let expected = match response.operation {
        Operation::Call => StepState::Processing,
        Operation::Compensate => StepState::Compensating,
    };
    // An answer to a task created at another instant is to the task that had the
    // id before (it expired, and its runs, steps and attempts repeat).
    let of_this_task = response
        .task_created_at
        .is_none_or(|created_at| created_at == task.created_at);
    let current = of_this_task
        && task.steps.get(response.step).is_some_and(|step| {
            step.state == expected && step.attempt == response.attempt && task.run == response.run
        });
    if !current || task.locked_by.is_none() {
        return Decision::ignore(Verdict::StaleResponse);
    }
    let mut change = Change::of(task, now);
    // An answer too large to keep is refused here, whichever agent sent it, and an
    // error's text is cut to what a task keeps.
    let outcome = match (&response.outcome, response.operation) {
        (Outcome::Succeeded { output }, Operation::Call) => {
            limits::refusal_of(output, task_data(order, task)).map_or_else(
                || response.outcome.clone(),
                |error| Outcome::Unusable { error },
            )
        }
        (Outcome::Succeeded { .. }, Operation::Compensate) => response.outcome.clone(),
        (Outcome::Failed { error }, _) => Outcome::Failed {
            error: limits::bounded_error(error.clone()),
        },
        (Outcome::Unusable { error }, _) => Outcome::Unusable {
            error: limits::bounded_error(error.clone()),
        },
    };
    if change.settle_callback(response.step) {
        change.advance(workflow, order);
        return change.done(Verdict::Recorded);
    }
    let callback = workflow.steps[response.step].callback();
    match (callback, &outcome, response.operation) {
        // Its service took the call: the step waits for its callback, unless the task
        // is being undone (then the effect is in place, to undo).
        (Some(callback), Outcome::Succeeded { output }, Operation::Call)
            if task.state == TaskState::Processing =>
        {
            match crate::machine::token_call_failure(task, workflow, output) {
                Some(error) => {
                    change.record(response.step, response.operation, Outcome::Failed { error });
                }
                None => {
                    let callback = crate::machine::visit_callback(task, callback);
                    change.wait_for_callback(response.step, &callback);
                }
            }
        }
        _ => change.record(response.step, response.operation, outcome),
    }
    change.advance(workflow, order);
    change.done(Verdict::Recorded)
}
