//! `Retry` and `Catch`: which error each matches, how long a retry waits, and the
//! `States.*` errors the language itself raises.

use serde_json::Value;

use crate::Refusal;
use crate::path::Selection;

/// The catch-all name: it matches every error but `States.Runtime`, and must stand
/// alone in the last retrier or catcher.
pub const ALL: &str = "States.ALL";
pub const TASK_FAILED: &str = "States.TaskFailed";
pub const TIMEOUT: &str = "States.Timeout";
pub const HEARTBEAT_TIMEOUT: &str = "States.HeartbeatTimeout";
pub const RUNTIME: &str = "States.Runtime";
pub const DATA_LIMIT_EXCEEDED: &str = "States.DataLimitExceeded";
pub const QUERY_EVALUATION_ERROR: &str = "States.QueryEvaluationError";
pub const INTRINSIC_FAILURE: &str = "States.IntrinsicFailure";
pub const BRANCH_FAILED: &str = "States.BranchFailed";
pub const EXCEED_TOLERATED_FAILURE_THRESHOLD: &str = "States.ExceedToleratedFailureThreshold";
pub const ITEM_READER_FAILED: &str = "States.ItemReaderFailed";
pub const RESULT_WRITER_FAILED: &str = "States.ResultWriterFailed";
pub const PERMISSIONS: &str = "States.Permissions";

/// Whether an `ErrorEquals` list names `error`. `States.TaskFailed` matches every
/// error but `States.Timeout` (and those `States.ALL` leaves out).
fn matches(error_equals: &[String], error: &str) -> bool {
    error_equals.iter().any(|name| {
        let wildcard = error != RUNTIME;
        name == error
            || (name == ALL && wildcard)
            || (name == TASK_FAILED && wildcard && error != TIMEOUT)
    })
}

/// One entry of `Retry`.
#[derive(Clone, Debug, PartialEq)]
pub struct Retrier {
    pub error_equals: Vec<String>,
    pub interval_seconds: u64,
    pub max_attempts: u64,
    pub backoff_rate: f64,
    pub max_delay_seconds: Option<u64>,
    /// `JitterStrategy: FULL`: the wait is drawn between zero and the computed one.
    pub full_jitter: bool,
}

impl Retrier {
    /// The wait before retry number `attempt` (1 for the first retry), in seconds,
    /// before jitter.
    pub fn delay_seconds(&self, attempt: u64) -> f64 {
        let exponent = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
        let delay = self.interval_seconds as f64 * self.backoff_rate.powi(exponent);
        match self.max_delay_seconds {
            Some(max) => delay.min(max as f64),
            None => delay,
        }
    }
}

/// One entry of `Catch`: where an error goes, and what the state's output is then.
#[derive(Clone, Debug, PartialEq)]
pub struct Catcher {
    pub error_equals: Vec<String>,
    pub next: String,
    /// JSONPath's `ResultPath` (default `$`; `None` inside means `null`).
    pub result_path: Option<Selection>,
    /// JSONata's `Output`.
    pub output: Option<Value>,
    pub assign: Option<Value>,
}

/// What the `Retry` list says of an error: the retrier that takes it, if any and if it
/// has attempts left.
pub fn retrier_for<'a>(retry: &'a [Retrier], error: &str) -> Option<(usize, &'a Retrier)> {
    retry
        .iter()
        .enumerate()
        .find(|(_, retrier)| matches(&retrier.error_equals, error))
}

/// The catcher that takes an error, if any, with its index.
pub fn catcher_for<'a>(catch: &'a [Catcher], error: &str) -> Option<(usize, &'a Catcher)> {
    catch
        .iter()
        .enumerate()
        .find(|(_, catcher)| matches(&catcher.error_equals, error))
}

/// Reads an `ErrorEquals` list, checking that `States.ALL` stands alone and last.
pub(crate) fn error_equals(
    value: Option<&Value>,
    at: &str,
    is_last: bool,
) -> Result<Vec<String>, Refusal> {
    let names: Vec<String> = match value {
        Some(Value::Array(names)) if !names.is_empty() => names
            .iter()
            .map(|name| {
                name.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| Refusal::new(at, "ErrorEquals must hold error names (strings)"))
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(Refusal::new(
                at,
                "ErrorEquals must be a non-empty list of error names",
            ));
        }
    };
    if names.iter().any(|name| name == ALL) && (names.len() > 1 || !is_last) {
        return Err(Refusal::new(
            at,
            "States.ALL must appear alone in the last retrier or catcher",
        ));
    }
    Ok(names)
}
