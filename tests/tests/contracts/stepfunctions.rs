//! Step Functions' protocol: a caller's executions in its own scope, and the
//! deployment's changes an operator's.

use sas_api::{self as api, ApiRequest, Caller};
use sas_core::app::App;
use sas_domain::ids::Owner;
use sas_tests::{Buffering, delivery_input};
use serde_json::{Value, json};

/// A Step Functions operation as `caller` sends it: its status and its body.
async fn step_functions(app: &App, caller: &Caller, operation: &str, body: Value) -> (u16, Value) {
    let target = format!("AWSStepFunctions.{operation}");
    let bytes = body.to_string();
    let request = ApiRequest {
        caller,
        method: "POST",
        path: "/",
        query: None,
        body: bytes.as_bytes(),
        target: Some(&target),
        trace: api::TraceHeaders::default(),
    };
    let answer = api::handle(app, request).await;
    let body = serde_json::from_str(&answer.body).expect("a JSON answer");
    (answer.status, body)
}

#[tokio::test]
async fn step_functions_callers_see_their_own_executions_and_only_operators_change_machines() {
    let world = Buffering::new();
    let app = world.direct_over(world.ports(), "api");
    let known = |name: &str, operator: bool| Caller::Known {
        owner: Owner::new(name).expect("an owner"),
        operator,
    };
    let (ana, bo, operator) = (known("ana", false), known("bo", false), known("ops", true));
    let machine = json!({"StartAt": "A", "States": {"A": {"Type": "Pass", "End": true}}});
    let create = json!({"name": "made", "definition": machine.to_string(), "roleArn": "r"});
    for caller in [&ana, &Caller::Open] {
        let (status, refused) =
            step_functions(&app, caller, "CreateStateMachine", create.clone()).await;
        assert_eq!(
            (status, refused["__type"].as_str()),
            (400, Some("AccessDeniedException")),
            "{caller:?}"
        );
    }
    let (status, made) = step_functions(&app, &operator, "CreateStateMachine", create).await;
    assert_eq!(status, 200, "{made}");
    // Versions, aliases and tags change the deployment too: an operator's; reading
    // them is anyone's.
    let made_arn = made["stateMachineArn"].clone();
    let publish = json!({"stateMachineArn": made_arn});
    let tag = json!({"resourceArn": made_arn, "tags": [{"key": "k", "value": "v"}]});
    // TestState runs any definition given: an operator's too.
    let test = json!({"definition": r#"{"Type": "Pass", "End": true}"#});
    for (operation, body) in [
        ("PublishStateMachineVersion", &publish),
        ("TagResource", &tag),
        ("TestState", &test),
    ] {
        let (status, refused) = step_functions(&app, &ana, operation, body.clone()).await;
        assert_eq!(
            (status, refused["__type"].as_str()),
            (400, Some("AccessDeniedException")),
            "{operation}"
        );
        let (status, done) = step_functions(&app, &operator, operation, body.clone()).await;
        assert_eq!(status, 200, "{operation}: {done}");
    }
    let (status, versions) = step_functions(&app, &ana, "ListStateMachineVersions", publish).await;
    assert_eq!(
        (
            status,
            versions["stateMachineVersions"].as_array().map(Vec::len)
        ),
        (200, Some(1))
    );
    let arn = "arn:aws:states:us-east-1:000000000000:stateMachine:drone-delivery";
    let start =
        json!({"stateMachineArn": arn, "name": "mine", "input": delivery_input().to_string()});
    let (status, started) = step_functions(&app, &ana, "StartExecution", start).await;
    assert_eq!(status, 200, "{started}");
    let execution = json!({"executionArn": started["executionArn"]});
    let (status, seen) = step_functions(&app, &ana, "DescribeExecution", execution.clone()).await;
    assert_eq!((status, seen["name"].as_str()), (200, Some("mine")));
    let (status, hidden) = step_functions(&app, &bo, "DescribeExecution", execution.clone()).await;
    assert_eq!(
        (status, hidden["__type"].as_str()),
        (400, Some("ExecutionDoesNotExist")),
        "another caller's execution is not found: {hidden}"
    );
    // A listing shows a caller its own executions only.
    let machine = json!({"stateMachineArn": arn});
    for (caller, expected) in [(&ana, vec!["mine"]), (&bo, vec![])] {
        let (status, listed) =
            step_functions(&app, caller, "ListExecutions", machine.clone()).await;
        let names: Vec<&str> = (listed["executions"].as_array().into_iter().flatten())
            .filter_map(|execution| execution["name"].as_str())
            .collect();
        assert_eq!((status, names), (200, expected), "{caller:?}: {listed}");
    }
    let (status, stopped) = step_functions(&app, &bo, "StopExecution", execution).await;
    assert_eq!(
        (status, stopped["__type"].as_str()),
        (400, Some("ExecutionDoesNotExist"))
    );
    // Where no one is authenticated on the root (a deployment with NONE), callers
    // start and read executions, unscoped.
    let start =
        json!({"stateMachineArn": arn, "name": "open", "input": delivery_input().to_string()});
    let (status, started) = step_functions(&app, &Caller::Open, "StartExecution", start).await;
    assert_eq!(status, 200, "{started}");
    // An unscoped listing names no owner's execution: its ARN could not name it.
    let (_, listed) = step_functions(&app, &Caller::Open, "ListExecutions", machine).await;
    let names: Vec<&str> = (listed["executions"].as_array().into_iter().flatten())
        .filter_map(|execution| execution["name"].as_str())
        .collect();
    assert_eq!(names, ["open"], "{listed}");
    // A task token is its own capability; anything else needs a caller.
    let forged = json!({"taskToken": "forged", "output": "{}"});
    let (_, token) =
        step_functions(&app, &Caller::Unauthenticated, "SendTaskSuccess", forged).await;
    assert_eq!(token["__type"], "InvalidToken");
    let (_, listed) = step_functions(
        &app,
        &Caller::Unauthenticated,
        "ListStateMachines",
        json!({}),
    )
    .await;
    assert_eq!(listed["__type"], "UnrecognizedClientException");
}
