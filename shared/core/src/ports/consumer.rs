//! Receiving messages from queues.

use std::time::Duration;

use async_trait::async_trait;

use sas_domain::ids::QueueName;
use sas_domain::trace::TraceContext;

use super::QueueError;

/// A message received from a queue, to delete once handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The message's id.
    pub id: String,
    /// The body.
    pub body: String,
    /// Times the message has been received, this time included.
    pub receive_count: u32,
    /// Deletes this receipt of the message.
    pub receipt: String,
    /// The span it came from: its `traceparent` and `tracestate` attributes.
    pub trace: Option<TraceContext>,
}

/// Receiving from queues, as Lambda's event-source mappings do in AWS (and the
/// local process and the tests do themselves).
#[async_trait]
pub trait Consumer: Send + Sync {
    /// Receives up to `max` messages (at most 10), waiting up to `wait` for the first.
    /// A received message stays invisible for the queue's visibility timeout; one
    /// received more than the queue's maxReceiveCount goes to its dead-letter queue.
    ///
    /// # Errors
    /// [`QueueError`] when the queue is unknown or unreachable.
    async fn receive(
        &self,
        queue: &QueueName,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError>;

    /// Deletes a received message.
    ///
    /// # Errors
    /// [`QueueError`] when the queue is unreachable.
    async fn delete(&self, queue: &QueueName, receipt: &str) -> Result<(), QueueError>;
}
