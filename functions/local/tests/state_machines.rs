//! A Step Functions state machine run by `sas-local` as a user runs one: a file
//! `NAME.asl.json` among the workflows, Lambda at `AWS_ENDPOINT_URL_LAMBDA` (here a
//! stand-in speaking Lambda's `Invoke` API), a task started with `PUT /tasks/{id}` and
//! read back with its execution's status, output, error and cause.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::routing::post;
use serde_json::{Value, json};

/// A loop: a Choice sends the count to `count-up` until it reaches 3, through both
/// ways of calling Lambda; then `fails` is called, retried once, and caught.
const LOOP: &str = r#"{
  "Comment": "counts to three through Lambda, then is caught failing",
  "StartAt": "Start",
  "States": {
    "Start": {"Type": "Pass", "Result": {"count": 0}, "Next": "More?"},
    "More?": {"Type": "Choice", "Choices": [
      {"Variable": "$.count", "NumericLessThan": 3, "Next": "Count"}
    ], "Default": "Fail"},
    "Count": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:000000000000:function:count-up",
              "Next": "Again"},
    "Again": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
              "Parameters": {"FunctionName": "identity", "Payload.$": "$"},
              "OutputPath": "$.Payload", "Next": "More?"},
    "Fail": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
             "Parameters": {"FunctionName": "fails", "Payload": {}},
             "Retry": [{"ErrorEquals": ["Boom"], "MaxAttempts": 1, "IntervalSeconds": 1}],
             "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.caught", "Next": "Done"}],
             "End": true},
    "Done": {"Type": "Pass", "End": true}
  }
}"#;

/// A state machine that fails: its Fail state's error and cause are the task's.
const REFUSED: &str = r#"{
  "QueryLanguage": "JSONata",
  "StartAt": "No",
  "States": {"No": {"Type": "Fail", "Error": "Refused", "Cause": "{% 'too heavy: ' & $states.input.kg %}"}}
}"#;

/// A person's approval: `ask` is given the task token, and the state waits for its
/// use (`POST /callbacks/{token}`), whose output or error is the state's.
const APPROVAL: &str = r#"{
  "StartAt": "Ask",
  "States": {
    "Ask": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
            "Parameters": {"FunctionName": "ask", "Payload": {"token.$": "$$.Task.Token", "kg.$": "$.kg"}},
            "TimeoutSeconds": 600, "ResultPath": "$.approval", "End": true}
  }
}"#;

#[derive(Default)]
struct Calls {
    by_function: std::sync::Mutex<Vec<String>>,
    fails: AtomicUsize,
    /// The task tokens `ask` was given, by the `kg` asked about.
    tokens: std::sync::Mutex<Vec<(i64, String)>>,
}

/// Lambda's `Invoke`, played: `count-up` adds one to `count`, `identity` answers its
/// event, `fails` fails with a `Boom`.
async fn invoke(
    State(calls): State<Arc<Calls>>,
    Path(function): Path<String>,
    event: Bytes,
) -> (HeaderMap, Vec<u8>) {
    calls
        .by_function
        .lock()
        .expect("calls")
        .push(function.clone());
    let mut headers = HeaderMap::new();
    let event: Value = serde_json::from_slice(&event).unwrap_or(json!({}));
    if function == "ask" {
        let token = event["token"].as_str().unwrap_or_default().to_owned();
        let kg = event["kg"].as_i64().unwrap_or_default();
        calls.tokens.lock().expect("tokens").push((kg, token));
    }
    let body = match function.as_str() {
        "count-up" => json!({"count": event["count"].as_i64().unwrap_or(0) + 1}),
        "fails" => {
            calls.fails.fetch_add(1, Ordering::SeqCst);
            headers.insert(
                "X-Amz-Function-Error",
                HeaderValue::from_static("Unhandled"),
            );
            json!({"errorMessage": "it broke", "errorType": "Boom"})
        }
        _ => event,
    };
    (headers, body.to_string().into_bytes())
}

async fn lambda_stand_in() -> (String, Arc<Calls>) {
    let calls = Arc::new(Calls::default());
    let app = Router::new()
        .route("/2015-03-31/functions/{function}/invocations", post(invoke))
        .with_state(Arc::clone(&calls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let address = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), calls)
}

