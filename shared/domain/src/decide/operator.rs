//! The owner's and operator's actions: resubmit and cancel.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::limits;
use crate::task::{
    Actor, EarlierInput, Happened, Order, Request, Resubmission, Step, StepState, Task, TaskState,
};
use crate::time::Timestamp;
use crate::workflow::{InputError, Workflow};

use super::change::{Change, left_in_place, not_undone};
use super::{Decision, Verdict};

/// Why an operator's or owner's action on a task was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A resubmission of a task not in Error.
    #[error("only a task in Error can be resubmitted; this one is {0:?}")]
    NotInError(TaskState),
    /// A cancellation, pause or resumption (what was asked, as a past participle) of
    /// a task that has ended.
    #[error("the task is {0:?} already: only a task still running can be {1}")]
    Ended(TaskState, &'static str),
    /// A callback token that is not one: malformed, for no task, or not signed by
    /// the task it names (nothing tells them apart).
    #[error("no such callback")]
    UnknownCallback,
    /// A redrive of an execution that is running, succeeded, or stopped in no state
    /// ([`crate::machine::redrive`]).
    #[error("only an execution that failed, timed out or was aborted in a state can be redriven")]
    NotRedrivable,
    /// A step the task's workflow does not have.
    #[error("the task's workflow has no step '{0}'")]
    NoSuchStep(String),
    /// A callback for a step that does not wait for it (any more).
    #[error(
        "step '{0}' does not wait for this callback: it was used, it timed out (a retry of a wait that calls nothing waits under a new token), or the task ended"
    )]
    NotWaiting(String),
    /// A heartbeat for a step that takes none.
    #[error("step '{0}' takes no heartbeat: its callback has no heartbeat setting")]
    NoHeartbeat(String),
    /// A pause of a task being undone, which is not held up.
    #[error("the task is being undone: only a task running forward can be paused")]
    Undoing,
    /// A resubmission of a child task by other than its parent.
    #[error("a child task runs again when its parent is resubmitted: resubmit task '{0}'")]
    RunByItsParent(String),
    /// A bulk action run again, on a task it has taken already.
    #[error("batch '{0}' took this task already")]
    TakenByBatch(String),
    /// An edited input that does not fit the task's workflow version.
    #[error(transparent)]
    Input(#[from] InputError),
    /// An edited input that would take the task's order data, earlier inputs
    /// included, over what a record may hold.
    #[error(
        "input: the task's inputs would take {0} bytes, over the {max} a task keeps; submit a new task",
        max = limits::MAX_ORDER
    )]
    InputsTooLarge(usize),
    /// An edited input that would leave the task no room for its steps' requests.
    #[error(
        "input: {0} bytes, over the {max} a task's input and results may take; submit a new task",
        max = limits::MAX_TASK_DATA
    )]
    InputTooLarge(usize),
    /// An edited input, while steps whose effect may be in place and that nothing
    /// undoes would be called again with it.
    #[error(
        "input: the task cannot run with another input while the effects of {} may be in place and cannot be undone; resubmit without an input (they are called again under the same idempotency keys), or submit a new task",
        .0.join(", ")
    )]
    EffectsInPlace(Vec<String>),
    /// A repair of a task that is running, or being undone.
    #[error(
        "only a task in Error, Processed, or paused with no step running can be repaired; this one is {0:?}"
    )]
    NotRepairable(TaskState),
    /// A repair of a task whose step is still out.
    #[error(
        "step '{0}' is still running: repair the task once it has ended, or pause it and wait for the step"
    )]
    StillRunning(String),
    /// A patch that does not apply, or gives what does not fit: what it patches, why.
    #[error("{0}: {1}")]
    Patch(String, String),
    /// Patches over what a task keeps of them.
    #[error(
        "the patches take {0} bytes, over the {max} a repair keeps in the task's record; submit a new task",
        max = super::repair::MAX_PATCH
    )]
    PatchTooLarge(usize),
    /// An output given for a step that runs again, or was undone.
    #[error(
        "outputs.{0}: step '{0}' runs again (it is the step to run from or comes after it) or was undone, so an output given for it would not be kept"
    )]
    RunsAgain(String),
    /// A repair that would send other work to steps whose effect may be in place and
    /// that nothing undoes.
    #[error(
        "the repair changes what is sent to {}, while their effects may be in place and nothing undoes them: calling them again would act twice; leave what they read as it is, or submit a new task",
        .0.join(", ")
    )]
    ChangedInPlace(Vec<String>),
    /// A move to another version that cannot be made safe: which step, and why.
    #[error("the task cannot move: {0}")]
    CannotMove(String),
    /// A repair of a Processed task that changes nothing any step reads.
    #[error(
        "the repair changes nothing any step reads and names no step to run from: no step would run again"
    )]
    NothingToRunAgain,
}

