//! The decisions of steps that start child tasks (a child workflow, a map): start
//! the children, at most `max_concurrency` at a time; count their ends as they are
//! told ([`on_child_ended`]); end the step when every child has (failing it when
//! more fail than it tolerates); undo it by having every child it started undone by
//! its own compensations. A step keeps counts and the items running, never a record
//! per child.
//!
//! Nothing here waits on a message for good: the step holds a lease (its watch)
//! while children run, and when it passes, the children running are started (or
//! asked to undo) again, which finds each where it is and tells the parent of
//! those that ended. And the children's own side: a child stopped ([`stop_as_child`])
//! or run again ([`rerun_child`]) for its parent.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::messages::{ChildEnded, Operation, Outcome};
use crate::task::{Actor, Answer, Children, Happened, Order, Request, StepState, Task, TaskState};
use crate::time::Timestamp;
use crate::workflow::{ChildrenStep, MAX_RETRY_WAIT, Results, Workflow};

use crate::decide::change::Change;
use crate::decide::steps::results;
use crate::decide::{
    ChildVersion, ChildrenOf, Decision, Effect, Refused, Resubmit, Verdict, cancel, resubmit,
    submit,
};

impl Change {
    /// Starts step `index`, which starts child tasks: its items counted (a map whose
    /// items are not an array fails at once), its first children started.
    pub(crate) fn start_children(&mut self, workflow: &Workflow, order: &Order, index: usize) {
        let definition = &workflow.steps[index];
        let Some(spec) = definition.children() else {
            return;
        };
        let total = match &spec.items {
            None => Ok(1),
            Some(source) => match source.lookup(&order.input, &results(&self.task)) {
                Some(Value::Array(items)) => Ok(u32::try_from(items.len()).unwrap_or(u32::MAX)),
                other => Err(format!(
                    "map.items: '{source}' is {}, not an array",
                    other.map_or("missing", json_kind)
                )),
            },
        };
        let total = match total {
            Ok(total) => total,
            Err(error) => {
                self.record(index, Operation::Call, Outcome::Failed { error });
                self.advance(workflow, order);
                return;
            }
        };
        let run = self.task.run;
        let step = &mut self.task.steps[index];
        step.state = StepState::Processing;
        step.attempt = 0;
        step.started_at = Some(self.now);
        step.retry_at = None;
        step.key_run = step.key_run_in(run);
        step.children = Some(Children {
            total,
            ..Children::default()
        });
        self.fill(workflow, order, index);
        self.log_start(index, Operation::Call);
    }

    /// Logs that step `index` started its children, or their undo, while it waits
    /// for them (a step with none to wait for has ended as it started).
    fn log_start(&mut self, index: usize, operation: Operation) {
        let step = &self.task.steps[index];
        if let Some(complete_by) = step.complete_by {
            let attempt = step.attempt;
            self.log(Happened::Sent {
                step: index,
                operation,
                attempt,
                complete_by,
            });
        }
    }

    /// Starts step `index`'s next children, up to its concurrency, unless the task
    /// is stopping or too many have failed; ends the step once none runs and none is
    /// to start; or, while the step is undone, tells its next children to undo.
    fn fill(&mut self, workflow: &Workflow, order: &Order, index: usize) {
        let Some(spec) = workflow.steps[index].children() else {
            return;
        };
        if self.task.steps[index].state == StepState::Compensating {
            self.fill_undo(workflow, spec, index);
            return;
        }
        let proceeding = self.task.state == TaskState::Processing;
        let input_of = child_inputs(&self.task, spec, order);
        let mut starts = Vec::new();
        let mut children = self.task.steps[index].children.clone().unwrap_or_default();
        let allowed = spec.tolerated_failures.allowed(children.total);
        while proceeding
            && children.failed <= allowed
            && children.started < children.total
            && children.running.len() < spec.max_concurrency as usize
        {
            let item = children.started;
            children.started += 1;
            match input_of(item) {
                Some(input) => {
                    children.running.push(item);
                    starts.push((item, input));
                }
                None => children.failed += 1,
            }
        }
        drop(input_of);
        let step = &mut self.task.steps[index];
        step.children = Some(children);
        // A child's end is progress: the watch waits its first wait again.
        step.attempt = 0;
        if !starts.is_empty() {
            self.effects.push(Effect::StartChildren {
                of: self.children_of(spec, index),
                children: starts,
                claimed: true,
            });
        }
        self.watch(workflow, index);
        self.settle(spec, index);
    }

