//! A world in memory where a task runs to its end with every answer chosen by the
//! fuzzer: the scheduler's decisions, its children's, its timers' and its leases'
//! (the clock moved on and the supervisor swept when nothing else is left to do),
//! whatever the workflow, its input and the services' outputs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sas_api::{ApiRequest, Caller};
use sas_core::app::App;
use sas_core::ports::{Consumer as _, OutgoingMessage, Queues as _};
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::messages::{AgentMessage, AgentRequest, AgentResponse, Outcome};
use sas_domain::submission::Submission;
use sas_domain::task::TaskState;
use sas_domain::time::Timestamp;
use sas_domain::workflow::Registry;
use sas_testkit::ManualClock;
use sas_testkit::memory::Memory;
use serde_json::Value;

/// Rounds of delivery a run takes at most: each round hands every queue's messages
/// to their consumer, or, when none are left, moves the clock on and sweeps.
const ROUNDS: usize = 300;

/// The world: the backend, its clock, and one process over them.
pub struct World {
    clock: Arc<ManualClock>,
    memory: Arc<Memory>,
    agent_requests: QueueName,
    consumed: [QueueName; 2],
    app: App,
    /// Tasks submitted so far, which name the next.
    submitted: AtomicUsize,
    /// Every message taken off a queue, by the queue's name.
    seen: Mutex<Vec<(String, String)>>,
}

impl World {
    /// An empty world running `workflows`.
    pub fn new(workflows: Registry) -> Self {
        let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
        let (memory, names) = sas_tests::in_memory(&clock, None);
        let ports = sas_core::app::Ports::of(&memory, Arc::clone(&clock) as _);
        let consumed = [names.scheduler.clone(), names.agent_responses.clone()];
        let agent_requests = names.agent_requests.clone();
        let app =
            App::new(ports, Arc::new(workflows), names, "fuzz".into()).with_deadline_messages(true);
        Self {
            clock,
            memory,
            agent_requests,
            consumed,
            app,
            submitted: AtomicUsize::new(0),
            seen: Mutex::new(Vec::new()),
        }
    }

    /// Every message taken off a queue so far, by the queue's name.
    pub fn seen(&self) -> Vec<(String, String)> {
        self.seen.lock().expect("not poisoned").clone()
    }

    /// Submits a task of `workflow` with `input` and runs it (and its children) with
    /// `answers`, in turn, as the services' answers ([`World::drive`]). A submission
    /// refused is a run too: it ends there.
    ///
    /// # Errors
    /// As [`World::drive`].
    pub async fn run(
        &self,
        workflow: &str,
        input: Value,
        answers: &[Outcome],
    ) -> Result<(), String> {
        if self.submit(workflow, input).await {
            self.drive(answers).await
        } else {
            Ok(())
        }
    }

    /// Submits a task of `workflow` with `input`; whether it was taken.
    pub async fn submit(&self, workflow: &str, input: Value) -> bool {
        let id = format!("t{}", self.submitted.fetch_add(1, Ordering::Relaxed));
        let id = TaskId::parse(id).expect("an id");
        let submitted = self.app.submit(workflow, Submission::new(id, input)).await;
        submitted.is_ok()
    }

    /// Runs the tasks submitted with `answers`, in turn, as the services' answers,
    /// until every task has ended or [`ROUNDS`] have passed.
    ///
    /// # Errors
    /// What broke: a request the agents cannot read, or a task the API cannot show.
    pub async fn drive(&self, answers: &[Outcome]) -> Result<(), String> {
        let mut answered = 0;
        for _ in 0..ROUNDS {
            let mut delivered = 0;
            for queue in &self.consumed {
                for message in self.take(queue).await {
                    let _ = self
                        .app
                        .on_scheduler_message(queue.as_str(), &message)
                        .await;
                    delivered += 1;
                }
            }
            for message in self.take(&self.agent_requests).await {
                let request: AgentRequest = serde_json::from_str(&message)
                    .map_err(|e| format!("a request the agents cannot read ({e}): {message}"))?;
                let outcome = answers[answered % answers.len()].clone();
                answered += 1;
                let answer = AgentMessage::Response(AgentResponse::answering(request, outcome));
                let sent = [OutgoingMessage::json(&answer, Duration::ZERO)];
                self.memory
                    .send(&self.consumed[1], &sent)
                    .await
                    .expect("sent");
                delivered += 1;
            }
            if delivered == 0 {
                if self.memory.tasks().iter().all(|t| t.state.is_final()) {
                    break;
                }
                self.clock.advance(Duration::from_secs(60));
                let _ = self.app.sweep(100).await;
            }
        }
        self.every_task_is_shown().await
    }

    /// Every message `queue` holds now, taken off it.
    async fn take(&self, queue: &QueueName) -> Vec<String> {
        let mut bodies = Vec::new();
        loop {
            let received = self
                .memory
                .receive(queue, 10, Duration::ZERO)
                .await
                .expect("received");
            if received.is_empty() {
                return bodies;
            }
            let mut seen = Vec::new();
            for delivery in received {
                self.memory
                    .delete(queue, &delivery.receipt)
                    .await
                    .expect("deleted");
                seen.push((queue.to_string(), delivery.body.clone()));
                bodies.push(delivery.body);
            }
            self.seen.lock().expect("not poisoned").extend(seen);
        }
    }

    /// Every task, and every listed state's listing, answered 200 by the operator's
    /// routes.
    async fn every_task_is_shown(&self) -> Result<(), String> {
        let tasks = self.memory.tasks();
        let paths = tasks
            .iter()
            .map(|task| format!("/operator/tasks/{}", task.id))
            .chain(
                // Every state but Processed, which is not listed.
                TaskState::ALL
                    .iter()
                    .filter(|state| **state != TaskState::Processed)
                    .map(|state| format!("/operator/tasks?state={}", state.as_str())),
            );
        for path in paths {
            let (path, query) = path
                .split_once('?')
                .map_or((path.as_str(), None), |(p, q)| (p, Some(q)));
            let request = ApiRequest {
                caller: &Caller::Anyone,
                method: "GET",
                path,
                query,
                body: b"",
                target: None,
                trace: sas_api::TraceHeaders::default(),
            };
            let answer = sas_api::handle(&self.app, request).await;
            if answer.status != 200 {
                return Err(format!(
                    "GET {path} ({}) answered {}: {}",
                    query.unwrap_or_default(),
                    answer.status,
                    answer.body
                ));
            }
        }
        Ok(())
    }
}
