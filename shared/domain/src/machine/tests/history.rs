//! An execution's history: the events each write makes, in Step Functions' words and
//! numbering.

use serde_json::{Value, json};

use super::{answered, dispatched, first_answered, invoked, machine, started};
use crate::decide::{Decision, on_response};
use crate::machine::graph::Visited;
use crate::machine::history::HistoryEvent;
use crate::task::TaskState;
use crate::time::Timestamp;

/// The events a decision wrote.
fn written(decision: &Decision) -> Vec<HistoryEvent> {
    let task = decision.next.as_ref().expect("written");
    task.machine.as_ref().expect("a run").written_events()
}

fn kinds(events: &[HistoryEvent]) -> Vec<String> {
    events
        .iter()
        .map(|event| event.event["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn each_write_adds_its_events_numbered_as_step_functions_numbers_them() {
    let workflow = machine(json!({
        "StartAt": "Start",
        "States": {
            "Start": {"Type": "Pass", "Result": {"n": 1}, "Next": "Call"},
            "Call": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
                     "Parameters": {"FunctionName": "f", "Payload.$": "$"},
                     "OutputPath": "$.Payload", "Next": "Big?"},
            "Big?": {"Type": "Choice", "Choices": [{"Variable": "$.n", "NumericGreaterThan": 5, "Next": "Done"}],
                     "Default": "Done"},
            "Done": {"Type": "Succeed"}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({}));
    let mut events = written(&claim);
    assert_eq!(
        kinds(&events),
        [
            "ExecutionStarted",
            "PassStateEntered",
            "PassStateExited",
            "TaskStateEntered"
        ],
        "the claim's write: up to the Task that waits"
    );
    let task = claim.next.clone().expect("claimed");
    let request = dispatched(&claim).remove(0);
    let payload = invoked(&request).payload;
    let answered = on_response(
        &task,
        &workflow,
        &order,
        &answered(&request, &payload, None),
        Timestamp(10),
    );
    assert_eq!(
        answered.next.as_ref().map(|t| t.state),
        Some(TaskState::Processed)
    );
    events.extend(written(&answered));
    assert_eq!(
        kinds(&events),
        [
            "ExecutionStarted",
            "PassStateEntered",
            "PassStateExited",
            "TaskStateEntered",
            "TaskScheduled",
            "TaskStarted",
            "TaskSucceeded",
            "TaskStateExited",
            "ChoiceStateEntered",
            "ChoiceStateExited",
            "SucceedStateEntered",
            "SucceedStateExited",
            "ExecutionSucceeded",
        ]
    );
    let ids: Vec<u64> = events.iter().map(|event| event.id).collect();
    assert_eq!(ids, (1..=13).collect::<Vec<_>>(), "one id each, in order");
    let details = |index: usize, field: &str| events[index].event[field].clone();
    assert_eq!(
        details(1, "stateEnteredEventDetails")["input"],
        json!("{}"),
        "a state's input, as JSON text"
    );
    let scheduled = details(4, "taskScheduledEventDetails");
    assert_eq!(
        (&scheduled["resourceType"], &scheduled["resource"]),
        (&json!("lambda"), &json!("invoke"))
    );
    let parameters: Value =
        serde_json::from_str(scheduled["parameters"].as_str().unwrap_or_default()).expect("JSON");
    assert_eq!(
        parameters,
        json!({"FunctionName": "f", "Payload": {"n": 1}})
    );
    assert_eq!(
        details(12, "executionSucceededEventDetails")["output"],
        json!("{\"n\":1}")
    );
}

#[test]
fn a_failure_ends_the_history_with_its_error_and_cause() {
    let workflow = machine(json!({
        "StartAt": "Call",
        "States": {
            "Call": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:1:function:f", "End": true}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({}));
    let error = r#"{"errorMessage":"no","errorType":"Boom"}"#;
    let failed = first_answered(
        &workflow,
        &order,
        &claim,
        (error, Some("Unhandled")),
        Timestamp(10),
    );
    let events = written(&failed);
    assert_eq!(
        kinds(&events),
        [
            "LambdaFunctionScheduled",
            "LambdaFunctionStarted",
            "LambdaFunctionFailed",
            "ExecutionFailed"
        ]
    );
    let ended = &events[3].event["executionFailedEventDetails"];
    assert_eq!(
        (&ended["error"], &ended["cause"]),
        (&json!("Boom"), &json!(error))
    );
    assert_eq!(events[3].id, 6, "after the state's entry and its three");
}

#[test]
fn a_loop_of_many_states_is_written_a_bounded_history_at_a_time() {
    let workflow = machine(json!({
        "StartAt": "Loop",
        "States": {
            "Loop": {"Type": "Pass", "Parameters": {"n.$": "States.MathAdd($.n, 1)"}, "Next": "Again?"},
            "Again?": {"Type": "Choice", "Choices": [{"Variable": "$.n", "NumericLessThan": 500, "Next": "Loop"}],
                       "Default": "Done"},
            "Done": {"Type": "Succeed"}
        }
    }));
    let (_, _, claim) = started(&workflow, json!({"n": 0}));
    let events = written(&claim);
    assert!(
        events.len() <= crate::machine::history::EVENTS_A_WRITE + 2,
        "{} events in one write",
        events.len()
    );
    assert_eq!(
        claim.next.as_ref().map(|t| t.state),
        Some(TaskState::Pending),
        "handed over to the next write"
    );
}

#[test]
fn the_graph_shows_each_state_its_visits_its_last_input_and_output_and_the_path() {
    let workflow = machine(json!({
        "StartAt": "Call",
        "States": {
            "Call": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:1:function:f",
                     "Catch": [{"ErrorEquals": ["Boom"], "ResultPath": "$.error", "Next": "Handled"}],
                     "Next": "Done"},
            "Handled": {"Type": "Fail", "Error": "Handled", "Cause": "it boomed"},
            "Done": {"Type": "Succeed"}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({"a": 1}));
    let mut events = written(&claim);
    let error = r#"{"errorMessage":"no","errorType":"Boom"}"#;
    let failed = first_answered(
        &workflow,
        &order,
        &claim,
        (error, Some("Unhandled")),
        Timestamp(10),
    );
    events.extend(written(&failed));
    let machine = &workflow.machine.as_ref().expect("a machine").0;
    let graph = crate::machine::graph::graph(machine, &events);
    let shown: Vec<(&str, usize, u32, Visited)> = (graph.states.iter())
        .map(|node| (node.name.as_str(), node.layer, node.visits, node.visited))
        .collect();
    assert_eq!(
        shown,
        [
            ("Call", 0, 1, Visited::Caught),
            ("Done", 1, 0, Visited::NotVisited),
            ("Handled", 1, 1, Visited::Failed),
        ]
    );
    assert_eq!(graph.states[0].next, ["Done", "Handled"]);
    assert_eq!(graph.states[0].input, Some(json!({"a": 1})));
    assert_eq!(graph.states[0].error.as_deref(), Some("Boom"));
    assert_eq!(
        (
            graph.states[2].error.as_deref(),
            graph.states[2].cause.as_deref()
        ),
        (Some("Handled"), Some("it boomed"))
    );
    assert_eq!(graph.path, ["Call", "Handled"]);
    assert!(graph.whole);
}

#[test]
fn a_write_keeps_values_as_json_and_they_read_back_as_their_text() {
    let workflow = machine(json!({
        "StartAt": "Start",
        "States": {
            "Start": {"Type": "Pass", "Result": {"n": 1.5, "name": "a \"b\""}, "Next": "Named"},
            "Named": {"Type": "Pass", "Result": "hello", "End": true}
        }
    }));
    let (_, _, claim) = started(&workflow, json!({"customer": "c-1"}));
    let run = claim
        .next
        .as_ref()
        .and_then(|t| t.machine.as_ref())
        .expect("a run");
    let kept: Vec<Value> = (run.new_events.iter())
        .map(|event| serde_json::from_str(event.event.get()).expect("JSON"))
        .collect();
    let exited =
        |events: &[Value], index: usize| events[index]["stateExitedEventDetails"]["output"].clone();
    assert_eq!(kept[2]["type"], "PassStateExited");
    assert_eq!(
        exited(&kept, 2),
        json!({"n": 1.5, "name": "a \"b\""}),
        "an object kept as JSON, not escaped in a string"
    );
    assert_eq!(
        exited(&kept, 4),
        json!("\"hello\""),
        "a string kept as its text: a string read is always text"
    );
    // Read back, by the write itself or from a store's JSON, as Step Functions
    // gives them: every value its text.
    let read = run.written_events();
    let stored: Vec<HistoryEvent> =
        serde_json::from_str(&serde_json::to_string(&*run.new_events).expect("JSON"))
            .expect("events");
    assert_eq!(stored, read);
    let outputs: Vec<&Value> = (read.iter())
        .filter(|event| event.event["type"] == "PassStateExited")
        .map(|event| &event.event["stateExitedEventDetails"]["output"])
        .collect();
    assert_eq!(
        outputs,
        [
            &json!(r#"{"n":1.5,"name":"a \"b\""}"#),
            &json!(r#""hello""#)
        ]
    );
    assert_eq!(
        read[0].event["executionStartedEventDetails"]["input"],
        json!(r#"{"customer":"c-1"}"#)
    );
}

#[test]
fn a_tasks_answer_is_kept_by_the_history_not_by_its_step_once_its_state_is_left() {
    let workflow = machine(json!({
        "StartAt": "First",
        "States": {
            "First": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:1:function:f",
                      "ResultPath": "$.first", "Next": "Second"},
            "Second": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:1:function:g", "End": true}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({}));
    let left = first_answered(
        &workflow,
        &order,
        &claim,
        (r#"{"answer":42}"#, None),
        Timestamp(10),
    );
    let task = left.next.as_ref().expect("written");
    let step = |name: &str| {
        task.steps
            .iter()
            .find(|s| *s.name == *name)
            .expect("a step")
    };
    assert_eq!(
        step("First").output,
        None,
        "the record does not carry the answer on"
    );
    assert_eq!(
        task.machine.as_ref().expect("a run").input.as_ref(),
        &json!({"first": {"answer": 42}}),
        "the result went into the state's output"
    );
    let events = written(&left);
    let succeeded = events
        .iter()
        .find(|e| e.event["type"] == "LambdaFunctionSucceeded")
        .expect("the Task's end in the history");
    assert_eq!(
        succeeded.event["lambdaFunctionSucceededEventDetails"]["output"],
        json!(r#"{"answer":42}"#)
    );
    assert_eq!(dispatched(&left).len(), 1, "the next state's call");
}
