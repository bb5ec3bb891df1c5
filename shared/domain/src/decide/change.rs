//! A task being changed: the copy to write, the effects it gathers, and the moves
//! every decision shares (its state, its history, its lease, its end).

use std::sync::Arc;
use std::time::Duration;

use crate::flow::CallRef;
use crate::limits::MAX_DELAY;
use crate::messages::{Alert, ChildEnded};
use crate::task::{Happened, Step, StepState, Task, TaskState};
use crate::time::Timestamp;
use crate::workflow::Workflow;

use super::delivery::ALERT_REDELIVERY;
use super::{Decision, Effect, Verdict};
use crate::kinds::call::gates::held_slots;

/// A task being changed: the copy to write and the effects it gathers.
pub(crate) struct Change {
    pub(crate) task: Task,
    pub(crate) effects: Vec<Effect>,
    pub(crate) now: Timestamp,
    /// A step began or stopped waiting for its callback: the caller is told the
    /// tokens of this version.
    pub(crate) waits_changed: bool,
    /// Of a repair: the resubmission it made, which its notifications carry.
    pub(crate) repair: Option<crate::task::Resubmission>,
    /// The calls holding gates' slots when the change began ([`crate::flow`]).
    held: Vec<(CallRef, Vec<String>)>,
    /// The task's lease when the change began.
    lease_before: Option<Timestamp>,
}

impl Change {
    pub(crate) fn of(task: &Task, now: Timestamp) -> Self {
        let mut task = task.clone();
        task.version += 1;
        task.updated_at = now;
        // The history events of this decision only: those before are written.
        if let Some(run) = task.machine.as_mut() {
            run.new_events = Arc::default();
        }
        Self {
            held: held_slots(&task),
            lease_before: task.complete_by,
            task,
            effects: Vec::new(),
            now,
            waits_changed: false,
            repair: None,
        }
    }

    /// The decision, with a deadline message for a lease the change takes: a task
    /// with notifications not known sent keeps a lease until they are. It keeps the
    /// lease it had (its last step's, as it ends) when that ends sooner than a new one
    /// would: they are sent at once, and a lease kept is no index entry moved and no
    /// deadline message more.
    pub(crate) fn done(mut self, verdict: Verdict) -> Decision {
        if self.waits_changed {
            self.notify();
        }
        if self.task.complete_by.is_none()
            && let Some(oldest) = self.task.outbox.first()
        {
            let ends_soon =
                |end: &Timestamp| *end > self.now && *end <= self.now.plus(ALERT_REDELIVERY);
            match self.lease_before.filter(ends_soon) {
                Some(end) => self.task.complete_by = Some(end),
                None => self.hold_for_delivery(oldest.notification.at),
            }
        }
        let held = std::mem::take(&mut self.held);
        self.release_ended_calls(held);
        self.watch_lease();
        Decision {
            next: Some(self.task),
            order: None,
            effects: self.effects,
            verdict,
        }
    }

    /// Asks for a deadline message for the task's lease unless the message on its
    /// way watches it: one due later than now and no later than the lease's end, which
    /// comes early and follows the lease ([`on_deadline`]). So a task has one message
    /// at a time, and another only for a lease ending sooner, or once its message is
    /// spent (or lost: the supervisor found the lease expired). A lease ending further
    /// off than a message can be delayed gets none yet: the supervisor asks for it
    /// once the end is within reach ([`Task::sweep_at`]), so that a long wait sends
    /// no message on and on.
    pub(crate) fn watch_lease(&mut self) {
        let Some(at) = self.task.complete_by else {
            return;
        };
        let watched = self
            .task
            .deadline
            .is_some_and(|due| due > self.now && due <= at);
        if watched {
            return;
        }
        if at > self.now.plus(MAX_DELAY) {
            self.task.deadline = None;
        } else {
            self.task.deadline = Some(at);
            self.effects.push(Effect::Deadline {
                task_id: self.task.id.clone(),
                at,
            });
        }
    }

    /// Moves the task to `state`, telling the caller.
    pub(crate) fn set_state(&mut self, state: TaskState) {
        if self.task.state == state {
            return;
        }
        self.task.state = state;
        self.log(Happened::State { state });
        self.notify();
    }

    /// Adds `what` to the task's history, as of now.
    pub(crate) fn log(&mut self, what: Happened) {
        self.task.log(self.now, what);
    }

    /// A step failed for good (its call, or its lease's end past its supervisor's
    /// threshold): the task fails, or a state machine's `Retry` and `Catch` say what
    /// becomes of it when the task moves on.
    pub(crate) fn fail_step(&mut self, reason: String) {
        if self.task.machine.is_none() {
            self.fail(reason);
        }
    }

