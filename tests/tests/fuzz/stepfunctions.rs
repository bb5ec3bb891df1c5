//! The fuzz target of Step Functions' protocol: `POST /` with any `X-Amz-Target`
//! (each operation served, and others) and bodies near each one's request (fields
//! dropped, replaced by any JSON, or the body any JSON or bytes), from any caller.
//! Every answer is under 500, and a refusal names its kind in `__type` with a message.

use proptest::prelude::*;
use sas_api::{self as api, ApiRequest, Caller};
use serde_json::{Value, json};

use super::run::{any_json, fuzz};
use super::subject;

/// An operation's name: one served, or any. (`StartSyncExecution` reads the request
/// `StartExecution` reads, then waits for a task that no scheduler runs here;
/// `GetActivityTask` waits only on an activity created, which a case's subject has
/// not.)
fn operation() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(
            &[
                "ListStateMachines",
                "DescribeStateMachine",
                "ValidateStateMachineDefinition",
                "CreateStateMachine",
                "UpdateStateMachine",
                "DeleteStateMachine",
                "PublishStateMachineVersion",
                "ListStateMachineVersions",
                "DeleteStateMachineVersion",
                "CreateStateMachineAlias",
                "DescribeStateMachineAlias",
                "UpdateStateMachineAlias",
                "ListStateMachineAliases",
                "DeleteStateMachineAlias",
                "TagResource",
                "UntagResource",
                "ListTagsForResource",
                "StartExecution",
                "DescribeStateMachineForExecution",
                "DescribeExecution",
                "ListExecutions",
                "StopExecution",
                "GetExecutionHistory",
                "RedriveExecution",
                "RepairExecution",
                "TestState",
                "SendTaskSuccess",
                "SendTaskFailure",
                "SendTaskHeartbeat",
                "CreateActivity",
                "DescribeActivity",
                "ListActivities",
                "DeleteActivity",
                "GetActivityTask",
            ][..]
        )
        .prop_map(str::to_owned),
        "[A-Za-z.]{0,30}",
    ]
}

/// A body near every operation's request: its fields, each valid or any JSON.
fn request_body() -> impl Strategy<Value = Vec<u8>> {
    let machine = "arn:aws:states:us-east-1:000000000000:stateMachine:drone-delivery";
    let valid = json!({
        "stateMachineArn": machine,
        "executionArn": "arn:aws:states:us-east-1:000000000000:execution:drone-delivery:e-1",
        "name": "e-1",
        "input": r#"{"customer_id": "c", "pickup": "a", "dropoff": "b", "weight_kg": 1}"#,
        "taskToken": "dDE.1.0.1.QaFlNBlqWQvc8F3JzVrMgw",
        "output": "{}",
        "error": "Boom",
        "cause": "it broke",
        "definition": r#"{"StartAt": "A", "States": {"A": {"Type": "Pass", "End": true}}}"#,
        "activityArn": "arn:aws:states:us-east-1:000000000000:activity:e-1",
        "workerName": "w-1",
        "maxResults": 2,
        "nextToken": "3",
        "reverseOrder": true,
        "publish": true,
        "revisionId": "1",
        "stateMachineVersionArn": format!("{machine}:1"),
        "stateMachineAliasArn": format!("{machine}:live"),
        "routingConfiguration": [{"stateMachineVersionArn": format!("{machine}:1"), "weight": 100}],
        "resourceArn": machine,
        "tags": [{"key": "team", "value": "drones"}],
        "tagKeys": ["team"],
        "statusFilter": "RUNNING",
        "redriveFilter": "NOT_REDRIVEN",
        "stateName": "A",
        "inspectionLevel": "DEBUG",
        "variables": r#"{"limit": 3}"#,
        "context": r#"{"Execution": {"Name": "e-1"}}"#,
        "mock": {"result": "{}", "errorOutput": {"error": "Boom", "cause": "it broke"}},
        "stateConfiguration": {"retrierRetryCount": 1},
    });
    (
        any_json(),
        prop::sample::select(
            &[
                "stateMachineArn",
                "executionArn",
                "name",
                "input",
                "taskToken",
                "output",
                "error",
                "cause",
                "activityArn",
                "workerName",
                "maxResults",
                "nextToken",
                "reverseOrder",
                "publish",
                "revisionId",
                "stateMachineVersionArn",
                "stateMachineAliasArn",
                "routingConfiguration",
                "resourceArn",
                "tags",
                "tagKeys",
                "statusFilter",
                "redriveFilter",
                "stateName",
                "inspectionLevel",
                "variables",
                "context",
                "mock",
                "stateConfiguration",
            ][..],
        ),
        any::<u8>(),
        prop::collection::vec(any::<u8>(), 0..64),
        ".{0,80}",
    )
        .prop_map(move |(value, field, how, bytes, text)| {
            let mut body = valid.clone();
            match how % 5 {
                0 => body[field] = value,
                1 => body[field] = Value::from(text),
                2 => {
                    body.as_object_mut().expect("object").remove(field);
                }
                3 => return bytes,
                _ => body = value,
            }
            body.to_string().into_bytes()
        })
}

#[test]
fn no_step_functions_request_panics_and_every_refusal_names_its_kind() {
    let caller = prop_oneof![Just(Caller::Anyone), Just(Caller::Unauthenticated)];
    fuzz(
        "step functions requests",
        1_000,
        (operation(), request_body(), caller),
        |(operation, body, caller)| {
            let subject = subject();
            // Each case twice: the second meets what the first made (an execution).
            for _ in 0..2 {
                let target = format!("AWSStepFunctions.{operation}");
                let request = ApiRequest {
                    caller: &caller,
                    method: "POST",
                    path: "/",
                    query: None,
                    body: &body,
                    target: Some(&target),
                    trace: api::TraceHeaders::default(),
                };
                let answer = subject.runtime.block_on(api::handle(&subject.app, request));
                prop_assert!(answer.status < 500, "{operation}: {}", answer.body);
                prop_assert_eq!(answer.content_type, Some(api::AMZ_JSON));
                let body: Value = serde_json::from_str(&answer.body).unwrap_or_default();
                prop_assert!(body.is_object(), "{operation}: {}", answer.body);
                if answer.status >= 400 {
                    prop_assert!(body["__type"].is_string(), "{operation}: {}", answer.body);
                    let message = body["message"].as_str().unwrap_or_default();
                    prop_assert!(!message.is_empty(), "{operation}: {}", answer.body);
                }
            }
            Ok(())
        },
    );
}