    /// Ends step `index` once no child runs and none is to start: Processed when
    /// every item's child was started and the failures are within what it tolerates,
    /// failed otherwise (its children that succeeded are undone with the task).
    /// Fails the task as soon as the failures pass what the step tolerates, while
    /// the children running finish.
    fn settle(&mut self, spec: &ChildrenStep, index: usize) {
        let step = &self.task.steps[index];
        let Some(children) = step.children.clone() else {
            return;
        };
        let attempt = step.attempt;
        let allowed = spec.tolerated_failures.allowed(children.total);
        let too_many = children.failed > allowed;
        let reason = format!(
            "step '{}': {} of {} children failed ({allowed} tolerated)",
            step.name, children.failed, children.total
        );
        if too_many && self.task.state == TaskState::Processing {
            self.fail(reason.clone());
        }
        let stopping = self.task.state != TaskState::Processing;
        if !children.running.is_empty() || (children.started < children.total && !stopping) {
            return;
        }
        let succeeded = children.started == children.total && !too_many;
        self.log(Happened::Answered {
            step: index,
            operation: Operation::Call,
            attempt,
            outcome: if succeeded {
                Answer::Succeeded
            } else {
                Answer::Failed
            },
        });
        let task_id = self.task.id.to_local();
        let step = &mut self.task.steps[index];
        step.finished_at = Some(self.now);
        step.complete_by = None;
        if succeeded {
            step.state = StepState::Processed;
            let mut summary = json!({
                "total": children.total,
                "succeeded": children.succeeded,
                "failed": children.failed,
                "children": format!("/tasks/{task_id}/children?step={}", step.name),
            });
            if spec.items.is_none() {
                summary["task_id"] = json!(task_id.child(&step.name, 0));
            }
            step.output = Some(Arc::new(summary));
            self.mark_done(index);
            return;
        }
        step.state = StepState::Error;
        step.error = Some(if too_many {
            reason.clone()
        } else {
            format!(
                "stopped with {} of {} children started",
                children.started, children.total
            )
        });
        if children.succeeded > 0 {
            self.mark_done(index);
        }
        self.fail(reason);
    }

    /// Undoes step `index`: every child it started is told to undo (at most its
    /// concurrency at a time), each by its own compensations.
    pub(crate) fn undo_children(&mut self, workflow: &Workflow, index: usize) {
        let Some(spec) = workflow.steps[index].children() else {
            return;
        };
        let step = &mut self.task.steps[index];
        step.undoing = Some(step.state);
        step.state = StepState::Compensating;
        step.started_at = Some(self.now);
        if let Some(children) = &mut step.children {
            children.running.clear();
            children.undo_started = 0;
            children.undone = 0;
            children.not_undone = 0;
        }
        self.fill_undo(workflow, spec, index);
        self.log_start(index, Operation::Compensate);
    }

    fn fill_undo(&mut self, workflow: &Workflow, spec: &ChildrenStep, index: usize) {
        let of = self.children_of(spec, index);
        let step = &mut self.task.steps[index];
        step.attempt = 0;
        let Some(children) = &mut step.children else {
            return;
        };
        let mut told = Vec::new();
        while children.undo_started < children.started
            && children.running.len() < spec.max_concurrency as usize
        {
            told.push(children.undo_started);
            children.running.push(children.undo_started);
            children.undo_started += 1;
        }
        let done = children.running.is_empty();
        let not_undone = children.not_undone;
        if !told.is_empty() {
            self.effects.push(Effect::StopChildren {
                of,
                items: told,
                undo: true,
            });
        }
        if !done {
            self.watch(workflow, index);
            return;
        }
        self.log(Happened::Answered {
            step: index,
            operation: Operation::Compensate,
            attempt: self.task.steps[index].attempt,
            outcome: if not_undone == 0 {
                Answer::Succeeded
            } else {
                Answer::Failed
            },
        });
        let step = &mut self.task.steps[index];
        step.finished_at = Some(self.now);
        step.complete_by = None;
        if not_undone == 0 {
            step.state = StepState::Compensated;
        } else {
            step.state = StepState::CompensationFailed;
            step.error = Some(format!(
                "{not_undone} children were not undone: see them for what is left in place"
            ));
        }
    }

