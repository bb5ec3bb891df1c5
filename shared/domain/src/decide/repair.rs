//! Repairs: an operator patches a task's input or a step's recorded output (a JSON
//! Merge Patch, or a JSON Patch), or names a step to run again from, and the task
//! goes on in a new run. A step whose work the repair leaves the same keeps its
//! result and is not called again; the others run again, undone first where their
//! effect is in place and a compensation undoes it, and the repair is refused where
//! it would call again, with another request, a step whose effect stays.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

use crate::kinds::Reads;
use crate::limits;
use crate::machine;
use crate::task::{
    Happened, Order, RepairNote, Request, Resubmission, Step, StepState, Task, TaskState,
};
use crate::time::Timestamp;
use crate::workflow::{Results, StepDefinition, Workflow};

use super::change::{Change, left_in_place};
use super::operator::{Refused, check_batch, edited_order, new_run};
use super::steps::results;
use super::{Decision, Effect, Verdict};

/// The most bytes of patches one repair takes: they are kept in the task's record.
pub const MAX_PATCH: usize = 16 * 1024;

/// A repair, as asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Repair {
    /// Who asks, when, and in which bulk action.
    pub request: Request,
    /// A patch of the input: a JSON Merge Patch (an object), or a JSON Patch (an
    /// array of operations).
    pub input: Option<Value>,
    /// Patches of steps' outputs, by step name, in either form. A step not finished
    /// is given the output: it is taken as done.
    pub outputs: BTreeMap<String, Value>,
    /// A step to run again, with every step after it, whatever the patches change.
    pub from: Option<String>,
    /// Why, in the operator's words.
    pub reason: Option<String>,
    /// Of a state machine's `from`: the input its state was last entered with, as the
    /// execution's history keeps it (the caller reads it there); `None` where the
    /// history has it not, or not whole.
    pub entered_with: Option<Arc<Value>>,
}

/// What a repair does to each step: what a dry run answers, before anything moves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct RepairPlan {
    /// The steps whose results are kept: they are not called again.
    pub kept: Vec<String>,
    /// The steps whose output the repair sets.
    pub patched: Vec<String>,
    /// The steps undone first, by their compensations in the reverse of the order
    /// they were done, before they run again.
    pub undone_first: Vec<String>,
    /// The steps that run again (the ones undone first among them).
    pub run_again: Vec<String>,
    /// Of those, the steps called again under the idempotency key they had: their
    /// effect may be in place and nothing undoes it, so their service answers from
    /// its record.
    pub same_key: Vec<String>,
}

/// A repair worked out: the task's new data and what becomes of each step, by index.
#[derive(Default)]
struct Planned {
    input: Option<Value>,
    outputs: Vec<(usize, Value)>,
    kept: Vec<usize>,
    run_again: Vec<usize>,
    undo_first: Vec<usize>,
    same_key: Vec<usize>,
}

impl Planned {
    /// What becomes of each step, by name.
    fn plan(&self, task: &Task) -> RepairPlan {
        let name = |index: &usize| task.steps[*index].name.to_string();
        let names = |indices: &[usize]| indices.iter().map(name).collect();
        RepairPlan {
            kept: names(&self.kept),
            patched: self.outputs.iter().map(|(index, _)| name(index)).collect(),
            undone_first: names(&self.undo_first),
            run_again: names(&self.run_again),
            same_key: names(&self.same_key),
        }
    }
}

/// Whether a task's step has an effect in place that its compensation undoes: what
/// a task being undone undoes, and what a repair undoes before it runs the step again.
pub(crate) fn undoable(step: &Step, definition: &StepDefinition) -> bool {
    step.effect_may_be_in_place()
        && step.state != StepState::CompensationFailed
        && definition.can_be_undone()
}

/// `target` with `patch` applied: a JSON Patch (RFC 6902) when it is an array, else
/// a JSON Merge Patch (RFC 7396).
pub(crate) fn patched(target: &Value, patch: &Value, what: &str) -> Result<Value, Refused> {
    let refused = |message: String| Refused::Patch(what.to_owned(), message);
    let mut value = target.clone();
    if patch.is_array() {
        let operations: json_patch::Patch = serde_json::from_value(patch.clone())
            .map_err(|e| refused(format!("not a JSON Patch: {e}")))?;
        json_patch::patch(&mut value, &operations).map_err(|e| refused(e.to_string()))?;
    } else {
        json_patch::merge(&mut value, patch);
    }
    Ok(value)
}

