//! `http:invoke` Tasks: called at the service whose URL their endpoint starts with,
//! with their method, headers, query and body, every status answered; an endpoint of
//! no service refused.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use sas_core::ports::{RemoteCall, RemoteError, RemoteRequest};
use sas_domain::machine::{HTTP_AGENT, HttpRequest, ServiceAnswer};
use sas_domain::messages::{Method, Payload};
use sas_domain::services::Service;

use crate::{HttpRemote, LocalCredentials};

use super::answer;

fn invoked(asked: &HttpRequest) -> RemoteRequest {
    RemoteRequest {
        service: HTTP_AGENT.to_owned(),
        method: Method::Post,
        path: "Invoke".to_owned(),
        idempotency_key: "t/1/Call#1".to_owned(),
        payload: Payload::of(asked).expect("JSON"),
        timeout: Duration::from_secs(5),
        trace: None,
    }
}

#[tokio::test]
async fn a_task_calls_its_endpoint_at_the_service_it_is_of_and_gets_every_status() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let seen = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("a request");
        let mut request = vec![0; 65_536];
        let read = socket.read(&mut request).await.expect("read");
        let refusal = answer(
            "404 Not Found",
            "content-type: text/plain\r\n",
            b"no such order",
        );
        let _ = socket.write_all(&refusal).await;
        String::from_utf8_lossy(&request[..read]).into_owned()
    });
    let mut orders = Service::at(format!("{url}/v1"));
    orders
        .headers
        .insert("x-tenant".to_owned(), "acme".to_owned());
    let remote = HttpRemote::new(
        HashMap::from([("orders".to_owned(), orders)]),
        None,
        Arc::new(LocalCredentials),
    );
    let asked = HttpRequest {
        endpoint: format!("{url}/v1/orders/o-1"),
        method: "GET".to_owned(),
        headers: [("x-trace".to_owned(), "7".to_owned())].into(),
        query: vec![("full".to_owned(), "yes please".to_owned())],
        body: None,
    };
    let answered = remote.call(&invoked(&asked)).await.expect("answered");
    let answered: ServiceAnswer = serde_json::from_value(answered).expect("an answer");
    assert_eq!(answered.status, 404);
    assert_eq!(answered.status_text.as_deref(), Some("Not Found"));
    assert_eq!(answered.body, json!("no such order"));
    assert_eq!(answered.headers["content-type"], "text/plain");
    let request = seen.await.expect("served").to_ascii_lowercase();
    assert!(
        request.starts_with("get /v1/orders/o-1?full=yes+please http/1.1"),
        "{request}"
    );
    for header in [
        "x-trace: 7",
        "x-tenant: acme",
        "idempotency-key: t/1/call#1",
    ] {
        assert!(request.contains(header), "{header}: {request}");
    }

    let elsewhere = HttpRequest {
        endpoint: format!("{url}/v2/orders"),
        ..asked
    };
    let refused = remote
        .call(&invoked(&elsewhere))
        .await
        .expect_err("refused");
    let RemoteError::Permanent(error) = refused else {
        panic!("{refused:?}");
    };
    assert!(
        error.contains("none of the deployment's services"),
        "{error}"
    );
}