impl Refused {
    /// Whether the task is not, or no longer, one the action takes (it has moved on,
    /// or the batch took it already), rather than refused for what the action would do
    /// to it: a bulk action passes over the first and reports the second.
    #[must_use]
    pub fn moved_on(&self) -> bool {
        matches!(
            self,
            Self::NotInError(_)
                | Self::Ended(..)
                | Self::TakenByBatch(_)
                | Self::RunByItsParent(_)
                | Self::Undoing
                | Self::NotRepairable(_)
                | Self::StillRunning(_)
        )
    }
}

/// A resubmission: who asks, and the new input, if it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct Resubmit {
    /// Who asks, when, and in which bulk action.
    pub request: Request,
    /// The input the new run takes instead of the current one.
    pub input: Option<Value>,
}

/// Refused when `batch` (if any) has taken the task already.
pub(super) fn check_batch(task: &Task, batch: Option<&String>) -> Result<(), Refused> {
    let taken = batch.is_some_and(|batch| {
        let by_batch = |request: &Request| request.batch.as_ref() == Some(batch);
        task.cancelled.as_ref().is_some_and(by_batch)
            || task.resubmissions.iter().any(|r| by_batch(&r.request))
    });
    match batch {
        Some(batch) if taken => Err(Refused::TakenByBatch(batch.clone())),
        _ => Ok(()),
    }
}

/// `order` with a new input, the one it replaces kept as run `run`'s.
///
/// # Errors
/// [`Refused`] when the input, or the order with it, is over what a task may take.
pub(super) fn edited_order(order: &Order, input: Value, run: u32) -> Result<Order, Refused> {
    let size = limits::json_size(&input);
    if size > limits::MAX_TASK_DATA {
        return Err(Refused::InputTooLarge(size));
    }
    let mut edited = order.clone();
    edited.earlier.push(EarlierInput {
        until_run: run,
        input: Arc::unwrap_or_clone(std::mem::replace(&mut edited.input, Arc::new(input))),
    });
    let size = limits::json_size(&json!(edited));
    if size > limits::MAX_ORDER {
        return Err(Refused::InputsTooLarge(size));
    }
    Ok(edited)
}

/// `task` changing into a new run, cleared of how the last one ended (or was held).
pub(super) fn new_run(task: &Task, now: Timestamp) -> Change {
    let mut change = Change::of(task, now);
    change.task.run += 1;
    change.task.failure_count = 0;
    change.task.error = None;
    change.task.pending_alert = None;
    change.task.not_undone.clear();
    change.task.cancelled = None;
    change.task.paused = None;
    change
}

/// An operator (or the owner) restarts a task in Error in a new run.
///
/// With the same input, it runs from its first step not Processed, keeping the
/// Processed steps and their results. A step whose effect may be in place with
/// nothing to undo it (no compensation; it timed out, or its answer was unusable:
/// [`Task::not_undone`]) is called again under the idempotency key it had, so that
/// its service does not apply it twice; the others, their effects known absent or
/// undone (by a compensation, or by hand when it failed, as the alert asks), get
/// the new run's keys.
///
/// With a new input (checked against the task's workflow version; the one it
/// replaces is kept in the order data), it runs every step again from the first,
/// under the new run's keys: refused while a step is not undone, since calling it
/// again with another input would apply a second effect.
///
/// # Errors
/// [`Refused`] when the task is not in Error, the batch took it already, or the
/// new input does not fit or cannot be run.
pub fn resubmit(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    resubmit: Resubmit,
    now: Timestamp,
) -> Result<Decision, Refused> {
    if task.state != TaskState::Error {
        return Err(Refused::NotInError(task.state));
    }
    if let Some(parent) = task
        .parent
        .as_ref()
        .filter(|_| resubmit.request.by != Actor::Parent)
    {
        return Err(Refused::RunByItsParent(parent.task.local().to_owned()));
    }
    check_batch(task, resubmit.request.batch.as_ref())?;
    let edited = match resubmit.input {
        Some(input) => {
            workflow.validate_input(&input)?;
            let in_place = not_undone(task, workflow);
            if !in_place.is_empty() {
                return Err(Refused::EffectsInPlace(in_place));
            }
            Some(edited_order(order, input, task.run)?)
        }
        None => None,
    };
    Ok(rerun(task, workflow, resubmit.request, edited, now))
}

