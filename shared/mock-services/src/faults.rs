//! The faults injected into a service's calls ([`Faults`]): latency, errors, hangs,
//! outages, large answers, a key required; for every call or a few.

use std::sync::PoisonError;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::MockServices;

/// Faults injected into one service's calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    /// Added to every call, in milliseconds.
    #[serde(default)]
    pub latency_ms: u64,
    /// Share of calls (0..1) answered 503 without applying the effect.
    #[serde(default)]
    pub transient_error_rate: f64,
    /// Share of calls (0..1) refused with 422, for good, without applying the effect.
    #[serde(default)]
    pub permanent_error_rate: f64,
    /// The effect is applied, then the answer is held this long (past any deadline).
    #[serde(default)]
    pub hang_ms: u64,
    /// From now, every call fails with 503 for this long.
    #[serde(default)]
    pub outage_ms: u64,
    /// The effect is applied and the answer padded to this many bytes of JSON (a
    /// service answering more than a step's output may hold).
    #[serde(default)]
    pub answer_bytes: Option<usize>,
    /// The service takes only calls with this `X-Api-Key` header: any other is
    /// refused with 401, without applying the effect.
    #[serde(default)]
    pub api_key: Option<String>,
    /// The faults apply to this many calls, then clear; all calls when absent.
    #[serde(default)]
    pub times: Option<u32>,
}

pub(crate) struct Injected {
    pub(crate) faults: Faults,
    outage_until: Instant,
    remaining: Option<u32>,
}

impl MockServices {
    /// Sets a service's faults. A new `api_key` is the service's next key: the ones
    /// before it are stale.
    pub fn set_faults(&self, service: &str, faults: Faults) {
        if let Some(key) = &faults.api_key {
            let mut all = self
                .credentials
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let keys = &mut all.entry(service.to_owned()).or_default().keys;
            if keys.last() != Some(key) {
                keys.retain(|k| k != key);
                keys.push(key.clone());
            }
        }
        let injected = Injected {
            outage_until: Instant::now() + Duration::from_millis(faults.outage_ms),
            remaining: faults.times,
            faults,
        };
        self.faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(service.to_owned(), injected);
    }
}

impl MockServices {
    /// Counts a call of `service` and returns the faults to apply to it, and
    /// whether the service is in an outage.
    pub(crate) fn take_faults(&self, service: &str) -> Option<(Faults, bool)> {
        *self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(service.to_owned())
            .or_default() += 1;
        let mut all = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        let injected = all.get_mut(service)?;
        if let Some(remaining) = injected.remaining.as_mut() {
            if *remaining == 0 {
                return None;
            }
            *remaining -= 1;
        }
        Some((
            injected.faults.clone(),
            Instant::now() < injected.outage_until,
        ))
    }

    pub(crate) fn chance(&self, rate: f64) -> bool {
        rate > 0.0
            && self
                .random
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .f64()
                < rate
    }
}
