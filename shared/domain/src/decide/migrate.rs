//! Moves: a task on one version of its workflow moved onto another while it runs (or
//! while it waits in Error for a resubmission), each step's record carried to the step
//! of the new version it maps to (the step of the same name, or the one it is renamed
//! to), checked before anything moves.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;

use crate::machine::MachineRun;
use crate::task::{Happened, Order, Request, Step, StepState, Task, TaskState};
use crate::time::Timestamp;
use crate::workflow::{StepKind, Workflow};

use super::change::{Change, left_in_place};
use super::operator::{Refused, check_batch};
use super::{Decision, Verdict};

/// A move, as asked: to which version (the task's workflow's, loaded by the caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// Who asks, when, and in which bulk action.
    pub request: Request,
    /// The steps of the task's version that the new one names otherwise: old name to
    /// new. A step not named here keeps its name.
    pub renamed: BTreeMap<String, String>,
}

/// What a move does to each step: what a dry run answers, before anything moves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct MovePlan {
    /// The version the task is on.
    pub from_version: u32,
    /// The version it moves to.
    pub to_version: u32,
    /// Each step the task has run or will run, and the step of the new version it
    /// becomes, with its state.
    pub moved: Vec<MovedStep>,
    /// The new version's steps the task has not had: each runs when its turn comes.
    pub new: Vec<String>,
    /// The steps the new version does not have, none of which had started.
    pub dropped: Vec<String>,
}

/// A step carried to the new version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct MovedStep {
    /// Its name in the task's version.
    pub from: String,
    /// Its name in the new one.
    pub to: String,
    /// Its state, which it keeps.
    pub state: StepState,
}

/// A move worked out: the steps of the new version, in its order, and the plan.
struct Planned {
    steps: Vec<Step>,
    /// A state machine's execution, as it goes on.
    run: Option<Box<MachineRun>>,
    plan: MovePlan,
}

/// What moving `task` from its version, `from`, to `to` would do, without doing it.
///
/// # Errors
/// [`Refused`] as [`move_task`] refuses.
pub fn plan_move(
    task: &Task,
    (from, to): (&Workflow, &Workflow),
    order: &Order,
    moving: &Move,
) -> Result<MovePlan, Refused> {
    plan(task, (from, to), order, moving).map(|planned| planned.plan)
}

/// An operator moves a task onto another version of its workflow, `to`: every step
/// it has started is carried to the step of `to` it maps to (its own name, or the
/// name `renamed` gives it), which must do the same kind of work at the same place;
/// a running one keeps its place and its name (its answer, its callback and its
/// children name it so), and one whose effect may be in place under its idempotency
/// key keeps its name (the key has it). A step of `to` the task has not had runs
/// when its turn comes, and must not come before a step that has started; a step
/// `to` does not have must not have started. The task goes on where it was.
///
/// # Errors
/// [`Refused::CannotMove`], naming the step and why, when it cannot be made safe;
/// [`Refused::NoSuchStep`] for a renamed step the task's version does not have.
pub fn move_task(
    task: &Task,
    (from, to): (&Workflow, &Workflow),
    order: &Order,
    moving: Move,
    now: Timestamp,
) -> Result<Decision, Refused> {
    let planned = plan(task, (from, to), order, &moving)?;
    let mut change = Change::of(task, now);
    change.task.workflow.version = to.version;
    change.task.steps = planned.steps;
    if let Some(run) = planned.run {
        change.task.machine = Some(run);
    }
    change.log(Happened::Moved {
        from_version: from.version,
        to_version: to.version,
        by: moving.request.by,
    });
    Ok(change.done(Verdict::Moved))
}

fn refused(step: &str, why: String) -> Refused {
    Refused::CannotMove(format!("step '{step}' {why}"))
}

/// Whether a step's record holds work: it was sent, it ended, or it was skipped.
fn started(step: &Step) -> bool {
    step.state != StepState::Pending || step.was_sent()
}

/// Whether a step is at work: out, waiting, or waiting to be sent again.
fn at_work(task: &Task, index: usize) -> bool {
    let step = &task.steps[index];
    task.running_steps().any(|i| i == index)
        || step.waiting.is_some()
        || (step.state == StepState::Pending && step.was_sent())
        || step
            .children
            .as_ref()
            .is_some_and(|c| !c.running.is_empty())
}

fn check_movable(
    task: &Task,
    (from, to): (&Workflow, &Workflow),
    order: &Order,
) -> Result<(), Refused> {
    if from.machine.is_some() != to.machine.is_some() {
        return Err(Refused::CannotMove(
            "a state machine's execution moves onto a version of its state machine alone".into(),
        ));
    }
    if (task.parent.as_ref()).is_some_and(|parent| parent.scope.is_some()) {
        return Err(Refused::CannotMove(
            "it is a branch of a Parallel or a Map: move the execution it belongs to".into(),
        ));
    }
    match task.state {
        TaskState::Compensating => {
            return Err(Refused::CannotMove(
                "it is being undone: move it once it has ended in Error".into(),
            ));
        }
        TaskState::Processed => {
            return Err(Refused::CannotMove(
                "it has ended Processed: nothing of it is left to run".into(),
            ));
        }
        _ => {}
    }
    if from.version == to.version {
        return Err(Refused::CannotMove(format!(
            "it is on version {} already",
            to.version
        )));
    }
    to.validate_input(&order.input).map_err(|e| {
        Refused::CannotMove(format!(
            "its input does not fit version {}: {e}",
            to.version
        ))
    })
}

