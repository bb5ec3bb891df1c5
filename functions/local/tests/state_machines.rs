//! A Step Functions state machine run by `sas-local` as a user runs one: a file
//! `NAME.asl.json` among the workflows, Lambda at `AWS_ENDPOINT_URL_LAMBDA` (here a
//! stand-in speaking Lambda's `Invoke` API), a task started with `PUT /tasks/{id}` and
//! read back with its execution's status, output, error and cause.

#[path = "common/approval.rs"]
mod approval;
mod common;
#[path = "common/ended.rs"]
mod ended;

use approval::APPROVAL;
use ended::ended;
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

/// An order through DynamoDB, SQS, SNS and EventBridge: written (a second write
/// refused by its condition, and caught), read, updated, an approval asked over SQS
/// and awaited by its task token, announced on SNS and EventBridge, deleted; a send to
/// a queue that is not there caught by its error's name.
const ORDER: &str = r#"{
  "StartAt": "Put",
  "States": {
    "Put": {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:putItem",
            "Parameters": {"TableName": "orders", "Item": {"id": {"S.$": "$.id"}, "kg": {"N.$": "States.Format('{}', $.kg)"}}},
            "ResultPath": null, "Next": "PutAgain"},
    "PutAgain": {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:putItem",
                 "Parameters": {"TableName": "orders", "Item": {"id": {"S.$": "$.id"}},
                                "ConditionExpression": "attribute_not_exists(id)"},
                 "Catch": [{"ErrorEquals": ["DynamoDB.ConditionalCheckFailedException"],
                            "ResultPath": "$.again", "Next": "Get"}],
                 "Next": "Get"},
    "Get": {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:getItem",
            "Parameters": {"TableName": "orders", "Key": {"id": {"S.$": "$.id"}}},
            "ResultSelector": {"kg.$": "$.Item.kg.N", "status.$": "$.SdkHttpMetadata.HttpStatusCode"},
            "ResultPath": "$.got", "Next": "Update"},
    "Update": {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:updateItem",
               "Parameters": {"TableName": "orders", "Key": {"id": {"S.$": "$.id"}},
                              "UpdateExpression": "SET stage = :s",
                              "ExpressionAttributeValues": {":s": {"S": "approved"}},
                              "ReturnValues": "ALL_NEW"},
               "ResultSelector": {"stage.$": "$.Attributes.stage.S"},
               "ResultPath": "$.updated", "Next": "Ask"},
    "Ask": {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
            "Parameters": {"QueueUrl.$": "$.asks", "MessageBody": {"token.$": "$$.Task.Token", "id.$": "$.id"}},
            "TimeoutSeconds": 60, "ResultPath": "$.approval", "Next": "Tell"},
    "Tell": {"Type": "Task", "Resource": "arn:aws:states:::sns:publish",
             "Parameters": {"TopicArn.$": "$.topic", "Message": {"approved.$": "$.id"},
                            "MessageAttributes": {"kind": {"DataType": "String", "StringValue": "approval"}}},
             "ResultSelector": {"id.$": "$.MessageId"}, "ResultPath": "$.told", "Next": "Announce"},
    "Announce": {"Type": "Task", "Resource": "arn:aws:states:::events:putEvents",
                 "Parameters": {"Entries": [{"Source": "orders", "DetailType": "approved", "Detail": {"id.$": "$.id"}}]},
                 "ResultSelector": {"failed.$": "$.FailedEntryCount"}, "ResultPath": "$.announced", "Next": "Delete"},
    "Delete": {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:deleteItem",
               "Parameters": {"TableName": "orders", "Key": {"id": {"S.$": "$.id"}}},
               "ResultPath": null, "Next": "Lost"},
    "Lost": {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage",
             "Parameters": {"QueueUrl.$": "States.Format('{}-gone', $.asks)", "MessageBody": "x"},
             "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.lost", "Next": "Done"}],
             "End": true},
    "Done": {"Type": "Succeed"}
  }
}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_machine_calls_dynamodb_sqs_sns_and_eventbridge_as_step_functions_does() {
    let moto = sas_testkit::moto::Moto::start();
    let environment = [
        ("AWS_ENDPOINT_URL", moto.endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
    ];
    let sdk = sas_aws_tasks::local_sdk(|name| {
        environment
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| (*value).to_owned())
    });
    let dynamodb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .endpoint_url(&moto.endpoint)
            .build(),
    );
    let sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(&sdk)
            .endpoint_url(&moto.endpoint)
            .build(),
    );
    let sns = aws_sdk_sns::Client::from_conf(
        aws_sdk_sns::config::Builder::from(&sdk)
            .endpoint_url(&moto.endpoint)
            .build(),
    );
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    dynamodb
        .create_table()
        .table_name("orders")
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("an attribute"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .expect("a key"),
        )
        .send()
        .await
        .expect("a table");
    let queue = |name: &'static str| {
        let sqs = sqs.clone();
        async move {
            sqs.create_queue()
                .queue_name(name)
                .send()
                .await
                .expect("a queue")
                .queue_url
                .expect("its URL")
        }
    };
    let asks = queue("asks").await;
    let told = queue("told").await;
    let topic = sns
        .create_topic()
        .name("approvals")
        .send()
        .await
        .expect("a topic")
        .topic_arn
        .expect("its ARN");
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:123456789012:told")
        .attributes("RawMessageDelivery", "true")
        .return_subscription_arn(true)
        .send()
        .await
        .expect("subscribed");

    let workflows = tempfile::tempdir().expect("a workflows directory");
    std::fs::write(workflows.path().join("order.asl.json"), ORDER).expect("written");
    let data = tempfile::tempdir().expect("a data directory");
    let workflows_dir = workflows.path().to_str().expect("a path");
    let mut variables = vec![("SAS_WORKFLOWS_DIR", workflows_dir)];
    variables.extend(environment);
    let (mut child, api, _) = common::spawn_with(data.path(), &variables);
    let http = reqwest::Client::new();
    let input = json!({"id": "o-1", "kg": 3, "asks": asks, "topic": topic});
    let created = http
        .put(format!("{api}/tasks/order-1"))
        .json(&json!({"workflow": "order", "input": input}))
        .send()
        .await
        .expect("submitted");
    assert!(
        created.status().is_success(),
        "{}",
        created.text().await.unwrap_or_default()
    );
    // The approval is asked over SQS with the state's task token: answered through
    // the project's callbacks.
    let asked = loop {
        let received = sqs
            .receive_message()
            .queue_url(&asks)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("received");
        if let Some(message) = received.messages.unwrap_or_default().pop() {
            break message;
        }
    };
    let asked: Value =
        serde_json::from_str(asked.body.as_deref().expect("a body")).expect("the body as JSON");
    assert_eq!(asked["id"], "o-1");
    let token = asked["token"].as_str().expect("the task token");
    let used = http
        .post(format!("{api}/callbacks/{token}"))
        .json(&json!({"output": {"approved_by": "ana"}}))
        .send()
        .await
        .expect("used");
    assert!(used.status().is_success());

    let task = ended(&http, &api, "order-1").await;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(task["status"], "SUCCEEDED", "{task:#}");
    let output = &task["output"];
    assert_eq!(
        output["again"]["Error"], "DynamoDB.ConditionalCheckFailedException",
        "{output:#}"
    );
    assert!(
        output["again"]["Cause"]
            .as_str()
            .is_some_and(|cause| cause.contains("Service: AmazonDynamoDBv2; Status Code: 400")),
        "{output:#}"
    );
    assert_eq!(output["got"], json!({"kg": "3", "status": 200}));
    assert_eq!(output["updated"], json!({"stage": "approved"}));
    assert_eq!(output["approval"], json!({"approved_by": "ana"}));
    assert!(
        output["told"]["id"]
            .as_str()
            .is_some_and(|id| !id.is_empty())
    );
    assert_eq!(output["announced"], json!({"failed": 0}));
    assert_eq!(
        output["lost"]["Error"], "SQS.QueueDoesNotExistException",
        "{output:#}"
    );
    assert!(
        output["lost"]["Cause"].as_str().is_some_and(
            |cause| cause.contains("Error Code: AWS.SimpleQueueService.NonExistentQueue")
        ),
        "{output:#}"
    );

    let published = sqs
        .receive_message()
        .queue_url(&told)
        .wait_time_seconds(1)
        .send()
        .await
        .expect("received")
        .messages
        .unwrap_or_default();
    let bodies: Vec<_> = published.iter().filter_map(|m| m.body.as_deref()).collect();
    assert_eq!(
        bodies,
        [r#"{"approved":"o-1"}"#],
        "the message sent as its JSON text"
    );
    let gone = dynamodb
        .get_item()
        .table_name("orders")
        .key(
            "id",
            aws_sdk_dynamodb::types::AttributeValue::S("o-1".to_owned()),
        )
        .send()
        .await
        .expect("read");
    assert!(gone.item.is_none(), "deleted: {gone:?}");
}

