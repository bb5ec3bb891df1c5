//! What a service's answer makes of a call: an output, a wait asked for, a retry or
//! a refusal.

use std::time::{Duration, SystemTime};

use serde_json::Value;

use sas_core::ports::RemoteError;
use sas_domain::limits::MAX_STEP_OUTPUT;

use super::{answer, call, serve};

/// A JSON string whose text has exactly `bytes` bytes.
fn json_of(bytes: usize) -> Vec<u8> {
    format!("\"{}\"", "x".repeat(bytes - 2)).into_bytes()
}

#[tokio::test]
async fn a_429_or_503_with_retry_after_asks_for_its_wait_and_others_do_not() {
    for status in ["429 Too Many Requests", "503 Service Unavailable"] {
        let (url, _) = serve(answer(status, "retry-after: 7\r\n", b"")).await;
        assert!(
            matches!(call(&url).await, Err(RemoteError::RetryAfter { wait, .. }) if wait == Duration::from_secs(7)),
            "{status} with delay-seconds"
        );
    }
    let in_a_minute = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(60));
    let (url, _) = serve(answer(
        "503 Service Unavailable",
        &format!("retry-after: {in_a_minute}\r\n"),
        b"",
    ))
    .await;
    assert!(
        matches!(call(&url).await, Err(RemoteError::RetryAfter { wait, .. })
            if (Duration::from_secs(58)..=Duration::from_secs(60)).contains(&wait)),
        "an HTTP date a minute ahead"
    );
    let (url, _) = serve(answer("429 Too Many Requests", "", b"")).await;
    assert!(
        matches!(call(&url).await, Err(RemoteError::Transient(_))),
        "no Retry-After: the backoff alone"
    );
    let (url, _) = serve(answer(
        "500 Internal Server Error",
        "retry-after: 7\r\n",
        b"",
    ))
    .await;
    assert!(
        matches!(call(&url).await, Err(RemoteError::Transient(_))),
        "only 429 and 503 ask for a wait"
    );
    let (url, _) = serve(answer(
        "429 Too Many Requests",
        "retry-after: soon\r\n",
        b"",
    ))
    .await;
    assert!(
        matches!(call(&url).await, Err(RemoteError::Transient(_))),
        "a Retry-After that is neither seconds nor a date is ignored"
    );
}

/// A 409 is the service still at work on an earlier attempt with the same
/// Idempotency-Key: tried again, as that attempt may take effect; other 4xx, such
/// as the draft's 422 for a key sent with another body, are refusals.
#[tokio::test]
async fn a_409_is_transient_and_other_4xx_are_refusals() {
    let (url, _) = serve(answer("409 Conflict", "", b"")).await;
    let conflict = call(&url).await;
    assert!(
        matches!(conflict, Err(RemoteError::Transient(_))),
        "{conflict:?}"
    );
    for status in [
        "400 Bad Request",
        "404 Not Found",
        "422 Unprocessable Content",
    ] {
        let (url, _) = serve(answer(status, "", b"")).await;
        let refused = call(&url).await;
        assert!(
            matches!(refused, Err(RemoteError::Permanent(_))),
            "{status}: {refused:?}"
        );
    }
}

#[tokio::test]
async fn an_answer_is_an_output_only_when_it_is_json_within_the_limit() {
    let (url, _) = serve(answer("200 OK", "", &json_of(MAX_STEP_OUTPUT))).await;
    let output = call(&url).await.expect("at the limit");
    assert_eq!(output.as_str().map(str::len), Some(MAX_STEP_OUTPUT - 2));

    let (url, _) = serve(answer("200 OK", "", &json_of(MAX_STEP_OUTPUT + 1))).await;
    assert!(
        matches!(call(&url).await, Err(RemoteError::Unusable(e)) if e.contains(&format!("{MAX_STEP_OUTPUT} bytes"))),
        "one byte over"
    );

    let (url, _) = serve(answer("204 No Content", "", b"")).await;
    assert_eq!(call(&url).await.expect("no body"), Value::Null);

    let (url, _) = serve(answer("200 OK", "", b"<html>welcome</html>")).await;
    let error = call(&url).await.expect_err("not JSON");
    assert_eq!(
        error,
        RemoteError::Unusable("service 'svc' answered 200 OK with a body that is not JSON".into()),
        "done, but its answer cannot be kept: undone"
    );
}

#[tokio::test]
async fn a_cut_off_body_is_transient_and_a_redirect_is_not_followed() {
    let mut cut = answer("200 OK", "", b"{\"id\": 1}");
    let declared = b"content-length: 9";
    let at = cut
        .windows(declared.len())
        .position(|w| w == declared)
        .expect("header");
    cut.splice(
        at..at + declared.len(),
        b"content-length: 90".iter().copied(),
    );
    let (url, _) = serve(cut).await;
    assert!(matches!(call(&url).await, Err(RemoteError::Transient(e)) if e.contains("cut off")));

    let (elsewhere, hits) = serve(answer("200 OK", "", b"{}")).await;
    let (url, _) = serve(answer(
        "307 Temporary Redirect",
        &format!("location: {elsewhere}/op\r\n"),
        b"",
    ))
    .await;
    let error = call(&url).await.expect_err("a redirect");
    assert!(
        matches!(&error, RemoteError::Permanent(e) if e.contains("redirects are not followed"))
    );
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "never followed"
    );
}
