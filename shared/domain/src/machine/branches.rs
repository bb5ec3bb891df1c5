//! A Parallel's branches and a Map's items, one child task each: the step of the
//! state starts them (at most its `MaxConcurrency` at once), keeps each one's output
//! as it ends ([`Change::branch_ended`]), and ends when every one has, or fails as soon
//! as more fail than the state tolerates (those still running stopped). Each child
//! runs the same machine, from its branch's start, with the variables in scope where
//! the state was entered ([`BranchScope`]).

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

use sas_asl::executions;

use super::results::ItemEnd;
use super::{Awaited, BranchFailure, BranchScope, Branches, VisitWork};
use crate::decide::change::Change;
use crate::decide::{ChildVersion, ChildrenOf, Effect};
use crate::kinds::children::MAX_CONCURRENCY;
use crate::kinds::{CallbackSettings, Kind, KindView, LeaseEnd, Reads, Summary, UndoOnFailure};
use crate::messages::{ChildEnded, Operation};
use crate::task::{Answer, Children, Happened, Order, StepState, TaskState};
use crate::workflow::{Supervision, Workflow};

/// The step of a Parallel or a Map state, or of a Task that starts an execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchesStep {
    /// Its state's `Type`: `Parallel`, `Map` or `Task`.
    pub state_type: &'static str,
    /// Of a Task that starts an execution and gives it its task token
    /// (`.waitForTaskToken`): the wait for the token's use once the execution started.
    pub token: Option<Box<TokenWait>>,
}

/// A wait for a task token's use after the step's child started: its timeout and
/// heartbeat, and the supervision that ends it (at once, past either).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenWait {
    pub callback: CallbackSettings,
    pub supervision: Supervision,
}

/// What a caller sees of a Parallel's or a Map's step.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BranchesView {
    /// Its state's `Type`: `Parallel` or `Map`.
    pub state_type: &'static str,
}

impl Kind for BranchesStep {
    fn start(&self, change: &mut Change, workflow: &Workflow, _: &Order, index: usize) {
        change.start_branches(workflow, index);
    }

    /// Never called: a state machine undoes nothing ([`Kind::undo_on_failure`]).
    fn undo(&self, _: &mut Change, _: &Workflow, _: &Order, _: usize) {}

    fn cancel(&self, change: &mut Change, index: usize) {
        change.stop_branches(index);
    }

    fn lease_ended(&self, step: &crate::task::Step) -> LeaseEnd<'_> {
        match &self.token {
            Some(token) if step.waiting.is_some() => LeaseEnd::Expired(&token.supervision),
            _ => LeaseEnd::ChildrenWatched,
        }
    }

    fn undo_on_failure(&self) -> UndoOnFailure {
        UndoOnFailure::NothingToUndo
    }

    fn callback(&self) -> Option<&CallbackSettings> {
        self.token.as_ref().map(|token| &token.callback)
    }

    fn reads(&self) -> Reads<'_> {
        Reads::EVERYTHING
    }

    fn service(&self) -> Option<&str> {
        None
    }

    fn view(&self) -> KindView {
        KindView::Branches(BranchesView {
            state_type: self.state_type,
        })
    }

    fn summary(&self) -> Summary {
        let (kind, does) = match self.state_type {
            "Map" => ("map", "Map: its item processor, a child task per item"),
            "Parallel" => ("parallel", "Parallel: a child task per branch"),
            _ => (
                "child",
                "Task: an execution of a state machine, a child task",
            ),
        };
        Summary {
            kind,
            does: does.to_owned(),
            undo: None,
        }
    }
}

impl Change {
    /// Starts step `index`, whose visit's children are in its work: none yet ended.
    pub(crate) fn start_branches(&mut self, workflow: &Workflow, index: usize) {
        let round = self.task.machine.as_ref().map_or(0, |run| run.events);
        let Some(branches) = self.branches_mut() else {
            return;
        };
        branches.round = round;
        branches.outputs = vec![Value::Null; branches.inputs.len()];
        branches.failure = None;
        if let Some(writing) = &mut branches.writing {
            writing.ends = vec![None; branches.inputs.len()];
        }
        let total = u32::try_from(branches.inputs.len()).unwrap_or(u32::MAX);
        self.begin(index, Operation::Call);
        self.task.steps[index].children = Some(Children {
            total,
            ..Children::default()
        });
        self.fill_branches(workflow, index);
    }