/// A machine that starts `child` four ways: waited for with its output as JSON, only
/// started (the child still waiting), a machine that is not there, caught, and given
/// its task token, waited for until the token is used.
const PARENT: &str = r#"{
  "StartAt": "Double",
  "States": {
    "Double": {"Type": "Task", "Resource": "arn:aws:states:::states:startExecution.sync:2",
               "Parameters": {"StateMachineArn": "arn:aws:states:us-east-1:000000000000:stateMachine:child",
                              "Input": {"n.$": "$.n"}},
               "ResultSelector": {"n.$": "$.Output.n", "status.$": "$.Status"},
               "ResultPath": "$.doubled", "Next": "Later"},
    "Later": {"Type": "Task", "Resource": "arn:aws:states:::states:startExecution",
              "Parameters": {"StateMachineArn": "arn:aws:states:us-east-1:000000000000:stateMachine:child",
                             "Input": {"wait": 3600}},
              "ResultPath": "$.later", "Next": "Missing"},
    "Missing": {"Type": "Task", "Resource": "arn:aws:states:::states:startExecution.sync",
                "Parameters": {"StateMachineArn": "arn:aws:states:us-east-1:000000000000:stateMachine:nowhere"},
                "Catch": [{"ErrorEquals": ["StepFunctions.StateMachineDoesNotExistException"],
                           "ResultPath": "$.missing", "Next": "Approval"}],
                "Next": "Approval"},
    "Approval": {"Type": "Task", "Resource": "arn:aws:states:::states:startExecution.waitForTaskToken",
                 "Parameters": {"StateMachineArn": "arn:aws:states:us-east-1:000000000000:stateMachine:child",
                                "Input": {"wait": 3600, "token.$": "$$.Task.Token"}},
                 "ResultPath": "$.approval", "Next": "Done"},
    "Done": {"Type": "Succeed"}
  }
}"#;

