//! What the log lines and the errors of a call name: the service and the call's
//! key, never its URL, its path or the service's body.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;

use sas_core::ports::{RemoteCall, RemoteError};
use sas_domain::messages::Method;
use sas_domain::services::Service;

use crate::{HttpRemote, LocalCredentials};

use super::{answer, call, request, serve};

/// Log lines, as a subscriber writes them.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Self;
    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}

/// A step's path holds input values (a customer's id, say), and a service's URL
/// may be internal: the agent's log lines name the service and the call's key,
/// never either.
#[tokio::test]
async fn log_lines_name_the_service_and_the_key_never_the_url_nor_the_path() {
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    let (refusing, _) = serve(answer("400 Bad Request", "", b"no")).await;
    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let unreachable = format!("http://{}", closed.local_addr().expect("address"));
    drop(closed);
    for url in [&refusing, &unreachable] {
        let remote = HttpRemote::new(
            HashMap::from([("svc".to_owned(), Service::at(url.as_str()))]),
            None,
            Arc::new(LocalCredentials),
        );
        let mut call = request(Method::Post, &serde_json::json!({}));
        call.path = "/customers/c-private-42/check".into();
        remote.call(&call).await.expect_err("failed");
    }
    let written = String::from_utf8(logs.0.lock().expect("logs").clone()).expect("text");
    assert!(written.contains("t/1/step"), "the key: {written}");
    for private in ["c-private-42", "127.0.0.1", "http://"] {
        assert!(!written.contains(private), "{private} logged: {written}");
    }
}

#[tokio::test]
async fn errors_name_the_service_never_its_url_nor_its_body() {
    let (url, _) = serve(answer(
        "404 Not Found",
        "",
        b"{\"detail\": \"no route /internal/admin on 10.0.3.7\"}",
    ))
    .await;
    let error = call(&url).await.expect_err("refused").to_string();
    assert_eq!(error, "permanent: service 'svc' answered 404 Not Found");

    let (url, _) = serve(answer(
        "503 Service Unavailable",
        "",
        b"db down at 10.0.3.7",
    ))
    .await;
    assert_eq!(
        call(&url).await,
        Err(RemoteError::Transient(
            "service 'svc' answered 503 Service Unavailable".into()
        ))
    );

    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let url = format!("http://{}", closed.local_addr().expect("address"));
    drop(closed);
    let error = call(&url)
        .await
        .expect_err("refused connection")
        .to_string();
    assert!(!error.contains("127.0.0.1"), "{error}");
    assert_eq!(error, "transient: service 'svc' could not be reached");
}
