//! Steps that wait, holding nothing but a lease: timers, callbacks, and the pause;
//! and the conditions that skip a step.
//!
//! A timer's lease ends at its instant, and its end is its success; a callback's
//! ends at its next heartbeat or its timeout, and its end is a failure the
//! supervisor retries, as an expired call's; its token ends it sooner
//! ([`on_callback`]). These decisions are taken by the API and the supervisor as
//! well as the scheduler, and only a scheduler sends to agents: they leave the
//! next step to a scheduler ([`Change::move_on`]).

use std::time::Duration;

use serde_json::Value;

use crate::callback::Token;
use crate::limits;
use crate::messages::{Operation, Outcome};
use crate::task::{Caller, Happened, Order, Request, StepState, Task, TaskState, Waiting};
use crate::time::Timestamp;
use crate::workflow::{CallbackSettings, SleepStep, Workflow};

use super::change::Change;
use super::steps::{results, task_data_size};
use super::{Decision, Effect, Refused, Verdict};

/// How a step's wait for its callback ends.
#[derive(Debug, Clone, PartialEq)]
pub enum CallbackOutcome {
    /// It succeeded: the step's result.
    Output(Value),
    /// It failed: the task is undone as for any step's error.
    Error(String),
}

/// A use of a step's callback: by its token, or on the owner's or operator's route.
#[derive(Debug, Clone, PartialEq)]
pub struct CallbackUse {
    /// The step, by index.
    pub step: usize,
    /// Its token; `None` on the owner's and operator's routes, which end whichever
    /// wait is current.
    pub token: Option<Token>,
    /// Who uses it.
    pub by: Caller,
    /// How the step ends.
    pub outcome: CallbackOutcome,
}

impl Change {
    /// Whether the task starts nothing new: it is paused, and not being undone (a
    /// failure is handled as usual, its undoing included).
    pub(super) fn is_paused(&self) -> bool {
        self.task.paused.is_some() && self.task.state != TaskState::Compensating
    }

    /// Whether step `index`, whose turn has come, runs: its conditions hold. One
    /// that does not is Skipped; one that cannot be evaluated fails the step, for
    /// good, and the task with it.
    pub(super) fn runs(&mut self, workflow: &Workflow, order: &Order, index: usize) -> bool {
        let guards = &workflow.steps[index].when;
        if guards.is_empty() {
            return true;
        }
        let holds = {
            let results = results(&self.task);
            guards.iter().try_fold(true, |all, guard| {
                Ok::<_, String>(all && guard.holds(&order.input, &results)?)
            })
        };
        match holds {
            Ok(true) => true,
            Ok(false) => {
                let step = &mut self.task.steps[index];
                step.state = StepState::Skipped;
                step.finished_at = Some(self.now);
                self.log(Happened::Skipped { step: index });
                false
            }
            Err(error) => {
                self.record(
                    index,
                    Operation::Call,
                    Outcome::Failed {
                        error: limits::bounded_error(format!("when: {error}")),
                    },
                );
                false
            }
        }
    }

    /// Starts step `index`'s timer: it ends at once when its instant has passed.
    pub(super) fn start_sleep(&mut self, order: &Order, index: usize, sleep: &SleepStep) {
        let until = match sleep {
            SleepStep::For(duration) => Ok(self.now.plus(*duration)),
            SleepStep::Until(source) => {
                let results = results(&self.task);
                source
                    .lookup(&order.input, &results)
                    .and_then(Value::as_str)
                    .and_then(Timestamp::parse_rfc3339)
                    .ok_or_else(|| format!("sleep_until: {source} is not an RFC 3339 instant"))
            }
        };
        let until = match until {
            Ok(until) => until,
            Err(error) => {
                self.record(index, Operation::Call, Outcome::Failed { error });
                return;
            }
        };
        self.begin_wait(index, until, Waiting::Timer);
        if until <= self.now {
            self.wake(index);
        }
    }

