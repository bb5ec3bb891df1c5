//! How a remote service is called when it fails: backoff with jitter between
//! retries, and a circuit breaker per service.

use std::time::Duration;

use super::workflow::RetryPolicy;
use crate::time::Timestamp;

/// The wait before retry number `retry` (1 for the wait after the first call):
/// exponential from the policy's initial backoff, capped, and with full jitter
/// drawn from `random` (uniform in 0..1) when the policy asks for it.
#[must_use]
pub fn backoff(policy: &RetryPolicy, retry: u32, random: f64) -> Duration {
    let factor = 2u32.saturating_pow(retry.saturating_sub(1));
    let nominal = policy
        .initial_backoff
        .saturating_mul(factor)
        .min(policy.max_backoff);
    if policy.jitter {
        nominal.mul_f64(random.clamp(0.0, 1.0))
    } else {
        nominal
    }
}

/// Settings of a [`CircuitBreaker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Consecutive failures that open the circuit.
    pub failure_threshold: u32,
    /// How long the circuit stays open before one trial call is let through.
    pub open_for: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            open_for: Duration::from_secs(5),
        }
    }
}

/// The circuit's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through; counts consecutive failures.
    Closed {
        /// Consecutive failures so far.
        failures: u32,
    },
    /// Calls fail fast until the instant given.
    Open {
        /// When one trial call may go through.
        until: Timestamp,
    },
    /// One trial call is out; others fail fast until it ends.
    HalfOpen,
}

/// A circuit breaker for one remote service: after enough consecutive transient
/// failures, calls fail fast for a while instead of adding load to a service that
/// is down; then one trial call decides whether to close it again.
#[derive(Debug, Clone)]
pub struct CircuitBreaker {
    settings: BreakerSettings,
    state: BreakerState,
}

impl CircuitBreaker {
    /// A closed breaker.
    #[must_use]
    pub fn new(settings: BreakerSettings) -> Self {
        Self {
            settings,
            state: BreakerState::Closed { failures: 0 },
        }
    }

    /// Where the circuit is.
    #[must_use]
    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// Whether a call may go out now; a true answer in the open state's end makes
    /// that call the trial.
    pub fn allow(&mut self, now: Timestamp) -> bool {
        match self.state {
            BreakerState::Closed { .. } => true,
            BreakerState::Open { until } if now >= until => {
                self.state = BreakerState::HalfOpen;
                true
            }
            BreakerState::Open { .. } | BreakerState::HalfOpen => false,
        }
    }

    /// The call succeeded, or failed in a way that says nothing about the
    /// service's health (a permanent, business error).
    pub fn on_success(&mut self) {
        self.state = BreakerState::Closed { failures: 0 };
    }

    /// The call failed transiently (timeout, 5xx, connection refused).
    pub fn on_failure(&mut self, now: Timestamp) {
        self.state = match self.state {
            BreakerState::Closed { failures } if failures + 1 < self.settings.failure_threshold => {
                BreakerState::Closed {
                    failures: failures + 1,
                }
            }
            _ => BreakerState::Open {
                until: now.plus(self.settings.open_for),
            },
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(jitter: bool) -> RetryPolicy {
        RetryPolicy {
            attempts: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            jitter,
            call_timeout: None,
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_and_jitter_stays_below_it() {
        let fixed: Vec<_> = (1..=4)
            .map(|n| backoff(&policy(false), n, 0.5).as_millis())
            .collect();
        assert_eq!(fixed, [100, 200, 350, 350]);
        assert_eq!(backoff(&policy(true), 2, 0.5), Duration::from_millis(100));
        assert_eq!(backoff(&policy(true), 3, 0.0), Duration::ZERO);
        assert_eq!(backoff(&policy(true), 30, 1.0), Duration::from_millis(350));
    }

    #[test]
    fn breaker_opens_after_consecutive_failures_and_tries_once_after_the_wait() {
        let settings = BreakerSettings {
            failure_threshold: 2,
            open_for: Duration::from_secs(1),
        };
        let mut breaker = CircuitBreaker::new(settings);
        let t0 = Timestamp(0);
        breaker.on_failure(t0);
        assert!(breaker.allow(t0));
        breaker.on_success();
        breaker.on_failure(t0);
        breaker.on_failure(t0);
        assert_eq!(
            breaker.state(),
            BreakerState::Open {
                until: Timestamp(1000)
            }
        );
        assert!(!breaker.allow(Timestamp(999)));
        assert!(breaker.allow(Timestamp(1000)), "the trial call");
        assert!(!breaker.allow(Timestamp(1000)), "only one trial at a time");
        breaker.on_failure(Timestamp(1100));
        assert_eq!(
            breaker.state(),
            BreakerState::Open {
                until: Timestamp(2100)
            }
        );
        assert!(breaker.allow(Timestamp(2100)));
        breaker.on_success();
        assert_eq!(breaker.state(), BreakerState::Closed { failures: 0 });
    }
}
