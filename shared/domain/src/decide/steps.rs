//! A task's steps, each sent once the steps it waits for are Processed (a straight
//! line of them one at a time, parallel branches at once), and undone in the reverse
//! of the order their effects came to be in place: the scheduler's claim, its
//! dispatch of each operation, and the record of each answer.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::callback::Token;
use crate::ids::TaskId;
use crate::limits;
use crate::messages::{AgentRequest, AgentResponse, Operation, Outcome, Payload};
use crate::task::{Answer, Happened, Order, Step, StepState, Task, TaskState};
use crate::time::Timestamp;
use crate::workflow::{CallStep, Endpoint, Results, StepKind, Workflow};

use super::change::Change;
use super::{Decision, Effect, Verdict};

/// How early a retry's Run message may come and still send its step: SQS delays a
/// message by whole seconds.
const RETRY_EARLY: Duration = Duration::from_secs(1);

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
    /// Runs the task on from where it is: every step whose turn has come (the
    /// steps it waits for Processed; its retry due), the next compensation, or its
    /// end. A failing task sends no new step, and undoes nothing while calls of its
    /// other branches are out: they finish or time out first.
    pub(super) fn advance(&mut self, workflow: &Workflow, order: &Order) {
        match self.task.state {
            TaskState::Processing | TaskState::Pending => {
                self.set_state(TaskState::Processing);
                // A step may end as it starts (a map of no items, a timer already
                // past, a step skipped), and the steps after it are due at once.
                loop {
                    if self.task.steps.iter().all(Step::is_settled) {
                        self.finish(workflow, TaskState::Processed);
                        return;
                    }
                    let due = if self.is_paused() {
                        Vec::new()
                    } else {
                        self.due(workflow)
                    };
                    if due.is_empty() || self.task.state != TaskState::Processing {
                        break;
                    }
                    for index in due {
                        // A step that cannot be sent fails at once, and the task with it.
                        if self.task.state == TaskState::Processing
                            && self.runs(workflow, order, index)
                        {
                            self.dispatch(workflow, order, index, Operation::Call);
                        }
                    }
                }
                if self.task.state == TaskState::Compensating {
                    // A step failed as it started (its condition, or its timer's
                    // instant, could not be read): what is done is undone.
                    self.advance(workflow, order);
                    return;
                }
                self.hold(workflow);
            }
            TaskState::Compensating => {
                if self.task.running_steps().next().is_some() {
                    self.hold(workflow);
                    return;
                }
                let undo = self
                    .task
                    .steps
                    .iter()
                    .enumerate()
                    .filter(|(i, s)| {
                        s.effect_may_be_in_place()
                            && s.state != StepState::CompensationFailed
                            && workflow.steps[*i].can_be_undone()
                    })
                    .max_by_key(|(i, s)| (s.done_order, *i))
                    .map(|(i, _)| i);
                match undo {
                    Some(index) => self.dispatch(workflow, order, index, Operation::Compensate),
                    None => self.finish(workflow, TaskState::Error),
                }
            }
            TaskState::Processed | TaskState::Error => {}
        }
    }

    /// The steps whose turn has come: Pending, the steps they wait for Processed, and
    /// those before them too, all the way back (a resubmission keeps Processed steps,
    /// so a step may be Processed while one before it is not), and a retry's time (if
    /// they wait for one) come.
    pub(super) fn due(&self, workflow: &Workflow) -> Vec<usize> {
        // Steps come after the steps they wait for, so one pass settles each.
        let mut settled = Vec::with_capacity(self.task.steps.len());
        for (step, definition) in self.task.steps.iter().zip(&workflow.steps) {
            let before_settled = definition.after.iter().all(|&before| settled[before]);
            settled.push(step.is_settled() && before_settled);
        }
        self.task
            .steps
            .iter()
            .enumerate()
            .filter(|(index, step)| {
                step.state == StepState::Pending
                    && workflow.steps[*index]
                        .after
                        .iter()
                        .all(|&before| settled[before])
                    && step
                        .retry_at
                        .is_none_or(|at| at <= self.now.plus(RETRY_EARLY))
            })
            .map(|(index, _)| index)
            .collect()
    }

    /// The task's lease while it runs: the soonest complete-by of its steps out, or of
    /// a retry's pickup. With no step out and a retry to wait for, the task is
    /// released to the schedulers until then (the retry's Run message is on its way).
    /// A paused task with no step out is released too, and holds no lease: nothing is
    /// due until it is resumed.
    pub(super) fn hold(&mut self, workflow: &Workflow) {
        let running = self
            .task
            .running_steps()
            .filter_map(|index| self.task.steps[index].complete_by)
            .min();
        let paused = self.is_paused();
        let retry = self
            .task
            .steps
            .iter()
            .filter(|s| s.state == StepState::Pending && !paused)
            .filter_map(|s| s.retry_at)
            .min();
        let pickup = retry.map(|at| at.max(self.now).plus(workflow.pickup_timeout));
        if running.is_none()
            && (pickup.is_some() || paused)
            && self.task.state == TaskState::Processing
        {
            self.task.locked_by = None;
            self.set_state(TaskState::Pending);
        }
        self.task.complete_by = match running.into_iter().chain(pickup).min() {
            Some(at) => Some(at),
            None if paused => None,
            None => self.task.complete_by,
        };
    }

    /// Sends step `index`'s call or compensation to its agent; or, for a step that
    /// starts children, starts them or has them undone.
    fn dispatch(&mut self, workflow: &Workflow, order: &Order, index: usize, operation: Operation) {
        let definition = &workflow.steps[index];
        let call = match (&definition.kind, operation) {
            (StepKind::Call(call), _) => call,
            (StepKind::Children(_), Operation::Call) => {
                return self.start_children(workflow, order, index);
            }
            (StepKind::Children(_), Operation::Compensate) => {
                return self.undo_children(workflow, index);
            }
            (StepKind::Sleep(sleep), Operation::Call) => {
                return self.start_sleep(order, index, sleep);
            }
            (StepKind::Wait(wait), Operation::Call) => {
                return self.start_wait(index, &wait.callback);
            }
            // Neither has anything to undo ([`StepDefinition::can_be_undone`]).
            (StepKind::Sleep(_) | StepKind::Wait(_), Operation::Compensate) => return,
        };
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
        let gates = call.gates(&workflow.name, &definition.name, &order.input);
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
    pub(super) fn request(
        &self,
        call: &CallStep,
        index: usize,
        order: &Order,
        operation: Operation,
    ) -> Result<(String, Payload), String> {
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

    /// Begins step `index`'s operation: its state, a new attempt, its key's run.
    pub(super) fn begin(&mut self, index: usize, operation: Operation) {
        let run = self.task.run;
        let step = &mut self.task.steps[index];
        step.state = match operation {
            Operation::Call => StepState::Processing,
            Operation::Compensate => {
                step.undoing = Some(step.state);
                StepState::Compensating
            }
        };
        step.attempt += 1;
        step.started_at = Some(self.now);
        step.key_run = step.key_run_in(run);
        step.retry_at = None;
    }

    /// Sends step `index`'s operation, begun, to its agent, with `path` and
    /// `payload`: it must be done a complete-by from now, and by `within` (when its
    /// gates' slots lapse).
    pub(super) fn send(
        &mut self,
        call: &CallStep,
        index: usize,
        operation: Operation,
        path: String,
        payload: Payload,
        within: Timestamp,
    ) {
        let complete_by = self.now.plus(call.complete_by).min(within);
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
            step_name: step.name.clone(),
            attempt,
            operation,
            agent: call.agent.clone(),
            method: endpoint(call, operation)
                .map(|e| e.method)
                .unwrap_or_default(),
            path,
            complete_by,
            idempotency_key: format!("{}/{key_run}/{}{key_suffix}", task.id, step.name),
            retry: call.retry.clone(),
            payload,
            sealed_task: None,
            task_created_at: Some(task.created_at),
        }));
        self.log(Happened::Sent {
            step: index,
            operation,
            attempt,
            complete_by,
        });
    }
}

