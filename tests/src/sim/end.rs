//! The end of a run: the system settles without faults, then the invariants that
//! hold once it has (every task final, effects in place or undone, once a run,
//! alerts published, notifications delivered, nothing left in the queues).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::PoisonError;
use std::time::Duration;

use sas_core::clock::Clock;
use sas_domain::ids::QueueName;
use sas_domain::task::{Step, StepState, Task, TaskState};
use serde_json::Value;

use super::remote::Applied;
use super::{CALLERS, Sim};

impl Sim {
    /// Runs without faults until every task is final and the queues are empty.
    pub(super) async fn settle(&mut self) -> bool {
        self.world.world().chaos = false;
        self.remote
            .outages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let deadline = self.clock.now().plus(self.settle_bound);
        loop {
            self.redrive_ingest().await;
            let visible = self.visible();
            if let Some((queue, id)) = visible.get(self.world.below(visible.len())) {
                self.deliver(queue, *id).await;
                continue;
            }
            let tasks = self.memory.tasks();
            let pending = self
                .queues()
                .iter()
                .any(|q| !self.memory.messages(q).is_empty());
            // A task in Error may keep a lease until its alert is published.
            if !pending
                && tasks
                    .iter()
                    .all(|t| t.state.is_final() && t.complete_by.is_none())
            {
                return true;
            }
            if self.clock.now() > deadline {
                return false;
            }
            self.settle_waits().await;
            self.sweep().await;
            if self.visible().is_empty() {
                // Nothing to do until the next message becomes visible or lease expires.
                let next_message = self
                    .queues()
                    .iter()
                    .flat_map(|q| self.memory.messages(q))
                    .map(|m| m.visible_at)
                    .min();
                let next_lease = tasks.iter().filter_map(Task::sweep_at).min();
                let next = [next_message, next_lease]
                    .into_iter()
                    .flatten()
                    .min()
                    .unwrap_or(self.clock.now());
                self.advance(self.clock.now().until(next) + Duration::from_millis(1));
            }
        }
    }

    /// The invariants that hold at the end of a run.
    pub(super) fn check_end(&self, settled: bool) {
        let tasks = self.memory.tasks();
        let accepted: BTreeSet<String> = tasks.iter().map(|t| t.id.to_string()).collect();
        if !settled {
            let open: Vec<_> = tasks
                .iter()
                .filter(|t| !t.state.is_final() || t.complete_by.is_some())
                .map(|t| format!("{} {:?} until {:?}", t.id, t.state, t.complete_by))
                .collect();
            let bound = self.settle_bound;
            self.world
                .violation(format!("not settled within {bound:?}: {open:?}"));
        }
        let applied = self.remote.applied().clone();
        for task in &tasks {
            let workflow = self
                .workflows
                .version(&task.workflow.name, task.workflow.version)
                .expect("workflow");
            if task.state.is_final() && (task.complete_by.is_some() || task.locked_by.is_some()) {
                self.world
                    .violation(format!("task {} final with a lease or a lock", task.id));
            }
            if workflow.machine.is_some() {
                self.check_machine_at_end(task, &applied);
                continue;
            }
            // A step kept Processed through a resubmission keeps the effect of its run.
            let applied_in =
                |service: &str, runs: std::ops::RangeInclusive<u32>, step: &str, suffix: &str| {
                    runs.into_iter().any(|run| {
                        applied.contains_key(&(
                            service.to_owned(),
                            format!("{}/{run}/{step}{suffix}", task.id),
                        ))
                    })
                };
            for (step, definition) in task.steps.iter().zip(&workflow.steps) {
                let Some(call) = definition.call() else {
                    self.check_children_at_end(&tasks, task, step);
                    continue;
                };
                // Under the keys the step carries now, those of the run it was last
                // sent in since its effect was known absent.
                let applied_for = |suffix: &str| {
                    applied_in(&call.agent, step.key_run..=step.key_run, &step.name, suffix)
                };
                match task.state {
                    TaskState::Processed
                        if step.state != StepState::Skipped
                            && !applied_in(&call.agent, 1..=task.run, &step.name, "") =>
                    {
                        self.world.violation(format!(
                            "task {} Processed without the effect of {}",
                            task.id, step.name
                        ));
                    }
                    TaskState::Error if definition.can_be_undone() => {
                        let undone = matches!(
                            step.state,
                            StepState::Compensated | StepState::CompensationFailed
                        );
                        if matches!(
                            step.state,
                            StepState::Processed | StepState::TimedOut | StepState::Compensating
                        ) {
                            self.world.violation(format!(
                                "task {} in Error with {} not compensated",
                                task.id, step.name
                            ));
                        }
                        if applied_for("") && !undone && step.state != StepState::Error {
                            self.world.violation(format!(
                                "task {} in Error with the effect of {} in place",
                                task.id, step.name
                            ));
                        }
                        if step.state == StepState::Compensated && !applied_for("/compensate") {
                            self.world.violation(format!(
                                "task {} step {} Compensated without its compensation",
                                task.id, step.name
                            ));
                        }
                    }
                    _ => {}
                }
            }
        }
        let alerts = self.memory.alerts();
        let unseen: Vec<(String, u32)> = {
            let world = self.world.world();
            world
                .reached_error
                .difference(&world.acted_on)
                .cloned()
                .collect()
        };
        for (id, run) in &unseen {
            if !alerts
                .iter()
                .any(|a| a.task_id.as_str() == id && a.run == *run)
            {
                self.world.violation(format!(
                    "task {id} reached Error in run {run} and no alert was published"
                ));
            }
        }
        for id in self.accepted.difference(&accepted) {
            self.world
                .violation(format!("task {id} was accepted and lost"));
        }
        self.check_notified();
        let mut keys_per_step: BTreeMap<(&str, &str, bool), usize> = BTreeMap::new();
        for effect in applied.values() {
            *keys_per_step
                .entry((&effect.task, &effect.step, effect.compensation))
                .or_default() += 1;
        }
        for ((task, step, compensation), keys) in keys_per_step {
            let runs = tasks
                .iter()
                .find(|t| t.id.as_str() == task)
                .map_or(0, |t| t.run as usize);
            if keys > runs {
                let what = if compensation {
                    "compensation"
                } else {
                    "effect"
                };
                self.world.violation(format!(
                    "the {what} of task {task} step {step} applied {keys} times in {runs} run(s)"
                ));
            }
        }
        self.check_one_effect_per_step(&tasks, &applied);
        for effect in applied.values() {
            if !accepted.contains(&effect.task) {
                self.world.violation(format!(
                    "an effect of unknown task {} ({}, compensation: {})",
                    effect.task, effect.step, effect.compensation
                ));
            }
        }
        let left: Vec<String> = self
            .queues()
            .iter()
            .flat_map(|queue| {
                self.memory
                    .messages(queue)
                    .into_iter()
                    .map(move |message| format!("{queue}: {}", message.body))
            })
            .collect();
        if !left.is_empty() {
            self.world.violation(format!(
                "messages left in the queues after settling: {left:?}"
            ));
        }
    }
    /// The children of a task's `step` once settled: every child it started has
    /// ended; a Processed task's children as the step counted them (those that failed
    /// within its tolerance in Error, or never started); a failed task's children in
    /// Error, undone by their own compensations (their own checks say so).
    fn check_children_at_end(&self, tasks: &[Task], task: &Task, step: &Step) {
        let Some(children) = &step.children else {
            return;
        };
        if !task.state.is_final() {
            return;
        }
        let states: Vec<Option<TaskState>> = (0..children.started)
            .map(|item| {
                let id = task.id.child(&step.name, item);
                tasks.iter().find(|t| t.id == id).map(|t| t.state)
            })
            .collect();
        let processed = states
            .iter()
            .filter(|s| **s == Some(TaskState::Processed))
            .count();
        let running = states.iter().flatten().filter(|s| !s.is_final()).count();
        let wrong = running > 0
            || match task.state {
                TaskState::Processed => {
                    processed != children.succeeded as usize
                        || states.len() - processed != children.failed as usize
                }
                _ => processed > 0,
            };
        if wrong {
            self.world.violation(format!(
                "task {} {:?} with the children of {} {states:?}, counted {children:?}",
                task.id, task.state, step.name
            ));
        }
    }

