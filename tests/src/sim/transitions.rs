//! The invariants of each transition the simulation writes: states, children and
//! their caps, the order of calls and compensations, completions counted, cancels
//! kept, notifications owed and alerts expected.

use std::time::Duration;

use sas_core::clock::Clock;
use sas_domain::machine::key_name;
use sas_domain::task::{Step, StepState, Task, TaskState};
use sas_domain::workflow::Workflow;

use super::store::FaultyStore;
use super::waits;

impl FaultyStore {
    /// The invariants of one transition, from `old` (if any) to `new`.
    pub(super) fn check(&self, old: Option<&Task>, new: &Task) {
        let Some(workflow) = self
            .workflows
            .version(&new.workflow.name, new.workflow.version)
        else {
            return self
                .world
                .violation(format!("task {} runs an unknown workflow", new.id));
        };
        if new.notify.is_some() && old.is_none_or(|o| o.state != new.state) {
            self.world.world().owed.insert((
                new.id.to_string(),
                new.version,
                new.state.as_str().to_owned(),
            ));
        }
        // A child alerts no operator (its parent does, if it fails), unless a person
        // must undo what it left.
        let alerts = new.parent.is_none() || new.needs_a_person();
        if new.state == TaskState::Error
            && old.is_none_or(|o| o.state != TaskState::Error)
            && alerts
        {
            self.world
                .world()
                .reached_error
                .insert((new.id.to_string(), new.run));
        }
        if let Some(old) = old.filter(|o| o.run < new.run) {
            // Resubmitted (a child, with its parent): a person acted on its alert.
            self.world
                .world()
                .acted_on
                .insert((new.id.to_string(), old.run));
        }
        self.check_children(old, new, &workflow);
        // Step by step, a transition is compared with the one before on the same
        // version: a move carries steps to other places.
        let old = old.filter(|o| o.workflow == new.workflow);
        if let Some(old) = old.filter(|o| o.cancelled.is_some() && o.run == new.run) {
            if new.state == TaskState::Processed {
                self.world
                    .violation(format!("task {} Processed after a cancel", new.id));
            }
            let called = old.steps.iter().zip(&new.steps).any(|(was, is)| {
                was.state != StepState::Processing && is.state == StepState::Processing
            });
            if called {
                self.world
                    .violation(format!("task {} called a step after a cancel", new.id));
            }
        }
        if let Some(old) = old.filter(|o| o.run == new.run) {
            self.check_order(old, new, &workflow);
            let now = self.world.world().clock.now();
            for broken in waits::check_transition(old, new, now) {
                self.world.violation(broken);
            }
        }
        // A state machine's steps are its states' last visits: one that failed and was
        // caught, or never visited, is neither; none may still be at work.
        let unsettled = match workflow.machine {
            Some(_) => new.steps.iter().any(|s| s.state == StepState::Processing),
            None => !new.steps.iter().all(Step::is_settled),
        };
        if new.state == TaskState::Processed && unsettled {
            self.world.violation(format!(
                "task {} Processed with a step neither Processed nor Skipped",
                new.id
            ));
        }
        for (index, (step, definition)) in new.steps.iter().zip(&workflow.steps).enumerate() {
            let Some(call) = definition.call() else {
                continue;
            };
            let bound = call.supervision.failure_threshold + 1;
            if step.failure_count > bound || step.compensation_failure_count > bound {
                self.world.violation(format!(
                    "task {} step {} FailureCount {}/{} past the threshold {} by more than one",
                    new.id,
                    step.name,
                    step.failure_count,
                    step.compensation_failure_count,
                    bound - 1
                ));
            }
            // A completion is a step that was running becoming Processed (a step whose
            // compensation timed out goes back to the state it had, Processed for
            // most, to be undone again); a state machine's, once a visit of its state.
            let was_running = old.is_some_and(|o| o.steps[index].state == StepState::Processing);
            if step.state == StepState::Processed && was_running {
                let mut world = self.world.world();
                let count = world
                    .completions
                    .entry((new.id.to_string(), new.run, key_name(new, &step.name)))
                    .or_default();
                *count += 1;
                if *count > 1 {
                    drop(world);
                    self.world.violation(format!(
                        "task {} step {} completed twice in run {}",
                        new.id, step.name, new.run
                    ));
                }
            }
        }
    }

