//! What wakes the engine at a schedule's runs, where something beside the
//! supervisor's sweep does (EventBridge Scheduler on AWS, a schedule of its own for
//! each of the project's).

use async_trait::async_trait;

use sas_domain::schedule::Schedule;

use super::Cause;

/// Why a schedule's wake-ups could not be set or removed.
#[derive(Debug, thiserror::Error)]
#[error("the schedule's wake-ups could not be set")]
pub struct WakeupError(#[source] pub Cause);

/// A schedule's wake-ups: each one fires the schedule ([`crate::app::App::fire_schedule`]),
/// which starts the runs that have come.
#[async_trait]
pub trait Wakeups: Send + Sync {
    /// Creates or replaces `schedule`'s wake-ups, on while it is not paused.
    ///
    /// # Errors
    /// [`WakeupError`] when the service fails.
    async fn set(&self, schedule: &Schedule) -> Result<(), WakeupError>;

    /// Removes the wake-ups of the schedule `name`; nothing where there are none.
    ///
    /// # Errors
    /// [`WakeupError`] when the service fails.
    async fn remove(&self, name: &str) -> Result<(), WakeupError>;
}
