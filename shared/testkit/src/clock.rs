//! A clock for tests.

use std::time::Duration;

use sas_core::clock::Clock;
use sas_domain::time::Timestamp;

/// A clock that moves only when told to; sleeping on it advances it at once.
#[derive(Debug)]
pub struct ManualClock {
    now: std::sync::atomic::AtomicI64,
}

impl ManualClock {
    /// A clock stopped at `start`.
    #[must_use]
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: std::sync::atomic::AtomicI64::new(start.0),
        }
    }

    /// Moves the clock forward by `duration`.
    pub fn advance(&self, duration: Duration) {
        let millis = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        self.now
            .fetch_add(millis, std::sync::atomic::Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.now.load(std::sync::atomic::Ordering::SeqCst))
    }

    async fn sleep(&self, duration: Duration) {
        self.advance(duration);
        tokio::task::yield_now().await;
    }
}
