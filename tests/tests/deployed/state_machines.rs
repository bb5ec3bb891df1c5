//! Step Functions state machines on the deployed stack: what a machine's Tasks call
//! (a function, a queue, a table), where a distributed Map reads its items and writes
//! its results (S3 objects), each allowed by what the deployment names alone.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use sas_tests::aws::Remote;
use sas_tests::ministack::Deployment;
use serde_json::{Value, json};

use super::{create_queue, create_table, put_task, wait_for_task};

/// A function's code for Lambda's `provided.al2023` runtime: a shell script that takes
/// each event from the Runtime API and answers `{"echoed": <event>}`, zipped.
fn echo_function_zip() -> Vec<u8> {
    const BOOTSTRAP: &str = r#"#!/bin/sh
set -eu
api="http://${AWS_LAMBDA_RUNTIME_API}/2018-06-01/runtime/invocation"
while true; do
  headers=$(mktemp)
  event=$(curl -sS -D "$headers" "$api/next")
  id=$(grep -i '^lambda-runtime-aws-request-id:' "$headers" | tr -d '\r' | cut -d' ' -f2)
  rm -f "$headers"
  curl -sS -X POST "$api/$id/response" -d "{\"echoed\": $event}" > /dev/null
done
"#;
    let directory = tempfile::tempdir().expect("a directory");
    let zip = directory.path().join("function.zip");
    let written = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile\n\
             with zipfile.ZipFile(sys.argv[1], 'w') as z:\n\
             \x20   info = zipfile.ZipInfo('bootstrap')\n\
             \x20   info.external_attr = 0o755 << 16\n\
             \x20   z.writestr(info, sys.argv[2])",
        ])
        .arg(&zip)
        .arg(BOOTSTRAP)
        .status()
        .expect("python3, to zip the function");
    assert!(written.success(), "the function not zipped");
    std::fs::read(zip).expect("the zip")
}

/// A Step Functions state machine of the deployment (tests/workflows/task-calls.asl.json)
/// invokes a real function deployed on the emulator, sends its task token to a queue
/// and waits for its use through the deployed API, and writes to a table: each what
/// the stack lets its agents call (`LambdaFunctionArns`, `StateMachineQueueArns`,
/// `StateMachineTableArns`). A function and a table it does not name are refused, IAM
/// enforced: each refusal is the Task's error, which its Catch takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_machine_calls_what_its_deployment_names_and_nothing_else() {
    let remote = Remote::start(true).await;
    let stack = Deployment::with_services_and(
        &remote,
        &[
            ("AuthMode", "NONE"),
            (
                "LambdaFunctionArns",
                "arn:aws:lambda:us-east-1:*:function:sas-greeter",
            ),
            ("StateMachineQueueArns", "arn:aws:sqs:us-east-1:*:sas-asks"),
            (
                "StateMachineTableArns",
                "arn:aws:dynamodb:us-east-1:*:table/sas-approvals",
            ),
            ("StateMachineObjectArns", "arn:aws:s3:::sas-parcels/in/*"),
            (
                "StateMachineResultArns",
                "arn:aws:s3:::sas-parcels/weighed/*",
            ),
            ("StateMachineBucketArns", "arn:aws:s3:::sas-parcels"),
        ],
    )
    .await;
    // Started first: its 300 children run while the rest goes on.
    parcels_started(&stack).await;
    let lambda = aws_sdk_lambda::Client::new(&stack.sdk);
    let code = echo_function_zip();
    // A role that exists: one of the stack's functions' (the echo calls nothing).
    let listed = lambda.list_functions().send().await.expect("the functions");
    let role = listed
        .functions()
        .iter()
        .find_map(|function| function.role())
        .expect("a function of the stack, with its role")
        .to_owned();
    for name in ["sas-greeter", "sas-other"] {
        lambda
            .create_function()
            .function_name(name)
            .runtime(aws_sdk_lambda::types::Runtime::Providedal2023)
            .handler("bootstrap")
            .role(&role)
            .code(
                aws_sdk_lambda::types::FunctionCode::builder()
                    .zip_file(aws_sdk_lambda::primitives::Blob::new(code.clone()))
                    .build(),
            )
            .send()
            .await
            .unwrap_or_else(|error| panic!("{name} not created: {error:?}"));
    }
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let asks = create_queue(&sqs, "sas-asks").await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&stack.sdk);
    for table in ["sas-approvals", "sas-elsewhere"] {
        create_table(&dynamodb, table, "name").await;
    }
    let calls = json!({"workflow": "task-calls", "input": {"name": "Ada", "asks": asks}});
    put_task(&stack, "calls-1", &calls).await;
    // The approval is asked over SQS with the state's task token, and given through the
    // deployed API.
    let asked = loop {
        let received = sqs
            .receive_message()
            .queue_url(&asks)
            .wait_time_seconds(5)
            .send()
            .await
            .expect("received");
        if let Some(message) = received.messages.unwrap_or_default().pop() {
            break message;
        }
    };
    let asked: Value =
        serde_json::from_str(asked.body().expect("a body")).expect("the body as JSON");
    assert_eq!(asked["name"], "Ada");
    let token = asked["token"].as_str().expect("the task token");
    let approval = json!({"output": {"by": "ana"}});
    let used = stack
        .call(
            "POST",
            &format!("/callbacks/{token}"),
            Some(&approval),
            false,
        )
        .await;
    assert_eq!(used.status, 200, "{}", used.body);
    let task = wait_for_task(
        &stack,
        "calls-1",
        "Processed",
        Duration::from_secs(90),
        |t| t["state"] == "Processed" || t["state"] == "Error",
    )
    .await;
    let output = &task["output"];
    assert_eq!(task["status"], "SUCCEEDED", "{task:#}");
    assert_eq!(
        output["greeter"],
        json!({"said": {"echoed": {"name": "Ada"}}}),
        "{task:#}"
    );
    assert_eq!(
        output["refused"]["Error"], "Lambda.AccessDeniedException",
        "the function the deployment does not name is refused: {task:#}"
    );
    assert_eq!(output["approval"], json!({"by": "ana"}), "{task:#}");
    assert_eq!(output["recorded"], json!({"status": 200}), "{task:#}");
    let stored = dynamodb
        .get_item()
        .table_name("sas-approvals")
        .key("name", AttributeValue::S("Ada".to_owned()))
        .send()
        .await
        .expect("read");
    assert_eq!(
        stored.item().and_then(|item| item.get("by")),
        Some(&AttributeValue::S("ana".to_owned()))
    );
    assert_eq!(
        output["kept_out"]["Error"], "DynamoDB.AccessDeniedException",
        "the table the deployment does not name is refused: {task:#}"
    );
    parcels_read(&stack).await;
}

