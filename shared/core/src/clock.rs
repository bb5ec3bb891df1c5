//! The clock port: the actors read time only through a [`Clock`], so that tests
//! and the simulation can drive it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sas_domain::time::Timestamp;

/// The source of time. The domain never reads the wall clock itself.
#[async_trait::async_trait]
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Timestamp;

    /// Waits for `duration` of this clock's time.
    async fn sleep(&self, duration: Duration);
}

/// The system clock, with Tokio's timer for sleeping.
#[derive(Debug, Default, Clone, Copy)]
pub struct WallClock;

#[async_trait::async_trait]
impl Clock for WallClock {
    fn now(&self) -> Timestamp {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Timestamp(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
    }

    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}
