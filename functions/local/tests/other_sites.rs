//! The local API answers programs and its own pages, not the pages of other sites
//! the developer has open: a form or a script of theirs (a body not declared JSON,
//! another `Origin`) or a name of theirs rebound to 127.0.0.1 (another `Host`) is
//! refused, and changes nothing.

mod common;

use std::process::Child;

use serde_json::{Value, json};

/// A task held in Processing: its first step's service holds its answer.
const TASK: &str = "held";

/// `sas-local`, its API's base URL and its port.
struct Local {
    child: Child,
    api: String,
    port: u16,
    http: reqwest::Client,
    _data: tempfile::TempDir,
}

impl Drop for Local {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Local {
    async fn start() -> Self {
        let data = tempfile::tempdir().expect("data directory");
        let (child, api, mock) = common::spawn_with(data.path(), &[]);
        let port = api.rsplit(':').next().and_then(|p| p.parse().ok());
        let local = Self {
            child,
            port: port.expect("a port"),
            api,
            http: reqwest::Client::new(),
            _data: data,
        };
        let held = local
            .http
            .put(format!("{mock}/faults/account"))
            .json(&json!({ "hang_ms": 30_000 }))
            .send()
            .await
            .expect("the mock services answer");
        assert!(held.status().is_success());
        let body = json!({ "workflow": "drone-delivery", "input": {
            "customer_id": "c", "pickup": "a", "dropoff": "b", "weight_kg": 1.0 } });
        let (status, task) = local
            .send(
                "PUT",
                &format!("/tasks/{TASK}"),
                &[JSON],
                Some(body.to_string()),
            )
            .await;
        assert_eq!(status, 202, "{task}");
        for _ in 0..100 {
            if local.task().await["state"] == "Processing" {
                return local;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("the task is not Processing: {}", local.task().await);
    }

    /// Sends a request with `headers` (and no others but reqwest's own); the status
    /// and the JSON body.
    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<String>,
    ) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = self.http.request(method, format!("{}{path}", self.api));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        let response = request.send().await.expect("the API answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("a body");
        let body = serde_json::from_str(&text)
            .unwrap_or_else(|_| Value::String(format!("{} bytes, not JSON", text.len())));
        (status, body)
    }

    async fn task(&self) -> Value {
        self.send("GET", &format!("/tasks/{TASK}"), &[], None)
            .await
            .1
    }
}

const JSON: (&str, &str) = ("content-type", "application/json");

#[tokio::test]
async fn another_sites_page_cannot_cancel_a_task_and_the_developers_own_can() {
    let local = Local::start().await;
    let cancel = format!("/tasks/{TASK}/cancel");
    let evil_host = format!("evil.example:{}", local.port);
    let other_port = format!("http://127.0.0.1:{}", local.port.wrapping_add(1));
    let refused = [
        (
            "a text/plain body (a form, or a fetch without preflight)",
            vec![("content-type", "text/plain")],
            "{}",
            415,
            "unsupported_media_type",
        ),
        (
            "an empty form",
            vec![("content-type", "application/x-www-form-urlencoded")],
            "",
            415,
            "unsupported_media_type",
        ),
        (
            "a body without a content type",
            vec![],
            "{}",
            415,
            "unsupported_media_type",
        ),
        (
            "another site's origin",
            vec![JSON, ("origin", "https://evil.example")],
            "{}",
            403,
            "forbidden",
        ),
        (
            "an opaque origin",
            vec![JSON, ("origin", "null")],
            "{}",
            403,
            "forbidden",
        ),
        (
            "another port's origin",
            vec![JSON, ("origin", &other_port)],
            "{}",
            403,
            "forbidden",
        ),
        (
            "a name rebound to 127.0.0.1",
            vec![JSON, ("host", &evil_host)],
            "{}",
            421,
            "misdirected_request",
        ),
    ];
    for (what, headers, body, status, code) in refused {
        let (answered, error) = local
            .send("POST", &cancel, &headers, Some(body.to_owned()))
            .await;
        assert_eq!(
            (answered, error["error"]["code"].as_str()),
            (status, Some(code)),
            "{what}: {error}"
        );
        let task = local.task().await;
        assert_eq!(task["state"], "Processing", "{what}: {task}");
        assert!(task["cancelled"].is_null(), "{what}: {task}");
    }

    // The console's own request: its origin, JSON.
    let origin = format!("http://127.0.0.1:{}", local.port);
    let headers = [
        ("content-type", "application/json; charset=utf-8"),
        ("origin", origin.as_str()),
    ];
    let (status, task) = local
        .send("POST", &cancel, &headers, Some("{}".to_owned()))
        .await;
    assert_eq!(status, 202, "{task}");
    assert!(!task["cancelled"].is_null(), "{task}");
}

#[tokio::test]
async fn every_route_answers_only_to_the_names_it_listens_as() {
    let local = Local::start().await;
    let port = local.port;
    for name in ["127.0.0.1", "localhost", "LocalHost", "[::1]"] {
        let host = format!("{name}:{port}");
        let origin = format!("http://{host}");
        let (status, body) = local
            .send(
                "GET",
                "/workflows",
                &[("host", &host), ("origin", &origin)],
                None,
            )
            .await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    let foreign = [
        format!("evil.example:{port}"),
        format!("127.0.0.1.evil.example:{port}"),
        "localhost".to_owned(),
        format!("localhost:{}", port.wrapping_add(1)),
    ];
    for route in ["/", "/workflows", "/local/alerts", "/local/queues/mine"] {
        for host in &foreign {
            let (status, body) = local.send("GET", route, &[("host", host)], None).await;
            assert_eq!(
                (status, body["error"]["code"].as_str()),
                (421, Some("misdirected_request")),
                "{host} on {route}: {body}"
            );
        }
        let (status, body) = local
            .send("GET", route, &[("origin", "https://evil.example")], None)
            .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (403, Some("forbidden")),
            "another origin on {route}: {body}"
        );
        // Another site's <img>: no Origin, but the browser says where it comes from.
        for site in ["cross-site", "same-site"] {
            let (status, body) = local
                .send("GET", route, &[("sec-fetch-site", site)], None)
                .await;
            assert_eq!(status, 403, "{site} on {route}: {body}");
        }
        let (status, body) = local
            .send("GET", route, &[("sec-fetch-site", "same-origin")], None)
            .await;
        assert_eq!(status, 200, "its own page on {route}: {body}");
        let (status, body) = local.send("GET", route, &[], None).await;
        assert_eq!(status, 200, "a program on {route}: {body}");
    }
}
