//! The dead-letter queues: what an operator looks at and sends back.

use async_trait::async_trait;

use sas_domain::ids::QueueName;

use super::QueueError;

/// A message a queue gave up on, in its dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The message's id in the dead-letter queue, to redrive it by.
    pub id: String,
    /// Its body.
    pub body: String,
}

/// The dead-letter queues of the pattern's queues, each named by the queue whose
/// messages it keeps: what an operator looks at and sends back.
#[async_trait]
pub trait DeadLetters: Send + Sync {
    /// How many messages the dead-letter queue of `source` holds (approximately, on SQS).
    ///
    /// # Errors
    /// [`QueueError`] when the queue cannot be read.
    async fn count(&self, source: &QueueName) -> Result<u64, QueueError>;

    /// Up to `max` of its messages, left where they are.
    ///
    /// # Errors
    /// [`QueueError`] when the queue cannot be read.
    async fn peek(&self, source: &QueueName, max: usize) -> Result<Vec<DeadLetter>, QueueError>;

    /// Sends messages back to `source`: those named by `ids` wherever they are in the
    /// dead-letter queue, or any when none are named; at most `max` either way.
    /// Returns how many went back. A message sent back and lost before its deletion
    /// from the dead-letter queue is sent twice, which every handler tolerates.
    ///
    /// # Errors
    /// [`QueueError`] when a queue fails.
    async fn redrive(
        &self,
        source: &QueueName,
        ids: Option<&[String]>,
        max: usize,
    ) -> Result<usize, QueueError>;
}
