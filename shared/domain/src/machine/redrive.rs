//! Step Functions' `RedriveExecution`: an execution that failed, timed out or was
//! aborted runs again from the state where it stopped, with that state's input and
//! the variables then in scope, as a new run of its task (under new idempotency
//! keys, as a resubmission's); the states it passed before are not run again, and its
//! history goes on. A Parallel or a Map it stopped in runs its branches again, whole.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::history::{self, WrittenEvent};
use super::{MachineRun, Status};
use crate::decide::{Decision, Refused, Resubmit, resubmit};
use crate::task::{Order, Request, Task};
use crate::time::Timestamp;
use crate::workflow::Workflow;

/// Where an execution stopped, for its redrive: the state it was in, its input, and
/// the variables in scope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoppedAt {
    /// The state.
    pub state: String,
    /// Its input.
    pub input: Arc<Value>,
    /// The variables.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub variables: Map<String, Value>,
}

/// Whether `task`'s execution may be redriven: it ended, not well, in a state.
#[must_use]
pub fn is_redrivable(task: &Task) -> bool {
    task.machine.as_deref().is_some_and(|run| {
        !matches!(run.status, Status::Running | Status::Succeeded) && run.stopped_at.is_some()
    })
}

/// `task`'s execution runs again from where it stopped ([`StoppedAt`]), as a
/// resubmission of its task.
///
/// # Errors
/// [`Refused::NotRedrivable`] for an execution that is running, succeeded, or stopped
/// before any state; as [`resubmit`] otherwise (a branch's, say).
pub fn redrive(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    request: Request,
    now: Timestamp,
) -> Result<Decision, Refused> {
    let stopped = match task.machine.as_deref() {
        Some(run) if is_redrivable(task) => run.stopped_at.clone(),
        _ => None,
    };
    let Some(stopped) = stopped else {
        return Err(Refused::NotRedrivable);
    };
    let redrive = Resubmit {
        request,
        input: None,
    };
    let decision = resubmit(task, workflow, order, redrive, now)?;
    Ok(entering(decision, workflow, *stopped, now))
}

/// `task`'s execution, ended (failed or succeeded), runs again from `at` (a state
/// it entered, with the input it entered it with), as a new run of its task.
///
/// # Errors
/// [`Refused::RunByItsParent`] for a branch, or an execution a parent started.
pub fn restart(
    task: &Task,
    workflow: &Workflow,
    request: Request,
    at: StoppedAt,
    now: Timestamp,
) -> Result<Decision, Refused> {
    if let Some(parent) = &task.parent {
        return Err(Refused::RunByItsParent(parent.task.local().to_owned()));
    }
    let decision = crate::decide::rerun(task, workflow, request, None, now);
    Ok(entering(decision, workflow, at, now))
}

/// `decision`, a new run of an execution's task, made to enter `at`'s state with its
/// input and variables; its history goes on with the redrive.
fn entering(
    mut decision: Decision,
    workflow: &Workflow,
    at: StoppedAt,
    now: Timestamp,
) -> Decision {
    let timeout = workflow
        .machine
        .as_ref()
        .and_then(|machine| machine.0.timeout_seconds);
    if let Some(next) = decision.next.as_mut() {
        let redriven = u64::from(next.run.saturating_sub(1));
        let run = next.machine.get_or_insert_with(Box::default);
        let id = run.history_base + 1;
        **run = MachineRun {
            state: Some(at.state),
            to_enter: true,
            input: at.input,
            variables: at.variables,
            events: id,
            history_base: run.history_base,
            deadline: timeout.map(|seconds| now.plus(Duration::from_secs(seconds))),
            ..MachineRun::default()
        };
        Arc::make_mut(&mut run.new_events).push(WrittenEvent {
            id,
            at: now,
            event: history::execution_redriven(redriven),
        });
    }
    decision
}

/// A repair of `task`'s execution ([`crate::decide::repair`]): its redrive from the
/// state where it stopped, or its restart from `from` (a state, with the input it was
/// entered with), that state's input patched with `input` (a JSON Merge Patch or a
/// JSON Patch). The state is what runs again.
///
/// # Errors
/// As [`redrive`] and [`restart`]; [`Refused::Patch`] for a patch that does not
/// apply, or gives an input over what a task's data may take.
pub fn repair_execution(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    (request, input): (Request, Option<&Value>),
    from: Option<(String, Arc<Value>)>,
    now: Timestamp,
) -> Result<Decision, Refused> {
    let patched = |entered: &Arc<Value>| -> Result<Arc<Value>, Refused> {
        let Some(patch) = input else {
            return Ok(Arc::clone(entered));
        };
        let patched = crate::decide::repair::patched(entered, patch, "input")?;
        let size = crate::limits::json_size(&patched);
        if size > crate::limits::MAX_TASK_DATA {
            return Err(Refused::InputTooLarge(size));
        }
        Ok(Arc::new(patched))
    };
    if let Some((state, entered)) = from {
        let at = StoppedAt {
            state,
            input: patched(&entered)?,
            variables: Map::new(),
        };
        return restart(task, workflow, request, at, now);
    }
    let mut decision = redrive(task, workflow, order, request, now)?;
    if let Some(run) = decision.next.as_mut().and_then(|t| t.machine.as_mut()) {
        run.input = patched(&run.input)?;
    }
    Ok(decision)
}

/// The state `task`'s execution stopped at, which its redrive or repair runs again.
#[must_use]
pub fn stopped_state(task: &Task) -> Option<&str> {
    let run = task.machine.as_deref().filter(|_| is_redrivable(task))?;
    run.stopped_at
        .as_ref()
        .map(|stopped| stopped.state.as_str())
}
