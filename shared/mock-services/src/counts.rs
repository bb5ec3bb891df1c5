//! The calls counted: received per service, and in progress (now, and the most at
//! once) per service and per customer.

use std::collections::HashMap;
use std::sync::PoisonError;

use serde::Serialize;

use crate::MockServices;

/// A service's calls in progress, and the most there were at once.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Concurrency {
    /// Now.
    pub now: u64,
    /// The most at once since start.
    pub peak: u64,
}

/// A call in progress: counted while it lives.
pub(crate) struct InFlight<'a> {
    mock: &'a MockServices,
    service: String,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(count) = self
            .mock
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&self.service)
        {
            count.now -= 1;
        }
    }
}

impl MockServices {
    /// Calls in progress per service, and the most there were at once.
    #[must_use]
    pub fn concurrency(&self) -> HashMap<String, Concurrency> {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl MockServices {
    /// Counts a call of `counted` (a service, or a service and a customer) in
    /// progress until the guard is dropped.
    pub(crate) fn enter(&self, counted: String) -> InFlight<'_> {
        let mut all = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let count = all.entry(counted.clone()).or_default();
        count.now += 1;
        count.peak = count.peak.max(count.now);
        InFlight {
            mock: self,
            service: counted,
        }
    }
}

impl MockServices {
    /// Requests received per service since start, failed ones included.
    #[must_use]
    pub fn calls(&self) -> HashMap<String, u64> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