    /// The children of one transition: a step runs at most its `max_concurrency`
    /// children, counted and in the store; a task ends with none of its children
    /// running.
    fn check_children(&self, old: Option<&Task>, new: &Task, workflow: &Workflow) {
        for (step, definition) in new.steps.iter().zip(&workflow.steps) {
            let (Some(spec), Some(children)) = (definition.children(), &step.children) else {
                continue;
            };
            if children.running.len() > spec.max_concurrency as usize {
                self.world.violation(format!(
                    "task {} step {} counts {} children running, over its cap of {}",
                    new.id,
                    step.name,
                    children.running.len(),
                    spec.max_concurrency
                ));
            }
            let ended = new.state.is_final() && old.is_none_or(|o| !o.state.is_final());
            if !ended {
                continue;
            }
            let stored = self.inner.tasks();
            let running: Vec<String> = (0..children.started)
                .map(|item| new.id.child(&step.name, item))
                .filter(|id| stored.iter().any(|t| t.id == *id && !t.state.is_final()))
                .map(|id| id.to_string())
                .collect();
            if !running.is_empty() {
                self.world.violation(format!(
                    "task {} ended {:?} with children of {} running: {running:?}",
                    new.id, new.state, step.name
                ));
            }
        }
        let starts =
            new.parent.is_some() && !new.state.is_final() && old.is_none_or(|o| o.state.is_final());
        if let Some(link) = new.parent.as_ref().filter(|_| starts) {
            let stored = self.inner.tasks();
            let cap = stored
                .iter()
                .find(|t| t.id == link.task)
                .and_then(|p| self.workflows.version(&p.workflow.name, p.workflow.version))
                .and_then(|w| Some(w.steps.get(link.step)?.children()?.max_concurrency));
            let siblings = stored
                .iter()
                .filter(|t| t.id != new.id && !t.state.is_final())
                .filter(|t| {
                    t.parent
                        .as_ref()
                        .is_some_and(|p| p.task == link.task && p.step == link.step)
                })
                .count();
            if let Some(cap) = cap.filter(|&cap| siblings + 1 > cap as usize) {
                self.world.violation(format!(
                    "child {} runs beside {siblings} siblings, over their cap of {cap}",
                    new.id
                ));
            }
        }
    }

    /// The order of one transition's calls and compensations: a step is called only
    /// once the steps it waits for are Processed (or Skipped), and not while the task is being
    /// undone (but as a repair's rewind ends); a step is undone only once every step
    /// done after it is, among those a repair undoes if it is one (branches undo
    /// in the reverse of the order their effects came to be in place), and no call
    /// is out; a call waiting for its retry is not sent before its time.
    fn check_order(&self, old: &Task, new: &Task, workflow: &Workflow) {
        for (index, (was, is)) in old.steps.iter().zip(&new.steps).enumerate() {
            let sent = |state| was.state != state && is.state == state;
            if sent(StepState::Processing) {
                let waiting: Vec<&str> = workflow.steps[index]
                    .after
                    .iter()
                    .filter(|&&before| !new.steps[before].is_settled())
                    .map(|&before| &*new.steps[before].name)
                    .collect();
                if !waiting.is_empty() {
                    self.world.violation(format!(
                        "task {} called {} before {waiting:?}",
                        new.id, is.name
                    ));
                }
                // A repair's rewind, its steps undone, runs the task forward.
                let rewound = !old.rewind.is_empty()
                    && new.rewind.is_empty()
                    && new.state == TaskState::Processing;
                if old.state == TaskState::Compensating && !rewound {
                    self.world.violation(format!(
                        "task {} called {} while being undone",
                        new.id, is.name
                    ));
                }
                let now = self.world.world().clock.now();
                if let Some(due) = was
                    .retry_at
                    .filter(|due| now.plus(Duration::from_secs(1)) < *due)
                {
                    self.world.violation(format!(
                        "task {} called {} at {now}, before its retry's time {due}",
                        new.id, is.name
                    ));
                }
            }
            if sent(StepState::Compensating) {
                // A repair undoes the steps it runs again, and no other.
                let rewinding = &new.rewind;
                if !rewinding.is_empty() && !rewinding.iter().any(|name| **name == *is.name) {
                    self.world.violation(format!(
                        "task {} undid {}, which its repair keeps",
                        new.id, is.name
                    ));
                }
                let later: Vec<&str> = new
                    .steps
                    .iter()
                    .zip(&workflow.steps)
                    .filter(|(other, definition)| {
                        other.done_order > is.done_order
                            && (rewinding.is_empty()
                                || rewinding.iter().any(|name| **name == *other.name))
                            && definition.can_be_undone()
                            && matches!(
                                other.state,
                                StepState::Processed | StepState::TimedOut | StepState::Unusable
                            )
                    })
                    .map(|(other, _)| &*other.name)
                    .collect();
                if !later.is_empty() {
                    self.world.violation(format!(
                        "task {} undid {} before {later:?}, done after it",
                        new.id, is.name
                    ));
                }
                if let Some(out) = new.steps.iter().find(|s| s.state == StepState::Processing) {
                    self.world.violation(format!(
                        "task {} undid {} while the call of {} is out",
                        new.id, is.name, out.name
                    ));
                }
            }
        }
    }
}
