//! The supervisor's decisions: a lease that has expired, and the deadline message
//! that watches a lease.

use std::time::Duration;

use crate::kinds::LeaseEnd;
use crate::messages::Operation;
use crate::task::{Happened, Order, Step, StepState, Task, TaskState, Waiting};
use crate::time::Timestamp;
use crate::workflow::{Supervision, Workflow};

use super::change::Change;
use super::{Decision, Effect, Verdict};

/// The supervisor, on a task whose lease has expired: sends it again if it was
/// waiting for a scheduler; otherwise counts a failure of each running step whose
/// complete-by has passed and retries it, or past the step's threshold gives it up
/// and compensates. A task that has ended with its alert or notifications not known
/// delivered has them delivered again; a running one's notifications not known sent
/// are sent again. A lease no deadline message watches gets one once it can.
#[must_use]
pub fn on_expired(task: &Task, workflow: &Workflow, order: &Order, now: Timestamp) -> Decision {
    let expired = task.complete_by.is_some_and(|at| at <= now);
    if !expired {
        if task.sweep_at().is_some_and(|at| at <= now) {
            // A lease too far off for a deadline message when it was taken is within
            // reach of one now.
            return Change::of(task, now).done(Verdict::LeaseWatched);
        }
        return Decision::ignore(Verdict::LeaseLive);
    }
    if task.state.is_final() {
        // The task ended and its alert or notifications were not known delivered:
        // they are again, after a new lease is taken for the next try.
        let mut change = Change::of(task, now);
        change.notify_again();
        return match &task.pending_alert {
            Some(alert) => {
                change.raise(alert.clone());
                change.done(Verdict::AlertedAgain)
            }
            None => {
                change.task.complete_by = None;
                change.done(Verdict::NotifiedAgain)
            }
        };
    }
    let mut change = Change::of(task, now);
    change.notify_again();
    // What each running step whose complete-by has passed does, as its kind says: a
    // failure, retried or given up; a timer's end (its success), or a call whose
    // callback came while it was out settled (its agent answers no more: the step
    // ends as the callback said); a wait for slots asked for again; children looked
    // for again.
    let (mut watched, mut ended, mut queued, mut expired) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for index in task
        .running_steps()
        .filter(|&index| task.steps[index].complete_by.is_none_or(|at| at <= now))
        .filter(|_| task.locked_by.is_some())
    {
        match workflow.steps[index]
            .kind
            .kind()
            .lease_ended(&task.steps[index])
        {
            LeaseEnd::ChildrenWatched => watched.push(index),
            LeaseEnd::Ended => ended.push(index),
            LeaseEnd::SlotsAskedAgain => queued.push(index),
            LeaseEnd::Expired(supervision) => expired.push((index, supervision)),
        }
    }
    for &index in &watched {
        change.watch_again(workflow, order, index);
    }
    for &index in &queued {
        change.admit_again(workflow, order, index);
    }
    if expired.is_empty() && ended.is_empty() && !queued.is_empty() {
        change.hold(workflow);
        return change.done(Verdict::SlotsAskedAgain);
    }
    for &index in &ended {
        if !change.settle_callback(index) {
            change.wake(index);
        }
    }
    if expired.is_empty() && !ended.is_empty() {
        change.move_on(workflow);
        return change.done(Verdict::Woke);
    }
    if expired.is_empty() && !watched.is_empty() {
        change.hold(workflow);
        return change.done(Verdict::ChildrenWatched);
    }
    if expired.is_empty() && change.is_paused() && task.running_steps().next().is_none() {
        // Paused, with nothing out: it holds no lease until it is resumed.
        change.hold(workflow);
        return change.done(Verdict::PausedIdle);
    }
    if expired.is_empty() {
        if task.locked_by.is_some() && task.running_steps().next().is_some() {
            // Steps of other branches are out, and a retry's Run message has not come.
            change.effects.push(Effect::Schedule {
                task_id: task.id.clone(),
                delay: Duration::ZERO,
            });
            change.hold(workflow);
        } else {
            change.release(workflow, Duration::ZERO);
        }
        return change.done(Verdict::SentAgain);
    }
    // A task being undone (asked to stop, or a step given up before or in this very
    // pass) tries no call again: each expired call is undone as one that timed out.
    let stopping = change.task.state == TaskState::Compensating
        || expired
            .iter()
            .any(|&(index, supervision)| gives_up(&task.steps[index], supervision));
    let mut retried = false;
    for (index, supervision) in expired {
        let Some(delay) = change.expire(supervision, index, stopping) else {
            continue;
        };
        retried = true;
        let step = &mut change.task.steps[index];
        if step.state == StepState::Compensating {
            // One compensation runs at a time: the task waits for its retry as a whole.
            step.state = step.undoing.unwrap_or(StepState::Processed);
            change.release(workflow, delay);
        } else {
            // Each call waits for its retry's own Run message (beside the calls of
            // other branches, or alone); a Run message before its time sends nothing.
            step.state = StepState::Pending;
            step.retry_at = Some(now.plus(delay));
            change.effects.push(Effect::Schedule {
                task_id: task.id.clone(),
                delay,
            });
        }
    }
    if change.task.state == TaskState::Compensating {
        if change.task.running_steps().next().is_some() {
            // The calls still out finish or time out before anything is undone.
            change.hold(workflow);
        } else if !retried {
            // Given up: a scheduler comes to undo what is done.
            change.release(workflow, Duration::ZERO);
        }
    } else if workflow.machine.is_some() && !retried && change.task.running_steps().next().is_none()
    {
        // A machine's call given up: a scheduler takes it through its Retry and Catch.
        change.release(workflow, Duration::ZERO);
    } else {
        // The lease follows the calls out and the retries' pickups; with no call out,
        // the task is released until its first retry is due.
        change.hold(workflow);
    }
    let verdict = if retried {
        Verdict::Retry
    } else {
        Verdict::GaveUp
    };
    change.done(verdict)
}