/// A distributed Map (tests/workflows/parcels.asl.json) is to read 300 parcels from
/// an object in the emulator's S3 and write their weights back; another reads an
/// object the deployment does not name, a third writes where it does not: all put,
/// all started.
async fn parcels_started(stack: &Deployment) {
    let lines: Vec<String> = (0..300)
        .map(|at| json!({"id": format!("p-{at}")}).to_string())
        .collect();
    let day = lines.join("\n");
    for key in ["in/today.jsonl", "out/today.jsonl"] {
        stack.put_object("sas-parcels", key, day.as_bytes()).await;
    }
    stack
        .put_object(
            "sas-parcels",
            "in/few.jsonl",
            lines[..3].join("\n").as_bytes(),
        )
        .await;
    stack
        .put_object("sas-elsewhere", "in/one.json", b"{}")
        .await;
    for (id, bucket) in [("listed-1", "sas-parcels"), ("listed-2", "sas-elsewhere")] {
        let input = json!({"bucket": bucket, "prefix": "in/"});
        let listed = json!({"workflow": "listed-parcels", "input": input});
        put_task(stack, id, &listed).await;
    }
    for (id, key, results) in [
        ("parcels-1", "in/today.jsonl", "weighed"),
        ("parcels-2", "out/today.jsonl", "weighed"),
        ("parcels-3", "in/few.jsonl", "elsewhere"),
    ] {
        let input = json!({"key": key, "results": results});
        put_task(stack, id, &json!({"workflow": "parcels", "input": input})).await;
    }
}

/// The Map read its 300 parcels, a child task each, under `StateMachineObjectArns`
/// (`sas-parcels/in/*`), and wrote their weights under `StateMachineResultArns`
/// (`sas-parcels/weighed/*`): its output names the manifest, which names the file of
/// results. The object outside the first was refused, as was the place outside the
/// second, IAM enforced, each caught as its reader's or writer's failure. A listing of
/// the bucket `StateMachineBucketArns` names gave its objects; another's was refused.
async fn parcels_read(stack: &Deployment) {
    let ended = |t: &Value| t["state"] == "Processed" || t["state"] == "Error";
    let read = wait_for_task(
        stack,
        "parcels-1",
        "Processed",
        Duration::from_secs(300),
        ended,
    )
    .await;
    assert_eq!(read["status"], "SUCCEEDED", "{read:#}");
    let details = &read["output"]["weighed"]["ResultWriterDetails"];
    let manifest_key = details["Key"].as_str().unwrap_or_default();
    assert!(
        details["Bucket"] == "sas-parcels" && manifest_key.starts_with("weighed/"),
        "{read:#}"
    );
    let manifest: Value =
        serde_json::from_str(&stack.s3_get(&format!("/sas-parcels/{manifest_key}")).await)
            .expect("the manifest");
    assert_eq!(
        manifest["MapRunArn"],
        read["output"]["weighed"]["MapRunArn"]
    );
    let file = manifest["ResultFiles"]["SUCCEEDED"][0]["Key"]
        .as_str()
        .unwrap_or_default();
    let weights = stack.s3_get(&format!("/sas-parcels/{file}")).await;
    let weights: Vec<Value> = (weights.lines())
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    assert_eq!(weights.len(), 300);
    assert_eq!(weights[299], json!({"id": "p-299", "kg": 300}));

    let ended_as = async |id: &str, field: &str, error: &str| {
        let task = wait_for_task(stack, id, "Processed", Duration::from_secs(90), ended).await;
        let caught = &task["output"][field];
        assert_eq!(caught["Error"], error, "{task:#}");
        assert!(
            caught["Cause"]
                .as_str()
                .is_some_and(|cause| cause.contains("S3.AccessDenied")),
            "what the deployment does not name is refused: {task:#}"
        );
    };
    ended_as("parcels-2", "unread", "States.ItemReaderFailed").await;
    ended_as("listed-2", "unlisted", "States.ItemReaderFailed").await;
    // The bucket the deployment names is listed: its objects under the prefix.
    let listed = wait_for_task(
        stack,
        "listed-1",
        "Processed",
        Duration::from_secs(90),
        ended,
    )
    .await;
    let sizes: Vec<(&str, u64)> = (listed["output"].as_array().into_iter().flatten())
        .map(|object| {
            (
                object["key"].as_str().unwrap_or_default(),
                object["size"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        sizes,
        [("in/few.jsonl", 38), ("in/today.jsonl", 4389)],
        "{listed:#}"
    );
    ended_as("parcels-3", "unwritten", "States.ResultWriterFailed").await;
}