const CHILD: &str = r#"{
  "StartAt": "Wait?",
  "States": {
    "Wait?": {"Type": "Choice", "Default": "Double",
              "Choices": [{"Variable": "$.wait", "IsPresent": true, "Next": "Later"}]},
    "Later": {"Type": "Wait", "SecondsPath": "$.wait", "End": true},
    "Double": {"Type": "Pass", "Parameters": {"n.$": "States.MathAdd($.n, $.n)"}, "End": true}
  }
}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_machine_starts_executions_of_another_and_waits_for_one() {
    let workflows = tempfile::tempdir().expect("a workflows directory");
    std::fs::write(workflows.path().join("parent.asl.json"), PARENT).expect("written");
    std::fs::write(workflows.path().join("child.asl.json"), CHILD).expect("written");
    let data = tempfile::tempdir().expect("a data directory");
    let workflows_dir = workflows.path().to_str().expect("a path");
    let (mut server, api, _) =
        common::spawn_with(data.path(), &[("SAS_WORKFLOWS_DIR", workflows_dir)]);
    let http = reqwest::Client::new();
    let created = http
        .put(format!("{api}/tasks/p-1"))
        .json(&json!({"workflow": "parent", "input": {"n": 21}}))
        .send()
        .await
        .expect("submitted");
    assert!(created.status().is_success());
    // The child asked for approval is given the token, which an approver uses.
    let approval = async || -> Option<Value> {
        let listed: Value = (http.get(format!("{api}/tasks?state=Processing&limit=100")))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let tasks = listed["tasks"].as_array()?;
        let child = tasks
            .iter()
            .find_map(|t| t["id"].as_str().filter(|id| id.contains("~Approval-")))?;
        http.get(format!("{api}/tasks/{child}"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()
    };
    let mut asked = None;
    for _ in 0..200 {
        asked = approval().await;
        if asked.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let asked = asked.expect("the approval's execution started");
    let token = asked["input"]["token"].as_str().expect("given the token");
    let used = http
        .post(format!("{api}/callbacks/{token}"))
        .json(&json!({"output": {"approved": true}}))
        .send()
        .await
        .expect("used");
    assert!(used.status().is_success(), "{}", used.status());
    let task = ended(&http, &api, "p-1").await;
    assert_eq!(task["status"], "SUCCEEDED", "{task:#}");
    assert_eq!(task["output"]["approval"], json!({"approved": true}));
    let output = &task["output"];
    assert_eq!(output["doubled"], json!({"n": 42, "status": "SUCCEEDED"}));
    assert_eq!(
        output["missing"]["Error"],
        "StepFunctions.StateMachineDoesNotExistException"
    );
    // The execution only started still waits, and is read as any task.
    let arn = output["later"]["ExecutionArn"].as_str().expect("an ARN");
    let id = arn.rsplit(':').next().expect("its name");
    assert!(arn.contains(":execution:child:p-1~Later-"), "{arn}");
    let later: Value = http
        .get(format!("{api}/tasks/{id}"))
        .send()
        .await
        .expect("read")
        .json()
        .await
        .expect("json");
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(later["workflow"]["name"], "child", "{later:#}");
    assert_eq!(later["status"], "RUNNING", "{later:#}");
}
