//! The ports: what the actors need from the outside world, named by role. The
//! embedded backend implements them for one machine; AWS adapters for Lambda.
//!
//! One file a port. The state store is a port for each kind of item it keeps
//! ([`TaskStore`], [`TaskListing`], [`LeaseIndex`], [`GateStore`], [`CursorKeyStore`],
//! [`WorkflowStore`], [`ExecutionHistory`]), and [`StateStore`] is all of them: what
//! the actors hold.

mod alerts;
mod consumer;
mod credentials;
mod cursor_key;
mod dead_letters;
mod gates;
mod history;
mod leases;
mod listing;
mod metrics;
mod payloads;
mod queues;
mod remote;
mod spans;
mod store;
mod tasks;
mod wakeups;
mod workflows;

pub use alerts::{AlertError, Alerts};
pub use consumer::{Consumer, Delivery};
pub use credentials::{CredentialError, Credentials, Unsigned};
pub use cursor_key::{CursorKey, CursorKeyStore};
pub use dead_letters::{DeadLetter, DeadLetters};
pub use gates::GateStore;
pub use history::{ExecutionHistory, HistoryPage};
pub use leases::{Expired, ExpiredCursor, LeaseIndex, LeaseKey, ShardProgress, Unreadable};
pub use listing::{LISTED, TaskListing, TaskPage};
pub use metrics::{Dimension, Metrics, NoMetrics, Unit};
pub use payloads::{PayloadError, Payloads, UploadRequest};
pub use queues::{Outgoing, OutgoingMessage, QueueError, Queues};
pub use remote::{RemoteCall, RemoteError, RemoteRequest};
pub use spans::Spans;
pub use store::{StateStore, StoreError};
pub use tasks::TaskStore;
pub use wakeups::{WakeupError, Wakeups};
pub use workflows::{Registration, WorkflowStore};

/// An adapter's own error (an SDK's, SQLite's, or a message where there is none),
/// kept whole as the source of the port's error.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// An error and its sources, each after the one before (`a: b: c`): how logs show
/// an error, whose own text names only what failed at its level.
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}
