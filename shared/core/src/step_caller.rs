//! The agent's work, as an actor: calls one remote service for a step, with retries,
//! backoff with jitter and a circuit breaker ([`sas_domain::resilience`]), never
//! past the step's complete-by time; and answers only while that time has not passed.
//! The agent function runs it on the agent-request queue.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tracing::{debug, info};

use crate::app::MessageError;
use crate::clock::Clock;
use crate::offload::{OffloadingQueues, message_body};
use crate::ports::{
    OutgoingMessage, PayloadError, Payloads, QueueError, Queues, RemoteCall, RemoteError,
    RemoteRequest,
};
use sas_domain::ids::QueueName;
use sas_domain::limits;
use sas_domain::messages::{AgentMessage, AgentRequest, AgentResponse, Outcome};
use sas_domain::resilience::{BreakerSettings, CircuitBreaker, backoff};

/// Why a request could not be handled; it is then left for redelivery and, after
/// the queue's maxReceiveCount, the dead-letter queue.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The message is not a request: a poison message.
    #[error("undecodable message: {0}")]
    Poison(String),
    /// The answer could not be sent.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// The request is stored apart, and could not be read.
    #[error("the request stored apart could not be read")]
    Unread(#[from] PayloadError),
}

impl MessageError for CallError {
    fn is_poison(&self) -> bool {
        matches!(self, Self::Poison(_))
    }
}

/// What the step caller did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallVerdict {
    /// The service answered (success or a permanent error) and the answer was sent.
    Answered,
    /// The complete-by time passed, or came too near for another try: no answer.
    Silent,
}

/// Calls steps' remote services, any number of them, each with its own circuit breaker.
pub struct StepCaller {
    remote: Arc<dyn RemoteCall>,
    queues: Arc<dyn Queues>,
    clock: Arc<dyn Clock>,
    responses: QueueName,
    breaker_settings: BreakerSettings,
    breakers: Mutex<HashMap<String, CircuitBreaker>>,
    random: Mutex<fastrand::Rng>,
    /// Where requests and answers too large for a message are kept, if anywhere.
    payloads: Option<Arc<dyn Payloads>>,
}

impl StepCaller {
    /// A step caller answering on `responses`; `seed` seeds the jitter.
    #[must_use]
    pub fn new(
        remote: Arc<dyn RemoteCall>,
        queues: Arc<dyn Queues>,
        clock: Arc<dyn Clock>,
        responses: QueueName,
        breaker_settings: BreakerSettings,
        seed: u64,
    ) -> Self {
        Self {
            remote,
            queues,
            clock,
            responses,
            breaker_settings,
            breakers: Mutex::new(HashMap::new()),
            random: Mutex::new(fastrand::Rng::with_seed(seed)),
            payloads: None,
        }
    }

    /// Reads requests stored apart from `payloads`, and stores there the answers
    /// too large for a message ([`crate::offload`]).
    #[must_use]
    pub fn with_payloads(mut self, payloads: Arc<dyn Payloads>) -> Self {
        self.queues = Arc::new(OffloadingQueues::new(self.queues, payloads.clone()));
        self.payloads = Some(payloads);
        self
    }

    /// Handles one agent-request message.
    ///
    /// # Errors
    /// [`CallError::Poison`] for an undecodable message, [`CallError::Queue`] when
    /// the answer cannot be sent, [`CallError::Unread`] when the request is stored
    /// apart and cannot be read.
    pub async fn on_request(&self, body: &str) -> Result<CallVerdict, CallError> {
        let body = message_body(self.payloads.as_deref(), body).await?;
        let request: AgentRequest =
            serde_json::from_str(&body).map_err(|e| CallError::Poison(e.to_string()))?;
        let Some(outcome) = self.perform(&request).await.map(within_limit) else {
            info!(task_id = %request.task_id, step = %request.step_name, "agent silent: past complete-by or out of tries");
            return Ok(CallVerdict::Silent);
        };
        if self.clock.now() >= request.complete_by {
            info!(task_id = %request.task_id, step = %request.step_name, "agent silent: answer came after complete-by");
            return Ok(CallVerdict::Silent);
        }
        let response = AgentMessage::Response(AgentResponse::answering(request, outcome));
        let message = OutgoingMessage::json(&response, Duration::ZERO);
        self.queues.send(&self.responses, &[message]).await?;
        Ok(CallVerdict::Answered)
    }

    /// Calls the service until it answers, refuses, or the time or tries run out
    /// (`None`: stay silent).
    async fn perform(&self, request: &AgentRequest) -> Option<Outcome> {
        let policy = &request.retry;
        for attempt in 1..=policy.attempts {
            let now = self.clock.now();
            if now >= request.complete_by {
                return None;
            }
            let result = if self.breaker(&request.agent, |b| b.allow(now)) {
                let remaining = now.until(request.complete_by);
                let timeout = policy.call_timeout.map_or(remaining, |t| t.min(remaining));
                let call = RemoteRequest {
                    service: request.agent.clone(),
                    method: request.method,
                    path: request.path.clone(),
                    idempotency_key: request.idempotency_key.clone(),
                    payload: request.payload.clone(),
                    timeout,
                    trace: None,
                };
                let result = self.remote.call(&call).await;
                let after = self.clock.now();
                self.breaker(&request.agent, |b| match &result {
                    Err(RemoteError::Transient(_) | RemoteError::RetryAfter { .. }) => {
                        b.on_failure(after);
                    }
                    Ok(_) | Err(RemoteError::Permanent(_) | RemoteError::Unusable(_)) => {
                        b.on_success();
                    }
                });
                result
            } else {
                Err(RemoteError::Transient(format!(
                    "circuit open for {}",
                    request.agent
                )))
            };
            // The service's own wait, when it named one, if the backoff is shorter.
            let asked = match result {
                Ok(output) => return Some(Outcome::Succeeded { output }),
                Err(RemoteError::Permanent(error)) => return Some(Outcome::Failed { error }),
                Err(RemoteError::Unusable(error)) => return Some(Outcome::Unusable { error }),
                Err(RemoteError::Transient(error)) => {
                    debug!(task_id = %request.task_id, step = %request.step_name, attempt, %error, "transient failure");
                    Duration::ZERO
                }
                Err(RemoteError::RetryAfter { reason, wait }) => {
                    debug!(task_id = %request.task_id, step = %request.step_name, attempt, %reason, ?wait, "transient failure, with a wait asked for");
                    wait
                }
            };
            if attempt < policy.attempts {
                let random = self
                    .random
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .f64();
                let wait = backoff(policy, attempt, random).max(asked);
                if self.clock.now().plus(wait) >= request.complete_by {
                    return None;
                }
                self.clock.sleep(wait).await;
            }
        }
        None
    }

    fn breaker<T>(&self, service: &str, f: impl FnOnce(&mut CircuitBreaker) -> T) -> T {
        let mut breakers = self.breakers.lock().unwrap_or_else(PoisonError::into_inner);
        let breaker = breakers
            .entry(service.to_owned())
            .or_insert_with(|| CircuitBreaker::new(self.breaker_settings));
        f(breaker)
    }
}

/// The outcome as the response carries it: an output larger than a step's may be
/// is not sent (its message could exceed what the queue takes), only its size.
fn within_limit(outcome: Outcome) -> Outcome {
    match &outcome {
        Outcome::Succeeded { output } => limits::output_refusal(limits::json_size(output), 0)
            .map_or(outcome, |error| Outcome::Unusable { error }),
        Outcome::Failed { .. } | Outcome::Unusable { .. } => outcome,
    }
}