async fn ended(http: &reqwest::Client, api: &str, id: &str) -> Value {
    let mut task = Value::Null;
    for _ in 0..300 {
        task = http
            .get(format!("{api}/tasks/{id}"))
            .send()
            .await
            .expect("read")
            .json()
            .await
            .expect("json");
        if matches!(task["state"].as_str(), Some("Processed" | "Error")) {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("task {id} did not end: {task:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_machine_runs_its_loop_through_lambda_and_reports_as_step_functions_does() {
    let (lambda, calls) = lambda_stand_in().await;
    let workflows = tempfile::tempdir().expect("a workflows directory");
    std::fs::write(workflows.path().join("count.asl.json"), LOOP).expect("written");
    std::fs::write(workflows.path().join("refused.asl.json"), REFUSED).expect("written");
    std::fs::write(workflows.path().join("approval.asl.json"), APPROVAL).expect("written");
    let data = tempfile::tempdir().expect("a data directory");
    let workflows_dir = workflows.path().to_str().expect("a path");
    let (mut child, api, _) = common::spawn_with(
        data.path(),
        &[
            ("SAS_WORKFLOWS_DIR", workflows_dir),
            ("AWS_ENDPOINT_URL_LAMBDA", &lambda),
        ],
    );
    let http = reqwest::Client::new();
    let put = |id: &str, workflow: &str, input: Value| {
        http.put(format!("{api}/tasks/{id}"))
            .json(&json!({"workflow": workflow, "input": input}))
            .send()
    };
    let created = put("loop-1", "count", json!({})).await.expect("submitted");
    assert!(
        created.status().is_success(),
        "{}",
        created.text().await.unwrap_or_default()
    );
    let refused = put("heavy-1", "refused", json!({"kg": 30}))
        .await
        .expect("submitted");
    assert!(refused.status().is_success());
    for (id, kg) in [("light-1", 2), ("heavy-2", 40)] {
        let asked = put(id, "approval", json!({"kg": kg}))
            .await
            .expect("submitted");
        assert!(asked.status().is_success());
    }
    // Each waits with its token given to `ask`; a person answers one and refuses the
    // other through the project's callbacks.
    let tokens = loop {
        let tokens = calls.tokens.lock().expect("tokens").clone();
        if tokens.len() == 2 {
            break tokens;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for (kg, token) in tokens {
        let answer = if kg < 10 {
            json!({"output": {"approved_by": "ana"}})
        } else {
            json!({"error": "TooHeavy"})
        };
        let used = http
            .post(format!("{api}/callbacks/{token}"))
            .json(&answer)
            .send()
            .await
            .expect("used");
        assert!(
            used.status().is_success(),
            "{}",
            used.text().await.unwrap_or_default()
        );
    }
    let light = ended(&http, &api, "light-1").await;
    let heavier = ended(&http, &api, "heavy-2").await;

    let task = ended(&http, &api, "loop-1").await;
    let heavy = ended(&http, &api, "heavy-1").await;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(task["state"], "Processed", "{task:#}");
    assert_eq!(task["status"], "SUCCEEDED");
    assert_eq!(task["output"]["count"], 3);
    assert_eq!(task["output"]["caught"]["Error"], "Boom");
    let cause: Value =
        serde_json::from_str(task["output"]["caught"]["Cause"].as_str().expect("a cause"))
            .expect("the function's error, as JSON");
    assert_eq!(cause["errorMessage"], "it broke");
    let functions: Vec<String> = (calls.by_function.lock().expect("calls").iter())
        .filter(|function| *function != "ask")
        .cloned()
        .collect();
    assert_eq!(
        functions,
        [
            "count-up", "identity", "count-up", "identity", "count-up", "identity", "fails",
            "fails"
        ],
        "each visit of the loop called once; the failing call retried once"
    );

    assert_eq!(heavy["state"], "Error");
    assert_eq!(heavy["status"], "FAILED");
    assert_eq!(heavy["error"], "Refused");
    assert_eq!(heavy["cause"], "too heavy: 30");

    assert_eq!(light["status"], "SUCCEEDED", "{light:#}");
    assert_eq!(
        light["output"],
        json!({"kg": 2, "approval": {"approved_by": "ana"}})
    );
    assert_eq!(heavier["status"], "FAILED", "{heavier:#}");
    assert_eq!(heavier["error"], "TooHeavy");
}