    /// A child of step `ended.step` ended: its output (or its failure) kept, more started,
    /// the step ended when its children have. False when the end is of an earlier
    /// start's child: stale.
    pub(crate) fn branch_ended(&mut self, workflow: &Workflow, ended: &ChildEnded) -> bool {
        let index = ended.step;
        let round = current(&self.task).map(|branches| branches.round);
        let end = ended.branch.as_deref().cloned().unwrap_or_default();
        // A child never started says no round; one of an earlier start is stale.
        if ended.branch.is_some() && Some(end.round) != round {
            return false;
        }
        // An execution a Task started counts as ended: whether the Task succeeded is
        // read from what it told ([`Change::execution_result`]).
        let execution = current(&self.task).is_some_and(|b| b.execution.is_some());
        let step = &mut self.task.steps[index];
        let Some(children) = &mut step.children else {
            return false;
        };
        children.running.retain(|&item| item != ended.item);
        let succeeded = execution || ended.state == TaskState::Processed;
        if succeeded {
            children.succeeded += 1;
        } else {
            children.failed += 1;
        }
        let now = self.now;
        let Some(branches) = self.branches_mut() else {
            return false;
        };
        branches.events += end.events;
        if let Some(slot) = (branches.writing.as_mut())
            .and_then(|writing| writing.ends.get_mut(ended.item as usize))
        {
            *slot = Some(ItemEnd {
                failed: !succeeded,
                started_at: end.started_at,
                stopped_at: now,
            });
        }
        if let Some(started) = &mut branches.execution {
            started.told = Some(end);
            self.fill_branches(workflow, index);
            return true;
        }
        let slot = branches.outputs.get_mut(ended.item as usize);
        if succeeded {
            if let Some(slot) = slot {
                *slot = end.output.unwrap_or(Value::Null);
            }
        } else {
            // A child that never ran, or was stopped, names no error of its own.
            let failure = match end.error {
                Some(error) => BranchFailure {
                    error,
                    cause: end.cause.unwrap_or_default(),
                },
                None => BranchFailure {
                    error: sas_asl::errors::RUNTIME.to_owned(),
                    cause: "the branch ended without a result".to_owned(),
                },
            };
            if let Some(slot) = slot {
                *slot = json!({"Error": failure.error, "Cause": failure.cause});
            }
            branches.failure.get_or_insert(failure);
        }
        self.fill_branches(workflow, index);
        true
    }

    /// Starts step `index`'s next children up to its concurrency; ends the step once
    /// every child has ended, or at once when more have failed than it tolerates. It
    /// reads the visit's children in place: a map's inputs and outputs are not copied
    /// at each child's end.
    fn fill_branches(&mut self, workflow: &Workflow, index: usize) {
        let Some(branches) = current(&self.task) else {
            return;
        };
        let mut children = self.task.steps[index].children.clone().unwrap_or_default();
        let stopped = self.task.state != TaskState::Processing;
        let failure = too_many_failed(branches, &children).or_else(|| {
            (stopped && children.running.is_empty()).then(|| BranchFailure {
                error: sas_asl::errors::RUNTIME.to_owned(),
                cause: "stopped before its children ended".to_owned(),
            })
        });
        if let Some(failure) = failure {
            self.stop_branches(index);
            return self.end_branches(index, Err(failure));
        }
        let limit = match branches.max_concurrency {
            0 => MAX_CONCURRENCY,
            limit => limit.min(MAX_CONCURRENCY),
        } as usize;
        let mut starts = Vec::new();
        while !stopped && children.started < children.total && children.running.len() < limit {
            let item = children.started;
            children.started += 1;
            children.running.push(item);
            starts.push((item, input_of(branches, item)));
        }
        let done = children.running.is_empty() && children.started == children.total;
        let step = &mut self.task.steps[index];
        step.children = Some(children);
        // A child's end is progress: the watch waits its first wait again.
        step.attempt = 0;
        if !starts.is_empty() {
            let of = self.branches_of(index);
            self.effects.push(Effect::StartChildren {
                of,
                children: starts,
                claimed: true,
            });
        }
        if done {
            self.children_done(workflow, index);
        } else {
            self.watch(workflow, index);
        }
    }

