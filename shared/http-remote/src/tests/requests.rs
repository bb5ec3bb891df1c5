//! What a call sends: its method, at its URL.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use sas_core::ports::RemoteError;
use sas_domain::messages::Method;

use crate::{HttpRemote, LocalCredentials, PARSED_URLS};

use super::{answer, call_with};

#[test]
fn urls_are_kept_parsed_up_to_a_bound_and_one_that_does_not_parse_is_not_named() {
    let remote = HttpRemote::new(HashMap::new(), None, Arc::new(LocalCredentials));
    for i in 0..PARSED_URLS + 5 {
        let url = remote
            .url("svc", "http://127.0.0.1:9/base/", &format!("/orders/{i}"))
            .expect("parses");
        assert_eq!(url.as_str(), format!("http://127.0.0.1:9/base/orders/{i}"));
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
