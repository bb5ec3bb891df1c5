//! Activities (`arn:aws:states:REGION:ACCOUNT:activity:NAME`): a Task whose work a
//! worker takes by polling (Step Functions' `GetActivityTask`), then ends with its
//! task token as any `.waitForTaskToken` Task is ended.
//!
//! The Task's visit is a wait for its callback that calls nothing; while no worker
//! has taken it, it is offered ([`offer`]): the stores keep an index of the offered
//! visits by activity, written with the task's record, so an offer is never lost
//! between two writes. A worker takes one with a conditional write of the record
//! ([`take`]): a visit is handed to one worker only, and a worker that never ends it
//! is found out by the state's `HeartbeatSeconds` or `TimeoutSeconds`, as in Step
//! Functions.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::VisitWork;
use crate::callback::Token;
use crate::decide::change::Change;
use crate::decide::{Decision, Refused, Verdict};
use crate::task::{Step, StepState, Task, Waiting};
use crate::time::Timestamp;
use crate::workflow::Workflow;

/// The ARN of this engine's activity `name`.
#[must_use]
pub fn activity_arn(name: &str) -> String {
    format!("arn:aws:states:{}:activity:{name}", super::place())
}

/// Who took an activity's visit, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taken {
    /// The worker's name, as it gave it (`workerName`), or empty.
    pub worker: String,
    /// When.
    pub at: Timestamp,
    /// The poll that took it ([`new_poll`]): a take whose write landed while its
    /// answer was lost is found again by it, and given to that poll's worker.
    #[serde(default)]
    pub poll: String,
}

/// A new poll's id: random, so that no other poll takes a visit as its own.
#[must_use]
pub fn new_poll() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Whether `task`'s visit was taken by the poll `poll`.
#[must_use]
pub fn is_taken_by(task: &Task, poll: &str) -> bool {
    matches!(
        task.machine.as_deref().and_then(|run| run.work.as_ref()),
        Some(VisitWork::Activity { taken: Some(taken), .. }) if taken.poll == poll
    )
}

/// A visit of a Task on an activity that no worker has taken yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer<'a> {
    /// The activity's name.
    pub activity: &'a str,
    /// Since when it is offered: its wait's start.
    pub since: Timestamp,
}

/// What a worker is given: the visit's task token and its input's JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivityTask {
    /// The token that ends the visit (`SendTaskSuccess`, `SendTaskFailure`) and keeps
    /// it alive (`SendTaskHeartbeat`).
    pub token: String,
    /// The Task's input, as its state worked it out.
    pub input: String,
}

/// The activity visit `task` offers to workers, if it offers one: its machine waits
/// in a Task on an activity that no worker has taken, its wait begun.
#[must_use]
pub fn offer(task: &Task) -> Option<Offer<'_>> {
    let run = task.machine.as_deref()?;
    let Some(VisitWork::Activity {
        activity,
        taken: None,
        ..
    }) = &run.work
    else {
        return None;
    };
    let state = run.state.as_deref()?;
    let step = waiting_step(task, state)?;
    Some(Offer {
        activity,
        since: step.started_at.unwrap_or(task.updated_at),
    })
}

/// The step of `state` while it waits for its callback.
fn waiting_step<'a>(task: &'a Task, state: &str) -> Option<&'a Step> {
    task.steps.iter().find(|step| {
        *step.name == *state
            && step.state == StepState::Processing
            && matches!(step.waiting, Some(Waiting::Callback { .. }))
    })
}

/// A worker (`worker`, its name) takes, by its poll `poll`, the visit `task` offers
/// on `activity`: the visit is offered no more, and the task as written gives the
/// worker its token and input ([`given`]). The same poll again changes nothing: its
/// take is written already.
///
/// # Errors
/// [`Refused::NotWaiting`] when `task` offers no visit on `activity` (another worker
/// took it, it ended, or it is of another activity).
pub fn take(
    task: &Task,
    workflow: &Workflow,
    activity: &str,
    (worker, poll): (&str, &str),
    now: Timestamp,
) -> Result<Decision, Refused> {
    if is_taken_by(task, poll) {
        return Ok(Decision::ignore(Verdict::ActivityTaken));
    }
    // A visit whose lease has ended (its heartbeat or its timeout missed) waits no
    // more, though the supervisor has yet to see it: its token would end nothing.
    let lapsed = || {
        let state = task.machine.as_deref().and_then(|run| run.state.as_deref());
        state
            .and_then(|state| waiting_step(task, state))
            .is_none_or(|step| step.complete_by.is_some_and(|at| at <= now))
    };
    if task.state.is_final()
        || offer(task).is_none_or(|offer| offer.activity != activity)
        || lapsed()
    {
        return Err(Refused::NotWaiting(activity.to_owned()));
    }
    let mut change = Change::of(task, now);
    if let Some(VisitWork::Activity { taken, .. }) = change.run_mut().work.as_mut() {
        *taken = Some(Taken {
            worker: worker.to_owned(),
            at: now,
            poll: poll.to_owned(),
        });
    }
    change.hold(workflow);
    Ok(change.done(Verdict::ActivityTaken))
}

/// What the worker that took `task`'s visit is given: its token and input; `None`
/// where no worker has taken a visit that still waits.
#[must_use]
pub fn given(task: &Task) -> Option<ActivityTask> {
    let run = task.machine.as_deref()?;
    let Some(VisitWork::Activity {
        input,
        taken: Some(_),
        ..
    }) = &run.work
    else {
        return None;
    };
    let state = run.state.as_deref()?;
    waiting_step(task, state)?;
    let index = task.steps.iter().position(|step| *step.name == *state)?;
    Some(ActivityTask {
        token: Token::issue(task, index, false)?,
        input: input.to_string(),
    })
}

/// The work of a visit of a Task on `activity`: its `input` offered to workers, its
/// lease as its state works it out.
pub(super) fn work(
    activity: &str,
    input: Value,
    (timeout_seconds, heartbeat_seconds): (Option<u64>, Option<u64>),
) -> VisitWork {
    VisitWork::Activity {
        activity: activity.to_owned(),
        input,
        timeout_seconds,
        heartbeat_seconds,
        taken: None,
    }
}