    /// Sets step `index`'s watch: when it passes with children still running, they
    /// are found again ([`Change::watch_again`]). From the workflow's pickup timeout
    /// after the last child's end, the waits double while nothing moves, up to the
    /// longest retry wait, so that a long child costs a few looks.
    pub(crate) fn watch(&mut self, workflow: &Workflow, index: usize) {
        let step = &mut self.task.steps[index];
        let wait = workflow
            .pickup_timeout
            .saturating_mul(1 << step.attempt.min(8))
            .min(MAX_RETRY_WAIT.max(workflow.pickup_timeout));
        step.attempt += 1;
        step.complete_by = Some(self.now.plus(wait));
    }

    /// Whose children step `index`'s are, and what they run.
    pub(crate) fn children_of(&self, spec: &ChildrenStep, index: usize) -> ChildrenOf {
        ChildrenOf {
            parent: self.task.id.clone(),
            step: index,
            step_name: self.task.steps[index].name.to_string(),
            run: self.task.run,
            workflow: spec.workflow.clone(),
            version: (self.task.pinned.get(&spec.workflow).copied()).map(ChildVersion::Pinned),
            notify: self.task.notify.clone(),
            owner: self.task.owner.clone(),
            pinned: self.task.pinned.clone(),
            priority: self.task.priority,
            scope: None,
            trace: Some(self.task.step_trace(index)),
        }
    }

    /// Step `index`'s watch has passed with children running: they are started again
    /// (a start lost is made, for a scheduler to claim; a child found ended is told
    /// to the parent again), or, while it is undone, told again to undo. Not a
    /// failure: a child's own supervisor fails it.
    pub(crate) fn watch_again(&mut self, workflow: &Workflow, order: &Order, index: usize) {
        if workflow.steps[index].branches().is_some() {
            return self.watch_branches_again(workflow, index);
        }
        let Some(spec) = workflow.steps[index].children() else {
            return;
        };
        let step = &self.task.steps[index];
        let running = step
            .children
            .as_ref()
            .map(|c| c.running.clone())
            .unwrap_or_default();
        let of = self.children_of(spec, index);
        // Children being undone, or of a task stopping, are looked for to be stopped
        // (one not yet created is kept from starting); the others, to be started.
        let undo = step.state == StepState::Compensating;
        if undo || self.task.state != TaskState::Processing {
            self.effects.push(Effect::StopChildren {
                of,
                items: running,
                undo,
            });
        } else {
            let input_of = child_inputs(&self.task, spec, order);
            let children = running
                .into_iter()
                .filter_map(|item| Some((item, input_of(item)?)))
                .collect();
            self.effects.push(Effect::StartChildren {
                of,
                children,
                claimed: false,
            });
        }
        self.watch(workflow, index);
    }
}

/// The input of each item's child, from `task`'s input and results ([`child_input`]).
fn child_inputs<'a>(
    task: &'a Task,
    spec: &'a ChildrenStep,
    order: &'a Order,
) -> impl Fn(u32) -> Option<Value> + 'a {
    let results = results(task);
    let items = spec
        .items
        .as_ref()
        .and_then(|source| source.lookup(&order.input, &results))
        .and_then(Value::as_array);
    move |item| {
        let value = items.and_then(|items| items.get(item as usize));
        child_input(spec, &order.input, &results, value)
    }
}

/// The input of the child for `item` (`None` for a child workflow's one): mapped by
/// the step's `input`, or the item itself (an object), or the parent's input (a
/// child workflow without a mapping). `None` when there is none to give.
fn child_input(
    spec: &ChildrenStep,
    input: &Value,
    results: &Results<'_>,
    item: Option<&Value>,
) -> Option<Value> {
    match (&spec.input, &spec.items) {
        (Some(fields), _) => Some(Value::Object(
            fields
                .iter()
                .map(|(field, source)| (field.clone(), source.value_for_item(input, results, item)))
                .collect(),
        )),
        (None, Some(_)) => item.filter(|item| item.is_object()).cloned(),
        (None, None) => Some(input.clone()),
    }
}

