//! Sending messages to queues, and why a queue could not be used.

use std::time::Duration;

use async_trait::async_trait;

use sas_domain::ids::QueueName;

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
}

impl OutgoingMessage {
    /// A message whose body is `message`'s JSON ([`sas_domain::to_json`]).
    pub fn json(message: &impl serde::Serialize, delay: Duration) -> Self {
        Self {
            body: sas_domain::to_json(message),
            delay,
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
