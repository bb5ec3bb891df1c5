//! Step Functions' own API on `sas-local`'s address, used by the tools a team already
//! has: boto3's `stepfunctions` client (`tests/clients/stepfunctions.py`) and the AWS
//! CLI, pointed at the engine by their endpoint alone. The machines' Lambda function
//! `ask` is a stand-in that keeps the task tokens it is given, for the client to use.

#[path = "common/approval.rs"]
mod approval;
mod common;

use approval::APPROVAL;
use std::path::{Path, PathBuf};
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

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A tool of the repository's `.venv` (`./tests/run` installs them from
/// `tests/requirements.txt`), or `$SAS_PYTHON`'s beside it.
fn tool(name: &str) -> PathBuf {
    let bin = std::env::var("SAS_PYTHON").map_or_else(
        |_| repository().join(".venv/bin"),
        |python| Path::new(&python).with_file_name(""),
    );
    let tool = bin.join(name);
    assert!(
        tool.exists(),
        "no {} : run ./tests/run, which installs boto3 and the AWS CLI into .venv, or \
         `.venv/bin/pip install -r tests/requirements.txt`, or set SAS_PYTHON",
        tool.display()
    );
    tool
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
    assert_eq!(passed, 85, "every check of the client passed: {said}");
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
    let after = loop {
        let after = aws(&api, &["describe-execution", "--execution-arn", KEPT_AFTER]);
        if after["status"] != "RUNNING" {
            break after;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
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

/// `aws stepfunctions` with `arguments` against `api`, as a person runs it: what it
/// prints, read as JSON (`null` where it prints nothing). The `sync-` host prefix of
/// `StartSyncExecution` and `TestState` is turned off, as at any address.
fn aws(api: &str, arguments: &[&str]) -> Value {
    let ran = Command::new(tool("aws"))
        .args(["stepfunctions", "--endpoint-url", api])
        .args(arguments)
        .env("AWS_ACCESS_KEY_ID", "any")
        .env("AWS_SECRET_ACCESS_KEY", "any")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_DISABLE_HOST_PREFIX_INJECTION", "true")
        .output()
        .expect("the AWS CLI runs");
    assert!(
        ran.status.success(),
        "aws stepfunctions {arguments:?}: {}",
        String::from_utf8_lossy(&ran.stderr)
    );
    if ran.stdout.iter().all(u8::is_ascii_whitespace) {
        return Value::Null;
    }
    serde_json::from_slice(&ran.stdout).expect("the CLI prints JSON")
}

/// The execution `arn` once it has ended, as `describe-execution` prints it.
async fn ended(api: &str, arn: &str) -> Value {
    for _ in 0..200 {
        let described = aws(api, &["describe-execution", "--execution-arn", arn]);
        if described["status"] != "RUNNING" {
            return described;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{arn} did not end");
}

/// Every operation of the API through the AWS CLI, as a person types it, each
/// checked by what it prints: machines, versions, aliases and tags; executions
/// started, listed, read, stopped and redriven; an activity's worker; a state tested.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_cli_drives_every_operation_through_its_output() {
    let workflows = tempfile::tempdir().expect("a workflows directory");
    std::fs::copy(
        repository().join("tests/workflows/greet.asl.json"),
        workflows.path().join("greet.asl.json"),
    )
    .expect("copied");
    let data = tempfile::tempdir().expect("a data directory");
    let directory = [(
        "SAS_WORKFLOWS_DIR",
        workflows.path().to_str().expect("a path"),
    )];
    let (mut child, api, _) = common::spawn_with(data.path(), &directory);
    let api = api.as_str();
    let arn =
        |kind: &str, name: &str| format!("arn:aws:states:us-east-1:000000000000:{kind}:{name}");
    let said = |text: &str| {
        json!({"StartAt": "Say", "States": {"Say": {"Type": "Pass", "Result": text, "End": true}}})
            .to_string()
    };
    let (greet, machine) = (arn("stateMachine", "greet"), arn("stateMachine", "cli"));

    let listed = aws(api, &["list-state-machines"]);
    assert!(
        listed["stateMachines"]
            .as_array()
            .expect("machines")
            .iter()
            .any(|m| m["name"] == "greet")
    );
    let described = aws(
        api,
        &["describe-state-machine", "--state-machine-arn", &greet],
    );
    let definition = described["definition"].as_str().expect("a definition");
    let valid = aws(
        api,
        &[
            "validate-state-machine-definition",
            "--definition",
            definition,
        ],
    );
    assert_eq!(valid["result"], "OK");

    // A machine, two versions, an alias moved from one to the other, tags.
    let create = [
        "create-state-machine",
        "--name",
        "cli",
        "--role-arn",
        "r",
        "--publish",
    ];
    let made = aws(
        api,
        &[&create[..], &["--definition", &said("one")]].concat(),
    );
    assert_eq!(made["stateMachineVersionArn"], format!("{machine}:1"));
    let update = [
        "update-state-machine",
        "--state-machine-arn",
        &machine,
        "--publish",
    ];
    let updated = aws(
        api,
        &[&update[..], &["--definition", &said("two")]].concat(),
    );
    assert_eq!(updated["stateMachineVersionArn"], format!("{machine}:2"));
    let published = aws(
        api,
        &[
            "publish-state-machine-version",
            "--state-machine-arn",
            &machine,
        ],
    );
    assert_eq!(
        published["stateMachineVersionArn"],
        format!("{machine}:2"),
        "the same revision"
    );
    let versions = aws(
        api,
        &[
            "list-state-machine-versions",
            "--state-machine-arn",
            &machine,
        ],
    );
    assert_eq!(
        versions["stateMachineVersions"].as_array().map(Vec::len),
        Some(2)
    );
    let route = |version: u32| {
        json!([{"stateMachineVersionArn": format!("{machine}:{version}"), "weight": 100}])
            .to_string()
    };
    let alias = aws(
        api,
        &[
            "create-state-machine-alias",
            "--name",
            "live",
            "--routing-configuration",
            &route(1),
        ],
    );
    let alias_arn = alias["stateMachineAliasArn"]
        .as_str()
        .expect("an alias")
        .to_owned();
    aws(
        api,
        &[
            "update-state-machine-alias",
            "--state-machine-alias-arn",
            &alias_arn,
            "--routing-configuration",
            &route(2),
        ],
    );
    let routed = aws(
        api,
        &[
            "describe-state-machine-alias",
            "--state-machine-alias-arn",
            &alias_arn,
        ],
    );
    assert_eq!(
        routed["routingConfiguration"][0]["stateMachineVersionArn"],
        format!("{machine}:2")
    );
    let aliases = aws(
        api,
        &[
            "list-state-machine-aliases",
            "--state-machine-arn",
            &machine,
        ],
    );
    assert_eq!(
        aliases["stateMachineAliases"][0]["stateMachineAliasArn"],
        alias_arn
    );
    aws(
        api,
        &[
            "tag-resource",
            "--resource-arn",
            &machine,
            "--tags",
            r#"[{"key": "team", "value": "drones"}]"#,
        ],
    );
    let tags = aws(api, &["list-tags-for-resource", "--resource-arn", &machine]);
    assert_eq!(tags["tags"], json!([{"key": "team", "value": "drones"}]));
    aws(
        api,
        &[
            "untag-resource",
            "--resource-arn",
            &machine,
            "--tag-keys",
            "team",
        ],
    );
    let tags = aws(api, &["list-tags-for-resource", "--resource-arn", &machine]);
    assert_eq!(tags["tags"], json!([]));

    // Executions: through the alias, synchronously, listed, their histories.
    let started = aws(
        api,
        &[
            "start-execution",
            "--state-machine-arn",
            &alias_arn,
            "--name",
            "run-1",
        ],
    );
    let run = started["executionArn"]
        .as_str()
        .expect("an execution")
        .to_owned();
    let done = ended(api, &run).await;
    assert_eq!(
        (&done["output"], &done["stateMachineAliasArn"]),
        (&json!("\"two\""), &json!(alias_arn))
    );
    let ran = aws(
        api,
        &[
            "describe-state-machine-for-execution",
            "--execution-arn",
            &run,
        ],
    );
    assert_eq!(ran["definition"], said("two"));
    let synced = aws(
        api,
        &[
            "start-sync-execution",
            "--state-machine-arn",
            &greet,
            "--input",
            r#"{"name": "cy"}"#,
        ],
    );
    assert_eq!(synced["output"], r#"{"greeting":"HELLO, CY!"}"#);
    let runs = aws(api, &["list-executions", "--state-machine-arn", &machine]);
    assert_eq!(runs["executions"][0]["name"], "run-1");
    let history = aws(
        api,
        &[
            "get-execution-history",
            "--execution-arn",
            &run,
            "--reverse-order",
        ],
    );
    assert_eq!(history["events"][0]["type"], "ExecutionSucceeded");

    // A failed execution redriven; an activity's worker ends one, another is stopped.
    let nameless = aws(
        api,
        &[
            "start-execution",
            "--state-machine-arn",
            &greet,
            "--name",
            "nobody",
        ],
    );
    let nameless = nameless["executionArn"]
        .as_str()
        .expect("an execution")
        .to_owned();
    assert_eq!(ended(api, &nameless).await["status"], "FAILED");
    let redriven = aws(api, &["redrive-execution", "--execution-arn", &nameless]);
    assert!(redriven["redriveDate"].is_number(), "{redriven}");
    assert_eq!(ended(api, &nameless).await["redriveCount"], 1);
    let activity = aws(api, &["create-activity", "--name", "cli-work"]);
    let activity = activity["activityArn"]
        .as_str()
        .expect("an activity")
        .to_owned();
    assert_eq!(
        aws(api, &["describe-activity", "--activity-arn", &activity])["name"],
        "cli-work"
    );
    let activities = aws(api, &["list-activities"]);
    assert_eq!(activities["activities"][0]["activityArn"], activity);
    let worked = json!({"StartAt": "Work", "States": {"Work": {"Type": "Task", "Resource": activity, "End": true}}});
    aws(
        api,
        &[
            "create-state-machine",
            "--name",
            "worked",
            "--role-arn",
            "r",
            "--definition",
            &worked.to_string(),
        ],
    );
    let worked = arn("stateMachine", "worked");
    let mut ends = Vec::new();
    for (name, how) in [("w-1", "success"), ("w-2", "failure"), ("w-3", "stop")] {
        let started = aws(
            api,
            &[
                "start-execution",
                "--state-machine-arn",
                &worked,
                "--name",
                name,
            ],
        );
        let execution = started["executionArn"]
            .as_str()
            .expect("an execution")
            .to_owned();
        let given = aws(
            api,
            &[
                "get-activity-task",
                "--activity-arn",
                &activity,
                "--worker-name",
                "cli",
            ],
        );
        let token = given["taskToken"].as_str().expect("a task").to_owned();
        aws(api, &["send-task-heartbeat", "--task-token", &token]);
        match how {
            "success" => aws(
                api,
                &[
                    "send-task-success",
                    "--task-token",
                    &token,
                    "--task-output",
                    r#"{"done": true}"#,
                ],
            ),
            "failure" => aws(
                api,
                &[
                    "send-task-failure",
                    "--task-token",
                    &token,
                    "--error",
                    "Refused",
                    "--cause",
                    "by cli",
                ],
            ),
            _ => aws(
                api,
                &[
                    "stop-execution",
                    "--execution-arn",
                    &execution,
                    "--error",
                    "Withdrawn",
                    "--cause",
                    "by cli",
                ],
            ),
        };
        let done = ended(api, &execution).await;
        ends.push((done["status"].clone(), done["error"].clone()));
    }
    assert_eq!(
        ends,
        [
            (json!("SUCCEEDED"), Value::Null),
            (json!("FAILED"), json!("Refused")),
            (json!("ABORTED"), json!("Withdrawn")),
        ]
    );

    // A state tested with its answer mocked.
    let task = json!({"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "End": true,
                      "Parameters": {"FunctionName": "price"}, "ResultSelector": {"price.$": "$.Payload.price"}});
    let mock = json!({"result": r#"{"Payload": {"price": 12}}"#}).to_string();
    let tested = aws(
        api,
        &[
            "test-state",
            "--definition",
            &task.to_string(),
            "--mock",
            &mock,
        ],
    );
    assert_eq!(
        (&tested["status"], &tested["output"]),
        (&json!("SUCCEEDED"), &json!(r#"{"price":12}"#))
    );

    // And each removed.
    aws(api, &["delete-activity", "--activity-arn", &activity]);
    aws(
        api,
        &[
            "delete-state-machine-alias",
            "--state-machine-alias-arn",
            &alias_arn,
        ],
    );
    aws(
        api,
        &[
            "delete-state-machine-version",
            "--state-machine-version-arn",
            &format!("{machine}:1"),
        ],
    );
    aws(
        api,
        &["delete-state-machine", "--state-machine-arn", &machine],
    );
    let listed = aws(api, &["list-state-machines"]);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !listed["stateMachines"]
            .as_array()
            .expect("machines")
            .iter()
            .any(|m| m["name"] == "cli")
    );
}

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
