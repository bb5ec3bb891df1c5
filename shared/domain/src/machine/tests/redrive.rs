//! `RedriveExecution`: an execution runs again from the state where it stopped, with
//! its input and variables, the states before it not run again, its history going on.
//! A resubmitted one runs again from its start; its history goes on too.

use serde_json::{Value, json};

use super::{answered, dispatched, first_answered, invoked, machine, run, started};
use crate::callback::Token;
use crate::decide::{
    CallbackOutcome, CallbackUse, Decision, Refused, Resubmit, on_callback, on_response, on_run,
    resubmit,
};
use crate::machine::{Status, is_redrivable, redrive};
use crate::task::{Actor, Caller, Order, Request, Task, TaskState};
use crate::time::Timestamp;
use crate::workflow::Workflow;

fn operator(at: i64) -> Request {
    Request {
        by: Actor::Operator,
        at: Timestamp(at),
        batch: None,
    }
}

/// The task of `claim` once its first call failed (the function raised `Boom`, at 5):
/// in Error, its execution Failed.
fn failed_at_its_first_call(workflow: &Workflow, order: &Order, claim: &Decision) -> Task {
    let boom = (r#"{"errorType":"Boom"}"#, Some("Unhandled"));
    let failed = first_answered(workflow, order, claim, boom, Timestamp(5));
    let task = failed.next.expect("failed");
    assert_eq!(
        (task.state, run(&task).status),
        (TaskState::Error, Status::Failed)
    );
    task
}

#[test]
fn a_failed_execution_is_redriven_from_the_state_where_it_stopped() {
    let workflow = machine(json!({
        "StartAt": "Start",
        "States": {
            "Start": {"Type": "Pass", "Assign": {"seen": "yes"}, "Next": "Call"},
            "Call": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
                     "Parameters": {"FunctionName": "f", "Payload": {"seen.$": "$seen", "n.$": "$.n"}},
                     "OutputPath": "$.Payload", "End": true}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({"n": 1}));
    let task = failed_at_its_first_call(&workflow, &order, &claim);
    assert!(is_redrivable(&task));

    let redriven =
        redrive(&task, &workflow, &order, operator(10), Timestamp(10)).expect("redriven");
    let task = redriven.next.clone().expect("written");
    let claim = on_run(&task, &workflow, &order, "s1", Timestamp(11));
    let again = dispatched(&claim).remove(0);
    assert_eq!(again.idempotency_key, "t1/2/Call#1", "a new run's call");
    let payload: Value = serde_json::from_str(&invoked(&again).payload).expect("JSON");
    assert_eq!(
        payload,
        json!({"seen": "yes", "n": 1}),
        "its input and variables kept"
    );
    let events: Vec<String> = [&redriven, &claim]
        .iter()
        .flat_map(|decision| {
            let run = decision.next.as_ref().and_then(|t| t.machine.as_deref());
            run.map(|run| run.written_events()).unwrap_or_default()
        })
        .map(|event| {
            format!(
                "{} {}",
                event.id,
                event.event["type"].as_str().unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(
        events,
        ["9 ExecutionRedriven", "10 TaskStateEntered"],
        "the Pass before it not run again; the history after the first run's end (event 8)"
    );
    let task = claim.next.clone().expect("claimed");
    let done = on_response(
        &task,
        &workflow,
        &order,
        &answered(&again, r#"{"ok":1}"#, None),
        Timestamp(12),
    );
    let task = done.next.expect("done");
    assert_eq!(run(&task).status, Status::Succeeded);
    assert_eq!(run(&task).output.as_deref(), Some(&json!({"ok": 1})));
    assert!(!is_redrivable(&task));
    let refused = redrive(&task, &workflow, &order, operator(20), Timestamp(20));
    assert!(
        matches!(refused, Err(Refused::NotRedrivable)),
        "{refused:?}"
    );
}

/// A task token wait whose call's effect may be in place (its function took the
/// token) is redriven as a new call of the new run: the token it gives then is the
/// one its wait takes.
#[test]
fn a_redriven_task_token_wait_takes_the_token_its_new_call_gave() {
    let workflow = machine(json!({
        "StartAt": "Ask",
        "States": {
            "Ask": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
                    "Parameters": {"FunctionName": "ask", "Payload": {"token.$": "$$.Task.Token"}},
                    "End": true}
        }
    }));
    let (_, order, mut decision) = started(&workflow, json!({}));
    let mut task = decision.next.clone().expect("claimed");
    for (run, outcome) in [
        (
            1,
            CallbackOutcome::Error(json!({"Error": "No", "Cause": "not now"}).to_string()),
        ),
        (2, CallbackOutcome::Output(json!("yes"))),
    ] {
        let request = dispatched(&decision).remove(0);
        let sent: Value = serde_json::from_str(&invoked(&request).payload).expect("JSON");
        let called = on_response(
            &task,
            &workflow,
            &order,
            &answered(&request, "null", None),
            Timestamp(run * 100),
        );
        task = called.next.expect("called");
        let callback = CallbackUse {
            step: 0,
            token: Token::parse(sent["token"].as_str().expect("a token")),
            by: Caller::Token,
            outcome,
        };
        let used = on_callback(&task, &workflow, &order, callback, Timestamp(run * 100 + 1));
        task = used
            .unwrap_or_else(|e| panic!("run {run}: {e}"))
            .next
            .expect("used");
        task = on_run(&task, &workflow, &order, "s1", Timestamp(run * 100 + 2))
            .next
            .expect("moved on");
        if run == 1 {
            assert_eq!(run_status(&task), Status::Failed);
            decision =
                redrive(&task, &workflow, &order, operator(150), Timestamp(150)).expect("redriven");
            task = decision.next.clone().expect("written");
            decision = on_run(&task, &workflow, &order, "s1", Timestamp(151));
            task = decision.next.clone().expect("claimed");
        }
    }
    assert_eq!(run_status(&task), Status::Succeeded);
}

fn run_status(task: &crate::task::Task) -> Status {
    run(task).status
}

#[test]
fn an_ended_execution_restarts_from_a_state_it_entered_with_the_input_it_entered_with() {
    let workflow = machine(json!({
        "StartAt": "First",
        "States": {
            "First": {"Type": "Pass", "Result": {"n": 1}, "Next": "Second"},
            "Second": {"Type": "Pass", "End": true}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({}));
    let ended = claim.next.expect("ended");
    assert_eq!(ended.state, TaskState::Processed);
    let repair = |entered_with: Option<Value>| crate::decide::Repair {
        request: operator(1),
        input: Some(json!({"n": 2})),
        outputs: std::collections::BTreeMap::new(),
        from: Some("Second".to_owned()),
        reason: None,
        entered_with: entered_with.map(std::sync::Arc::new),
    };
    let refused = crate::decide::repair(&ended, &workflow, &order, repair(None), Timestamp(1));
    assert!(
        matches!(&refused, Err(Refused::Patch(field, why)) if field == "from" && why.contains("never entered it")),
        "{refused:?}"
    );
    let restarted = crate::decide::repair(
        &ended,
        &workflow,
        &order,
        repair(Some(json!({"n": 1}))),
        Timestamp(1),
    )
    .expect("restarted")
    .next
    .expect("written");
    assert_eq!(restarted.run, 2);
    assert_eq!(run(&restarted).state.as_deref(), Some("Second"));
    assert_eq!(*run(&restarted).input, json!({"n": 2}), "its input patched");
    let done = on_run(&restarted, &workflow, &order, "s1", Timestamp(2))
        .next
        .expect("ended again");
    assert_eq!(done.state, TaskState::Processed);
    assert_eq!(run(&done).output.as_deref(), Some(&json!({"n": 2})));
}

#[test]
fn a_failed_execution_resubmitted_runs_again_from_its_start_under_new_keys() {
    let workflow = machine(json!({
        "StartAt": "Call",
        "States": {"Call": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:1:function:f", "End": true}}
    }));
    let (_, order, claim) = started(&workflow, json!({}));
    let first = dispatched(&claim).remove(0);
    let task = failed_at_its_first_call(&workflow, &order, &claim);
    assert_eq!(task.error.as_deref(), Some("Boom"));
    let request = Resubmit {
        request: operator(10),
        input: None,
    };
    let again = resubmit(&task, &workflow, &order, request, Timestamp(10)).expect("resubmitted");
    let task = again.next.clone().expect("resubmitted");
    assert!(run(&task).is_unstarted(), "it starts again");
    let claim = on_run(&task, &workflow, &order, "s1", Timestamp(11));
    let second = dispatched(&claim).remove(0);
    assert_eq!(first.idempotency_key, "t1/1/Call#1");
    assert_eq!(second.idempotency_key, "t1/2/Call#1");
    // Its history goes on after the first run's end (event 6), none written over.
    let events = claim
        .next
        .as_ref()
        .expect("claimed")
        .machine
        .as_ref()
        .expect("a run")
        .written_events();
    let shown: Vec<(u64, &str)> = (events.iter())
        .map(|event| (event.id, event.event["type"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(shown, [(7, "ExecutionRedriven"), (8, "TaskStateEntered")]);
    assert_eq!(
        events[0].event["executionRedrivenEventDetails"]["redriveCount"],
        1
    );
}
