//! The state store's tasks: each with its order data, created, read and replaced on
//! condition of its version.

use std::borrow::Cow;

use async_trait::async_trait;

use sas_domain::ids::TaskId;
use sas_domain::task::{Order, Task};

use super::{Outgoing, StoreError};

/// The tasks and their order data, each task one record written on condition of its
/// version.
#[async_trait]
pub trait TaskStore: Send + Sync {
    /// Writes a new task and its order data in one transaction.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when a task with that id exists.
    async fn create(&self, task: &Task, order: &Order) -> Result<(), StoreError>;

    /// Reads a task.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] or [`StoreError::Corrupt`].
    async fn task(&self, id: &TaskId) -> Result<Option<Task>, StoreError>;

    /// Reads a task with its order data.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] or [`StoreError::Corrupt`].
    async fn task_with_order(&self, id: &TaskId) -> Result<Option<(Task, Order)>, StoreError>;

    /// Reads a task with its order data as a replica has it, perhaps a write or more
    /// behind, or not yet there (DynamoDB's eventually consistent read: half the
    /// price). For decisions whose write is conditional on the version read, so that
    /// a stale read loses its race; whatever else such a read leads to is read again
    /// with [`TaskStore::task_with_order`]. Stores whose reads are all consistent
    /// keep this default.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] or [`StoreError::Corrupt`].
    async fn task_with_order_eventually_consistent(
        &self,
        id: &TaskId,
    ) -> Result<Option<(Task, Order)>, StoreError> {
        self.task_with_order(id).await
    }

    /// Replaces a task, on condition that the stored version is `task.version - 1`;
    /// where a decision may come from a task carried in a message rather than read
    /// (DynamoDB's), also that the id still names the same task (`created_at`): an id
    /// used again after its task expired starts its versions again.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when the stored version is another, or the id names
    /// another task.
    async fn update(&self, task: &Task) -> Result<(), StoreError>;

    /// Replaces a task as [`TaskStore::update`] does, and its order data, in one
    /// transaction (an edited resubmission).
    ///
    /// # Errors
    /// [`StoreError::Conflict`] as [`TaskStore::update`].
    async fn update_with_order(&self, task: &Task, order: &Order) -> Result<(), StoreError>;

    /// Replaces a task as [`TaskStore::update`] does and sends the messages its
    /// decision requires. A store that keeps the queues too writes both in one
    /// transaction (a transactional outbox) and returns nothing; the others write the
    /// task and return the messages, for the caller to send (a crash between the two
    /// is covered by the task's lease). `task` may be given owned, for a store that
    /// keeps what it writes to take rather than copy.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] as [`TaskStore::update`]; then nothing is sent.
    async fn update_and_send(
        &self,
        task: Cow<'_, Task>,
        outbox: Vec<Outgoing>,
    ) -> Result<Vec<Outgoing>, StoreError> {
        self.update(&task).await?;
        Ok(outbox)
    }
}