    /// Every status change written of a task that asks for notifications reached the
    /// callers' queue at least once (sends failed, and actors stopped between a
    /// write and its sends): a caller may rely on them, deduplicating by version.
    fn check_notified(&self) {
        let callers = QueueName::parse(CALLERS).expect("name");
        let delivered: BTreeSet<(String, u64, String)> = self
            .memory
            .messages(&callers)
            .iter()
            .filter_map(|m| serde_json::from_str::<Value>(&m.body).ok())
            .filter_map(|n| {
                let field = |name: &str| n[name].as_str().map(str::to_owned);
                Some((field("task_id")?, n["version"].as_u64()?, field("state")?))
            })
            .collect();
        let owed = self.world.world().owed.clone();
        for (task, version, state) in owed.difference(&delivered) {
            self.world.violation(format!(
                "task {task}: the status change to {state} of version {version} was never notified"
            ));
        }
    }

    /// No step of a task has its effect applied under two idempotency keys, the
    /// first not undone: across resubmissions too, a step whose effect may be in
    /// place is called again under its key, never under a new one. (Read-only steps
    /// have no effect; a state machine runs again from its start, its visits under
    /// the new run's keys: [`Sim::check_machine_at_end`].)
    fn check_one_effect_per_step(
        &self,
        tasks: &[Task],
        applied: &BTreeMap<(String, String), Applied>,
    ) {
        let mut not_undone: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
        for ((service, key), effect) in applied {
            let undone = applied.contains_key(&(service.clone(), format!("{key}/compensate")));
            if !effect.compensation && !undone {
                not_undone
                    .entry((&effect.task, &effect.step))
                    .or_default()
                    .push(key);
            }
        }
        for ((task, step), keys) in not_undone {
            let exempt = tasks
                .iter()
                .find(|t| t.id.as_str() == task)
                .and_then(|t| self.workflows.version(&t.workflow.name, t.workflow.version))
                .is_some_and(|w| {
                    w.machine.is_some()
                        || (w.steps.iter().find(|s| s.name == step))
                            .and_then(|s| s.call())
                            .is_some_and(|c| c.read_only)
                });
            if keys.len() > 1 && !exempt {
                self.world.violation(format!(
                    "task {task} step {step} has its effect in place under {} keys: {keys:?}",
                    keys.len()
                ));
            }
        }
    }
}
