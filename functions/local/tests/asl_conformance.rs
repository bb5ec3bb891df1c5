//! The conformance cases AWS Step Functions recorded (`../shared/asl-conformance`, read
//! where it lies), run through the engine as a user runs a state machine: each case's
//! definition a file `NAME.asl.json` among `sas-local`'s workflows, its Lambda functions
//! played behind Lambda's `Invoke` API at `AWS_ENDPOINT_URL_LAMBDA`, its execution
//! started with `PUT /tasks/{id}` and read back from `GET /tasks/{id}`. Prints `N
//! passed, M failed`, and for each failure the case and the difference; a definition
//! AWS refused must be refused. (`cargo test -p sas-asl --test conformance` runs the
//! same cases through the language alone, in memory.)

#[path = "../../../shared/asl/tests/conformance/cases.rs"]
mod cases;
mod common;
#[path = "common/ended.rs"]
mod ended;

use ended::ended;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};

use cases::{Case, Verdict};
use sas_domain::workflow::Workflow;

/// The share of the cases that must pass through the engine: what it passes today
/// (every one, Map and Parallel included). It only goes up.
const REQUIRED_PERCENT: f64 = 100.0;

/// The played functions by their names in the running cases (each case's own, so
/// that two cases' functions of one name do not meet).
type Functions = Arc<HashMap<String, Value>>;

/// Lambda's `Invoke`, played as the function's case says ([`cases::played`]).
async fn invoke(
    State(functions): State<Functions>,
    Path(function): Path<String>,
    asked: HeaderMap,
    event: Bytes,
) -> (StatusCode, HeaderMap, Vec<u8>) {
    let mut headers = HeaderMap::new();
    // Lambda takes a function's name or its ARN.
    let name = match function.split(':').collect::<Vec<_>>()[..] {
        ["arn", _, "lambda", _, _, "function", name, ..] => name.to_owned(),
        _ => function,
    };
    let Some(behaviour) = functions.get(&name) else {
        let arn = format!("arn:aws:lambda:us-east-1:000000000000:function:{name}:$LATEST");
        let body = json!({"Type": "User", "message": format!("Function not found: {arn}")});
        for (header, value) in [
            ("x-amzn-ErrorType", "ResourceNotFoundException"),
            ("x-amzn-RequestId", "00000000-0000-4000-8000-000000000002"),
        ] {
            headers.insert(header, HeaderValue::from_static(value));
        }
        let body = body.to_string().into_bytes();
        return (StatusCode::NOT_FOUND, headers, body);
    };
    if asked
        .get("X-Amz-Log-Type")
        .is_some_and(|kind| kind == "Tail")
    {
        // The end of the function's log, in base64: "START ... END".
        headers.insert(
            "X-Amz-Log-Result",
            HeaderValue::from_static("U1RBUlQgLi4uIEVORA=="),
        );
    }
    if let Some(seconds) = behaviour.get("sleeps_seconds").and_then(Value::as_f64) {
        tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    }
    let (payload, function_error) = cases::played(behaviour, &event);
    if let Some(error) = function_error {
        headers.insert("X-Amz-Function-Error", HeaderValue::from_static(error));
    }
    (StatusCode::OK, headers, payload.into_bytes())
}

