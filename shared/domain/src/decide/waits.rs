//! What every kind of step that waits shares (a timer, a callback, a call in its
//! gates' lines): its wait begun and written in the history, its end, its stop when
//! the task is undone; the pause; and the conditions that skip a step.
//!
//! These decisions are taken by the API and the supervisor as well as the
//! scheduler, and only a scheduler sends to agents: they leave the next step to a
//! scheduler ([`Change::move_on`]).

use std::time::Duration;

use crate::limits;
use crate::messages::{Operation, Outcome};
use crate::task::{Happened, Order, Request, StepState, Task, TaskState, Waiting};
use crate::time::Timestamp;
use crate::workflow::Workflow;

use super::change::Change;
use super::steps::results;
use super::{Decision, Effect, Refused, Verdict};

impl Change {
    /// Whether the task starts nothing new: it is paused, and not being undone (a
    /// failure is handled as usual, its undoing included).
    pub(crate) fn is_paused(&self) -> bool {
        self.task.paused.is_some() && self.task.state != TaskState::Compensating
    }

    /// Whether step `index`, whose turn has come, runs: its conditions hold. One
    /// that does not is Skipped; one that cannot be evaluated fails the step, for
    /// good, and the task with it.
    pub(crate) fn runs(&mut self, workflow: &Workflow, order: &Order, index: usize) -> bool {
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

    /// Step `index` runs, a new attempt, waiting as `waiting` says, its lease ending
    /// at `complete_by`.
    pub(crate) fn begin_wait(&mut self, index: usize, complete_by: Timestamp, waiting: Waiting) {
        self.begin(index, Operation::Call);
        let step = &mut self.task.steps[index];
        step.complete_by = Some(complete_by);
        step.waiting = Some(waiting);
        self.log_wait(index);
    }

    /// Writes in the history that step `index` waits; a callback's token is told to
    /// the caller with the task's version that holds it.
    pub(crate) fn log_wait(&mut self, index: usize) {
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
    pub(crate) fn wait_for_start(&mut self, workflow: &Workflow) {
        match self.task.start_at.filter(|at| *at > self.now) {
            Some(at) => self.task.complete_by = Some(at),
            None => self.release(workflow, Duration::ZERO),
        }
    }

    /// Step `index`'s timer has ended: it is Processed.
    pub(crate) fn wake(&mut self, index: usize) {
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

    /// The task moves on from a decision that sends nothing to an agent (the API's,
    /// the supervisor's): it ends if every step has; a step due is left to a
    /// scheduler, which a Run message brings (the task released to one when nothing
    /// else is out); a task being undone with nothing out is released to one.
    pub(crate) fn move_on(&mut self, workflow: &Workflow) {
        if workflow.machine.is_some() && self.task.running_steps().next().is_none() {
            // A machine's state says where it goes: a scheduler takes it on.
            self.release(workflow, Duration::ZERO);
            return;
        }
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
    pub(crate) fn stop_waits(&mut self) {
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
