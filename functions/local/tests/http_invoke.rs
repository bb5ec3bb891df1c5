//! A state machine's `http:invoke` Tasks run by `sas-local`: each endpoint a URL of a
//! service the process names (`SAS_SERVICES`), its answer the Task's result, a status
//! outside 2xx its error (`States.Http.StatusCode.NNN`), and an endpoint of no service
//! refused.

mod common;
#[path = "common/ended.rs"]
mod ended;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use serde_json::{Value, json};

const CALLS: &str = r#"{
  "StartAt": "Read",
  "States": {
    "Read": {"Type": "Task", "Resource": "arn:aws:states:::http:invoke",
             "Parameters": {"ApiEndpoint.$": "States.Format('{}/v1/orders/{}', $.base, $.id)",
                            "Method": "GET", "Headers": {"x-trace": "t-1"},
                            "Authentication": {"ConnectionArn": "arn:aws:events:us-east-1:000000000000:connection/orders/1"}},
             "ResultSelector": {"order.$": "$.ResponseBody", "status.$": "$.StatusCode"},
             "ResultPath": "$.read", "Next": "Pay"},
    "Pay": {"Type": "Task", "Resource": "arn:aws:states:::http:invoke",
            "Parameters": {"ApiEndpoint.$": "States.Format('{}/v1/payments', $.base)", "Method": "POST",
                           "RequestBody": {"id.$": "$.id"}},
            "Catch": [{"ErrorEquals": ["States.Http.StatusCode.402"], "ResultPath": "$.unpaid", "Next": "Elsewhere"}],
            "Next": "Elsewhere"},
    "Elsewhere": {"Type": "Task", "Resource": "arn:aws:states:::http:invoke",
                  "Parameters": {"ApiEndpoint": "http://127.0.0.1:9/not-a-service", "Method": "GET"},
                  "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.kept_out", "Next": "Done"}],
                  "End": true},
    "Done": {"Type": "Succeed"}
  }
}"#;

async fn order(Path(id): Path<String>, headers: HeaderMap) -> axum::Json<Value> {
    let trace = headers
        .get("x-trace")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    axum::Json(json!({"id": id, "trace": trace}))
}

async fn payment() -> (StatusCode, &'static str) {
    (StatusCode::PAYMENT_REQUIRED, "card declined")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_machine_calls_its_services_with_http_invoke() {
    let app = Router::new()
        .route("/v1/orders/{id}", get(order))
        .route("/v1/payments", post(payment));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let base = format!("http://{}", listener.local_addr().expect("an address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let workflows = tempfile::tempdir().expect("a workflows directory");
    std::fs::write(workflows.path().join("calls.asl.json"), CALLS).expect("written");
    let data = tempfile::tempdir().expect("a data directory");
    let services = json!({"orders": format!("{base}/v1")}).to_string();
    let workflows_dir = workflows.path().to_str().expect("a path");
    let (mut server, api, _) = common::spawn_with(
        data.path(),
        &[
            ("SAS_WORKFLOWS_DIR", workflows_dir),
            ("SAS_SERVICES", &services),
        ],
    );
    let http = reqwest::Client::new();
    let created = http
        .put(format!("{api}/tasks/c-1"))
        .json(&json!({"workflow": "calls", "input": {"base": base, "id": "o-1"}}))
        .send()
        .await
        .expect("submitted");
    assert!(created.status().is_success());
    let task = ended::ended(&http, &api, "c-1").await;
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(task["status"], "SUCCEEDED", "{task:#}");
    let output = &task["output"];
    assert_eq!(
        output["read"],
        json!({"order": {"id": "o-1", "trace": "t-1"}, "status": "200"})
    );
    assert_eq!(output["unpaid"]["Error"], "States.Http.StatusCode.402");
    let cause: Value =
        serde_json::from_str(output["unpaid"]["Cause"].as_str().expect("a cause")).expect("JSON");
    assert_eq!(cause["ResponseBody"], "card declined");
    assert_eq!(
        output["kept_out"]["Error"], "States.Permissions",
        "{output:#}"
    );
}