async fn lambda_stand_in(functions: Functions) -> String {
    let app = Router::new()
        .route("/2015-03-31/functions/{function}/invocations", post(invoke))
        .with_state(functions);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let address = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

/// A case made the engine's own: its functions renamed `c<N>-<name>`, in its
/// definition and input, so that each case calls its own.
struct Prepared {
    case: Case,
    id: String,
    definition: String,
    input: Value,
}

fn prepare(index: usize, case: Case, functions: &mut HashMap<String, Value>) -> Prepared {
    let id = format!("c{index}");
    let mut definition = case.value["definition"].to_string();
    let mut input = case.value["input"].to_string();
    let lambdas = case.lambdas();
    let mut names: Vec<(&String, &Value)> = lambdas.iter().collect();
    // The longest first: no name is replaced inside a longer one.
    names.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    for (name, lambda) in names {
        let own = format!("{id}-{name}");
        definition = definition.replace(name.as_str(), &own);
        input = input.replace(name.as_str(), &own);
        functions.insert(own, lambda["behaviour"].clone());
    }
    Prepared {
        id,
        definition,
        input: serde_json::from_str(&input).expect("the input, renamed"),
        case,
    }
}

/// What the engine reports of an execution, its case's own names given back.
fn outcome(prepared: &Prepared, task: &Value) -> cases::Outcome {
    let text = task.to_string().replace(&format!("{}-", prepared.id), "");
    let task: Value = serde_json::from_str(&text).expect("the task, renamed back");
    let field = |name: &str| task[name].as_str().unwrap_or_default().to_owned();
    match task["status"].as_str() {
        Some("SUCCEEDED") => cases::Outcome::Succeeded(task["output"].clone()),
        Some("TIMED_OUT") => cases::Outcome::TimedOut,
        _ => cases::Outcome::Failed {
            error: field("error"),
            cause: field("cause"),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_recorded_case_runs_through_the_engine_as_aws_ran_it() {
    let all = cases::read_all();
    let mut functions = HashMap::new();
    let mut verdicts: Vec<(String, Verdict)> = Vec::new();
    let mut running = Vec::new();
    let workflows = tempfile::tempdir().expect("a workflows directory");
    for (index, case) in all.into_iter().enumerate() {
        let prepared = prepare(index, case, &mut functions);
        let name = prepared.case.name().to_owned();
        let loaded = Workflow::parse(&format!("{}.asl.json", prepared.id), &prepared.definition);
        match (prepared.case.status(), loaded) {
            ("INVALID_DEFINITION", Err(_)) => verdicts.push((name, Verdict::Pass)),
            ("INVALID_DEFINITION", Ok(_)) => {
                verdicts.push((
                    name,
                    Verdict::Fail("accepted a definition AWS refused".into()),
                ));
            }
            (_, Err(refusal)) => {
                verdicts.push((name, Verdict::Fail(format!("refused: {refusal}"))))
            }
            (_, Ok(_)) => {
                let file = workflows.path().join(format!("{}.asl.json", prepared.id));
                std::fs::write(file, &prepared.definition).expect("written");
                running.push(prepared);
            }
        }
    }
    let lambda = lambda_stand_in(Arc::new(functions)).await;
    let data = tempfile::tempdir().expect("a data directory");
    let workflows_dir = workflows.path().to_str().expect("a path").to_owned();
    let (mut child, api, _) = common::spawn_with(
        data.path(),
        &[
            ("SAS_WORKFLOWS_DIR", workflows_dir.as_str()),
            ("AWS_ENDPOINT_URL_LAMBDA", lambda.as_str()),
        ],
    );
    let http = reqwest::Client::new();
    for prepared in &running {
        let submitted = http
            .put(format!("{api}/tasks/{}", prepared.id))
            .json(&json!({"workflow": prepared.id, "input": prepared.input}))
            .send()
            .await
            .expect("submitted");
        assert!(
            submitted.status().is_success(),
            "{}: {}",
            prepared.id,
            submitted.text().await.unwrap_or_default()
        );
    }
    for prepared in &running {
        let task = ended(&http, &api, &prepared.id).await;
        let verdict = prepared.case.judge(&outcome(prepared, &task));
        verdicts.push((prepared.case.name().to_owned(), verdict));
    }
    let _ = child.kill();
    let _ = child.wait();
    let percent = cases::report(&verdicts);
    assert!(
        percent >= REQUIRED_PERCENT,
        "{percent:.1}% of the cases passed through the engine, below the {REQUIRED_PERCENT}% required"
    );
}
