//! The agent's work, as an actor: calls one remote service for a step, with retries,
//! backoff with jitter and a circuit breaker ([`sas_domain::resilience`]), never
//! past the step's complete-by time; and answers only while that time has not passed.
//! The agent function runs it on the agent-request queue.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tracing::{debug, info};

use crate::app::MessageError;
use crate::clock::Clock;
use crate::offload::{OffloadingQueues, answer_by_reference, message_body, put_parts_back};
use crate::ports::{
    Metrics, NoMetrics, OutgoingMessage, PayloadError, Payloads, QueueError, Queues, RemoteCall,
    RemoteError, RemoteRequest, Spans,
};
use sas_domain::ids::QueueName;
use sas_domain::limits;
use sas_domain::messages::{AgentMessage, AgentRequest, AgentResponse, Outcome};
use sas_domain::resilience::{BreakerSettings, CircuitBreaker, backoff};
use sas_domain::trace::{SpanId, TraceContext};

mod spans;

use spans::{CallSpans, call_outcome};

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

/// Where a step caller's answers go instead of its response queue: `sas-local`'s,
/// whose scheduler is in the same process, applies each as it is made, neither
/// encoded nor read back, and sends on the queue only one it cannot apply.
#[async_trait::async_trait]
pub trait Answers: Send + Sync {
    /// Delivers `answer`, which continues `trace`.
    ///
    /// # Errors
    /// [`QueueError`] when it could be neither applied nor sent.
    async fn answer(
        &self,
        answer: AgentResponse,
        trace: Option<TraceContext>,
    ) -> Result<(), QueueError>;
}