/// `task` in a new run, asked by `request`, with its new order if it has one: each
/// step not Processed (every step, with a new order) made new, under the new run's
/// keys but where its effect may be in place; a state machine's run from its start.
pub(crate) fn rerun(
    task: &Task,
    workflow: &Workflow,
    request: Request,
    edited: Option<Order>,
    now: Timestamp,
) -> Decision {
    let mut change = new_run(task, now);
    let run = change.task.run;
    change.log(Happened::Resubmitted { run });
    change.task.resubmissions.push(Resubmission {
        run,
        request,
        edited: edited.is_some(),
        repair: None,
    });
    let plain = edited.is_none();
    for (step, definition) in change.task.steps.iter_mut().zip(&workflow.steps) {
        if plain && step.state == StepState::Processed {
            continue;
        }
        // A state machine's visits are calls of the new run, each under its keys.
        let keeps_key = plain && workflow.machine.is_none() && left_in_place(step, definition);
        // A step sent before keys were kept per step took the task's run's.
        let key_run = match keeps_key {
            true => step.key_run_in(task.run),
            false => 0,
        };
        *step = Step::new(&step.name);
        step.key_run = key_run;
    }
    if workflow.machine.is_some() {
        // A state machine runs again from its start, each visit under the new run's
        // keys (a visit makes its step's record new as it begins); its history goes on.
        change.task.machine = (change.task.machine.as_deref())
            .map(|before| Box::new(crate::machine::MachineRun::after(before)));
    }
    change.set_state(TaskState::Pending);
    change.release(workflow, Duration::ZERO);
    let mut decision = change.done(Verdict::Resubmitted);
    decision.order = edited;
    decision
}

/// The owner or an operator asks a task to stop: it is Compensating at once, and
/// once the calls it has out (if any) are done, its done steps are compensated in the
/// reverse of the order they were done (a call that succeeds is undone too; one whose
/// lease ends, or that waited for a retry, is not tried again, but undone as timed
/// out); it ends in Error, its caller notified and an operator
/// alerted that it was cancelled. Asking again changes nothing.
///
/// # Errors
/// [`Refused`] when the task has ended (and was not cancelled), or the batch took
/// it already.
pub fn cancel(
    task: &Task,
    workflow: &Workflow,
    request: Request,
    now: Timestamp,
) -> Result<Decision, Refused> {
    check_batch(task, request.batch.as_ref())?;
    if task.cancelled.is_some() {
        return Ok(Decision::ignore(Verdict::CancelledAlready));
    }
    if task.state.is_final() {
        return Err(Refused::Ended(task.state, "cancelled"));
    }
    let mut change = Change::of(task, now);
    change.fail(format!("cancelled by {}", request.by.as_str()));
    change.log(Happened::Cancelled { by: request.by });
    change.task.cancelled = Some(request);
    change.task.paused = None;
    for (index, definition) in workflow.steps.iter().enumerate() {
        definition.kind.kind().cancel(&mut change, index);
    }
    // The calls out finish or time out first: the lease follows them alone (a retry
    // the task waited for is stopped, and so are its waits); with none, a scheduler
    // comes now to compensate.
    change.move_on(workflow);
    Ok(change.done(Verdict::CancelRequested))
}

/// Step Functions' `StopExecution`: [`cancel`], the state machine's execution then
/// aborted with `error` and `cause` where either is given.
///
/// # Errors
/// [`cancel`]'s.
pub fn stop_execution(
    task: &Task,
    workflow: &Workflow,
    request: Request,
    now: Timestamp,
    (error, cause): (Option<String>, Option<String>),
) -> Result<Decision, Refused> {
    let mut decision = cancel(task, workflow, request, now)?;
    let run = (decision.next.as_mut()).and_then(|next| next.machine.as_deref_mut());
    if let Some(run) = run.filter(|_| error.is_some() || cause.is_some()) {
        run.error = error;
        run.cause = cause;
    }
    Ok(decision)
}