/// What a repair would do, without doing it.
///
/// # Errors
/// [`Refused`] as [`repair`] refuses.
pub fn plan_repair(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    repair: &Repair,
) -> Result<RepairPlan, Refused> {
    if workflow.machine.is_some() {
        return plan_execution(task, workflow, repair);
    }
    plan(task, workflow, order, repair).map(|planned| planned.plan(task))
}

/// An operator repairs a task in Error, one Processed, or one paused with no step
/// running: its input and its steps' outputs patched, it goes on in a new run. The
/// steps whose work the patches leave the same keep their results (a step reads the
/// values its fields name, or, without fields, the whole input and the results of
/// the steps before it: [`crate::kinds::Reads`]); the step named `from` and every
/// step after it run again, and so do those not finished and those whose work
/// changed. Of those, a step whose effect is in place is undone first by its
/// compensation; one whose effect stays with nothing to undo it is called again
/// under its key where its work is the same, and the repair is refused, naming it,
/// where it is not.
///
/// # Errors
/// [`Refused`] when the task is not one a repair takes, a patch does not apply or
/// does not fit, or a step could act twice.
pub fn repair(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    repair: Repair,
    now: Timestamp,
) -> Result<Decision, Refused> {
    if workflow.machine.is_some() {
        return repair_execution(task, workflow, order, repair, now);
    }
    let mut planned = plan(task, workflow, order, &repair)?;
    let edited = match planned.input.take() {
        Some(input) => Some(edited_order(order, input, task.run)?),
        None => None,
    };
    let mut change = new_run(task, now);
    let run = change.task.run;
    let by = repair.request.by;
    change.log(Happened::Repaired {
        run,
        by,
        reason: repair.reason.clone(),
    });
    let resubmission = noted(repair, run, edited.is_some(), planned.plan(task).run_again);
    change.task.resubmissions.push(resubmission.clone());
    change.repair = Some(resubmission);
    for (index, output) in planned.outputs {
        let step = &mut change.task.steps[index];
        let done = step.done_order > 0;
        step.state = StepState::Processed;
        step.output = Some(Arc::new(output));
        step.error = None;
        step.finished_at = Some(now);
        if !done {
            change.mark_done(index);
        }
    }
    for &index in &planned.run_again {
        if planned.undo_first.contains(&index) {
            continue;
        }
        let step = &mut change.task.steps[index];
        let key_run = match planned.same_key.contains(&index) {
            true => step.key_run_in(task.run),
            false => 0,
        };
        *step = Step::new(&step.name);
        step.key_run = key_run;
    }
    change.task.rewind = (planned.undo_first.iter())
        .map(|&index| task.steps[index].name.to_string())
        .collect();
    change.set_state(match change.task.rewind.is_empty() {
        true => TaskState::Pending,
        false => TaskState::Compensating,
    });
    change.release(workflow, Duration::ZERO);
    let mut decision = change.done(Verdict::Repaired);
    decision.order = edited;
    Ok(decision)
}

/// The resubmission a repair makes, run `run`: who, why, the patches, what ran again.
fn noted(repair: Repair, run: u32, edited: bool, run_again: Vec<String>) -> Resubmission {
    let note = RepairNote {
        reason: repair.reason,
        patch: json!({"input": repair.input, "outputs": repair.outputs}),
        from: repair.from,
        run_again,
    };
    Resubmission {
        run,
        request: repair.request,
        edited,
        repair: Some(note),
    }
}

/// A state machine's repair: the state its execution stopped at, or `from`, runs
/// again, its input patched; outputs are a workflow's.
fn plan_execution(
    task: &Task,
    workflow: &Workflow,
    repair: &Repair,
) -> Result<RepairPlan, Refused> {
    check_repairable(task, repair)?;
    if !repair.outputs.is_empty() {
        return Err(Refused::Patch(
            "outputs".into(),
            "a state machine's execution is repaired by the input of the state it runs again from: patch that".into(),
        ));
    }
    let state = match &repair.from {
        Some(state) => {
            check_restartable(workflow, state, repair.entered_with.is_some())?;
            state.as_str()
        }
        None => machine::stopped_state(task).ok_or(Refused::NotRedrivable)?,
    };
    Ok(RepairPlan {
        run_again: vec![state.to_owned()],
        ..RepairPlan::default()
    })
}

