//! Conditions (`when`) that skip a step, or a parallel step's branches.

use super::waits::{around, order_at, past_a};
use super::*;
use crate::task::Happened;

#[test]
fn a_step_whose_condition_does_not_hold_is_skipped_and_the_next_goes_on() {
    let workflow =
        around(r#"{"name": "big", "when": "input.amount >= 100", "agent": "s", "call": "/big"}"#);
    let order = order_at("2026-01-01T00:00:00Z");
    let decision = past_a(&workflow, &order, Timestamp(1_000));
    let sent: Vec<usize> = dispatched(&decision).iter().map(|r| r.step).collect();
    assert_eq!(sent, [2], "b is sent at once");
    let task = decision.next.expect("written");
    assert_eq!(task.steps[1].state, StepState::Skipped);
    assert_eq!(task.steps[1].attempt, 0, "a skipped step calls nothing");
    assert!(
        task.history
            .iter()
            .any(|e| *e.what() == Happened::Skipped { step: 1 })
    );
}

#[test]
fn a_condition_that_cannot_be_evaluated_fails_its_step_and_the_task_is_undone() {
    let workflow = around(
        r#"{"name": "gold", "when": "results['a'].tier == 'gold'", "agent": "s", "call": "/gold"}"#,
    );
    let order = order_at("2026-01-01T00:00:00Z");
    let decision = past_a(&workflow, &order, Timestamp(1_000));
    let task = decision.next.clone().expect("written");
    assert_eq!(task.state, TaskState::Compensating);
    assert_eq!(task.steps[1].state, StepState::Error);
    let error = task.steps[1].error.clone().unwrap_or_default();
    assert!(
        error.starts_with("when: 'results['a'].tier == 'gold''"),
        "{error}"
    );
    let undo: Vec<_> = dispatched(&decision)
        .iter()
        .map(|r| (r.step, r.operation))
        .collect();
    assert_eq!(undo, [(0, Operation::Compensate)], "a is undone");
}

#[test]
fn a_parallel_steps_condition_skips_every_branch_and_the_step_after_goes_on() {
    let workflow = around(
        r#"{"name": "checks", "when": "input.amount > 1000", "parallel": [
            [{"name": "x", "agent": "s", "call": "/x"}],
            [{"name": "y", "agent": "s", "call": "/y", "when": "true"}]
        ]}"#,
    );
    let order = order_at("2026-01-01T00:00:00Z");
    let decision = past_a(&workflow, &order, Timestamp(1_000));
    let sent: Vec<usize> = dispatched(&decision).iter().map(|r| r.step).collect();
    assert_eq!(sent, [3], "b, after both branches skipped");
    let task = decision.next.expect("written");
    assert_eq!(task.steps[1].state, StepState::Skipped);
    assert_eq!(task.steps[2].state, StepState::Skipped);
}
