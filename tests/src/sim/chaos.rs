//! The chaos phase's actions, chosen at random: deliveries, the clock moved on,
//! sweeps, submissions and their repeats, resubmissions, cancels, redrives and
//! scheduler restarts.

use std::sync::PoisonError;
use std::time::Duration;

use sas_core::clock::Clock;
use sas_domain::decide::Resubmit;
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::submission::Submission;
use sas_domain::task::{Actor, Request, Task, TaskState};
use sas_domain::time::Timestamp;
use serde_json::{Value, json};

use super::machine::MACHINE;
use super::{CALLERS, Sim};

impl Sim {
    pub(super) async fn submit(&mut self) {
        let n = self.submitted.len();
        let id = TaskId::parse(format!("t{n}")).expect("id");
        let drone = json!({"customer_id": format!("c{n}"), "pickup": "a", "dropoff": "b", "weight_kg": 1.0});
        let order = json!({"order_id": format!("o{n}")});
        let items: Vec<Value> = (0..self.world.below(5))
            .map(|i| json!({"key": format!("o{n}-{i}")}))
            .collect();
        let generated = json!({"order_id": format!("o{n}"), "items": items});
        let (workflow, input) = match self.world.below(12) {
            0..=2 => ("drone-delivery", drone),
            3..=4 => ("drone-delivery-parallel", drone),
            5..=7 => ("generated", generated),
            8..=9 => (MACHINE, generated),
            _ => ("order-processing", order),
        };
        if self.world.chance(0.15) {
            let steps = &self.workflows.latest(workflow).expect("workflow").steps;
            let step = steps[self.world.below(steps.len())].name.clone();
            self.remote
                .doomed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert((id.to_string(), step.clone()));
            self.world.note(format!("doom {id} at {step}"));
        }
        // Half the callers ask for notifications; some tasks start later.
        let notify = self.world.chance(0.5).then_some(CALLERS);
        let priority = 1 + self.world.below(5);
        let start_at = self.world.chance(0.1).then(|| {
            let later = Duration::from_secs(self.world.world().random.u64(1..60));
            self.clock.now().plus(later).0
        });
        self.submitted.push((
            id.clone(),
            json!({"workflow": workflow, "input": input, "notify": notify, "start_at": start_at,
                   "priority": priority}),
        ));
        self.submit_again(n).await;
    }

    /// Submits task `n`, again when it was already: the same request, the same task.
    async fn submit_again(&mut self, n: usize) {
        let (id, request) = self.submitted[n].clone();
        let submission = Submission {
            notify: request["notify"]
                .as_str()
                .map(|q| QueueName::parse(q).expect("name")),
            start_at: request["start_at"].as_i64().map(Timestamp),
            priority: request["priority"]
                .as_u64()
                .and_then(|p| u8::try_from(p).ok())
                .unwrap_or(sas_domain::flow::DEFAULT_PRIORITY),
            ..Submission::new(id.clone(), request["input"].clone())
        };
        let scheduler = &self.schedulers[self.world.below(self.schedulers.len())];
        let workflow = request["workflow"].as_str().unwrap_or_default();
        let outcome = if self.ingest.is_some() {
            scheduler.accept(workflow, submission).await.map(drop)
        } else {
            scheduler.submit(workflow, submission).await.map(drop)
        };
        match outcome {
            Ok(()) => {
                self.accepted.insert(id.to_string());
                self.world.note(format!("submit {id} -> accepted"));
            }
            Err(e) => self.world.note(format!("submit {id} -> failed: {e}")),
        }
    }

