//! State machines run by the decisions: loops whose visits are calls of their own,
//! Retry and Catch, Fail, Wait, Parallel and Map, task tokens, and what the engine
//! refuses to load.

mod activities;
mod context;
mod distributed;
mod executions;
mod history;
mod moves;
mod redrive;
mod retries;
mod services;

use serde_json::{Value, json};

use super::{InvokeAnswer, InvokeRequest, Status};
use crate::callback::Token;
use crate::decide::{
    CallbackOutcome, CallbackUse, Decision, Effect, on_callback, on_child_ended, on_expired,
    on_response, on_run, submit,
};
use crate::ids::TaskId;
use crate::messages::{AgentRequest, AgentResponse, ChildEnded, Outcome};
use crate::submission::Submission;
use crate::task::{Caller, Order, Task, TaskState};
use crate::time::Timestamp;
use crate::workflow::Workflow;

fn machine(definition: Value) -> Workflow {
    Workflow::parse("machines/m.asl.json", &definition.to_string())
        .expect("a machine the engine runs")
}

fn started(workflow: &Workflow, input: Value) -> (Task, Order, Decision) {
    let submission = Submission::new(TaskId::parse("t1").expect("id"), input);
    let (task, order, _) = submit(workflow, submission, Timestamp(0));
    let claim = on_run(&task, workflow, &order, "s1", Timestamp(0));
    (task, order, claim)
}

fn dispatched(decision: &Decision) -> Vec<AgentRequest> {
    dispatches(&decision.effects)
}

fn dispatches(effects: &[Effect]) -> Vec<AgentRequest> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Dispatch(request) => Some(request.clone()),
            _ => None,
        })
        .collect()
}

fn scheduled(decision: &Decision) -> Option<std::time::Duration> {
    decision.effects.iter().find_map(|effect| match effect {
        Effect::Schedule { delay, .. } => Some(*delay),
        _ => None,
    })
}

/// The Lambda agent's answer to `request`: the function's payload, or its error.
fn answered(request: &AgentRequest, payload: &str, function_error: Option<&str>) -> AgentResponse {
    let answer = InvokeAnswer {
        payload: payload.to_owned(),
        function_error: function_error.map(str::to_owned),
        log_result: None,
    };
    let output = serde_json::to_value(answer).expect("an answer");
    AgentResponse::answering(request.clone(), Outcome::Succeeded { output })
}

/// The decision on the Lambda agent's answer (its payload, and its function error if
/// any) to the first call `claim` dispatched, at `at`.
fn first_answered(
    workflow: &Workflow,
    order: &Order,
    claim: &Decision,
    (payload, function_error): (&str, Option<&str>),
    at: Timestamp,
) -> Decision {
    let task = claim.next.as_ref().expect("claimed");
    let request = dispatched(claim).remove(0);
    on_response(
        task,
        workflow,
        order,
        &answered(&request, payload, function_error),
        at,
    )
}

fn invoked(request: &AgentRequest) -> InvokeRequest {
    serde_json::from_str(request.payload.as_str())
        .unwrap_or_else(|e| panic!("{e}: {}", request.payload.as_str()))
}

fn run(task: &Task) -> &super::MachineRun {
    task.machine.as_deref().expect("a machine's run")
}