/// Why a step whose callback's holder sent no heartbeat in time failed.
pub(crate) const HEARTBEAT_MISSED: &str = "its heartbeat was missed";

/// Whether running `step` is given up when its complete-by passes now: its failures
/// would pass its `supervision`'s threshold.
fn gives_up(step: &Step, supervision: &Supervision) -> bool {
    step.state == StepState::Processing && step.failure_count + 1 > supervision.failure_threshold
}

impl Change {
    /// Counts a failure of step `index`, whose complete-by has passed, under its
    /// `supervision`: its delay before a retry, or none when it is given up (past its
    /// threshold, or a call of a task `stopping`: being undone), and the task with it.
    fn expire(
        &mut self,
        supervision: &Supervision,
        index: usize,
        stopping: bool,
    ) -> Option<Duration> {
        let now = self.now;
        self.task.failure_count += 1;
        let step = &mut self.task.steps[index];
        let lease_end = step.complete_by.take();
        // A wait whose lease ended before its timeout: its heartbeat was missed.
        let mut heartbeat_missed = false;
        if let Some(waiting) = step.waiting.take() {
            // Its token is dead: a retry waits under a new one.
            self.waits_changed = true;
            heartbeat_missed = matches!(waiting, Waiting::Callback { until, .. }
                if lease_end.is_some_and(|end| end < until));
        }
        let step = &mut self.task.steps[index];
        let compensating = step.state == StepState::Compensating;
        let failures = if compensating {
            &mut step.compensation_failure_count
        } else {
            &mut step.failure_count
        };
        *failures += 1;
        let failures = *failures;
        let operation = if compensating {
            Operation::Compensate
        } else {
            Operation::Call
        };
        let attempt = step.attempt;
        // A call of a task being undone is not tried again: its effect may be in
        // place, so it is compensated as one that timed out for good.
        let stopping = stopping && !compensating;
        let delay = if failures == supervision.failure_threshold {
            supervision.extended_wait
        } else {
            supervision.retry_delay
        };
        let gave_up = failures > supervision.failure_threshold || stopping;
        self.log(Happened::Expired {
            step: index,
            operation,
            attempt,
            retry_at: (!gave_up).then(|| now.plus(delay)),
        });
        if !gave_up {
            return Some(delay);
        }
        let reason = if heartbeat_missed {
            HEARTBEAT_MISSED.to_owned()
        } else {
            format!("timed out {failures} times")
        };
        let step = &mut self.task.steps[index];
        step.finished_at = Some(now);
        if compensating {
            step.state = StepState::CompensationFailed;
            step.error = Some(format!("compensation {reason}"));
        } else {
            step.state = StepState::TimedOut;
            let task_reason = format!("step '{}' {reason}", step.name);
            step.error = Some(reason);
            self.mark_done(index);
            self.fail_step(task_reason);
        }
        None
    }
}

/// A scheduler, on the deadline message for a lease ending `at`: a message the task
/// no longer waits for (another watches its lease) is dropped. Otherwise it is spent:
/// the lease is acted on as the supervisor would ([`on_expired`]), and whatever lease
/// the task then has gets a message of its own (a message that came early, the lease
/// having moved on, is followed by one for the new end). A task without a lease ends
/// the chain.
#[must_use]
pub fn on_deadline(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    at: Timestamp,
    now: Timestamp,
) -> Decision {
    if task.deadline != Some(at) {
        return Decision::ignore(Verdict::DeadlineSuperseded);
    }
    let decision = on_expired(task, workflow, order, now);
    if decision.next.is_some() || task.complete_by.is_none() {
        return decision;
    }
    // The lease moved on: the next message, for its end.
    Change::of(task, now).done(Verdict::DeadlineMoved)
}