/// Calls steps' remote services, any number of them, each with its own circuit breaker.
pub struct StepCaller {
    remote: Arc<dyn RemoteCall>,
    queues: Arc<dyn Queues>,
    clock: Arc<dyn Clock>,
    responses: QueueName,
    breaker_settings: BreakerSettings,
    breakers: Mutex<foldhash::HashMap<String, CircuitBreaker>>,
    random: Mutex<fastrand::Rng>,
    /// Where requests and answers too large for a message are kept, if anywhere.
    payloads: Option<Arc<dyn Payloads>>,
    /// Where the spans of its calls go, if anywhere ([`StepCaller::with_spans`]).
    spans: Option<Arc<dyn Spans>>,
    /// Where its calls' latencies go ([`StepCaller::with_metrics`]).
    metrics: Arc<dyn Metrics>,
    /// Where its answers go instead of its response queue, if anywhere
    /// ([`StepCaller::answering_to`]).
    answers: Option<Arc<dyn Answers>>,
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
            breakers: Mutex::new(foldhash::HashMap::default()),
            random: Mutex::new(fastrand::Rng::with_seed(seed)),
            payloads: None,
            spans: None,
            metrics: Arc::new(NoMetrics),
            answers: None,
        }
    }

    /// Gives its answers to `answers` instead of sending them on its response queue.
    #[must_use]
    pub fn answering_to(mut self, answers: Arc<dyn Answers>) -> Self {
        self.answers = Some(answers);
        self
    }

    /// Records in `metrics` each call's latency, from its request's arrival to its
    /// answer or its silence (`CallLatency`, by service and outcome).
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<dyn Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Tells `spans` the spans of its calls made in a trace: each call, under the
    /// step's span its request came from, and each attempt under the call.
    #[must_use]
    pub fn with_spans(mut self, spans: Arc<dyn Spans>) -> Self {
        self.spans = Some(spans);
        self
    }

    /// Reads requests stored apart from `payloads`, and stores there the answers
    /// too large for a message ([`crate::offload`]).
    #[must_use]
    pub fn with_payloads(mut self, payloads: Arc<dyn Payloads>) -> Self {
        self.queues = Arc::new(OffloadingQueues::new(self.queues, payloads.clone()));
        self.payloads = Some(payloads);
        self
    }

    /// Handles one agent-request message, which came from the span `trace` names
    /// (the step's), if any.
    ///
    /// # Errors
    /// [`CallError::Poison`] for an undecodable message, [`CallError::Queue`] when
    /// the answer cannot be sent, [`CallError::Unread`] when the request, or a part
    /// of its payload, is stored apart and cannot be read.
    pub async fn on_request(
        &self,
        body: &str,
        trace: Option<&TraceContext>,
    ) -> Result<CallVerdict, CallError> {
        let body = message_body(self.payloads.as_deref(), body).await?;
        let mut request: AgentRequest =
            serde_json::from_str(&body).map_err(|e| CallError::Poison(e.to_string()))?;
        if let Some(payloads) = self.payloads.as_deref() {
            put_parts_back(payloads, &mut request).await?;
        }
        let traced = trace.filter(|trace| trace.sampled && self.spans.is_some());
        let started = self.clock.now();
        let mut spans = traced.map(|trace| CallSpans::new(trace.clone(), self.span_id(), started));
        let outcome = self
            .perform(&request, spans.as_mut())
            .await
            .map(within_limit);
        let late = self.clock.now() >= request.complete_by;
        // The answer goes on from the call's span, or from the step's when the call
        // has none (no spans told here).
        let answer_trace = spans
            .as_ref()
            .map(CallSpans::call_trace)
            .or_else(|| trace.cloned());
        let told = outcome.as_ref().filter(|_| !late);
        let dimensions = [
            ("Service", request.agent.as_str()),
            ("Outcome", call_outcome(told)),
        ];
        let ended = self.clock.now();
        (self.metrics).time("CallLatency", &dimensions, started.until(ended));
        if let (Some(spans), Some(sink)) = (spans, &self.spans) {
            sink.finished(spans.finish(&request, told, ended));
        }
        let Some(outcome) = outcome else {
            info!(task_id = %request.task_id, step = %request.step_name, "agent silent: past complete-by or out of tries");
            return Ok(CallVerdict::Silent);
        };
        if late {
            info!(task_id = %request.task_id, step = %request.step_name, "agent silent: answer came after complete-by");
            return Ok(CallVerdict::Silent);
        }
        let answer = AgentResponse::answering(request, outcome);
        if let Some(answers) = &self.answers {
            answers.answer(answer, answer_trace).await?;
            return Ok(CallVerdict::Answered);
        }
        let mut response = AgentMessage::Response(answer);
        let mut message = OutgoingMessage::json(&response, Duration::ZERO);
        // Too large for a message: the output goes among its task's values, where the
        // step's write finds it, rather than into a message's and then the task's.
        if let Some(payloads) = self.payloads.as_deref()
            && message.body.len() > limits::MAX_MESSAGE_BODY
        {
            let AgentMessage::Response(answer) = &mut response;
            (answer_by_reference(payloads, answer).await)
                .map_err(|error| QueueError::new(&self.responses, error))?;
            message = OutgoingMessage::json(&response, Duration::ZERO);
        }
        let message = OutgoingMessage {
            trace: answer_trace,
            ..message
        };
        self.queues.send(&self.responses, &[message]).await?;
        Ok(CallVerdict::Answered)
    }

    /// Calls the service until it answers, refuses, or the time or tries run out
    /// (`None`: stay silent).
    /// Each attempt is told to `spans`, when the request is traced.
    async fn perform(
        &self,
        request: &AgentRequest,
        mut spans: Option<&mut CallSpans>,
    ) -> Option<Outcome> {
        let policy = &request.retry;
        for attempt in 1..=policy.attempts {
            let now = self.clock.now();
            if now >= request.complete_by {
                return None;
            }
            let span = spans.as_ref().map(|_| self.span_id());
            let made = self.breaker(&request.agent, |b| b.allow(now));
            let result = if made {
                let remaining = now.until(request.complete_by);
                let timeout = policy.call_timeout.map_or(remaining, |t| t.min(remaining));
                let call = RemoteRequest {
                    service: request.agent.clone(),
                    method: request.method,
                    path: request.path.clone(),
                    idempotency_key: request.idempotency_key.clone(),
                    payload: request.payload.clone(),
                    timeout,
                    trace: spans.as_ref().zip(span).map(|(s, span)| s.under(span)),
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
            if let (Some(spans), Some(span)) = (spans.as_deref_mut(), span) {
                let times = (now, self.clock.now());
                spans.attempt(span, attempt, times, made.then_some(&result));
            }
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

    /// A new span's id, at random.
    fn span_id(&self) -> SpanId {
        let mut random = self.random.lock().unwrap_or_else(PoisonError::into_inner);
        SpanId(random.u64(1..).to_be_bytes())
    }

    fn breaker<T>(&self, service: &str, f: impl FnOnce(&mut CircuitBreaker) -> T) -> T {
        let mut breakers = self.breakers.lock().unwrap_or_else(PoisonError::into_inner);
        // Looked up by its name before one is made for it: no name copied a call.
        if let Some(breaker) = breakers.get_mut(service) {
            return f(breaker);
        }
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
        Outcome::Succeeded { output } => limits::refusal_of(output, std::iter::empty())
            .map_or(outcome, |error| Outcome::Unusable { error }),
        Outcome::Failed { .. } | Outcome::Unusable { .. } => outcome,
    }
}