    async fn resubmit_one(&mut self) {
        let in_error: Vec<Task> = self
            .memory
            .tasks()
            .into_iter()
            // A child runs again with its parent (it refuses a resubmission of its own).
            .filter(|t| t.parent.is_none())
            .filter(|t| t.state == TaskState::Error && !self.resubmitted.contains(t.id.as_str()))
            .collect();
        let Some(task) = in_error.get(self.world.below(in_error.len())) else {
            return;
        };
        *self
            .world
            .world()
            .faults
            .entry("operator resubmit")
            .or_default() += 1;
        self.resubmitted.insert(task.id.to_string());
        self.prepare_to_run_again(task);
        // Half the time with an edited input: each of its text fields changed.
        let input = self.world.chance(0.5).then(|| {
            let (_, request) = self
                .submitted
                .iter()
                .find(|(id, _)| *id == task.id)
                .expect("submitted");
            let mut input = request["input"].clone();
            for value in input.as_object_mut().expect("object").values_mut() {
                if let Some(text) = value.as_str() {
                    *value = json!(format!("{text}+run{}", task.run + 1));
                }
            }
            input
        });
        let resubmit = Resubmit {
            request: self.request(Actor::Operator),
            input,
        };
        let outcome = self.schedulers[0].resubmit(&task.id, resubmit).await;
        // A resubmission whose answer was lost (a crash after its write) happened too.
        let resubmitted = self
            .memory
            .tasks()
            .iter()
            .any(|t| t.id == task.id && t.run > task.run);
        if resubmitted {
            self.world
                .world()
                .acted_on
                .insert((task.id.to_string(), task.run));
        }
        self.world.note(format!(
            "resubmit {} -> {}",
            task.id,
            outcome.map_or_else(|e| format!("failed: {e}"), |t| format!("run {}", t.run))
        ));
    }

    pub(super) fn request(&self, by: Actor) -> Request {
        Request {
            by,
            at: self.clock.now(),
            batch: None,
        }
    }

    /// A task at random, whatever its state, and who acts on it: its owner or an
    /// operator.
    pub(super) fn any_task_and_actor(&self) -> Option<(Task, Actor)> {
        let tasks = self.memory.tasks();
        let task = tasks.get(self.world.below(tasks.len()))?.clone();
        let by = if self.world.chance(0.5) {
            Actor::Owner
        } else {
            Actor::Operator
        };
        Some((task, by))
    }

    /// The owner or an operator cancels a task, whatever its state.
    async fn cancel_one(&mut self) {
        let Some((task, by)) = self.any_task_and_actor() else {
            return;
        };
        *self.world.world().faults.entry("cancel").or_default() += 1;
        let outcome = self.schedulers[0].cancel(&task.id, self.request(by)).await;
        self.world.note(format!(
            "cancel {} ({:?}) -> {}",
            task.id,
            task.state,
            outcome.map_or_else(|e| format!("refused: {e}"), |t| format!("{:?}", t.state))
        ));
    }

    pub(super) fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// One action of the chaos phase, chosen at random.
    pub(super) async fn chaos_step(&mut self) {
        let roll = self.world.below(100);
        match roll {
            0..30 => {
                let visible = self.visible();
                if let Some((queue, id)) = visible.get(self.world.below(visible.len())) {
                    self.deliver(queue, *id).await;
                }
            }
            35..45 => {
                let visible = self.visible();
                let picks: Vec<_> = (0..3)
                    .filter_map(|_| visible.get(self.world.below(visible.len())).cloned())
                    .collect();
                if picks.len() > 1 {
                    *self
                        .world
                        .world()
                        .faults
                        .entry("concurrent deliveries")
                        .or_default() += 1;
                }
                futures_util::future::join_all(picks.iter().map(|(q, id)| self.deliver(q, *id)))
                    .await;
            }
            45..65 => {
                let long = self.world.chance(0.15);
                let millis =
                    self.world
                        .world()
                        .random
                        .u64(if long { 1_000..40_000 } else { 0..500 });
                self.advance(Duration::from_millis(millis));
            }
            65..75 => self.sweep().await,
            75..85 if self.submitted.len() < 12 => self.submit().await,
            75..85 => {
                let n = self.world.below(self.submitted.len());
                *self
                    .world
                    .world()
                    .faults
                    .entry("duplicate submission")
                    .or_default() += 1;
                self.submit_again(n).await;
            }
            85..89 => self.resubmit_one().await,
            92..95 => self.cancel_one().await,
            95..97 => self.redrive_ingest().await,
            97..99 => self.repair_one().await,
            99 => self.ship_or_move_one().await,
            30..32 => self.use_a_token(true).await,
            32..33 => self.poll_an_activity().await,
            33..34 => self.complete_a_step().await,
            34..35 => self.pause_or_resume_one().await,
            89..92 => {
                *self
                    .world
                    .world()
                    .faults
                    .entry("scheduler restart")
                    .or_default() += 1;
                let i = self.world.below(self.schedulers.len());
                self.schedulers[i] = self.app();
                self.world.note(format!("restart scheduler {i}"));
            }
            _ => {}
        }
    }
}
