//! An OTLP/HTTP receiver of a test's own (JSON encoding), where the system under test
//! exports its spans, and how a test reads them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::routing::post;
use serde_json::{Value, json};

/// An OTLP/HTTP receiver on a free port: the spans of every export it took.
pub struct Receiver {
    /// Its base URL: `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub url: String,
    spans: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    /// Starts one on a free port of 127.0.0.1.
    ///
    /// # Panics
    /// When no port is free.
    pub async fn start() -> Self {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let taken = Arc::clone(&spans);
        let router = axum::Router::new().route(
            "/v1/traces",
            post(move |body: axum::Json<Value>| async move {
                let found = body["resourceSpans"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|r| r["scopeSpans"].as_array().into_iter().flatten())
                    .flat_map(|s| s["spans"].as_array().into_iter().flatten().cloned());
                taken.lock().expect("spans").extend(found);
                axum::Json(json!({}))
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self { url, spans }
    }

    /// The spans received once `done` holds of them, within 30 seconds.
    /// # Panics
    /// When `done` does not hold within 30 seconds, with the spans received.
    pub async fn spans_when(&self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans.lock().expect("spans").clone();
            if done(&spans) {
                return spans;
            }
            assert!(Instant::now() < deadline, "spans received: {spans:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The value of a span's attribute `key`: its `stringValue` or `intValue`.
#[must_use]
pub fn attribute<'s>(span: &'s Value, key: &str) -> Option<&'s Value> {
    let attributes = span["attributes"].as_array()?;
    let found = attributes.iter().find(|a| a["key"] == key)?;
    let value = &found["value"];
    value.get("stringValue").or_else(|| value.get("intValue"))
}

/// The spans named `name`.
#[must_use]
pub fn named<'s>(spans: &'s [Value], name: &str) -> Vec<&'s Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

/// The one span named `name`.
/// # Panics
/// Unless there is exactly one.
#[must_use]
pub fn the<'s>(spans: &'s [Value], name: &str) -> &'s Value {
    let [span] = named(spans, name)[..] else {
        panic!("one span {name}: {spans:#?}");
    };
    span
}

/// Whether every span is of one trace, each under another of them but for one: the
/// root, a trace's own or under a caller's span.
#[must_use]
pub fn one_tree(spans: &[Value]) -> bool {
    let ids: Vec<&Value> = spans.iter().map(|s| &s["spanId"]).collect();
    let roots = spans
        .iter()
        .filter(|s| !ids.contains(&&s["parentSpanId"]))
        .count();
    let trace = &spans[0]["traceId"];
    roots == 1 && spans.iter().all(|s| &s["traceId"] == trace)
}