fn plan(
    task: &Task,
    (from, to): (&Workflow, &Workflow),
    order: &Order,
    moving: &Move,
) -> Result<Planned, Refused> {
    check_batch(task, moving.request.batch.as_ref())?;
    check_movable(task, (from, to), order)?;
    let known = |name: &str| match &from.machine {
        Some(machine) => machine.0.state(name).is_some() || from.step_index(name).is_some(),
        None => from.step_index(name).is_some(),
    };
    if let Some(unknown) = (moving.renamed.keys()).find(|name| !known(name)) {
        return Err(Refused::NoSuchStep(unknown.clone()));
    }
    let mut plan = MovePlan {
        from_version: from.version,
        to_version: to.version,
        ..MovePlan::default()
    };
    let mut carried: Vec<Option<usize>> = vec![None; to.steps.len()];
    for (index, step) in task.steps.iter().enumerate() {
        let name = &*step.name;
        let target = moving.renamed.get(name).map_or(name, String::as_str);
        let Some(place) = to.step_index(target) else {
            if started(step) {
                return Err(refused(
                    name,
                    format!(
                        "is {:?}: version {} has no step '{target}' to carry it to; name the step it becomes",
                        step.state, to.version
                    ),
                ));
            }
            plan.dropped.push(name.to_owned());
            continue;
        };
        if carried[place].replace(index).is_some() {
            return Err(refused(
                target,
                "would be the new place of two steps".into(),
            ));
        }
        let (before, after) = (&from.steps[index], &to.steps[place]);
        if started(step) && !before.kind.same_work(&after.kind) {
            let (was, is) = (before.kind.summary(), after.kind.summary());
            return Err(refused(
                name,
                format!(
                    "is a {} ({}); version {}'s '{target}' is a {} ({}): it does other work",
                    was.kind, was.does, to.version, is.kind, is.does
                ),
            ));
        }
        if at_work(task, index) && matches!(before.kind, StepKind::Branches(_)) {
            return Err(refused(
                name,
                format!(
                    "runs its branches on version {}: move the execution once it has left the state",
                    from.version
                ),
            ));
        }
        if at_work(task, index) && (place != index || target != name) {
            return Err(refused(
                name,
                format!(
                    "is at work as step {} of {}: it keeps its place and its name; move the task once it has ended",
                    index + 1,
                    task.steps.len()
                ),
            ));
        }
        if target != name && left_in_place(step, before) {
            return Err(refused(name, "may have its effect in place under an idempotency key that has its name: it keeps its name".into()));
        }
        plan.moved.push(MovedStep {
            from: name.to_owned(),
            to: target.to_owned(),
            state: step.state,
        });
    }
    // A new step must not come before a step that has started: it cannot run in its
    // place. Index order puts every step after the steps it waits for.
    let mut after_new: Vec<Option<usize>> = vec![None; to.steps.len()];
    for (place, step) in to.steps.iter().enumerate() {
        after_new[place] = step.after.iter().find_map(|&before| match carried[before] {
            None => Some(before),
            Some(_) => after_new[before],
        });
        if let (Some(index), Some(new)) = (carried[place], after_new[place])
            && started(&task.steps[index])
        {
            return Err(refused(
                &to.steps[new].name,
                format!(
                    "is new in version {} and comes before '{}', which has started: it cannot run in its place",
                    to.version, step.name
                ),
            ));
        }
    }
    let steps = (to.steps.iter().zip(&carried))
        .map(|(definition, carried)| match carried {
            Some(index) => Step {
                name: definition.name.as_str().into(),
                ..task.steps[*index].clone()
            },
            None => {
                plan.new.push(definition.name.clone());
                Step::new(&definition.name)
            }
        })
        .collect();
    let run = moved_run(task, to, &moving.renamed)?;
    Ok(Planned { steps, run, plan })
}

/// A state machine's execution, its states renamed as `renamed` says: the state it
/// stands in (or stopped at, for its redrive) must be a state of `to`, where the
/// execution goes on as `to` defines it. `None` for a workflow's task.
fn moved_run(
    task: &Task,
    to: &Workflow,
    renamed: &BTreeMap<String, String>,
) -> Result<Option<Box<MachineRun>>, Refused> {
    let (Some(run), Some(machine)) = (task.machine.as_deref(), &to.machine) else {
        return Ok(None);
    };
    let rename = |name: &str| renamed.get(name).map_or(name, String::as_str).to_owned();
    let mut run = run.clone();
    let stood = (run.state.iter_mut()).chain(run.stopped_at.iter_mut().map(|at| &mut at.state));
    for state in stood {
        let target = rename(state);
        if machine.0.state(&target).is_none() {
            return Err(refused(
                state,
                format!(
                    "is where the execution stands: version {} has no state '{target}'; name the state it becomes",
                    to.version
                ),
            ));
        }
        *state = target;
    }
    run.visits = (run.visits.into_iter())
        .map(|(name, visits)| (rename(&name), visits))
        .collect();
    Ok(Some(Box::new(run)))
}
