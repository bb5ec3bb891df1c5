//! What a service's answer makes of a call: the step's output when it is a 2xx with
//! a JSON body within the limit, else why not, in words a caller may see (a wait
//! the service asked for, a refusal), the body quoted in the log alone.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};
use serde_json::Value;
use tracing::warn;

use sas_core::ports::{RemoteError, RemoteRequest};
use sas_domain::limits::MAX_STEP_OUTPUT;

/// How much of a body a log line quotes.
const LOGGED_BODY: usize = 512;

/// What a service answered: its status and headers, and its body as far as it was
/// read.
pub(crate) struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Result<Vec<u8>, BodyError>,
}

/// Why a body could not be read whole.
pub(crate) enum BodyError {
    /// Longer than the limit.
    TooLarge,
    /// The connection failed while reading it.
    Read(hyper::Error),
}

/// What the service's answer to `request` makes of the call: the step's output, or
/// why there is none.
pub(crate) fn read_answer(request: &RemoteRequest, answer: Answer) -> Result<Value, RemoteError> {
    let service = request.service.as_str();
    let status = answer.status;
    let asked_wait = retry_after(&answer.headers, SystemTime::now());
    let body = match answer.body {
        Ok(body) => body,
        Err(BodyError::TooLarge) if status.is_success() => {
            warn!(service, key = %request.idempotency_key, %status, "answer over the size of a step's output");
            return Err(RemoteError::Unusable(format!(
                "service '{service}' answered {status} with a body over the \
                 {MAX_STEP_OUTPUT} bytes a step's output may have"
            )));
        }
        Err(BodyError::TooLarge) => Vec::new(),
        Err(BodyError::Read(error)) => {
            warn!(service, key = %request.idempotency_key, %status, %error, "answer cut off");
            return Err(RemoteError::Transient(format!(
                "service '{service}' answered {status} and its body was cut off"
            )));
        }
    };
    if status.is_success() {
        if body.is_empty() {
            return Ok(Value::Null);
        }
        // The service did it; what it said cannot be kept: the step is undone.
        return serde_json::from_slice(&body).map_err(|error| {
            warn!(service, key = %request.idempotency_key, %status, %error, body = %quoted(&body), "answer not JSON");
            RemoteError::Unusable(format!(
                "service '{service}' answered {status} with a body that is not JSON"
            ))
        });
    }
    warn!(service, key = %request.idempotency_key, %status, body = %quoted(&body), "remote service refused");
    if status.is_redirection() {
        return Err(RemoteError::Permanent(format!(
            "service '{service}' answered {status}: redirects are not followed \
             (is its URL out of date?)"
        )));
    }
    let reason = format!("service '{service}' answered {status}");
    match (status.as_u16(), asked_wait) {
        (429 | 503, Some(wait)) => Err(RemoteError::RetryAfter { reason, wait }),
        // 409: what the Idempotency-Key draft has a service answer while an earlier
        // attempt with the same key is still at work there. Not a refusal: that
        // attempt may take effect, and a step failed for good would not be undone.
        (408 | 409 | 429 | 500..=599, _) => Err(RemoteError::Transient(reason)),
        _ => Err(RemoteError::Permanent(reason)),
    }
}

/// Reads a body, up to `limit` bytes.
pub(crate) async fn read_body(mut incoming: Incoming, limit: usize) -> Result<Vec<u8>, BodyError> {
    let declared = incoming.size_hint().exact().unwrap_or(0);
    if usize::try_from(declared).map_or(true, |n| n > limit) {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(frame) = incoming.frame().await {
        let Ok(chunk) = frame.map_err(BodyError::Read)?.into_data() else {
            continue;
        };
        if body.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The start of a body, for a log line.
fn quoted(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(LOGGED_BODY)]).into_owned()
}

/// The wait a `Retry-After` header asks for: delay-seconds, or an HTTP date (a date
/// past is no wait).
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}
