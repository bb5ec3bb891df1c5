//! Step Functions' own API on `sas-local`'s address, used by the tools a team already
//! has: boto3's `stepfunctions` client (`tests/clients/stepfunctions.py`) and the AWS
//! CLI, pointed at the engine by their endpoint alone. The machines' Lambda function
//! `ask` is a stand-in that keeps the task tokens it is given, for the client to use.

#[path = "common/approval.rs"]
mod approval;
#[path = "common/aws_cli.rs"]
mod aws_cli;
mod common;

use approval::APPROVAL;
use aws_cli::{aws, ended, repository, tool};
use std::process::Command;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::{get, post};
use serde_json::{Value, json};

/// The tokens `ask` was given, by the `kg` asked about.
type Tokens = Arc<Mutex<Vec<(String, String)>>>;

/// Lambda's `Invoke` of `ask`, played: the token kept, an empty answer.
async fn ask(State(tokens): State<Tokens>, event: Bytes) -> &'static str {
    let event: Value = serde_json::from_slice(&event).unwrap_or_default();
    let kg = event["kg"].to_string();
    let token = event["token"].as_str().unwrap_or_default().to_owned();
    tokens.lock().expect("tokens").push((kg, token));
    "null"
}

async fn tokens(State(tokens): State<Tokens>) -> axum::Json<Value> {
    axum::Json(json!(*tokens.lock().expect("tokens")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_and_the_aws_cli_run_state_machines_with_only_the_endpoint_changed() {
    let kept = Tokens::default();
    let lambda = Router::new()
        .route("/2015-03-31/functions/ask/invocations", post(ask))
        .route("/tokens", get(tokens))
        .with_state(Arc::clone(&kept));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let lambda_url = format!("http://{}", listener.local_addr().expect("an address"));
    tokio::spawn(async move { axum::serve(listener, lambda).await });

    let workflows = tempfile::tempdir().expect("a workflows directory");
    std::fs::write(workflows.path().join("approval.asl.json"), APPROVAL).expect("written");
    std::fs::copy(
        repository().join("tests/workflows/greet.asl.json"),
        workflows.path().join("greet.asl.json"),
    )
    .expect("copied");
    let data = tempfile::tempdir().expect("a data directory");
    let variables = [
        (
            "SAS_WORKFLOWS_DIR",
            workflows.path().to_str().expect("a path"),
        ),
        ("AWS_ENDPOINT_URL_LAMBDA", lambda_url.as_str()),
    ];
    let (mut child, api, _) = common::spawn_with(data.path(), &variables);
    let client = Command::new(tool("python"))
        .arg(repository().join("tests/clients/stepfunctions.py"))
        .args(["--endpoint", &api])
        .args(["--tokens", &format!("{lambda_url}/tokens")])
        .output()
        .expect("the client runs");
    let said = String::from_utf8_lossy(&client.stdout);
    assert!(
        client.status.success(),
        "the boto3 client failed:\n{said}\n{}",
        String::from_utf8_lossy(&client.stderr)
    );
    let passed = (said.lines())
        .map(|line| serde_json::from_str::<Value>(line).expect("a JSON line"))
        .filter(|check| check["ok"] == true)
        .count();
    assert_eq!(passed, 86, "every check of the client passed: {said}");
    // The AWS CLI, as a person types it: its output is the execution's description.
    let described = aws(&api, &["describe-execution", "--execution-arn", GREETED]);
    let greet = GREETED
        .replace(":execution:", ":stateMachine:")
        .replace(":greet-1", "");
    let listed = aws(
        &api,
        &[
            "list-executions",
            "--state-machine-arn",
            &greet,
            "--status-filter",
            "SUCCEEDED",
        ],
    );
    // A machine created at run time, its versions and aliases, outlive their process:
    // the same data, started again.
    let _ = child.kill();
    let _ = child.wait();
    let (mut child, api, _) = common::spawn_with(data.path(), &variables);
    let input = r#"{"n": 4}"#;
    let start = [
        "start-execution",
        "--state-machine-arn",
        KEPT,
        "--name",
        "after",
    ];
    aws(&api, &[&start[..], &["--input", input]].concat());
    let after = ended(&api, KEPT_AFTER).await;
    let _ = child.kill();
    let _ = child.wait();

    assert_eq!(described["status"], "SUCCEEDED", "{described:#}");
    assert_eq!(described["name"], "greet-1");
    assert_eq!(described["output"], r#"{"greeting":"HELLO, ANA!"}"#);
    let succeeded: Vec<&str> = (listed["executions"].as_array().expect("executions"))
        .iter()
        .filter_map(|execution| execution["name"].as_str())
        .collect();
    assert!(
        succeeded.contains(&"greet-1") && listed["executions"][0]["status"] == "SUCCEEDED",
        "{listed:#}"
    );
    assert_eq!(after["status"], "SUCCEEDED", "{after:#}");
    assert_eq!(after["output"], "8");
    assert_eq!(
        after["stateMachineVersionArn"],
        "arn:aws:states:us-east-1:000000000000:stateMachine:kept:1"
    );
}

/// The execution the client started first.
const GREETED: &str = "arn:aws:states:us-east-1:000000000000:execution:greet:greet-1";
/// The machine the client created and left, through the alias it gave its first
/// version, and its execution after the restart.
const KEPT: &str = "arn:aws:states:us-east-1:000000000000:stateMachine:kept:live";
const KEPT_AFTER: &str = "arn:aws:states:us-east-1:000000000000:execution:kept:after";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_arns_name_the_region_and_account_the_process_is_given() {
    let data = tempfile::tempdir().expect("a data directory");
    let place = [
        ("AWS_REGION", "eu-west-1"),
        ("SAS_ACCOUNT_ID", "123456789012"),
    ];
    let (mut child, api, _) = common::spawn_with(data.path(), &place);
    let machine = "arn:aws:states:eu-west-1:123456789012:stateMachine:drone-delivery";
    let described = aws(
        &api,
        &["describe-state-machine", "--state-machine-arn", machine],
    );
    let input = r#"{"customer_id": "c-1", "pickup": "a", "dropoff": "b", "weight_kg": 1}"#;
    let start = [
        "start-execution",
        "--state-machine-arn",
        machine,
        "--name",
        "e-1",
    ];
    let started = aws(&api, &[&start[..], &["--input", input]].concat());
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(described["stateMachineArn"], machine);
    assert_eq!(
        described["roleArn"],
        "arn:aws:iam::123456789012:role/drone-delivery"
    );
    assert_eq!(
        started["executionArn"],
        "arn:aws:states:eu-west-1:123456789012:execution:drone-delivery:e-1"
    );
    // An account that is not one is refused at the start, naming the setting.
    let refused = common::command(data.path(), &[("SAS_ACCOUNT_ID", "me")])
        .output()
        .expect("sas-local runs");
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("SAS_ACCOUNT_ID=me"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}