    /// Step `index`'s children have ended: the step ends, or, of a Task whose execution
    /// started with its task token, waits for the token's use (ends as it was used,
    /// where it came before the start was told).
    fn children_done(&mut self, workflow: &Workflow, index: usize) {
        let started = current(&self.task)
            .and_then(|branches| branches.execution.as_deref())
            .and_then(|execution| execution.told.as_ref())
            .is_some_and(|told| told.started_at.is_some());
        let callback = (workflow.steps[index].callback())
            .map(|callback| super::visit_callback(&self.task, callback));
        match callback {
            Some(_) if started && self.settle_callback(index) => {}
            Some(callback) if started => self.wait_for_callback(index, &callback),
            _ => self.end_branches(index, Ok(())),
        }
    }

    /// Step `index`'s children have ended (`Ok`), or it fails with `failure`.
    fn end_branches(&mut self, index: usize, outcome: Result<(), BranchFailure>) {
        let attempt = self.task.steps[index].attempt;
        self.log(Happened::Answered {
            step: index,
            operation: Operation::Call,
            attempt,
            outcome: if outcome.is_ok() {
                Answer::Succeeded
            } else {
                Answer::Failed
            },
        });
        let now = self.now;
        let step = &mut self.task.steps[index];
        step.finished_at = Some(now);
        step.complete_by = None;
        // The ends of children still running, if any, are no longer waited for.
        if let Some(children) = &mut step.children {
            children.running.clear();
        }
        match outcome {
            Ok(()) => step.state = StepState::Processed,
            Err(failure) => {
                step.state = StepState::Error;
                // Read back as the state's error ([`super::decide`]).
                step.error =
                    Some(json!({"Error": failure.error, "Cause": failure.cause}).to_string());
            }
        }
    }

    /// Stops step `index`'s children still running: the task is stopped, or the
    /// state failed.
    pub(crate) fn stop_branches(&mut self, index: usize) {
        let step = &self.task.steps[index];
        let Some(children) = &step.children else {
            return;
        };
        if step.state != StepState::Processing || children.running.is_empty() {
            return;
        }
        let items = children.running.clone();
        let of = self.branches_of(index);
        self.effects.push(Effect::StopChildren {
            of,
            items,
            undo: false,
        });
    }

    /// Step `index`'s watch has passed with children running: they are started again
    /// (a start lost is made; a child found ended is told to the parent again).
    pub(crate) fn watch_branches_again(&mut self, workflow: &Workflow, index: usize) {
        let running = self.task.steps[index]
            .children
            .as_ref()
            .map(|children| children.running.clone())
            .unwrap_or_default();
        let of = self.branches_of(index);
        if self.task.state == TaskState::Processing {
            let branches = current(&self.task);
            let children = running
                .into_iter()
                .map(|item| (item, branches.map_or(Value::Null, |b| input_of(b, item))))
                .collect();
            self.effects.push(Effect::StartChildren {
                of,
                children,
                claimed: false,
            });
        } else {
            self.effects.push(Effect::StopChildren {
                of,
                items: running,
                undo: false,
            });
        }
        self.watch(workflow, index);
    }

    /// The children of the visit being made.
    fn branches_mut(&mut self) -> Option<&mut Branches> {
        match self.task.machine.as_mut()?.work.as_mut()? {
            VisitWork::Branches(branches) => Some(branches),
            _ => None,
        }
    }

    /// Whose children step `index`'s are: branches of this task's machine, with the
    /// variables in scope; or the execution of another machine its Task started.
    pub(super) fn branches_of(&self, index: usize) -> ChildrenOf {
        let task = &self.task;
        let run = task.machine.as_deref();
        let branches = current(task);
        let round = branches.map_or(0, |branches| branches.round);
        let started = branches.and_then(|branches| branches.execution.as_deref());
        let (workflow, version, scope) = match started {
            Some(started) => (
                started.machine.clone(),
                started.qualifier.clone().map(ChildVersion::Qualified),
                BranchScope {
                    round,
                    execution: Some(started.awaits),
                    ..BranchScope::default()
                },
            ),
            None => (
                task.workflow.name.to_string(),
                Some(ChildVersion::Pinned(task.workflow.version)),
                BranchScope {
                    round,
                    variables: run.map(|run| run.variables.clone()).unwrap_or_default(),
                    execution: None,
                    execution_input: branches.and_then(|b| b.execution_input.clone()),
                },
            ),
        };
        ChildrenOf {
            parent: task.id.clone(),
            step: index,
            step_name: format!("{}-{round}", child_name(&task.steps[index].name, index)),
            run: task.run,
            workflow,
            version,
            notify: task.notify.clone(),
            owner: task.owner.clone(),
            pinned: task.pinned.clone(),
            priority: task.priority,
            scope: Some(Box::new(scope)),
            trace: Some(task.step_trace(index)),
        }
    }