    /// Stops the run and undoes what it did, for `reason`, unless the task was
    /// stopped already (asked to cancel, say): the first reason is the task's error.
    /// A step waiting to be sent again (for a retry, or under the key it kept through
    /// a resubmission) may have its effect in place: it is undone as one that timed
    /// out.
    pub(crate) fn fail(&mut self, reason: String) {
        self.task.error.get_or_insert(reason);
        // A repair's rewind becomes the undoing of all.
        self.task.rewind.clear();
        self.set_state(TaskState::Compensating);
        self.stop_waiting();
        self.stop_waits();
    }

    /// Marks the steps waiting to be sent again (for a retry, or under the key they
    /// kept through a resubmission) timed out: their effect may be in place, and a
    /// task being undone sends them no more, so they are undone.
    pub(crate) fn stop_waiting(&mut self) {
        let waiting: Vec<usize> = (0..self.task.steps.len())
            .filter(|&index| {
                let step = &self.task.steps[index];
                step.state == StepState::Pending && step.was_sent()
            })
            .collect();
        for index in waiting {
            self.stop(index, "stopped while waiting to be sent again");
        }
    }

    /// Step `index`, which a task being undone takes no further, is timed out for
    /// `why`: its effect may be in place, so it is undone.
    pub(crate) fn stop(&mut self, index: usize, why: &str) {
        let step = &mut self.task.steps[index];
        step.state = StepState::TimedOut;
        step.error = Some(why.into());
        step.finished_at = Some(self.now);
        step.complete_by = None;
        step.retry_at = None;
        step.waiting = None;
        self.mark_done(index);
    }

    /// Records that step `index`'s effect came to be in place, after those before it:
    /// a failed task undoes its steps in the reverse of this order.
    pub(crate) fn mark_done(&mut self, index: usize) {
        let last = self.task.steps.iter().map(|s| s.done_order).max();
        self.task.steps[index].done_order = last.unwrap_or(0) + 1;
    }

    /// Releases the task to wait for a scheduler after `delay`, with a lease that
    /// lets the supervisor send it again if nobody picks it up. A running task is
    /// Pending again: one a scheduler may claim.
    pub(crate) fn release(&mut self, workflow: &Workflow, delay: Duration) {
        if self.task.state == TaskState::Processing {
            self.set_state(TaskState::Pending);
        }
        self.task.locked_by = None;
        self.task.complete_by = Some(self.now.plus(delay + workflow.pickup_timeout));
        self.effects.push(Effect::Schedule {
            task_id: self.task.id.clone(),
            delay,
        });
    }

    /// Ends the task in `state`. A pause ends with it: a pause holds up a running
    /// task, and one resubmitted (or rerun for its parent) runs.
    pub(crate) fn finish(&mut self, workflow: &Workflow, state: TaskState) {
        self.task.locked_by = None;
        self.task.complete_by = None;
        self.task.paused = None;
        // A state machine undoes nothing: what its calls did stays, as in Step Functions.
        if state == TaskState::Error && workflow.machine.is_none() {
            self.task.not_undone = not_undone(&self.task, workflow);
        }
        self.set_state(state);
        if let Some(ended) = ChildEnded::of(&self.task) {
            self.effects.push(Effect::TellParent(ended));
        }
        // A child's parent alerts for it, unless a person must undo what it left.
        let alerts = self.task.parent.is_none() || self.task.needs_a_person();
        if state == TaskState::Error && alerts {
            let compensation_failed = self
                .task
                .steps
                .iter()
                .filter(|s| s.state == StepState::CompensationFailed)
                .map(|s| s.name.to_string())
                .collect();
            self.raise(Alert {
                task_id: self.task.id.clone(),
                run: self.task.run,
                workflow: self.task.workflow.name.to_string(),
                reason: self.task.error.clone().unwrap_or_default(),
                compensation_failed,
                not_undone: self.task.not_undone.clone(),
                at: self.now,
                trace: Some(self.task.run_trace()),
            });
        }
    }

    /// Alerts an operator, and keeps the alert in the task with a lease until it is
    /// published ([`alert_published`]); the supervisor raises it again
    /// ([`on_expired`]) if the lease expires first.
    pub(crate) fn raise(&mut self, alert: Alert) {
        self.hold_for_delivery(alert.at);
        self.task.pending_alert = Some(alert.clone());
        self.effects.push(Effect::Alert(alert));
    }
}

/// Whether `step`'s effect may be in place with nothing to undo it: it has no
/// compensation (and is not read-only). A step whose compensation failed is left to
/// a person to undo by hand (the alert names it); this one, to decide on.
pub(crate) fn left_in_place(step: &Step, definition: &crate::workflow::StepDefinition) -> bool {
    step.effect_may_be_in_place() && !definition.is_undone_on_failure()
}

/// The steps of `task` whose effect may be in place with nothing to undo it, by name
/// ([`Task::not_undone`]).
pub(crate) fn not_undone(task: &Task, workflow: &Workflow) -> Vec<String> {
    task.steps
        .iter()
        .zip(&workflow.steps)
        .filter(|(step, definition)| left_in_place(step, definition))
        .map(|(step, _)| step.name.to_string())
        .collect()
}