    /// Starts step `index`'s wait for its callback, which calls nothing.
    pub(super) fn start_wait(&mut self, index: usize, callback: &CallbackSettings) {
        let until = self.now.plus(callback.timeout);
        let complete_by = next_heartbeat(callback, self.now, until);
        let waiting = Waiting::Callback {
            until,
            after_call: false,
        };
        self.begin_wait(index, complete_by, waiting);
    }

    /// Step `index`, whose call its service took, waits for its callback from now:
    /// its lease ends at its first heartbeat, or its timeout.
    pub(super) fn wait_for_callback(&mut self, index: usize, callback: &CallbackSettings) {
        let until = self.now.plus(callback.timeout);
        let step = &mut self.task.steps[index];
        step.waiting = Some(Waiting::Callback {
            until,
            after_call: true,
        });
        step.complete_by = Some(next_heartbeat(callback, self.now, until));
        self.log_wait(index);
    }

    /// Step `index` runs, a new attempt, waiting as `waiting` says, its lease ending
    /// at `complete_by`.
    fn begin_wait(&mut self, index: usize, complete_by: Timestamp, waiting: Waiting) {
        self.begin(index, Operation::Call);
        let step = &mut self.task.steps[index];
        step.complete_by = Some(complete_by);
        step.waiting = Some(waiting);
        self.log_wait(index);
    }

    /// Writes in the history that step `index` waits; a callback's token is told to
    /// the caller with the task's version that holds it.
    fn log_wait(&mut self, index: usize) {
        let step = &self.task.steps[index];
        let (attempt, until) = match step.waiting {
            Some(Waiting::Callback { until, .. }) => {
                self.waits_changed = true;
                (step.attempt, until)
            }
            Some(Waiting::Timer | Waiting::Slot { .. }) | None => {
                (step.attempt, step.complete_by.unwrap_or(self.now))
            }
        };
        self.log(Happened::Waiting {
            step: index,
            attempt,
            until,
        });
    }

    /// A task that waits for no scheduler (resumed, say) waits for its start, if it
    /// is to come, or is released to one.
    pub(super) fn wait_for_start(&mut self, workflow: &Workflow) {
        match self.task.start_at.filter(|at| *at > self.now) {
            Some(at) => self.task.complete_by = Some(at),
            None => self.release(workflow, Duration::ZERO),
        }
    }

    /// Step `index`'s timer has ended: it is Processed.
    pub(super) fn wake(&mut self, index: usize) {
        let step = &mut self.task.steps[index];
        step.state = StepState::Processed;
        step.finished_at = Some(self.now);
        step.complete_by = None;
        step.waiting = None;
        self.log(Happened::Woke {
            step: index,
            by: None,
        });
    }

    /// Step `index`'s call, whose callback came while it was out, is settled (its
    /// agent answered, or its lease ended and it answers no more): the step ends as
    /// the callback said. Whether it did is returned.
    pub(super) fn settle_callback(&mut self, index: usize) -> bool {
        let Some(outcome) = self.task.steps[index].called_back.take() else {
            return false;
        };
        self.record(index, Operation::Call, outcome);
        true
    }

    /// The task moves on from a decision that sends nothing to an agent (the API's,
    /// the supervisor's): it ends if every step has; a step due is left to a
    /// scheduler, which a Run message brings (the task released to one when nothing
    /// else is out); a task being undone with nothing out is released to one.
    pub(super) fn move_on(&mut self, workflow: &Workflow) {
        match self.task.state {
            TaskState::Processing | TaskState::Pending => {
                if self.task.steps.iter().all(crate::task::Step::is_settled) {
                    self.finish(workflow, TaskState::Processed);
                    return;
                }
                if self.task.locked_by.is_some()
                    && !self.is_paused()
                    && !self.due(workflow).is_empty()
                {
                    if self.task.running_steps().next().is_none() {
                        // Nothing out: a scheduler claims it again, or, its Run message
                        // lost, the supervisor sends another at the pickup timeout.
                        self.release(workflow, Duration::ZERO);
                        return;
                    }
                    self.effects.push(Effect::Schedule {
                        task_id: self.task.id.clone(),
                        delay: Duration::ZERO,
                    });
                }
                self.hold(workflow);
            }
            TaskState::Compensating => {
                if self.task.running_steps().next().is_some() {
                    self.hold(workflow);
                } else {
                    self.release(workflow, Duration::ZERO);
                }
            }
            TaskState::Processed | TaskState::Error => {}
        }
    }