    /// The result of the Task of step `index` on `resource`, which started an
    /// execution, from what the execution told of itself: `StartExecution`'s answer,
    /// or, waited for (`.sync`, `.sync:2`), its description, a failure where it did
    /// not succeed.
    pub(super) fn execution_result(
        &self,
        index: usize,
        resource: &sas_asl::definition::Resource,
    ) -> Result<Value, sas_asl::Failure> {
        let branches = current(&self.task);
        let Some((started, input)) = branches.and_then(|branches| {
            let started = branches.execution.as_deref()?;
            Some((started, branches.inputs.first()?))
        }) else {
            return Err(sas_asl::Failure::runtime("a Task's execution not recorded"));
        };
        let told = started.told.clone().unwrap_or_default();
        // Never started (its machine is not there): `StartExecution`'s own error.
        if let (None, Some(error)) = (told.started_at, &told.error) {
            let cause = told.cause.clone().unwrap_or_default();
            return Err(sas_asl::Failure::new(error.clone(), cause));
        }
        let of = self.branches_of(index);
        let name = of.parent.child(&of.step_name, 0).local().to_owned();
        let machine = &started.machine;
        let described = executions::Described {
            execution_arn: &super::execution_arn(machine, &name),
            machine_arn: &super::machine_arn(machine),
            name: &name,
            input,
            status: told.status.as_str(),
            output: told.output.as_ref(),
            error: told.error.as_deref(),
            cause: told.cause.as_deref(),
            start_date: told.started_at.unwrap_or(self.now).0,
            stop_date: self.task.steps[index].finished_at.map(|at| at.0),
        };
        match started.awaits {
            Awaited::Start => Ok(executions::started(&described)),
            Awaited::End => executions::ended(resource.pattern, &described),
        }
    }
}

/// The children of the visit `task`'s machine is making, if it makes one.
fn current(task: &crate::task::Task) -> Option<&Branches> {
    match task.machine.as_ref()?.work.as_ref()? {
        VisitWork::Branches(branches) => Some(branches),
        _ => None,
    }
}

/// The input of child `item`.
fn input_of(branches: &Branches, item: u32) -> Value {
    branches
        .inputs
        .get(item as usize)
        .cloned()
        .unwrap_or(Value::Null)
}

/// The failure that ends a Parallel or a Map before its children have: any child's
/// without tolerance; past a Map's tolerance, `States.ExceedToleratedFailureThreshold`.
fn too_many_failed(branches: &Branches, children: &Children) -> Option<BranchFailure> {
    let failure = branches.failure.clone()?;
    let (failed, total) = (u64::from(children.failed), u64::from(children.total));
    let tolerated = branches
        .tolerated_count
        .is_some_and(|count| failed <= count)
        || branches
            .tolerated_percentage
            .is_some_and(|percentage| failed as f64 * 100.0 <= percentage * total as f64);
    match (branches.tolerated_count, branches.tolerated_percentage) {
        _ if tolerated => None,
        (None, None) => Some(failure),
        _ => Some(BranchFailure {
            error: sas_asl::errors::EXCEED_TOLERATED_FAILURE_THRESHOLD.to_owned(),
            cause: "The specified tolerated failure threshold was exceeded".to_owned(),
        }),
    }
}

/// The name a state's children carry in their ids: the state's own where it fits
/// an id, else its step's place.
fn child_name(state: &str, index: usize) -> String {
    let plain = !state.is_empty()
        && state.len() <= 64
        && state
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain {
        state.to_owned()
    } else {
        format!("state-{index}")
    }
}
