//! Tasks that start an execution of another state machine
//! (`arn:aws:states:::states:startExecution`): a child task running that machine,
//! waited for to its end (`.sync`, `.sync:2`), only to its start, or, given the task's
//! token, until the token is used (`.waitForTaskToken`).

use serde_json::{Value, json};

use super::{machine, run, run_children_of, started};
use crate::callback::Token;
use crate::decide::{CallbackOutcome, CallbackUse, on_callback, on_expired, on_run};
use crate::task::{Caller, TaskState};
use crate::time::Timestamp;
use crate::workflow::Workflow;

/// A machine named `child`: it fails on `{"fail": true}`, waits a minute on
/// `{"wait": true}`, and otherwise doubles `n`.
fn child() -> Workflow {
    let definition = json!({
        "StartAt": "How?",
        "States": {
            "How?": {"Type": "Choice", "Default": "Double", "Choices": [
                {"Variable": "$.fail", "IsPresent": true, "Next": "Broke"},
                {"Variable": "$.wait", "IsPresent": true, "Next": "Later"}]},
            "Broke": {"Type": "Fail", "Error": "Child.Broke", "Cause": "as asked"},
            "Later": {"Type": "Wait", "Seconds": 60, "End": true},
            "Double": {"Type": "Pass", "End": true,
                       "Parameters": {"n.$": "States.MathAdd($.n, $.n)"}}
        }
    });
    Workflow::parse("machines/child.asl.json", &definition.to_string()).expect("the child")
}

/// A machine that starts `child` with its input, on `resource`, and catches what fails.
fn parent(resource: &str) -> Workflow {
    machine(json!({
        "StartAt": "Start",
        "States": {
            "Start": {"Type": "Task", "Resource": resource, "End": true,
                      "Parameters": {
                        "StateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:child",
                        "Input.$": "$"},
                      "Catch": [{"ErrorEquals": ["States.TaskFailed"], "Next": "Caught"}]},
            "Caught": {"Type": "Pass", "End": true}
        }
    }))
}

/// Runs `parent` with `input`, its child to where it waits or ends: the execution's
/// output, and the child.
fn executed(parent: &Workflow, input: Value) -> (Value, crate::task::Task) {
    let child = child();
    let (_, order, claim) = started(parent, input);
    let (task, children) = run_children_of(&[parent, &child], &order, claim);
    assert_eq!(task.state, TaskState::Processed, "{:?}", run(&task));
    let output = run(&task).output.as_deref().cloned().expect("an output");
    let [child] = <[_; 1]>::try_from(children).expect("one child");
    (output, child)
}

#[test]
fn a_sync_task_waits_for_the_executions_end_and_is_given_its_description() {
    let (output, child) = executed(
        &parent("arn:aws:states:::states:startExecution.sync"),
        json!({"n": 21}),
    );
    assert_eq!(&*child.workflow.name, "child");
    assert!(child.id.as_str().starts_with("t1~Start-"), "{}", child.id);
    assert_eq!(output["Status"], json!("SUCCEEDED"));
    assert_eq!(output["Output"], json!("{\"n\":42}"), "as text: {output}");
    assert_eq!(output["Input"], json!("{\"n\":21}"));
    assert_eq!(
        output["ExecutionArn"],
        json!(format!(
            "arn:aws:states:us-east-1:000000000000:execution:child:{}",
            child.id.as_str()
        ))
    );
    assert_eq!(
        output["StateMachineArn"],
        json!("arn:aws:states:us-east-1:000000000000:stateMachine:child")
    );
    let (output, _) = executed(
        &parent("arn:aws:states:::states:startExecution.sync:2"),
        json!({"n": 2}),
    );
    assert_eq!(output["Output"], json!({"n": 4}), "as JSON: {output}");
}

#[test]
fn a_child_that_fails_fails_its_sync_task_with_its_description() {
    let (output, child) = executed(
        &parent("arn:aws:states:::states:startExecution.sync:2"),
        json!({"fail": true}),
    );
    assert_eq!(child.state, TaskState::Error);
    assert_eq!(output["Error"], json!("States.TaskFailed"), "{output}");
    let cause: Value =
        serde_json::from_str(output["Cause"].as_str().expect("a cause")).expect("JSON");
    assert_eq!(cause["Status"], json!("FAILED"));
    assert_eq!(cause["Error"], json!("Child.Broke"));
    assert_eq!(cause["Cause"], json!("as asked"));
}

#[test]
fn a_plain_start_ends_the_task_once_the_execution_has_started() {
    let (output, child) = executed(
        &parent("arn:aws:states:::states:startExecution"),
        json!({"wait": true}),
    );
    assert_eq!(child.state, TaskState::Processing, "the child still waits");
    assert_eq!(
        output
            .as_object()
            .map(|fields| fields.keys().map(String::as_str).collect::<Vec<_>>()),
        Some(vec!["ExecutionArn", "StartDate"]),
        "{output}"
    );
    assert_eq!(output["StartDate"], json!(5), "the child's creation");
}

/// A machine that starts `child` with `input` and its task token, and waits for the
/// token's use at most ten minutes.
fn token_giver() -> Workflow {
    machine(json!({
        "StartAt": "Start",
        "States": {
            "Start": {"Type": "Task", "End": true, "TimeoutSeconds": 600,
                      "Resource": "arn:aws:states:::states:startExecution.waitForTaskToken",
                      "Parameters": {
                        "StateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:child",
                        "Input": {"wait": true, "token.$": "$$.Task.Token"}}}
        }
    }))
}

#[test]
fn a_start_that_gives_its_task_token_ends_when_the_token_is_used() {
    let parent = token_giver();
    let (_, order, claim) = started(&parent, json!({}));
    let (task, children) = run_children_of(&[&parent, &child()], &order, claim);
    assert_eq!(
        task.state,
        TaskState::Processing,
        "it waits: {:?}",
        run(&task)
    );
    assert!(task.steps[0].waiting.is_some(), "for the token's use");
    let [child] = <[_; 1]>::try_from(children).expect("one child");
    let token = run(&child).input["token"].as_str().map(str::to_owned);
    let token = token.expect("the child was given the token");
    let callback = CallbackUse {
        step: 0,
        token: Token::parse(&token),
        by: Caller::Token,
        outcome: CallbackOutcome::Output(json!({"approved": true})),
    };
    let used = on_callback(&task, &parent, &order, callback, Timestamp(20)).expect("used");
    let task = on_run(
        &used.next.expect("recorded"),
        &parent,
        &order,
        "s1",
        Timestamp(21),
    )
    .next
    .expect("moved on");
    assert_eq!(task.state, TaskState::Processed, "{:?}", run(&task));
    assert_eq!(
        run(&task).output.as_deref(),
        Some(&json!({"approved": true}))
    );
}

#[test]
fn a_start_whose_token_is_never_used_times_out() {
    let parent = token_giver();
    let (_, order, claim) = started(&parent, json!({}));
    let (task, _) = run_children_of(&[&parent, &child()], &order, claim);
    let lease = task.steps[0].complete_by.expect("the wait's end");
    assert!(lease >= Timestamp(600_000), "its timeout: {lease:?}");
    let expired = on_expired(&task, &parent, &order, lease)
        .next
        .expect("expired");
    let task = on_run(&expired, &parent, &order, "s1", lease)
        .next
        .expect("moved on");
    assert_eq!(task.state, TaskState::Error, "{:?}", run(&task));
    assert_eq!(run(&task).error.as_deref(), Some("States.Timeout"));
}