/// Refused unless an execution of `workflow` may run again from `state`: a state of
/// its machine (not of a branch), that the execution entered with an input its
/// history keeps whole, in a machine that sets no variables (those in scope when the
/// state was entered are not kept).
fn check_restartable(workflow: &Workflow, state: &str, entered: bool) -> Result<(), Refused> {
    let machine = workflow.machine.as_ref().map(|machine| &machine.0);
    if machine.and_then(|machine| machine.state(state)).is_none() {
        return Err(Refused::NoSuchStep(state.to_owned()));
    }
    let refused = |why: String| Err(Refused::Patch("from".into(), why));
    let assigns = machine.is_some_and(|m| m.all_states().iter().any(|(_, s)| s.assign.is_some()));
    if assigns {
        return refused(format!(
            "the state machine sets variables (Assign), and those in scope when '{state}' was entered are not kept: repair it where it stopped"
        ));
    }
    if !entered {
        return refused(format!(
            "the execution's history has no whole input of '{state}': it never entered it, or its input was over 256 KiB"
        ));
    }
    Ok(())
}

/// [`repair`] of a state machine's execution: its redrive from where it stopped, or
/// its restart from `from`, that state's input patched
/// ([`machine::repair_execution`]), noted as a repair.
fn repair_execution(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    repair: Repair,
    now: Timestamp,
) -> Result<Decision, Refused> {
    let plan = plan_execution(task, workflow, &repair)?;
    let asked = (repair.request.clone(), repair.input.as_ref());
    let from = repair.from.clone().zip(repair.entered_with.clone());
    let mut decision = machine::repair_execution(task, workflow, order, asked, from, now)?;
    decision.verdict = Verdict::Repaired;
    let Some(next) = decision.next.as_mut() else {
        return Ok(decision);
    };
    let (by, reason) = (repair.request.by, repair.reason.clone());
    let resubmission = noted(repair, next.run, false, plan.run_again);
    let run = next.run;
    next.log(now, Happened::Repaired { run, by, reason });
    next.resubmissions.pop();
    next.resubmissions.push(resubmission.clone());
    // The redrive told the caller; its notifications say it was this repair.
    let version = next.version;
    let told =
        (next.outbox.iter_mut()).chain(decision.effects.iter_mut().filter_map(|e| match e {
            Effect::Notify { outbound, .. } => Some(outbound),
            _ => None,
        }));
    for outbound in told.filter(|o| o.notification.version == version) {
        outbound.notification.repair = Some(resubmission.clone());
    }
    Ok(decision)
}

/// Refused unless `task` is one a repair takes: in Error, Processed, or paused with
/// no step running; not a child (its parent runs it again).
fn check_repairable(task: &Task, repair: &Repair) -> Result<(), Refused> {
    if let Some(parent) = &task.parent {
        return Err(Refused::RunByItsParent(parent.task.local().to_owned()));
    }
    check_batch(task, repair.request.batch.as_ref())?;
    let paused = task.paused.is_some() && task.state != TaskState::Compensating;
    if !(task.state.is_final() || paused) {
        return Err(Refused::NotRepairable(task.state));
    }
    if let Some(index) = task.running_steps().next() {
        return Err(Refused::StillRunning(task.steps[index].name.to_string()));
    }
    let size = limits::json_size(&json!([&repair.input, &repair.outputs]));
    if size > MAX_PATCH {
        return Err(Refused::PatchTooLarge(size));
    }
    Ok(())
}

