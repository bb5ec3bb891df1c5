//! Calls to remote services, and how they fail.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use sas_domain::messages::{Method, Payload};
use sas_domain::trace::TraceContext;

/// How a remote call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// May succeed if tried again: timeout, 5xx, 429, connection refused.
    #[error("transient: {0}")]
    Transient(String),
    /// May succeed if tried again, but not sooner than `wait`: the service said so
    /// (a 429 or 503 with Retry-After).
    #[error("transient: {reason}; retry after {} s", wait.as_secs())]
    RetryAfter {
        /// What the service answered.
        reason: String,
        /// How long it asked callers to wait.
        wait: Duration,
    },
    /// Will not succeed if tried again: the service refused the request.
    #[error("permanent: {0}")]
    Permanent(String),
    /// The service did it (a 2xx), but its answer cannot be kept: larger than a
    /// step's output may be, or not JSON.
    #[error("unusable answer: {0}")]
    Unusable(String),
}

/// One call to a remote service.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteRequest {
    /// The service, by the agent name of the step.
    pub service: String,
    /// The operation's method.
    pub method: Method,
    /// The operation's path.
    pub path: String,
    /// Sent with every attempt; the service applies the effect once per key.
    pub idempotency_key: String,
    /// The body.
    pub payload: Payload,
    /// The longest the call may take.
    pub timeout: Duration,
    /// The span of this attempt, sent as `traceparent` (with `tracestate`) so that
    /// the service's own spans join the task's trace.
    pub trace: Option<TraceContext>,
}

/// Calls remote services.
#[async_trait]
pub trait RemoteCall: Send + Sync {
    /// Makes one call.
    ///
    /// # Errors
    /// [`RemoteError`], telling whether a retry may help.
    async fn call(&self, request: &RemoteRequest) -> Result<Value, RemoteError>;
}
