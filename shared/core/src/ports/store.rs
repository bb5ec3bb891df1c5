//! The state store as a whole: its error, and [`StateStore`], every port of the
//! items it keeps in one.

use super::{
    Cause, CursorKeyStore, ExecutionHistory, GateStore, LeaseIndex, TaskListing, TaskStore,
    WorkflowStore,
};

/// Why the state store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The write's condition failed: someone else changed or created the record first.
    #[error("conditional write lost: the record changed since it was read")]
    Conflict,
    /// The store could not be reached or failed; the caller may retry.
    #[error("state store unavailable")]
    Unavailable(#[source] Cause),
    /// A record could not be decoded.
    #[error("state store record is corrupt")]
    Corrupt(#[source] Cause),
    /// A record is larger than the store takes: no retry will write it.
    #[error("state store record too large: {0}")]
    TooLarge(String),
    /// A listing's cursor is not one the store gave.
    #[error("'{0}' is not a cursor from an earlier page")]
    InvalidCursor(String),
}

/// The durable state store: tasks and their order data, their listings and leases,
/// gates, the cursor key and workflow definitions. Implemented by every type that
/// implements the port of each.
pub trait StateStore:
    TaskStore + TaskListing + LeaseIndex + GateStore + CursorKeyStore + WorkflowStore + ExecutionHistory
{
}

impl<T> StateStore for T where
    T: TaskStore
        + TaskListing
        + LeaseIndex
        + GateStore
        + CursorKeyStore
        + WorkflowStore
        + ExecutionHistory
        + ?Sized
{
}
