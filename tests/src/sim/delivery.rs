//! Messages handed to the simulated functions as an event-source mapping would,
//! lost, duplicated and dead-lettered; the supervisors' sweeps; the trace's
//! description of a message.

use std::time::Duration;

use sas_core::clock::Clock;
use sas_core::ports::{OutgoingMessage, Queues};
use sas_domain::ids::QueueName;
use sas_domain::messages::{AgentRequest, SchedulerMessage};

use super::Sim;

impl Sim {
    pub(super) fn queues(&self) -> Vec<QueueName> {
        let mut queues = vec![
            self.names.scheduler.clone(),
            self.names.agent_requests.clone(),
            self.names.agent_responses.clone(),
        ];
        queues.extend(self.ingest.iter().map(|(ingest, _)| ingest.clone()));
        queues
    }

    /// Whether `queue` is the queue of buffered submissions.
    fn is_ingest(&self, queue: &QueueName) -> bool {
        self.ingest
            .as_ref()
            .is_some_and(|(ingest, _)| ingest == queue)
    }

    /// An operator, alarmed by the ingest dead-letter queue, sends its messages back.
    pub(super) async fn redrive_ingest(&self) {
        let Some((ingest, dead_letter)) = &self.ingest else {
            return;
        };
        for message in self.memory.messages(dead_letter) {
            let describe = describe(&message.body);
            self.move_message(dead_letter, message.id, message.body, ingest)
                .await;
            self.world.note(format!("redrive {dead_letter} {describe}"));
        }
    }

    /// Takes message `id` (its body `body`) off `from` and puts it, visible, on `to`.
    async fn move_message(&self, from: &QueueName, id: u64, body: String, to: &QueueName) {
        self.memory.drop_message(from, id);
        let message = OutgoingMessage {
            body,
            delay: Duration::ZERO,
            trace: None,
        };
        Queues::send(self.memory.as_ref(), to, &[message])
            .await
            .expect("the in-memory queue takes it");
    }

    /// Messages that may be received now, by queue and id.
    pub(super) fn visible(&self) -> Vec<(QueueName, u64)> {
        let now = self.clock.now();
        self.queues()
            .into_iter()
            .flat_map(|q| {
                self.memory
                    .messages(&q)
                    .into_iter()
                    .filter(|m| m.visible_at <= now)
                    .map(move |m| (q.clone(), m.id))
            })
            .collect()
    }

    /// Hands a message to its function, as an event-source mapping would: deleted
    /// when handled, left to come back when the handler fails.
    pub(super) async fn deliver(&self, queue: &QueueName, id: u64) {
        let Some(delivery) = self.memory.receive_one(queue, id) else {
            return;
        };
        let describe = describe(&delivery.body);
        if let Some((_, dead_letter)) = self.ingest.as_ref().filter(|_| self.is_ingest(queue)) {
            if self.world.fault("ingest message dead-lettered", 0.02) {
                self.move_message(queue, id, delivery.body, dead_letter)
                    .await;
                self.world
                    .note(format!("dead-letter {queue} #{id} {describe}"));
                return;
            }
        } else if self.world.fault("message lost", 0.02) {
            self.memory.drop_message(queue, id);
            self.world.note(format!("lose {queue} #{id} {describe}"));
            return;
        }
        let copies = if self.world.fault("message duplicated", 0.05) {
            2
        } else {
            1
        };
        let handled =
            futures_util::future::join_all((0..copies).map(|_| self.handle(queue, &delivery.body)))
                .await;
        for outcome in &handled {
            self.world.note(format!(
                "deliver {queue} #{id} (receive {}) {describe} -> {outcome}",
                delivery.receive_count
            ));
        }
        if handled.iter().any(|o| !o.starts_with("failed")) {
            let _ =
                sas_core::ports::Consumer::delete(self.memory.as_ref(), queue, &delivery.receipt)
                    .await;
        }
    }

    async fn handle(&self, queue: &QueueName, body: &str) -> String {
        let failed = |e: &dyn std::fmt::Display| format!("failed: {e}");
        if *queue == self.names.agent_requests {
            match self.step_caller.on_request(body, None).await {
                Ok(verdict) => format!("{verdict:?}"),
                Err(e) => failed(&e),
            }
        } else {
            let scheduler = &self.schedulers[self.world.below(self.schedulers.len())];
            match scheduler.on_scheduler_message(queue.as_str(), body).await {
                Ok(handled) => handled.as_str().to_owned(),
                Err(e) => failed(&e),
            }
        }
    }

    pub(super) async fn sweep(&self) {
        let twice = self.world.fault("two supervisors at once", 0.3);
        let sweeps = futures_util::future::join_all(
            self.supervisors
                .iter()
                .take(if twice { 2 } else { 1 })
                .map(|s| s.sweep(100)),
        )
        .await;
        for report in sweeps {
            match report {
                Ok(report) if !report.is_empty() => self
                    .world
                    .note(format!("sweep {}", serde_json::json!(report))),
                Ok(_) => {}
                Err(e) => self.world.note(format!("sweep failed: {e}")),
            }
        }
    }
}

/// A short description of a message, for the trace.
fn describe(body: &str) -> String {
    if let Ok(request) = serde_json::from_str::<AgentRequest>(body) {
        return format!(
            "{:?} {} {} attempt {}",
            request.operation, request.task_id, request.step_name, request.attempt
        );
    }
    match serde_json::from_str::<SchedulerMessage>(body) {
        Ok(SchedulerMessage::Run { task_id }) => format!("Run {task_id}"),
        Ok(SchedulerMessage::Deadline { task_id, at }) => format!("Deadline {task_id} at {}", at.0),
        Ok(SchedulerMessage::ChildEnded(ended)) => format!(
            "ChildEnded {} step {} item {} {:?}",
            ended.task_id, ended.step, ended.item, ended.state
        ),
        Ok(SchedulerMessage::Response(r)) => format!(
            "Response {} step {} attempt {} {:?}",
            r.task_id, r.step, r.attempt, r.operation
        ),
        Ok(SchedulerMessage::Submit(b)) => format!("Submit {}", b.submission.id),
        Ok(SchedulerMessage::Granted(grant)) => format!("Granted {}", grant.call.id()),
        Ok(SchedulerMessage::Gate { gate }) => format!("Gate {gate}"),
        Err(_) => "undecodable".into(),
    }
}