/// The scheduler, on a Run message: claims the task if it waits for a scheduler
/// and sends the steps whose turn has come (or its next compensation) to agents; or,
/// on a claimed task whose branch's step waits for this retry, sends it (Resumed). A
/// Run message before a retry's time sends nothing.
#[must_use]
pub fn on_run(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    instance: &str,
    now: Timestamp,
) -> Decision {
    let claimable = task.locked_by.is_none()
        && matches!(task.state, TaskState::Pending | TaskState::Compensating);
    let mut change = Change::of(task, now);
    // A paused task starts nothing until it is resumed; one whose start is to come
    // waits for it (its lease ends then).
    let not_yet = task.start_at.is_some_and(|at| at > now.plus(RETRY_EARLY));
    if change.is_paused() || (task.state == TaskState::Pending && not_yet) {
        return Decision::ignore(Verdict::NotWaitingForScheduler);
    }
    // A Run message before its retry's time (a duplicate, or one early): the task
    // waits on for the one that is due, or for its lease.
    let early = task.state == TaskState::Pending
        && change.due(workflow).is_empty()
        && task.steps.iter().any(|s| s.retry_at.is_some());
    if claimable && !early {
        change.task.locked_by = Some(instance.to_owned());
        change.advance(workflow, order);
        return change.done(Verdict::Claimed);
    }
    // A claimed task whose step (in a branch) waits for this message's retry, while
    // steps of other branches run.
    let resumable = task.locked_by.is_some()
        && task.state == TaskState::Processing
        && !change.due(workflow).is_empty();
    if !resumable {
        return Decision::ignore(Verdict::NotWaitingForScheduler);
    }
    change.advance(workflow, order);
    change.done(Verdict::Resumed)
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
            limits::output_refusal(limits::json_size(output), task_data_size(order, task))
                .map_or_else(
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
        (Some(callback), Outcome::Succeeded { .. }, Operation::Call)
            if task.state == TaskState::Processing =>
        {
            change.wait_for_callback(response.step, callback);
        }
        _ => change.record(response.step, response.operation, outcome),
    }
    change.advance(workflow, order);
    change.done(Verdict::Recorded)
}