/// The JSON kind of `value`, in errors.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The scheduler, told that a child ended: its parent's step counts it and moves
/// on (more children, the step's end, the task's next move). An end of another run,
/// or of a child the step no longer waits for (counted already), is stale.
#[must_use]
pub fn on_child_ended(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    ended: &ChildEnded,
    now: Timestamp,
) -> Decision {
    let Some(step) = task.steps.get(ended.step) else {
        return Decision::ignore(Verdict::StaleResponse);
    };
    // While the step is undone, only a child's end in Error (undone, or with nothing
    // to undo) counts: a Processed end is an earlier message, from before the undo.
    let expected = match step.state {
        StepState::Processing => true,
        StepState::Compensating => ended.state == TaskState::Error,
        _ => false,
    };
    let waited_for = task.run == ended.run
        && expected
        && step
            .children
            .as_ref()
            .is_some_and(|c| c.running.contains(&ended.item));
    if !waited_for {
        return Decision::ignore(Verdict::StaleResponse);
    }
    let mut change = Change::of(task, now);
    if workflow
        .steps
        .get(ended.step)
        .and_then(|step| step.branches())
        .is_some()
    {
        if !change.branch_ended(workflow, ended) {
            return Decision::ignore(Verdict::StaleResponse);
        }
        change.advance(workflow, order);
        return change.done(Verdict::ChildCounted);
    }
    let step = &mut change.task.steps[ended.step];
    let undoing = step.state == StepState::Compensating;
    if let Some(children) = &mut step.children {
        children.running.retain(|&item| item != ended.item);
        match (undoing, ended.state) {
            (true, _) if ended.needs_a_person => children.not_undone += 1,
            (true, _) => children.undone += 1,
            (false, TaskState::Processed) => children.succeeded += 1,
            (false, _) => children.failed += 1,
        }
    }
    change.fill(workflow, order, ended.step);
    change.advance(workflow, order);
    change.done(Verdict::ChildCounted)
}

/// A child task, for its parent that is undone (`undo`) or cancelled: a running one
/// is cancelled; one that ended Processed is undone by its own compensations when
/// its parent's step is undone (a cancelled parent undoes it later, at its step's
/// cap); one in Error has nothing left to do.
#[must_use]
pub fn stop_as_child(task: &Task, workflow: &Workflow, undo: bool, now: Timestamp) -> Decision {
    let request = Request {
        by: Actor::Parent,
        at: now,
        batch: None,
    };
    match task.state {
        TaskState::Error => Decision::ignore(Verdict::CancelledAlready),
        TaskState::Processed if !undo => Decision::ignore(Verdict::CancelledAlready),
        TaskState::Processed => {
            let mut change = Change::of(task, now);
            change.task.not_undone.clear();
            change.fail("undone: its parent task failed or was cancelled".into());
            change.log(Happened::Cancelled { by: Actor::Parent });
            change.task.cancelled = Some(request);
            change.release(workflow, Duration::ZERO);
            change.done(Verdict::StoppedForParent)
        }
        _ => cancel(task, workflow, request, now)
            .unwrap_or_else(|_| Decision::ignore(Verdict::CancelledAlready)),
    }
}

/// A child stopped before it was created (its parent cancelled or undone while its
/// start was on its way): kept as a task in Error that never ran, so that the start,
/// when it comes, finds it ended rather than running it.
#[must_use]
pub fn never_started(
    workflow: &Workflow,
    of: &ChildrenOf,
    item: u32,
    now: Timestamp,
) -> (Task, Order) {
    let submission = crate::submission::Submission {
        id: of.parent.child(&of.step_name, item),
        input: json!({}),
        notify: None,
        owner: of.owner.clone(),
        parent: Some(crate::task::ParentLink {
            task: of.parent.clone(),
            step: of.step,
            item,
            run: of.run,
            scope: of.scope.clone(),
        }),
        pinned: of.pinned.clone(),
        start_at: None,
        priority: of.priority,
        alias: None,
        trace: of.trace.clone(),
    };
    let (task, order, _) = submit(workflow, submission, now);
    let mut change = Change::of(&task, now);
    change.task.error = Some("stopped by its parent before it started".into());
    change.task.fingerprint = "".into();
    change.task.complete_by = None;
    change.task.deadline = None;
    change.task.state = TaskState::Error;
    change.log(Happened::State {
        state: TaskState::Error,
    });
    (change.task, order)
}

/// A child task in Error, for its parent's new run (a resubmission reruns what was
/// undone): run again, with `input` if it changed, its end then told to that run.
///
/// # Errors
/// [`Refused`] when the new input does not fit, or cannot be run.
pub fn rerun_child(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    input: Option<Value>,
    run: u32,
    now: Timestamp,
) -> Result<Decision, Refused> {
    let request = Request {
        by: Actor::Parent,
        at: now,
        batch: None,
    };
    let mut decision = resubmit(task, workflow, order, Resubmit { request, input }, now)?;
    if let Some(next) = &mut decision.next
        && let Some(parent) = &mut next.parent
    {
        parent.run = run;
    }
    decision.verdict = Verdict::RerunForParent;
    Ok(decision)
}
