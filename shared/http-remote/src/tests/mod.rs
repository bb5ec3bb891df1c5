//! The calls, against servers on 127.0.0.1: `requests` (what is sent), `answers`
//! (what an answer makes of the call), `credentials` (secrets and signatures) and
//! `privacy` (what logs and errors name); here, what they share.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use sas_core::ports::{RemoteCall, RemoteError, RemoteRequest};
use sas_domain::messages::{Method, Payload};
use sas_domain::services::Service;

use crate::{HttpRemote, LocalCredentials};

mod answers;
mod credentials;
mod invoke;
mod privacy;
mod requests;

/// A server on 127.0.0.1 that answers every request with `answer` (raw HTTP)
/// and counts the requests it got.
async fn serve(answer: Vec<u8>) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&hits);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut request = vec![0; 65_536];
            let _ = socket.read(&mut request).await;
            let _ = socket.write_all(&answer).await;
            let _ = socket.shutdown().await;
        }
    });
    (url, hits)
}

fn answer(status: &str, headers: &str, body: &[u8]) -> Vec<u8> {
    let mut raw = format!(
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    raw
}

/// A call of `svc`'s `/op` with `body`, as the agent makes it.
fn request(method: Method, body: &serde_json::Value) -> RemoteRequest {
    RemoteRequest {
        service: "svc".into(),
        method,
        path: "/op".into(),
        idempotency_key: "t/1/step".into(),
        payload: Payload::of(body).expect("JSON"),
        timeout: Duration::from_secs(5),
        trace: None,
    }
}

async fn call(url: &str) -> Result<Value, RemoteError> {
    call_with(url, Method::Post).await
}

async fn call_with(url: &str, method: Method) -> Result<Value, RemoteError> {
    let remote = HttpRemote::new(
        HashMap::from([("svc".to_owned(), Service::at(url))]),
        None,
        Arc::new(LocalCredentials),
    );
    remote
        .call(&request(method, &serde_json::json!({"a": 1})))
        .await
}
