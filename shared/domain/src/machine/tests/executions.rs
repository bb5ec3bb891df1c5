//! Tasks that start an execution of another state machine
//! (`arn:aws:states:::states:startExecution`): a child task running that machine,
//! waited for to its end (`.sync`, `.sync:2`) or only to its start.

use serde_json::{Value, json};

use super::{machine, run, run_children_of, started};
use crate::task::TaskState;
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
    assert_eq!(child.workflow.name, "child");
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

#[test]
fn a_start_that_waits_for_a_task_token_is_refused_naming_the_state() {
    let refused = Workflow::parse(
        "m.asl.json",
        &json!({"StartAt": "S", "States": {"S": {"Type": "Task", "End": true,
            "Resource": "arn:aws:states:::states:startExecution.waitForTaskToken",
            "Parameters": {"StateMachineArn": "arn:aws:states:us-east-1:1:stateMachine:c"}}}})
        .to_string(),
    )
    .expect_err("not run yet");
    assert_eq!(refused.step.as_deref(), Some("S"));
    assert_eq!(refused.field, "/States/S/Resource");
}
