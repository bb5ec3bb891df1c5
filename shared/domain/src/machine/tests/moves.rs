//! A state machine's execution moved onto another version of its state machine: it
//! goes on as the new version defines it, and a move that cannot be made safe is
//! refused, naming the state.

use std::collections::BTreeMap;

use super::*;
use crate::decide::{Move, Refused, move_task, plan_move};
use crate::task::{Actor, Request};

/// Version `version` of a machine that waits 10 s, then says `said`.
fn waiting(version: u32, wait: &str, said: &str) -> Workflow {
    let mut workflow = machine(json!({
        "StartAt": wait,
        "States": {
            wait: {"Type": "Wait", "Seconds": 10, "Next": "Say"},
            "Say": {"Type": "Pass", "Result": said, "End": true}
        }
    }));
    workflow.version = version;
    workflow
}

fn moving(renamed: &[(&str, &str)]) -> Move {
    Move {
        request: Request {
            by: Actor::Operator,
            at: Timestamp(0),
            batch: None,
        },
        renamed: (renamed.iter())
            .map(|(from, to)| ((*from).to_owned(), (*to).to_owned()))
            .collect::<BTreeMap<_, _>>(),
    }
}

#[test]
fn an_execution_waiting_in_a_state_moves_on_and_ends_as_the_new_version_says() {
    let (v1, v2) = (waiting(1, "Wait", "v1"), waiting(2, "Wait", "v2"));
    let (_, order, claim) = started(&v1, json!({}));
    let task = claim.next.expect("claimed");
    let moved = move_task(&task, (&v1, &v2), &order, moving(&[]), Timestamp(5_000))
        .expect("moved")
        .next
        .expect("written");
    assert_eq!(moved.workflow.version, 2);
    assert_eq!(run(&moved).state.as_deref(), Some("Wait"));
    let woke = on_expired(&moved, &v2, &order, Timestamp(10_000));
    let task = woke.next.expect("woke");
    let done = on_run(&task, &v2, &order, "s1", Timestamp(10_001));
    let task = done.next.expect("ended");
    assert_eq!(task.state, TaskState::Processed);
    assert_eq!(run(&task).output.as_deref(), Some(&json!("v2")));
}

#[test]
fn a_move_of_an_execution_that_cannot_be_made_safe_is_refused_naming_the_state() {
    let v1 = waiting(1, "Wait", "v1");
    let (_, order, claim) = started(&v1, json!({}));
    let task = claim.next.expect("claimed");
    let napping = waiting(2, "Nap", "v2");
    for (renamed, says) in [
        (
            vec![],
            "step 'Wait' is Processing: version 2 has no step 'Wait' to carry it to",
        ),
        (
            vec![("Wait", "Nap")],
            "step 'Wait' is at work as step 1 of 1: it keeps its place and its name",
        ),
    ] {
        match plan_move(&task, (&v1, &napping), &order, &moving(&renamed)) {
            Err(Refused::CannotMove(why)) => assert!(why.contains(says), "'{says}' in '{why}'"),
            other => panic!("refused, not {other:?}"),
        }
    }
    assert_eq!(
        plan_move(&task, (&v1, &napping), &order, &moving(&[("Sleep", "Nap")])),
        Err(Refused::NoSuchStep("Sleep".to_owned()))
    );
    let parallel = |version: u32| {
        let mut workflow = machine(json!({
            "StartAt": "Both",
            "States": {"Both": {"Type": "Parallel", "End": true, "Branches": [
                {"StartAt": "W", "States": {"W": {"Type": "Wait", "Seconds": 5, "End": true}}}]}}
        }));
        workflow.version = version;
        workflow
    };
    let (p1, p2) = (parallel(1), parallel(2));
    let (_, branched, claim) = started(&p1, json!({}));
    let parent = claim.next.expect("its branches started");
    match plan_move(&parent, (&p1, &p2), &branched, &moving(&[])) {
        Err(Refused::CannotMove(why)) => assert!(
            why.contains("step 'Both' runs its branches on version 1"),
            "{why}"
        ),
        other => panic!("refused, not {other:?}"),
    }
    let workflow = crate::workflow::Workflow::parse(
        "w.json",
        r#"{"name": "w", "version": 2, "steps": [{"name": "Wait", "sleep": "10s"}]}"#,
    )
    .expect("a workflow");
    assert!(matches!(
        plan_move(&task, (&v1, &workflow), &order, &moving(&[])),
        Err(Refused::CannotMove(why)) if why.contains("onto a version of its state machine")
    ));
}

#[test]
fn a_failed_execution_moved_is_redriven_from_the_state_it_stopped_at_renamed() {
    let v1 = machine(json!({
        "StartAt": "Decide",
        "States": {
            "Decide": {"Type": "Choice", "Choices": [
                {"Variable": "$.n", "NumericEquals": 2, "Next": "Done"}]},
            "Done": {"Type": "Pass", "Result": "done", "End": true}
        }
    }));
    let mut v2 = machine(json!({
        "StartAt": "Route",
        "States": {
            "Route": {"Type": "Choice", "Choices": [
                {"Variable": "$.n", "NumericEquals": 2, "Next": "Done"}], "Default": "Done"},
            "Done": {"Type": "Pass", "Result": "done", "End": true}
        }
    }));
    v2.version = 2;
    let (_, order, claim) = started(&v1, json!({"n": 1}));
    let failed = claim.next.expect("failed");
    assert_eq!(failed.state, TaskState::Error);
    assert_eq!(super::super::stopped_state(&failed), Some("Decide"));
    let renamed = moving(&[("Decide", "Route")]);
    let moved = move_task(&failed, (&v1, &v2), &order, renamed, Timestamp(2));
    let moved = moved.expect("moved").next.expect("written");
    assert_eq!(super::super::stopped_state(&moved), Some("Route"));
    let request = moving(&[]).request;
    let redriven = super::super::redrive(&moved, &v2, &order, request, Timestamp(3));
    let task = redriven.expect("redriven").next.expect("written");
    let done = on_run(&task, &v2, &order, "s1", Timestamp(4));
    let task = done.next.expect("ended");
    assert_eq!(task.state, TaskState::Processed);
    assert_eq!(run(&task).output.as_deref(), Some(&json!("done")));
}
