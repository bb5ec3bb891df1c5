//! The state store's histories of state machines' executions, event by event: each
//! write's events kept beside its task by the write itself
//! ([`sas_domain::machine::MachineRun::new_events`]), read a page at a time.

use async_trait::async_trait;

use sas_domain::ids::TaskId;
use sas_domain::machine::history::HistoryEvent;

use super::StoreError;

/// Which of an execution's events to read: up to `limit`, in the order of their ids
/// (or the reverse), after the event `after` in that order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryPage {
    /// The event before the page, in its order.
    pub after: Option<u64>,
    /// The most events.
    pub limit: usize,
    /// The latest first.
    pub reverse: bool,
}

/// The events of executions' histories.
#[async_trait]
pub trait ExecutionHistory: Send + Sync {
    /// A page of the events of the execution that is task `task`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] or [`StoreError::Corrupt`].
    async fn history(
        &self,
        task: &TaskId,
        page: HistoryPage,
    ) -> Result<Vec<HistoryEvent>, StoreError>;
}
