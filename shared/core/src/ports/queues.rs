//! Sending messages to queues, and why a queue could not be used.

use std::time::Duration;

use async_trait::async_trait;

use sas_domain::ids::QueueName;
use sas_domain::trace::TraceContext;

use super::Cause;

/// Why a queue could not be used.
#[derive(Debug, thiserror::Error)]
#[error("queue {queue} failed")]
pub struct QueueError {
    /// The queue.
    pub queue: String,
    /// What went wrong.
    #[source]
    pub cause: Cause,
}

impl QueueError {
    /// `queue` could not be used, because of `cause`.
    pub fn new(queue: impl ToString, cause: impl Into<Cause>) -> Self {
        Self {
            queue: queue.to_string(),
            cause: cause.into(),
        }
    }
}

/// A message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// The body, JSON.
    pub body: String,
    /// How long it stays invisible (at most 15 minutes).
    pub delay: Duration,
    /// The span it comes from, carried as its `traceparent` and `tracestate`
    /// attributes ([`sas_domain::trace`]).
    pub trace: Option<TraceContext>,
}

impl OutgoingMessage {
    /// A message whose body is `message`'s JSON ([`sas_domain::to_json`]), in no
    /// trace.
    pub fn json(message: &impl serde::Serialize, delay: Duration) -> Self {
        Self::text(sas_domain::to_json(message), delay)
    }

    /// A message of `body`, in no trace.
    #[must_use]
    pub const fn text(body: String, delay: Duration) -> Self {
        Self {
            body,
            delay,
            trace: None,
        }
    }

    /// The message, coming from the span `trace` names.
    #[must_use]
    pub fn traced(self, trace: TraceContext) -> Self {
        Self {
            trace: Some(trace),
            ..self
        }
    }
}

/// A message for a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The queue.
    pub queue: QueueName,
    /// The message.
    pub message: OutgoingMessage,
}

/// Sending to the pattern's queues and to callers' notification queues.
#[async_trait]
pub trait Queues: Send + Sync {
    /// Sends messages to one queue; all are sent or an error is returned (some may
    /// have been sent: receivers tolerate duplicates).
    ///
    /// # Errors
    /// [`QueueError`] when the queue is unknown or unreachable.
    async fn send(&self, queue: &QueueName, messages: &[OutgoingMessage])
    -> Result<(), QueueError>;
}
