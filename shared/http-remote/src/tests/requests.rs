//! What a call sends: its method, at its URL.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use sas_core::ports::{RemoteCall, RemoteError};
use sas_domain::messages::Method;
use sas_domain::services::Service;

use crate::{HttpRemote, LocalCredentials, PARSED_URLS};

use super::{answer, call_with, request, serve};

#[test]
fn urls_are_kept_parsed_up_to_a_bound_and_one_that_does_not_parse_is_not_named() {
    let remote = HttpRemote::new(HashMap::new(), None, Arc::new(LocalCredentials));
    for i in 0..PARSED_URLS + 5 {
        let url = remote
            .url("svc", "http://127.0.0.1:9/base/", &format!("/orders/{i}"))
            .expect("parses");
        assert_eq!(
            url.to_string(),
            format!("http://127.0.0.1:9/base/orders/{i}")
        );
    }
    assert_eq!(remote.urls.lock().expect("lock").len(), PARSED_URLS);
    let kept = remote
        .url("svc", "http://127.0.0.1:9/base", "/orders/0")
        .expect("kept");
    assert_eq!(kept.path(), "/base/orders/0");
    let refused = remote
        .url("svc", "http://[::1", "/secret-path")
        .expect_err("not a URL");
    assert!(
        matches!(&refused, RemoteError::Transient(m) if m == "service 'svc' failed the request")
    );
}

#[tokio::test]
async fn a_step_is_called_with_its_method() {
    for method in [Method::Post, Method::Put, Method::Patch, Method::Delete] {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let seen = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("a request");
            let mut request = vec![0; 65_536];
            let read = socket.read(&mut request).await.expect("read");
            let _ = socket.write_all(&answer("204 No Content", "", b"")).await;
            String::from_utf8_lossy(&request[..read]).into_owned()
        });
        assert_eq!(call_with(&url, method).await.expect("called"), Value::Null);
        let request = seen.await.expect("served");
        assert!(
            request.starts_with(&format!("{} /op HTTP/1.1", method.as_str())),
            "{request}"
        );
    }
}

/// A remote with the one service `svc` at `url`, as `shape` sets it.
fn remote_of(url: &str, shape: impl FnOnce(&mut Service)) -> HttpRemote {
    let mut service = Service::at(url);
    shape(&mut service);
    HttpRemote::new(
        HashMap::from([("svc".to_owned(), service)]),
        None,
        Arc::new(LocalCredentials),
    )
}

/// A service's own timeout, shorter than the call's, bounds its request and the
/// answer's body: a service that sends its headers and then nothing more has not
/// answered.
#[tokio::test]
async fn a_service_that_answers_no_sooner_than_its_own_timeout_did_not_answer_in_time() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = vec![0; 65_536];
                let _ = socket.read(&mut request).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{\"a\"";
                let _ = socket.write_all(head.as_bytes()).await;
                tokio::time::sleep(Duration::from_secs(30)).await;
            });
        }
    });
    let remote = remote_of(&url, |s| s.timeout = Some(Duration::from_millis(200)));
    let started = Instant::now();
    let error = remote
        .call(&request(Method::Post, &json!({"a": 1})))
        .await
        .expect_err("no whole answer");
    assert!(
        matches!(&error, RemoteError::Transient(m) if m == "service 'svc' did not answer in time"),
        "{error:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "bounded by the service's timeout"
    );
}

/// A header that is not valid HTTP (a service's, here with a line break) is the
/// call's own fault: refused for good, and nothing is sent.
#[tokio::test]
async fn a_header_that_is_not_valid_http_refuses_the_call_and_sends_nothing() {
    let (url, hits) = serve(answer("200 OK", "", b"{}")).await;
    let remote = remote_of(&url, |s| {
        s.headers
            .insert("x-tenant".into(), "a\r\nx-admin: 1".into());
    });
    let error = remote
        .call(&request(Method::Post, &json!({"a": 1})))
        .await
        .expect_err("refused");
    assert!(
        matches!(&error, RemoteError::Permanent(m)
            if m == "the call of service 'svc' has a header that is not valid HTTP"),
        "{error:?}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing sent");
}
