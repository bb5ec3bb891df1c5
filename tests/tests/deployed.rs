//! The real stack, `infra/template.yaml`, deployed with `sam deploy` on MiniStack with
//! IAM enforced, and driven from outside as its users drive it: through the deployed
//! HTTP API, the deployed queues and the alert topic. The functions run as Lambda
//! functions through their real triggers, each under the policy the template gives it,
//! so a permission missing from the template fails a test here. Each test deploys the
//! stack on a MiniStack of its own (`sas_tests::ministack`, which lists the emulator's
//! gaps and how the harness works around them). Two tests deploy it otherwise, as its
//! users do: with `infra/localstack/deploy.sh`, and the CDK app with `cdk deploy`.
//!
//! The tests, by theme, each a module of `deployed/`: [`delivery`], [`recovery`],
//! [`callers`], [`workflows`] (with [`schedules`] beside it), [`state_machines`],
//! [`deployments`] and [`traces`]; this file holds the helpers they share.

#[path = "deployed/callers.rs"]
mod callers;
#[path = "deployed/delivery.rs"]
mod delivery;
#[path = "deployed/deployments.rs"]
mod deployments;
#[path = "deployed/recovery.rs"]
mod recovery;
#[path = "deployed/schedules.rs"]
mod schedules;
#[path = "deployed/state_machines.rs"]
mod state_machines;
#[path = "deployed/traces.rs"]
mod traces;
#[path = "deployed/workflows.rs"]
mod workflows;

use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use sas_tests::aws::{Remote, queue_arn};
use sas_tests::ministack::{Answer, Deployment};
use serde_json::{Value, json};

/// The README's drone delivery.
fn readme_delivery() -> Value {
    json!({"workflow":"drone-delivery","input":{"customer_id":"c-1","pickup":"Sydney","dropoff":"Bondi","weight_kg":1.2}})
}

/// The stack with the remote services at `remote` ([`Deployment::with_services`]).
async fn deploy(remote: &Remote) -> Deployment {
    Deployment::with_services(remote).await
}

/// Waits until the task satisfies `done`; panics after `patience` with the task and
/// the functions' logs.
async fn wait_for_task(
    stack: &Deployment,
    id: &str,
    what: &str,
    patience: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    wait_for_task_as(stack, None, id, what, patience, done).await
}

/// [`wait_for_task`], reading the task with `token` as its bearer token.
async fn wait_for_task_as(
    stack: &Deployment,
    token: Option<&str>,
    id: &str,
    what: &str,
    patience: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let answer = stack
            .call_as(token, "GET", &format!("/tasks/{id}"), None)
            .await;
        let task = answer.json();
        if answer.status == 200 && done(&task) {
            return task;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "task {id} never became {what} within {patience:?}: {} {}\n{}",
                answer.status,
                answer.body,
                stack.all_logs().await
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Submits a task through the deployed API (unsigned, as a client); its answer, a 202.
async fn put_task(stack: &Deployment, id: &str, body: &Value) -> Answer {
    let put = stack
        .call("PUT", &format!("/tasks/{id}"), Some(body), false)
        .await;
    assert_eq!(put.status, 202, "{}", put.body);
    put
}

/// Creates a queue; returns its URL.
async fn create_queue(sqs: &aws_sdk_sqs::Client, name: &str) -> String {
    sqs.create_queue()
        .queue_name(name)
        .send()
        .await
        .expect("a queue")
        .queue_url()
        .expect("its URL")
        .to_owned()
}

/// Creates a table keyed by the text attribute `key`, paid per request.
async fn create_table(dynamodb: &aws_sdk_dynamodb::Client, name: &str, key: &str) {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    dynamodb
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(key)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("an attribute"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(key)
                .key_type(KeyType::Hash)
                .build()
                .expect("a key"),
        )
        .send()
        .await
        .unwrap_or_else(|error| panic!("table {name} not created: {error:?}"));
}

/// Receives what a queue holds, deleting it; the bodies.
async fn drain(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    let received = sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .expect("a receive");
    let mut bodies = Vec::new();
    for message in received.messages() {
        bodies.push(message.body().unwrap_or_default().to_owned());
        sqs.delete_message()
            .queue_url(url)
            .receipt_handle(message.receipt_handle().unwrap_or_default())
            .send()
            .await
            .expect("a delete");
    }
    bodies
}

/// The operators' view of a state, signed: status and task ids.
async fn listed(stack: &Deployment, state: &str) -> (u16, Vec<String>) {
    let answer = stack
        .call("GET", &format!("/operator/tasks?state={state}"), None, true)
        .await;
    let ids = answer.json()["tasks"]
        .as_array()
        .map(|tasks| {
            tasks
                .iter()
                .map(|t| t["id"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default();
    (answer.status, ids)
}

fn status_and_code(answer: &Answer) -> (u16, Option<String>) {
    (
        answer.status,
        answer.json()["error"]["code"].as_str().map(str::to_owned),
    )
}

/// An operator's signed call: its status and body.
async fn operator(
    stack: &Deployment,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let answer = stack.call(method, path, body, true).await;
    (answer.status, answer.json())
}

/// How many decisions of `verdict` a function has made, from its metric lines.
async fn verdicts(stack: &Deployment, function: &str, verdict: &str) -> usize {
    stack
        .logs(function)
        .await
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line.get("Decisions").is_some() && line["Verdict"] == verdict)
        .count()
}

/// The operators' inbox: a queue subscribed to the stack's alert topic, which SNS may
/// send to; its URL.
async fn operators_inbox(
    stack: &Deployment,
    sqs: &aws_sdk_sqs::Client,
    sns: &aws_sdk_sns::Client,
) -> String {
    let topic = &stack.outputs["AlertTopicArn"];
    let inbox = create_queue(sqs, "operators-inbox").await;
    let inbox_arn = queue_arn(sqs, &inbox).await;
    let policy = json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": "sns.amazonaws.com"},
        "Action": "sqs:SendMessage", "Resource": inbox_arn,
        "Condition": {"ArnEquals": {"aws:SourceArn": topic}}}]});
    sqs.set_queue_attributes()
        .queue_url(&inbox)
        .attributes(QueueAttributeName::Policy, policy.to_string())
        .send()
        .await
        .expect("the inbox's policy");
    sns.subscribe()
        .topic_arn(topic)
        .protocol("sqs")
        .endpoint(&inbox_arn)
        .send()
        .await
        .expect("the inbox subscribed");
    inbox
}

/// The message of an SNS envelope delivered to SQS, as JSON.
fn sns_message(body: &str) -> Value {
    let envelope: Value = serde_json::from_str(body).expect("an SNS envelope");
    let message = envelope["Message"].as_str().unwrap_or(body);
    serde_json::from_str(message).unwrap_or_else(|_| json!(message))
}
