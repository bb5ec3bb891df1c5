//! The operator's repairs and moves, at random points of the chaos: a task run again
//! from a step, its input patched or resumed as it is; a new version of the drone
//! delivery shipped, and running tasks moved onto it. A refused repair or move must
//! change nothing; the end's invariants (one effect a step, under one key while it may
//! be in place) hold across them.

use std::collections::BTreeMap;
use std::sync::PoisonError;

use sas_core::app::ActionError;
use sas_domain::decide::{Move, Repair};
use sas_domain::ids::CHILD_SEPARATOR;
use sas_domain::task::{Actor, StepState, Task, TaskState};
use sas_domain::workflow::Workflow;
use serde_json::{Value, json};

use super::Sim;
use super::remote::Applied;

/// The workflow a new version of is shipped during the chaos.
const MOVED: &str = "drone-delivery";

impl Sim {
    /// Before a task runs again (a resubmission, a repair): half the time the
    /// operator fixed the cause; and the steps whose compensation failed are undone
    /// by hand, as the alerts ask: the task's, and its children's, which run again
    /// with it.
    pub(super) fn prepare_to_run_again(&mut self, task: &Task) {
        if self.world.chance(0.5) {
            self.remote
                .doomed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|(t, _)| t != task.id.as_str());
        }
        let family = format!("{}{CHILD_SEPARATOR}", task.id);
        for member in self.memory.tasks() {
            if member.id != task.id && !member.id.as_str().starts_with(&family) {
                continue;
            }
            let workflow = self
                .workflows
                .version(&member.workflow.name, member.workflow.version)
                .expect("workflow");
            for (step, definition) in member.steps.iter().zip(&workflow.steps) {
                let Some(call) = definition.call() else {
                    continue;
                };
                if step.state == StepState::CompensationFailed {
                    let key = format!("{}/{}/{}/compensate", member.id, step.key_run, step.name);
                    self.remote.applied().insert(
                        (call.agent.clone(), key),
                        Applied {
                            task: member.id.to_string(),
                            step: step.name.to_string(),
                            compensation: true,
                        },
                    );
                }
            }
        }
    }

    /// The task now, as stored.
    fn stored(&self, task: &Task) -> Option<Task> {
        self.memory.tasks().into_iter().find(|t| t.id == task.id)
    }

    /// After an action on `task`: a refusal must have changed nothing; a new run is
    /// the operator's, who saw the run that ended (its alert is not awaited).
    fn after_action(
        &mut self,
        task: &Task,
        what: &'static str,
        outcome: Result<Task, ActionError>,
    ) {
        let now = self.stored(task);
        let refused = matches!(outcome, Err(ActionError::Refused(_)));
        if refused && now.as_ref().map(|t| t.version) != Some(task.version) {
            self.world
                .violation(format!("a refused {what} of task {} changed it", task.id));
        }
        if now.is_some_and(|t| t.run > task.run) {
            self.world
                .world()
                .acted_on
                .insert((task.id.to_string(), task.run));
        }
        let counted = match (refused, what) {
            (false, _) => what,
            (true, "move") => "move refused",
            (true, _) => "repair refused",
        };
        *self.world.world().faults.entry(counted).or_default() += 1;
        self.world.note(format!(
            "{what} {} ({:?}) -> {}",
            task.id,
            task.state,
            outcome.map_or_else(
                |e| format!("refused: {e}"),
                |t| format!("{:?} run {}", t.state, t.run)
            )
        ));
    }

    /// An operator repairs a task in Error or Processed, once: runs it again from a
    /// step at random, patches a text field of its input, or resumes it as it is.
    pub(super) async fn repair_one(&mut self) {
        let candidates: Vec<Task> = (self.memory.tasks().into_iter())
            .filter(|t| t.parent.is_none() && t.machine.is_none())
            .filter(|t| matches!(t.state, TaskState::Error | TaskState::Processed))
            .filter(|t| !self.resubmitted.contains(t.id.as_str()))
            .collect();
        let Some(task) = candidates.get(self.world.below(candidates.len())).cloned() else {
            return;
        };
        self.resubmitted.insert(task.id.to_string());
        self.prepare_to_run_again(&task);
        let workflow = (self.workflows)
            .version(&task.workflow.name, task.workflow.version)
            .expect("workflow");
        let (input, from) = match self.world.below(3) {
            0 => {
                let step = &workflow.steps[self.world.below(workflow.steps.len())];
                (None, Some(step.name.clone()))
            }
            1 => (Some(self.input_patch(&task)), None),
            _ => (None, None),
        };
        let repair = Repair {
            request: self.request(Actor::Operator),
            input,
            outputs: BTreeMap::new(),
            from,
            reason: Some("the simulation's operator".into()),
            entered_with: None,
        };
        let outcome = self.schedulers[0].repair(&task.id, repair).await;
        self.after_action(&task, "repair", outcome);
    }

    /// A merge patch of one text field of `task`'s submitted input.
    fn input_patch(&self, task: &Task) -> Value {
        let (_, request) = (self.submitted.iter())
            .find(|(id, _)| *id == task.id)
            .expect("submitted");
        let texts: Vec<(&String, &str)> = (request["input"].as_object().into_iter().flatten())
            .filter_map(|(field, value)| Some((field, value.as_str()?)))
            .collect();
        match texts.get(self.world.below(texts.len())) {
            Some((field, text)) => json!({ *field: format!("{text}+repair{}", task.run + 1) }),
            None => json!({}),
        }
    }

    /// The drone delivery's next version is shipped (a read-only confirmation added
    /// at its end), or, once it is, an operator moves a task of the version before
    /// onto it, whatever its state.
    pub(super) async fn ship_or_move_one(&mut self) {
        let latest = self.workflows.latest(MOVED).expect("the drone delivery");
        let Some(before) = self.workflows.version(MOVED, latest.version - 1) else {
            self.workflows
                .add(next_version(&latest))
                .expect("a new version");
            self.world
                .note(format!("ship {MOVED} v{}", latest.version + 1));
            return;
        };
        let on_it: Vec<Task> = (self.memory.tasks().into_iter())
            .filter(|t| &*t.workflow.name == MOVED && t.workflow.version == before.version)
            .collect();
        let Some(task) = on_it.get(self.world.below(on_it.len())).cloned() else {
            return;
        };
        let moving = Move {
            request: self.request(Actor::Operator),
            renamed: BTreeMap::new(),
        };
        let outcome = self.schedulers[0]
            .move_task(&task.id, latest.version, moving)
            .await;
        self.after_action(&task, "move", outcome);
    }
}

/// `workflow`'s next version: a read-only confirmation added at its end.
fn next_version(workflow: &Workflow) -> Workflow {
    let mut text: Value = serde_json::from_str(&workflow.source).expect("its JSON");
    text["version"] = json!(workflow.version + 1);
    let steps = text["steps"].as_array_mut().expect("steps");
    steps.push(json!({
        "name": "confirm-delivery", "agent": "delivery", "call": "/deliveries/confirm",
        "read_only": true,
    }));
    Workflow::parse("drone-delivery-next.json", &text.to_string()).expect("a valid version")
}