fn plan(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    repair: &Repair,
) -> Result<Planned, Refused> {
    check_repairable(task, repair)?;
    let index_of = |name: &str| {
        (workflow.step_index(name)).ok_or_else(|| Refused::NoSuchStep(name.to_owned()))
    };
    let input = match &repair.input {
        Some(patch) => {
            let input = patched(&order.input, patch, "input")?;
            workflow.validate_input(&input)?;
            Some(input).filter(|input| *input != *order.input)
        }
        None => None,
    };
    let mut outputs = Vec::new();
    for (name, patch) in &repair.outputs {
        let index = index_of(name)?;
        let step = &task.steps[index];
        let before = step.output.as_deref().unwrap_or(&Value::Null);
        let output = patched(before, patch, &format!("outputs.{name}"))?;
        let size = limits::json_size(&output);
        if size > limits::MAX_STEP_OUTPUT {
            return Err(Refused::Patch(
                format!("outputs.{name}"),
                format!(
                    "{size} bytes, over the {} a step's output may take",
                    limits::MAX_STEP_OUTPUT
                ),
            ));
        }
        outputs.push((index, output));
    }
    outputs.sort_by_key(|(index, _)| *index);
    let from = repair.from.as_deref().map(index_of).transpose()?;
    let old_input = &order.input;
    let new_input = input.as_ref().unwrap_or(old_input);
    let old_results = results(task);
    let mut new_results: Results<'_> = old_results.clone();
    for (index, output) in &outputs {
        new_results.insert(&task.steps[*index].name, output);
    }
    let steps = &workflow.steps;
    // Index order puts every step after the steps it waits for: one pass settles each.
    let mut after_from = vec![false; steps.len()];
    // Of each step, for any reason ([0]) and for the patches' alone ([1]): whether it
    // runs again, and whether a result before it moved (ran again, or was patched). A
    // step that nothing undoes is refused only where the patches change its work: a
    // restart calls it again under its key.
    let mut runs = [vec![false; steps.len()], vec![false; steps.len()]];
    let mut earlier = [vec![false; steps.len()], vec![false; steps.len()]];
    let mut output_patched = vec![false; steps.len()];
    let mut planned = Planned::default();
    let mut changed_in_place = Vec::new();
    for (index, (step, definition)) in task.steps.iter().zip(steps).enumerate() {
        after_from[index] =
            from == Some(index) || definition.after.iter().any(|&before| after_from[before]);
        for lens in 0..2 {
            earlier[lens][index] = (definition.after.iter()).any(|&before| {
                runs[lens][before] || output_patched[before] || earlier[lens][before]
            });
        }
        if let Some((_, output)) = outputs.iter().find(|(i, _)| *i == index) {
            let undone = matches!(
                step.state,
                StepState::Compensated | StepState::CompensationFailed
            );
            if after_from[index] || undone {
                return Err(Refused::RunsAgain(step.name.to_string()));
            }
            output_patched[index] = step.output.as_deref() != Some(output);
            continue;
        }
        // A condition sees the input and the results before it.
        let reads = match definition.when.is_empty() {
            true => definition.kind.kind().reads(),
            false => Reads::EVERYTHING,
        };
        // What the patches change of what it reads, and the steps it reads the
        // results of (which may run again).
        let patched_reads = (reads.input && input.is_some())
            || (reads.values.iter()).any(|source| {
                source.value(old_input, &old_results) != source.value(new_input, &new_results)
            });
        let read_steps: Vec<usize> = (reads.values.iter())
            .filter_map(|source| workflow.step_index(source.result_step()?))
            .collect();
        let changed = |lens: usize| {
            patched_reads
                || (reads.earlier && earlier[lens][index])
                || read_steps.iter().any(|&read| runs[lens][read])
        };
        let (changed, by_patches) = (changed(0), changed(1));
        runs[1][index] = by_patches;
        if !(after_from[index] || changed || !step.is_settled()) {
            planned.kept.push(index);
            continue;
        }
        runs[0][index] = true;
        planned.run_again.push(index);
        if undoable(step, definition) {
            planned.undo_first.push(index);
        } else if left_in_place(step, definition) {
            if by_patches {
                changed_in_place.push(step.name.to_string());
            } else {
                planned.same_key.push(index);
            }
        }
    }
    if !changed_in_place.is_empty() {
        return Err(Refused::ChangedInPlace(changed_in_place));
    }
    if planned.run_again.is_empty() && task.state == TaskState::Processed {
        return Err(Refused::NothingToRunAgain);
    }
    planned.input = input;
    planned.outputs = outputs;
    Ok(planned)
}

impl Change {
    /// Of a task a repair undoes steps of: whether the compensation of one failed.
    /// Then the repair ends in the undoing of all, the task failing, as any failure
    /// does: a person must undo that step.
    pub(crate) fn rewind_failed(&mut self) -> bool {
        let failed = (self.task.rewind.iter()).find(|name| {
            (self.task.steps.iter())
                .any(|s| *s.name == **name && s.state == StepState::CompensationFailed)
        });
        let Some(name) = failed.cloned() else {
            return false;
        };
        self.fail(format!(
            "step '{name}': its compensation failed while a repair undid it to run it again"
        ));
        true
    }

    /// The steps a repair undoes are undone: they are new, to run again under the
    /// new run's keys, and the task runs on.
    pub(crate) fn rewound(&mut self, workflow: &Workflow, order: &Order) {
        for name in std::mem::take(&mut self.task.rewind) {
            if let Some(step) = self.task.steps.iter_mut().find(|s| *s.name == name) {
                *step = Step::new(&name);
            }
        }
        self.set_state(TaskState::Processing);
        self.advance(workflow, order);
    }
}