    /// Ends the waits of a task that is being undone: a timer or a callback waits no
    /// more. Each is timed out: a call whose callback it waited for has its effect in
    /// place, and is undone; a timer, or a wait that called nothing, has nothing to
    /// undo. A call still in its gates' line that was never sent under its key (its
    /// run's first attempt) is as though never begun: nothing to undo.
    pub(super) fn stop_waits(&mut self) {
        let waiting: Vec<usize> = self
            .task
            .running_steps()
            .filter(|&index| self.task.steps[index].waiting.is_some())
            .collect();
        for index in waiting {
            let step = &mut self.task.steps[index];
            let never_sent = matches!(step.waiting, Some(Waiting::Slot { .. }))
                && step.state == StepState::Processing
                && step.attempt == 1
                && step.key_run == self.task.run;
            if never_sent {
                let name = std::mem::take(&mut step.name);
                *step = crate::task::Step::new(&name);
                continue;
            }
            self.stop(index, "stopped while it waited: the task is being undone");
            self.waits_changed = true;
        }
    }
}

/// When a wait for `callback` from `now` until `until` needs its next heartbeat (its
/// timeout, without heartbeats).
fn next_heartbeat(callback: &CallbackSettings, now: Timestamp, until: Timestamp) -> Timestamp {
    callback
        .heartbeat
        .map_or(until, |heartbeat| now.plus(heartbeat).min(until))
}

/// Whether step `index` of `task` waits for the callback `token` was made for (or
/// any, without one), or may yet (its call is out, and its service may call back
/// before the scheduler records its answer; once only), now: a wait past its time
/// (its timeout, a heartbeat missed) is over before the supervisor finds it.
///
/// # Errors
/// [`Refused::UnknownCallback`] for a token `task` did not sign;
/// [`Refused::NotWaiting`] when the step waits for no such callback.
fn check_wait(
    task: &Task,
    workflow: &Workflow,
    index: usize,
    token: Option<&Token>,
    now: Timestamp,
) -> Result<(), Refused> {
    if token.is_some_and(|token| !token.is_signed_for(task) || token.step != index) {
        return Err(Refused::UnknownCallback);
    }
    let Some(step) = task.steps.get(index) else {
        return Err(Refused::UnknownCallback);
    };
    let after_call = workflow.steps[index].call().is_some();
    let waits = !task.state.is_final()
        && workflow.steps[index].callback().is_some()
        && step.state == StepState::Processing
        && step.called_back.is_none()
        && step.complete_by.is_none_or(|at| now < at)
        && token.is_none_or(|token| token.is_current(task, after_call));
    if waits {
        Ok(())
    } else {
        Err(Refused::NotWaiting(step.name.clone()))
    }
}

/// The callback of a step is used: by its token, or on the owner's or operator's
/// route. The step ends with the output given (Processed) or the error (as a step
/// that failed, the task undone); a scheduler takes the task on. A callback that
/// comes while its step's call is still out (its agent's answer not yet recorded)
/// is kept: the call, which may still be retried by its agent, keeps its slots and
/// is undone only once it is settled, by its answer or its lease's end
/// ([`Change::settle_callback`]).
///
/// # Errors
/// [`Refused::UnknownCallback`] for a token the task did not sign;
/// [`Refused::NotWaiting`] when the step does not wait for this callback: it was
/// used, it timed out (and a retry of a wait that calls nothing waits under a new
/// token), or the task ended.
pub fn on_callback(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    callback: CallbackUse,
    now: Timestamp,
) -> Result<Decision, Refused> {
    let index = callback.step;
    check_wait(task, workflow, index, callback.token.as_ref(), now)?;
    let mut change = Change::of(task, now);
    let outcome = match callback.outcome {
        CallbackOutcome::Output(output) => {
            limits::output_refusal(limits::json_size(&output), task_data_size(order, task))
                .map_or(Outcome::Succeeded { output }, |error| Outcome::Unusable {
                    error,
                })
        }
        CallbackOutcome::Error(error) => {
            let error = limits::bounded_error(error);
            // A refusal after a call: the call's effect may be in place, and is undone.
            if workflow.steps[index].call().is_some() {
                Outcome::Unusable { error }
            } else {
                Outcome::Failed { error }
            }
        }
    };
    change.log(Happened::Woke {
        step: index,
        by: Some(callback.by),
    });
    let step = &mut change.task.steps[index];
    if step.waiting.is_none() {
        step.called_back = Some(outcome);
        change.hold(workflow);
        return Ok(change.done(Verdict::CallbackKept));
    }
    change.record(index, Operation::Call, outcome);
    change.waits_changed = true;
    change.move_on(workflow);
    Ok(change.done(Verdict::CallbackUsed))
}