#[test]
fn each_visit_of_a_loop_is_a_call_of_its_own() {
    let workflow = machine(json!({
        "StartAt": "Count",
        "States": {
            "Count": {"Type": "Pass", "Result": 0, "ResultPath": "$.count", "Next": "More?"},
            "More?": {"Type": "Choice", "Choices": [
                {"Variable": "$.count", "NumericLessThan": 3, "Next": "Call"}
            ], "Default": "Done"},
            "Call": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:1:function:echo",
                     "ResultPath": "$.echoed", "Next": "Add"},
            "Add": {"Type": "Pass", "Parameters": {"count.$": "States.MathAdd($.count, 1)"}, "Next": "More?"},
            "Done": {"Type": "Succeed"}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({}));
    let mut task = claim.next.clone().expect("claimed");
    let mut keys = Vec::new();
    let mut decision = claim;
    while task.state != TaskState::Processed {
        let requests = dispatched(&decision);
        assert_eq!(
            requests.len(),
            1,
            "one call out at a time: {:?}",
            decision.effects
        );
        let request = &requests[0];
        assert_eq!(request.agent, super::LAMBDA_AGENT);
        keys.push(request.idempotency_key.clone());
        let sent = invoked(request);
        assert_eq!(sent.function, "echo");
        let response = answered(request, &sent.payload, None);
        decision = on_response(&task, &workflow, &order, &response, Timestamp(10));
        task = decision.next.clone().expect("recorded");
    }
    assert_eq!(keys, ["t1/1/Call#1", "t1/1/Call#2", "t1/1/Call#3"]);
    let run = run(&task);
    assert_eq!(run.status, Status::Succeeded);
    assert_eq!(run.output.as_deref(), Some(&json!({"count": 3})));
    assert!(task.not_undone.is_empty());
}

#[test]
fn a_retry_sends_the_same_visit_again_and_a_catcher_takes_the_last_error() {
    let workflow = machine(json!({
        "StartAt": "Call",
        "States": {
            "Call": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
                     "Parameters": {"FunctionName": "f", "Payload.$": "$"},
                     "Retry": [{"ErrorEquals": ["Boom"], "MaxAttempts": 1, "IntervalSeconds": 2}],
                     "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Handled"}],
                     "End": true},
            "Handled": {"Type": "Pass", "End": true}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({"a": 1}));
    let task = claim.next.clone().expect("claimed");
    let first = dispatched(&claim).remove(0);
    assert_eq!(invoked(&first).payload, r#"{"a":1}"#);
    let boom = r#"{"errorMessage":"no","errorType":"Boom"}"#;
    let failed = on_response(
        &task,
        &workflow,
        &order,
        &answered(&first, boom, Some("Unhandled")),
        Timestamp(5),
    );
    let task = failed.next.clone().expect("recorded");
    assert_eq!(scheduled(&failed), Some(std::time::Duration::from_secs(2)));
    assert!(
        dispatched(&failed).is_empty(),
        "the retry waits its interval"
    );
    assert_eq!(task.state, TaskState::Pending);
    // Its Run message comes after the interval: the same visit, the same key.
    let again = on_run(&task, &workflow, &order, "s2", Timestamp(2_005));
    let task = again.next.clone().expect("claimed again");
    let second = dispatched(&again).remove(0);
    assert_eq!(second.idempotency_key, first.idempotency_key);
    let failed = on_response(
        &task,
        &workflow,
        &order,
        &answered(&second, boom, Some("Unhandled")),
        Timestamp(2_010),
    );
    let task = failed.next.clone().expect("recorded");
    assert_eq!(task.state, TaskState::Processed);
    let output = run(&task).output.as_deref().cloned().expect("an output");
    assert_eq!(output["Error"], "Boom");
    assert_eq!(output["Cause"], boom);
}

#[test]
fn a_fail_state_fails_the_execution_and_the_task() {
    let workflow = machine(json!({
        "StartAt": "Stop",
        "States": {"Stop": {"Type": "Fail", "Error": "Nope", "CausePath": "$.why"}}
    }));
    let (_, _, claim) = started(&workflow, json!({"why": "because"}));
    let task = claim.next.clone().expect("decided");
    assert_eq!(task.state, TaskState::Error);
    let ended = run(&task);
    assert_eq!(ended.status, Status::Failed);
    assert_eq!(
        (ended.error.as_deref(), ended.cause.as_deref()),
        (Some("Nope"), Some("because"))
    );
    assert_eq!(task.error.as_deref(), Some("Nope"));
    // The Path forms take an intrinsic function too, as in Step Functions.
    let workflow = machine(json!({
        "StartAt": "Stop",
        "States": {"Stop": {"Type": "Fail", "ErrorPath": "$.code",
                            "CausePath": "States.Format('{} kg is over 25', $.kg)"}}
    }));
    let (_, _, claim) = started(&workflow, json!({"code": "TooHeavy", "kg": 40}));
    let task = claim.next.expect("decided");
    let failed = (run(&task).error.as_deref(), run(&task).cause.as_deref());
    assert_eq!(failed, (Some("TooHeavy"), Some("40 kg is over 25")));
}

#[test]
fn a_wait_state_is_a_timer_and_the_machine_goes_on_at_its_end() {
    let workflow = machine(json!({
        "StartAt": "Wait",
        "States": {
            "Wait": {"Type": "Wait", "Seconds": 10, "Next": "Done"},
            "Done": {"Type": "Pass", "Result": "woke", "End": true}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({}));
    let task = claim.next.clone().expect("claimed");
    assert_eq!(
        task.complete_by,
        Some(Timestamp(10_000)),
        "the lease is the timer's end"
    );
    let woke = on_expired(&task, &workflow, &order, Timestamp(10_000));
    let task = woke.next.clone().expect("woke");
    assert_eq!(task.state, TaskState::Pending, "released to a scheduler");
    let done = on_run(&task, &workflow, &order, "s1", Timestamp(10_001));
    let task = done.next.clone().expect("ended");
    assert_eq!(task.state, TaskState::Processed);
    assert_eq!(run(&task).output.as_deref(), Some(&json!("woke")));
}

#[test]
fn a_loop_that_never_waits_is_written_a_thousand_states_at_a_time() {
    let workflow = machine(json!({
        "StartAt": "Again",
        "States": {"Again": {"Type": "Pass", "Next": "Again"}}
    }));
    let (_, order, claim) = started(&workflow, json!({}));
    let task = claim.next.clone().expect("written");
    assert_eq!(task.state, TaskState::Pending, "handed to the next write");
    assert_eq!(scheduled(&claim), Some(std::time::Duration::ZERO));
    let events = run(&task).events;
    let next = on_run(&task, &workflow, &order, "s1", Timestamp(1));
    let task = next.next.clone().expect("written again");
    assert!(run(&task).events > events, "it moved on");
}

#[test]
fn what_the_engine_does_not_run_yet_is_refused_naming_the_state() {
    let map = Workflow::parse(
        "m.asl.json",
        &json!({"StartAt": "M", "States": {"M": {"Type": "Map", "ItemProcessor": {
            "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
            "StartAt": "P", "States": {"P": {"Type": "Pass", "End": true}}}, "End": true,
            "ItemReader": {"Resource": "arn:aws:states:::athena:getQueryResults",
                           "Parameters": {"QueryExecutionId": "q"}}}}})
        .to_string(),
    )
    .expect_err("a reader of a query's results is not run yet");
    assert_eq!(map.step.as_deref(), Some("M"));
    assert_eq!(map.field, "/States/M/ItemReader/Resource");
    assert!(map.message.contains("not run by this engine yet"), "{map}");
    let refused = Workflow::parse(
        "m.asl.json",
        &json!({"StartAt": "A", "States": {"A": {"Type": "Pass", "Next": "B"}}}).to_string(),
    )
    .expect_err("a missing target");
    assert!(
        refused.to_string().contains("Missing 'Next' target: B"),
        "{refused}"
    );
    assert_eq!(refused.file, "m.asl.json");
}

#[test]
fn an_execution_past_its_timeout_times_out() {
    let workflow = machine(json!({
        "TimeoutSeconds": 5,
        "StartAt": "Wait",
        "States": {"Wait": {"Type": "Wait", "Seconds": 60, "End": true}}
    }));
    let (_, order, claim) = started(&workflow, json!({}));
    let task = claim.next.clone().expect("claimed");
    assert_eq!(
        task.complete_by,
        Some(Timestamp(5_000)),
        "woken at the execution's end"
    );
    let woke = on_expired(&task, &workflow, &order, Timestamp(5_000));
    let task = woke.next.clone().expect("woke");
    let ended = on_run(&task, &workflow, &order, "s1", Timestamp(5_001));
    let task = ended.next.clone().expect("ended");
    assert_eq!(task.state, TaskState::Error);
    assert_eq!(run(&task).status, Status::TimedOut);
    assert_eq!(run(&task).error.as_deref(), Some("States.Timeout"));
}

/// No history cap, and no record that grows: a loop of visits of a Task (each its own
/// call) ends, the task's record as small at the end as once its history is full (Step
/// Functions stops an execution at 25,000 events). 10,000 visits here, in a debug
/// build's seconds; `SAS_LOOP_ITERATIONS=100000` for more.
#[test]
fn a_loop_of_many_thousand_calls_ends_and_its_record_stays_small() {
    let iterations: u64 = std::env::var("SAS_LOOP_ITERATIONS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(10_000);
    let workflow = machine(json!({
        "StartAt": "More?",
        "States": {
            "More?": {"Type": "Choice", "Choices": [
                {"Variable": "$.n", "NumericLessThan": iterations, "Next": "Call"}
            ], "Default": "Done"},
            "Call": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:1:function:f",
                     "ResultSelector": {"n.$": "States.MathAdd($.n, 1)"}, "Next": "More?"},
            "Done": {"Type": "Succeed"}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({"n": 0}));
    let mut task = claim.next.clone().expect("claimed");
    let mut request = dispatched(&claim).remove(0);
    let mut largest = 0;
    let mut settled = None;
    for call in 1..=iterations {
        let sent = invoked(&request);
        let decision = on_response(
            &task,
            &workflow,
            &order,
            &answered(&request, &sent.payload, None),
            Timestamp(0),
        );
        task = decision.next.clone().expect("recorded");
        let size = serde_json::to_vec(&task).expect("a record").len();
        largest = largest.max(size);
        // Its history is full (it keeps its last events) after a few hundred calls.
        if call == 1_000.min(iterations) {
            settled = Some(size);
        }
        if call < iterations {
            request = dispatched(&decision).remove(0);
        }
    }
    assert_eq!(request.idempotency_key, format!("t1/1/Call#{iterations}"));
    assert_eq!(task.state, TaskState::Processed);
    assert_eq!(
        run(&task).output.as_deref(),
        Some(&json!({"n": iterations}))
    );
    let settled = settled.expect("a size");
    // The counters' digits grow (the visit's, the attempt's, the events', in the
    // record and in the history it keeps): bytes a tenfold, never a record a visit.
    assert!(
        largest < settled + 256,
        "the record grew from {settled} to {largest} bytes"
    );
    println!("{iterations} visits: the largest record {largest} bytes");
}

/// Runs the children `decision` starts (machines that call nothing) and tells their
/// parent of each end, in turn, until it starts no more: the parent as it then is,
/// and every child's id.
fn run_children(workflow: &Workflow, order: &Order, decision: Decision) -> (Task, Vec<String>) {
    let (parent, children) = run_children_of(&[workflow], order, decision);
    (
        parent,
        children.iter().map(|child| child.id.to_string()).collect(),
    )
}

/// As [`run_children`], each child running the one of `workflows` it names (the
/// parent's is the first), and telling its parent of its start where that is all
/// its parent waits for: the parent, and each child as it then is.
fn run_children_of(
    workflows: &[&Workflow],
    order: &Order,
    decision: Decision,
) -> (Task, Vec<Task>) {
    let (parent, children, _) = run_children_then(workflows, order, decision);
    (parent, children)
}

/// As [`run_children_of`], with the effects of the last end told to the parent.
fn run_children_then(
    workflows: &[&Workflow],
    order: &Order,
    decision: Decision,
) -> (Task, Vec<Task>, Vec<Effect>) {
    let workflow = workflows[0];
    let mut parent = decision.next.clone().expect("the parent");
    let mut effects = decision.effects;
    let mut ids = Vec::new();
    while let Some((of, children)) = effects.iter().find_map(|effect| match effect {
        Effect::StartChildren { of, children, .. } => Some((of.clone(), children.clone())),
        _ => None,
    }) {
        effects.clear();
        for (item, input) in children {
            let mut submission = Submission::new(of.parent.child(&of.step_name, item), input);
            submission.parent = Some(crate::task::ParentLink {
                task: of.parent.clone(),
                step: of.step,
                item,
                run: of.run,
                scope: of.scope.clone(),
            });
            let child_workflow = workflows
                .iter()
                .find(|workflow| workflow.name == of.workflow)
                .expect("the child's workflow");
            let (child, child_order, _) = submit(child_workflow, submission, Timestamp(5));
            let ran = on_run(&child, child_workflow, &child_order, "s2", Timestamp(5));
            let child = ran.next.expect("the child ran");
            let ended = ChildEnded::of(&child)
                .or_else(|| ChildEnded::started(&child))
                .expect("the child ended, or started for a parent that waits for no more");
            ids.push(child);
            let told = on_child_ended(&parent, workflow, order, &ended, Timestamp(6));
            if let Some(next) = told.next {
                parent = next;
                effects.extend(told.effects);
            }
        }
    }
    (parent, ids, effects)
}

#[test]
fn a_parallel_and_a_map_run_a_child_task_each_and_gather_their_outputs_in_order() {
    let workflow = machine(json!({
        "StartAt": "Both",
        "States": {
            "Both": {"Type": "Parallel", "Next": "Each", "ResultPath": "$.both",
                     "Assign": {"seen": "yes"},
                     "Branches": [
                {"StartAt": "One", "States": {"One": {"Type": "Pass", "Result": 1, "End": true}}},
                {"StartAt": "Two", "States": {"Two": {"Type": "Pass", "Result": 2, "End": true}}}]},
            "Each": {"Type": "Map", "ItemsPath": "$.items", "MaxConcurrency": 1, "End": true,
                     "ItemSelector": {"at.$": "$$.Map.Item.Index", "value.$": "$$.Map.Item.Value"},
                     "ItemProcessor": {"StartAt": "Say", "States": {"Say": {"Type": "Pass",
                        "Parameters": {"said.$": "States.Format('{} {}', $seen, $.value)"},
                        "End": true}}}}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({"items": ["a", "b", "c"]}));
    let (task, ids) = run_children(&workflow, &order, claim);
    assert_eq!(task.state, TaskState::Processed, "{:?}", run(&task));
    assert_eq!(
        run(&task).output.as_deref(),
        Some(&json!([{"said": "yes a"}, {"said": "yes b"}, {"said": "yes c"}]))
    );
    assert_eq!(ids.len(), 5);
    assert!(
        ids[0].starts_with("t1~Both-") && ids[0].ends_with("~0"),
        "{ids:?}"
    );
    assert!(ids[2].starts_with("t1~Each-"), "{ids:?}");
}

#[test]
fn a_map_past_its_tolerated_failures_fails_and_its_catcher_takes_it() {
    let workflow = machine(json!({
        "StartAt": "Each",
        "States": {
            "Each": {"Type": "Map", "ToleratedFailureCount": 1, "MaxConcurrency": 1,
                     "Next": "Done",
                     "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}],
                     "ItemProcessor": {"StartAt": "Odd?", "States": {
                        "Odd?": {"Type": "Choice", "Choices": [
                            {"Variable": "$", "NumericEquals": 1, "Next": "No"}],
                            "Default": "Yes"},
                        "No": {"Type": "Fail", "Error": "Odd", "Cause": "one"},
                        "Yes": {"Type": "Pass", "End": true}}}},
            "Done": {"Type": "Succeed"},
            "Caught": {"Type": "Pass", "End": true}
        }
    }));
    let (_, order, claim) = started(&workflow, json!([0, 1, 2]));
    let (task, _) = run_children(&workflow, &order, claim);
    assert_eq!(
        run(&task).output.as_deref(),
        Some(&json!([0, {"Error": "Odd", "Cause": "one"}, 2])),
        "one failure is tolerated"
    );
    let (_, order, claim) = started(&workflow, json!([1, 1, 0]));
    let (task, ids) = run_children(&workflow, &order, claim);
    assert_eq!(task.state, TaskState::Processed);
    assert_eq!(
        run(&task).output.as_deref(),
        Some(&json!({"Error": "States.ExceedToleratedFailureThreshold",
                     "Cause": "The specified tolerated failure threshold was exceeded"}))
    );
    assert_eq!(
        ids.len(),
        2,
        "no child started once the state failed: {ids:?}"
    );
}

#[test]
fn a_wait_for_task_token_ends_with_its_tokens_use_and_each_visit_has_its_own_token() {
    let workflow = machine(json!({
        "StartAt": "Ask",
        "States": {
            "Ask": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
                    "Parameters": {"FunctionName": "ask", "Payload": {"token.$": "$$.Task.Token"}},
                    "ResultPath": "$.answer", "Next": "Again?"},
            "Again?": {"Type": "Choice", "Choices": [
                {"Variable": "$.answer.again", "BooleanEquals": true, "Next": "Ask"}],
                "Default": "Done"},
            "Done": {"Type": "Succeed"}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({}));
    let mut task = claim.next.clone().expect("claimed");
    let mut decision = claim;
    let mut tokens = Vec::new();
    for again in [true, false] {
        let request = dispatched(&decision).pop().expect("the function invoked");
        let sent: Value = serde_json::from_str(&invoked(&request).payload).expect("a payload");
        let token = sent["token"].as_str().expect("the token").to_owned();
        tokens.push(token.clone());
        // The function answers at once; the state waits for its token's use.
        let answered = on_response(
            &task,
            &workflow,
            &order,
            &answered(&request, "null", None),
            Timestamp(10),
        );
        task = answered.next.expect("recorded");
        assert_eq!(task.state, TaskState::Processing);
        let callback = CallbackUse {
            step: 0,
            token: Token::parse(&token),
            by: Caller::Token,
            outcome: CallbackOutcome::Output(json!({"again": again})),
        };
        let used = on_callback(&task, &workflow, &order, callback, Timestamp(20)).expect("used");
        task = used.next.expect("recorded");
        // Released: a scheduler takes the machine on from the state's exit.
        decision = on_run(&task, &workflow, &order, "s1", Timestamp(21));
        task = decision.next.clone().expect("moved on");
    }
    assert_ne!(
        tokens[0], tokens[1],
        "each visit waits under a token of its own"
    );
    let stale = CallbackUse {
        step: 0,
        token: Token::parse(&tokens[0]),
        by: Caller::Token,
        outcome: CallbackOutcome::Output(json!({})),
    };
    assert!(on_callback(&task, &workflow, &order, stale, Timestamp(30)).is_err());
    assert_eq!(run(&task).status, Status::Succeeded);
    assert_eq!(
        run(&task).output.as_deref(),
        Some(&json!({"answer": {"again": false}}))
    );
}

#[test]
fn an_error_and_a_cause_past_step_functions_lengths_are_cut_to_them() {
    let workflow = machine(json!({
        "StartAt": "Call",
        "States": {"Call": {"Type": "Task", "End": true,
                            "Resource": "arn:aws:lambda:us-east-1:123456789012:function:f"}}
    }));
    let (_, order, claim) = started(&workflow, json!({}));
    let task = claim.next.clone().expect("claimed");
    let request = dispatched(&claim).pop().expect("invoked");
    let error_type = "E".repeat(1_000);
    let payload = json!({"errorType": error_type, "errorMessage": "m".repeat(100_000)});
    let answer = answered(&request, &payload.to_string(), Some("Unhandled"));
    let ended = on_response(&task, &workflow, &order, &answer, Timestamp(5));
    let task = ended.next.expect("recorded");
    assert_eq!(task.state, TaskState::Error);
    let (error, cause) = (run(&task).error.clone(), run(&task).cause.clone());
    let (error, cause) = (error.unwrap_or_default(), cause.unwrap_or_default());
    assert!(
        error.starts_with("EEE") && error.len() <= 256,
        "{}",
        error.len()
    );
    assert!(cause.len() <= 32_768, "{}", cause.len());
    assert!(cause.ends_with("[cut]"), "marked as cut");
    assert!(task.error.as_ref().is_some_and(|e| e.len() <= 256));
    for event in run(&task).new_events.iter() {
        let kind = event.read().event["type"].clone();
        assert!(event.size() < 40_000, "{} bytes: {kind}", event.size());
    }
}