impl Change {
    /// Records how an operation of step `index` ended.
    pub(super) fn record(&mut self, index: usize, operation: Operation, outcome: Outcome) {
        let answer = match &outcome {
            Outcome::Succeeded { .. } => Answer::Succeeded,
            Outcome::Failed { .. } => Answer::Failed,
            Outcome::Unusable { .. } => Answer::Unusable,
        };
        self.log(Happened::Answered {
            step: index,
            operation,
            attempt: self.task.steps[index].attempt,
            outcome: answer,
        });
        let step = &mut self.task.steps[index];
        step.finished_at = Some(self.now);
        step.complete_by = None;
        step.waiting = None;
        match (outcome, operation) {
            (Outcome::Succeeded { output }, Operation::Call) => {
                step.state = StepState::Processed;
                step.output = Some(Arc::new(output));
                self.mark_done(index);
            }
            (Outcome::Unusable { error }, Operation::Call) => {
                step.state = StepState::Unusable;
                let reason = format!("step '{}': {error}", step.name);
                step.error = Some(error);
                self.mark_done(index);
                self.fail(reason);
            }
            (Outcome::Succeeded { .. } | Outcome::Unusable { .. }, Operation::Compensate) => {
                step.state = StepState::Compensated;
            }
            (Outcome::Failed { error }, Operation::Call) => {
                step.state = StepState::Error;
                let reason = format!("step '{}' failed: {error}", step.name);
                step.error = Some(error);
                self.fail(reason);
            }
            (Outcome::Failed { error }, Operation::Compensate) => {
                step.state = StepState::CompensationFailed;
                step.error = Some(format!("compensation failed: {error}"));
            }
        }
    }
}

/// The outputs of `task`'s steps that have one, by step name.
pub(super) fn results(task: &Task) -> Results<'_> {
    task.steps
        .iter()
        .filter_map(|s| Some((s.name.as_str(), s.output.as_deref()?)))
        .collect()
}

/// The bytes of the data an agent request carries: the input and the outputs kept.
pub(super) fn task_data_size(order: &Order, task: &Task) -> usize {
    limits::json_size(&order.input)
        + task
            .steps
            .iter()
            .filter_map(|s| s.output.as_deref())
            .map(limits::json_size)
            .sum::<usize>()
}

/// The endpoint of a call step's operation: its call, or its compensation (if any).
fn endpoint(call: &CallStep, operation: Operation) -> Option<&Endpoint> {
    match operation {
        Operation::Call => Some(&call.call),
        Operation::Compensate => call.compensation.as_ref(),
    }
}
