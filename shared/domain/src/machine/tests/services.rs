//! A state machine's Tasks that call AWS API actions: asked of their services'
//! agents, their answers shaped as Step Functions shapes them, and what is refused.

use serde_json::{Value, json};

use super::{dispatched, machine, run, started};
use crate::callback::Token;
use crate::decide::{CallbackOutcome, CallbackUse, on_callback, on_response, on_run};
use crate::machine::{ServiceAnswer, Status};
use crate::messages::{AgentRequest, AgentResponse, Outcome};
use crate::task::{Caller, TaskState};
use crate::time::Timestamp;
use crate::workflow::Workflow;

/// What a service's agent answers: `body`, with a request id.
pub(super) fn service_answered(request: &AgentRequest, body: Value) -> AgentResponse {
    let answer = ServiceAnswer {
        body,
        status: 200,
        headers: [("x-amzn-RequestId".to_owned(), "r-1".to_owned())].into(),
        status_text: None,
    };
    let output = serde_json::to_value(answer).expect("an answer");
    AgentResponse::answering(request.clone(), Outcome::Succeeded { output })
}

#[test]
fn an_aws_api_action_is_asked_of_its_services_agent_and_answers_with_its_metadata() {
    let workflow = machine(json!({
        "StartAt": "Get",
        "States": {
            "Get": {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:getItem",
                    "Parameters": {"TableName": "orders", "Key": {"id": {"S.$": "$.id"}}},
                    "ResultSelector": {"item.$": "$.Item", "status.$": "$.SdkHttpMetadata.HttpStatusCode"},
                    "ResultPath": "$.got", "Next": "Tell"},
            "Tell": {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                     "Parameters": {"QueueUrl": "q", "MessageBody": {"token.$": "$$.Task.Token", "id.$": "$.id"}},
                     "ResultPath": "$.told", "End": true}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({"id": "o-1"}));
    let task = claim.next.clone().expect("claimed");
    let get = dispatched(&claim).remove(0);
    assert_eq!(
        (get.agent.as_str(), get.path.as_str()),
        ("dynamodb", "GetItem")
    );
    assert_eq!(
        get.payload.value(),
        json!({"TableName": "orders", "Key": {"id": {"S": "o-1"}}})
    );
    let item = json!({"Item": {"id": {"S": "o-1"}}});
    let got = on_response(
        &task,
        &workflow,
        &order,
        &service_answered(&get, item),
        Timestamp(5),
    );
    let task = got.next.clone().expect("recorded");
    let tell = dispatched(&got).remove(0);
    assert_eq!(
        (tell.agent.as_str(), tell.path.as_str()),
        ("sqs", "SendMessage")
    );
    let body = tell.payload.value()["MessageBody"].clone();
    let body: Value = serde_json::from_str(body.as_str().expect("the body as text")).expect("JSON");
    assert_eq!(body["id"], "o-1");
    let sent = json!({"MessageId": "m-1"});
    let task = on_response(
        &task,
        &workflow,
        &order,
        &service_answered(&tell, sent),
        Timestamp(6),
    )
    .next
    .expect("recorded");
    assert_eq!(
        task.state,
        TaskState::Processing,
        "waits for the token's use"
    );
    let callback = CallbackUse {
        step: 1,
        token: Token::parse(body["token"].as_str().expect("a token")),
        by: Caller::Token,
        outcome: CallbackOutcome::Output(json!({"ok": true})),
    };
    let used = on_callback(&task, &workflow, &order, callback, Timestamp(7)).expect("used");
    let task = used.next.expect("recorded");
    let task = on_run(&task, &workflow, &order, "s1", Timestamp(8))
        .next
        .expect("ended");
    assert_eq!(run(&task).status, Status::Succeeded);
    assert_eq!(
        run(&task).output.as_deref(),
        Some(
            &json!({"id": "o-1", "got": {"item": {"id": {"S": "o-1"}}, "status": 200},
                     "told": {"ok": true}})
        )
    );
}

#[test]
fn an_action_that_cannot_wait_for_a_token_or_an_unknown_field_is_refused() {
    let refused = Workflow::parse(
        "m.asl.json",
        &json!({"StartAt": "G", "States": {"G": {"Type": "Task", "End": true,
            "Resource": "arn:aws:states:::dynamodb:getItem.waitForTaskToken",
            "Parameters": {"TableName": "t"}}}})
        .to_string(),
    )
    .expect_err("getItem sends no token");
    assert_eq!(refused.field, "/States/G/Resource", "{refused}");
    let workflow = machine(json!({"StartAt": "P", "States": {"P": {"Type": "Task",
        "Resource": "arn:aws:states:::sns:publish", "Parameters": {"Topic": "t"}, "End": true}}}));
    let (_, _, claim) = started(&workflow, json!({}));
    let task = claim.next.expect("ended");
    assert_eq!(run(&task).error.as_deref(), Some("States.Runtime"));
    assert!(
        run(&task)
            .cause
            .as_deref()
            .unwrap_or_default()
            .contains("'Topic'"),
        "{:?}",
        run(&task).cause
    );
}

#[test]
fn a_function_that_fails_while_given_its_token_fails_the_state_at_once() {
    let workflow = machine(json!({
        "StartAt": "Ask",
        "States": {
            "Ask": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
                    "Parameters": {"FunctionName": "ask", "Payload": {"token.$": "$$.Task.Token"}},
                    "TimeoutSeconds": 3600,
                    "Catch": [{"ErrorEquals": ["Boom"], "ResultPath": "$.caught", "Next": "Handled"}],
                    "End": true},
            "Handled": {"Type": "Pass", "End": true}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({}));
    let task = claim.next.clone().expect("claimed");
    let ask = dispatched(&claim).remove(0);
    let boom = super::answered(
        &ask,
        r#"{"errorMessage":"no","errorType":"Boom"}"#,
        Some("Unhandled"),
    );
    let failed = on_response(&task, &workflow, &order, &boom, Timestamp(5));
    let task = failed.next.expect("recorded");
    assert_eq!(run(&task).status, Status::Succeeded, "{:?}", run(&task));
    assert_eq!(
        run(&task).output.as_deref().map(|o| &o["caught"]["Error"]),
        Some(&json!("Boom"))
    );
}

#[test]
fn a_missed_heartbeat_is_a_heartbeat_timeout_and_the_wait_s_end_a_timeout() {
    let workflow = machine(json!({
        "StartAt": "Ask",
        "States": {
            "Ask": {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                    "Parameters": {"QueueUrl": "q", "MessageBody": {"token.$": "$$.Task.Token"}},
                    "TimeoutSeconds": 60, "HeartbeatSeconds": 10,
                    "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.caught", "Next": "Handled"}],
                    "End": true},
            "Handled": {"Type": "Pass", "End": true}
        }
    }));
    let caught = |beats: &[i64], expires_at: i64| {
        let (_, order, claim) = started(&workflow, json!({}));
        let task = claim.next.clone().expect("claimed");
        let ask = dispatched(&claim).remove(0);
        let sent = service_answered(&ask, json!({"MessageId": "m-1"}));
        let mut task = on_response(&task, &workflow, &order, &sent, Timestamp(0))
            .next
            .expect("waits");
        let token = serde_json::from_str::<Value>(
            ask.payload.value()["MessageBody"].as_str().expect("text"),
        )
        .expect("JSON")["token"]
            .as_str()
            .expect("a token")
            .to_owned();
        let token = Token::parse(&token).expect("a token of the task's");
        for &at in beats {
            task = crate::decide::on_heartbeat(&task, &workflow, &token, Timestamp(at))
                .expect("a heartbeat")
                .next
                .expect("recorded");
        }
        let expired = crate::decide::on_expired(&task, &workflow, &order, Timestamp(expires_at));
        let task = expired.next.expect("expired");
        let task = on_run(&task, &workflow, &order, "s1", Timestamp(expires_at + 1))
            .next
            .unwrap_or(task);
        run(&task).output.as_deref().expect("caught")["caught"]["Error"].clone()
    };
    assert_eq!(caught(&[], 10_000), json!("States.HeartbeatTimeout"));
    let beats: Vec<i64> = (1..=6).map(|n| n * 9_000).collect();
    assert_eq!(caught(&beats, 60_000), json!("States.Timeout"));
}

#[test]
fn an_http_invoke_is_asked_of_the_http_agent_and_a_status_outside_2xx_is_its_error() {
    let workflow = machine(json!({
        "StartAt": "Call",
        "States": {
            "Call": {"Type": "Task", "Resource": "arn:aws:states:::http:invoke",
                     "Parameters": {"ApiEndpoint.$": "States.Format('https://orders.example.com/{}', $.id)",
                                    "Method": "GET",
                                    "Authentication": {"ConnectionArn": "arn:aws:events:us-east-1:1:connection/c/1"}},
                     "ResultSelector": {"body.$": "$.ResponseBody", "status.$": "$.StatusCode"},
                     "Catch": [{"ErrorEquals": ["States.Http.StatusCode.503"], "Next": "Busy"}],
                     "End": true},
            "Busy": {"Type": "Pass", "End": true}
        }
    }));
    for (status, body, expected) in [
        (
            200,
            "{\"id\": \"o-1\"}",
            json!({"body": {"id": "o-1"}, "status": "200"}),
        ),
        (503, "later", json!("States.Http.StatusCode.503")),
    ] {
        let (_, order, claim) = started(&workflow, json!({"id": "o-1"}));
        let task = claim.next.clone().expect("claimed");
        let call = dispatched(&claim).remove(0);
        assert_eq!(
            (call.agent.as_str(), call.path.as_str()),
            ("http", "Invoke")
        );
        assert_eq!(
            call.payload.value()["endpoint"],
            "https://orders.example.com/o-1"
        );
        let answer = ServiceAnswer {
            body: json!(body),
            status,
            headers: Default::default(),
            status_text: None,
        };
        let output = serde_json::to_value(answer).expect("an answer");
        let response = AgentResponse::answering(call, Outcome::Succeeded { output });
        let decision = on_response(&task, &workflow, &order, &response, Timestamp(5));
        let task = decision.next.expect("recorded");
        assert_eq!(task.state, TaskState::Processed, "{:?}", run(&task));
        let output = run(&task).output.as_deref().cloned().unwrap_or_default();
        if status == 200 {
            assert_eq!(output, expected);
        } else {
            assert_eq!(output["Error"], expected, "caught: {output}");
        }
    }
}

#[test]
fn a_token_waits_as_long_and_beats_as_often_as_its_visit_works_out() {
    let workflow = machine(json!({
        "StartAt": "Ask",
        "States": {
            "Ask": {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                    "Parameters": {"QueueUrl": "q", "MessageBody": {"token.$": "$$.Task.Token"}},
                    "TimeoutSecondsPath": "$.wait", "HeartbeatSecondsPath": "$.beat",
                    "End": true}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({"wait": 600, "beat": 60}));
    let task = claim.next.clone().expect("claimed");
    let ask = dispatched(&claim).remove(0);
    let token: Value = serde_json::from_str(
        ask.payload.value()["MessageBody"]
            .as_str()
            .expect("the body's text"),
    )
    .expect("JSON");
    let token = Token::parse(token["token"].as_str().expect("the token"));
    let sent = json!({"MessageId": "m-1"});
    let answered = on_response(
        &task,
        &workflow,
        &order,
        &service_answered(&ask, sent),
        Timestamp(1_000),
    );
    let task = answered.next.expect("waiting");
    let step = &task.steps[0];
    assert_eq!(
        step.complete_by,
        Some(Timestamp(61_000)),
        "its first heartbeat, from $.beat"
    );
    assert!(
        matches!(step.waiting, Some(crate::task::Waiting::Callback { until, .. }) if until == Timestamp(601_000)),
        "its timeout, from $.wait: {:?}",
        step.waiting
    );
    let beat = crate::decide::on_heartbeat(
        &task,
        &workflow,
        &token.expect("a token"),
        Timestamp(30_000),
    )
    .expect("a heartbeat taken");
    let task = beat.next.expect("recorded");
    assert_eq!(task.steps[0].complete_by, Some(Timestamp(90_000)));
}

#[test]
fn a_tasks_scheduled_event_keeps_at_most_a_payloads_limit_of_its_parameters() {
    let workflow = machine(json!({
        "StartAt": "Call",
        "States": {
            "Call": {"Type": "Task", "Resource": "arn:aws:states:::http:invoke",
                     "Parameters": {"ApiEndpoint": "https://orders.example.com/o", "Method": "POST",
                                    "RequestBody.$": "$"},
                     "End": true}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({"manifest": "m".repeat(2_000_000)}));
    let task = claim.next.clone().expect("claimed");
    let call = dispatched(&claim).remove(0);
    let answer = ServiceAnswer {
        body: json!("done"),
        status: 200,
        headers: Default::default(),
        status_text: None,
    };
    let output = serde_json::to_value(answer).expect("an answer");
    let response = AgentResponse::answering(call, Outcome::Succeeded { output });
    let decision = on_response(&task, &workflow, &order, &response, Timestamp(5));
    let events = &run(decision.next.as_ref().expect("recorded")).new_events;
    let scheduled = events
        .iter()
        .find(|e| e.read().event["type"] == "TaskScheduled")
        .expect("scheduled");
    assert!(
        scheduled.size() < 300 * 1024,
        "the request of 2 MB cut to Step Functions' 256 KiB: {} bytes",
        scheduled.size()
    );
}