/// The holder of a step's callback says it is alive: its complete-by moves a
/// heartbeat on, never past its timeout.
///
/// # Errors
/// As for [`on_callback`]; [`Refused::NoHeartbeat`] for a step that takes none.
pub fn on_heartbeat(
    task: &Task,
    workflow: &Workflow,
    token: &Token,
    now: Timestamp,
) -> Result<Decision, Refused> {
    let step = token.step;
    check_wait(task, workflow, step, Some(token), now)?;
    let callback = workflow.steps[step].callback();
    let Some(callback) = callback.filter(|c| c.heartbeat.is_some()) else {
        return Err(Refused::NoHeartbeat(task.steps[step].name.clone()));
    };
    // A heartbeat while the call is still out says nothing the call's own lease does not.
    let Some(Waiting::Callback { until, .. }) = task.steps[step].waiting else {
        return Ok(Decision::ignore(Verdict::HeartbeatEarly));
    };
    let mut change = Change::of(task, now);
    change.task.steps[step].complete_by = Some(next_heartbeat(callback, now, until));
    change.hold(workflow);
    Ok(change.done(Verdict::HeartbeatRecorded))
}

/// The owner or an operator pauses a task: it starts no new step until it is
/// resumed. Its steps out finish (a failure is handled as usual, its undoing
/// included), its timers and callbacks' timeouts keep running. Asking again changes
/// nothing.
///
/// # Errors
/// [`Refused::Ended`] for a task that has ended, [`Refused::Undoing`] for one being
/// undone.
pub fn pause(
    task: &Task,
    workflow: &Workflow,
    request: Request,
    now: Timestamp,
) -> Result<Decision, Refused> {
    if task.paused.is_some() {
        return Ok(Decision::ignore(Verdict::PausedAlready));
    }
    if task.state.is_final() {
        return Err(Refused::Ended(task.state, "paused"));
    }
    if task.state == TaskState::Compensating {
        return Err(Refused::Undoing);
    }
    let mut change = Change::of(task, now);
    change.log(Happened::Paused { by: request.by });
    change.task.paused = Some(request);
    change.hold(workflow);
    Ok(change.done(Verdict::PauseRequested))
}

/// The owner or an operator resumes a paused task: it goes on where it stopped (a
/// scheduler comes for the steps due). Asking again changes nothing.
///
/// # Errors
/// [`Refused::Ended`] for a task that has ended.
pub fn resume(
    task: &Task,
    workflow: &Workflow,
    request: Request,
    now: Timestamp,
) -> Result<Decision, Refused> {
    if task.paused.is_none() {
        return Ok(Decision::ignore(Verdict::NotPaused));
    }
    if task.state.is_final() {
        return Err(Refused::Ended(task.state, "resumed"));
    }
    let mut change = Change::of(task, now);
    change.task.paused = None;
    change.log(Happened::Resumed { by: request.by });
    if change.task.locked_by.is_some() {
        change.move_on(workflow);
    } else {
        change.wait_for_start(workflow);
    }
    Ok(change.done(Verdict::ResumeRequested))
}
