//! Resubmissions (plain and edited, and the idempotency keys they keep) and cancels.

use super::*;
use crate::decide::operator::edited_order;

#[test]
fn a_permanent_error_compensates_at_once_and_a_resubmission_redoes_the_undone_steps() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, request) = run_to(&workflow, 4, now);
    assert_eq!(request.step_name, "create-delivery");
    let failed = Outcome::Failed {
        error: "address not served".into(),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&request, failed), now);
    let mut task = decision.next.clone().expect("recorded");
    assert_eq!(task.state, TaskState::Compensating);
    assert_eq!(task.steps[4].state, StepState::Error);
    let mut decision = decision;
    while let Some(request) = dispatched(&decision).first().map(|r| (*r).clone()) {
        decision = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
        task = decision.next.clone().expect("compensated");
    }
    let states: Vec<_> = task.steps.iter().map(|s| s.state).collect();
    use StepState::{Compensated, Error, Processed};
    assert_eq!(
        states,
        [Processed, Compensated, Processed, Compensated, Error]
    );
    assert_eq!(task.state, TaskState::Error);

    assert!(
        resubmit(
            &run_to(&workflow, 1, now).0,
            &workflow,
            &order,
            again(),
            now
        )
        .is_err(),
        "only a task in Error"
    );
    let decision = resubmit(&task, &workflow, &order, again(), now).expect("resubmitted");
    let task = decision.next.expect("reset");
    assert_eq!(
        (task.state, task.run, task.failure_count, task.error.clone()),
        (TaskState::Pending, 2, 0, None)
    );
    let claim = on_run(&task, &workflow, &order, "s1", now);
    let request = dispatched(&claim)[0];
    assert_eq!(
        (request.step_name.as_str(), request.idempotency_key.as_str()),
        ("create-package", "t1/2/create-package")
    );
}

#[test]
fn a_cancel_during_a_call_keeps_its_result_then_undoes_the_done_steps_once() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, running) = run_to(&workflow, 2, now);
    let decision = cancel(&task, &workflow, operator(None), now).expect("cancelled");
    assert_eq!(decision.verdict, Verdict::CancelRequested);
    assert!(
        dispatched(&decision).is_empty(),
        "the running call is waited for"
    );
    let task = decision.next.expect("marked");
    assert_eq!(task.error.as_deref(), Some("cancelled by an operator"));
    assert_eq!(
        (task.state, task.steps[2].state),
        (TaskState::Compensating, StepState::Processing),
        "to be undone, once the running call is done"
    );
    assert_eq!(
        cancel(&task, &workflow, operator(None), now).map(|d| (d.verdict, d.next)),
        Ok((Verdict::CancelledAlready, None)),
        "asking again changes nothing"
    );
    let answered = on_response(&task, &workflow, &order, &respond(&running, ok()), now);
    let task = answered.next.clone().expect("recorded");
    assert_eq!(task.state, TaskState::Compensating);
    let (task, compensated, effects) = answer_all(task, &workflow, &order, answered);
    assert_eq!(compensated, ["create-package"]);
    assert_eq!(task.state, TaskState::Error);
    assert_eq!(
        states(&task),
        [Done, Compensated, Done, Untouched, Untouched]
    );
    let alert = effects.iter().find_map(|e| match e {
        Effect::Alert(alert) => Some(alert),
        _ => None,
    });
    assert_eq!(
        alert.map(|a| a.reason.as_str()),
        Some("cancelled by an operator")
    );
    let told = effects.iter().any(|e| {
        matches!(e, Effect::Notify { outbound, .. }
        if outbound.notification.state == TaskState::Error
            && outbound.notification.error.as_deref() == Some("cancelled by an operator"))
    });
    assert!(told, "the caller is told it was cancelled: {effects:?}");
    assert_eq!(
        cancel(&task, &workflow, operator(None), now).map(|d| d.verdict),
        Ok(Verdict::CancelledAlready)
    );
}

#[test]
fn a_cancel_during_a_compensation_undoes_each_done_step_once() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, request) = run_to(&workflow, 4, now);
    let failed = Outcome::Failed {
        error: "address not served".into(),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&request, failed), now);
    let task = decision.next.clone().expect("compensating");
    let undoing = dispatched(&decision)[0].clone();
    assert_eq!(undoing.step_name, "schedule-drone");
    let cancelled = cancel(&task, &workflow, operator(None), now).expect("cancelled");
    assert!(cancelled.effects.is_empty(), "{:?}", cancelled.effects);
    let task = cancelled.next.expect("marked");
    assert!(
        task.error
            .as_deref()
            .is_some_and(|e| e.contains("address not served"))
    );
    let answered = on_response(&task, &workflow, &order, &respond(&undoing, ok()), now);
    let task = answered.next.clone().expect("recorded");
    let (task, compensated, _) = answer_all(task, &workflow, &order, answered);
    assert_eq!(compensated, ["create-package"]);
    assert_eq!(task.state, TaskState::Error);
    assert!(task.cancelled.is_some());
}

#[test]
fn a_cancel_during_a_supervisor_retry_wait_compensates_without_the_retry() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, _) = run_to(&workflow, 2, now);
    let late = task.complete_by.expect("lease");
    let retry = on_expired(&task, &workflow, &any_order(), late);
    assert_eq!(retry.verdict, Verdict::Retry);
    let task = retry.next.expect("waiting");
    assert_eq!(
        (task.state, task.locked_by.as_deref()),
        (TaskState::Pending, None)
    );
    let decision = cancel(&task, &workflow, operator(Some("b1")), late).expect("cancelled");
    assert!(
        decision
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Schedule { .. }))
    );
    let task = decision.next.expect("compensating");
    assert_eq!(task.state, TaskState::Compensating);
    assert_eq!(
        cancel(&task, &workflow, operator(Some("b1")), late),
        Err(Refused::TakenByBatch("b1".into())),
        "a batch takes a task once"
    );
    let claim = on_run(&task, &workflow, &order, "s2", late);
    let task = claim.next.clone().expect("claimed");
    let (task, compensated, _) = answer_all(task, &workflow, &order, claim);
    assert_eq!(
        compensated,
        ["create-package"],
        "check-transport, sent once, has no compensation"
    );
    assert_eq!(
        states(&task),
        [Done, Compensated, StepState::TimedOut, Untouched, Untouched],
        "the step waiting for its retry may have taken effect"
    );
    assert_eq!(task.state, TaskState::Error);
}

#[test]
fn a_call_whose_lease_ends_after_a_cancel_is_not_retried_but_undone() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, running) = run_to(&workflow, 3, now);
    assert_eq!(running.step_name, "schedule-drone");
    let task = cancel(&task, &workflow, operator(None), now)
        .expect("cancelled")
        .next
        .expect("marked");
    let late = task.complete_by.expect("lease");
    let expired = on_expired(&task, &workflow, &any_order(), late);
    assert_eq!(expired.verdict, Verdict::GaveUp);
    let task = expired.next.expect("given up");
    assert_eq!(task.steps[3].state, StepState::TimedOut);
    let claim = on_run(&task, &workflow, &order, "s2", late);
    let task = claim.next.clone().expect("claimed");
    let (task, compensated, _) = answer_all(task, &workflow, &order, claim);
    assert_eq!(compensated, ["schedule-drone", "create-package"]);
    assert_eq!(task.error.as_deref(), Some("cancelled by an operator"));
}

#[test]
fn a_task_not_started_is_cancelled_at_once_and_an_ended_one_not_at_all() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, _) = submit(&workflow, submission(false), now);
    let task = cancel(&task, &workflow, operator(None), now)
        .expect("cancelled")
        .next
        .expect("compensating");
    let claim = on_run(&task, &workflow, &order, "s1", now);
    let task = claim.next.expect("ended");
    assert_eq!(task.state, TaskState::Error);
    assert!(dispatched_none(&claim.effects));
    let (done, ..) = run_to(&workflow, 0, now);
    let mut processed = done;
    processed.state = TaskState::Processed;
    assert_eq!(
        cancel(&processed, &workflow, operator(None), now),
        Err(Refused::Ended(TaskState::Processed, "cancelled"))
    );
}

#[test]
fn an_edited_resubmission_checks_the_input_keeps_the_old_one_and_runs_the_new() {
    let workflow = drone();
    let now = Timestamp(0);
    let (decision, order) = refused_at_first(&workflow, "no such customer", now);
    let task = decision.next.expect("in error");
    assert_eq!(task.state, TaskState::Error);
    let edit = |input: Value| Resubmit {
        request: operator(None),
        input: Some(input),
    };
    let refused = resubmit(
        &task,
        &workflow,
        &order,
        edit(json!({"customer_id": 7})),
        now,
    );
    assert!(matches!(refused, Err(Refused::Input(e)) if e.field == "input.customer_id"));
    let new = json!({"customer_id": "c2", "pickup": "a", "dropoff": "b", "weight_kg": 1});
    let decision = resubmit(&task, &workflow, &order, edit(new.clone()), now).expect("ok");
    let edited = decision.order.expect("a new input");
    assert_eq!(*edited.input, new);
    assert_eq!(
        edited.earlier,
        [EarlierInput {
            until_run: 1,
            input: Value::clone(&order.input)
        }]
    );
    let task = decision.next.expect("resubmitted");
    assert_eq!((task.run, task.resubmissions.len()), (2, 1));
    assert!(task.resubmissions[0].edited);
    let claim = on_run(&task, &workflow, &edited, "s1", now);
    assert_eq!(dispatched(&claim)[0].payload.value()["input"], new);
    // Each edit keeps the input it replaces: past what a task keeps, one is refused.
    let (mut task, mut order) = (task, edited);
    let large = json!({"customer_id": "x".repeat(60 * 1024), "pickup": "a", "dropoff": "b", "weight_kg": 1});
    for _ in 0..4 {
        task.state = TaskState::Error;
        let decision = resubmit(&task, &workflow, &order, edit(large.clone()), now).expect("ok");
        (task, order) = (decision.next.expect("task"), decision.order.expect("order"));
    }
    assert_eq!(order.earlier.len(), 5);
    let half = json!("x".repeat(limits::MAX_ORDER / 2));
    order.earlier.push(EarlierInput {
        until_run: task.run,
        input: half.clone(),
    });
    assert!(matches!(
        edited_order(&order, half, task.run + 1),
        Err(Refused::InputsTooLarge(size)) if size > limits::MAX_ORDER
    ));
}

#[test]
fn a_resubmission_calls_a_step_whose_effect_may_be_in_place_under_the_key_it_had() {
    let workflow = drone();
    let now = Timestamp(0);
    // The delivery times out past its threshold: created, perhaps, and nothing
    // undoes it. The drone's cancellation is refused.
    let (task, order, request) = run_to(&workflow, 4, now);
    assert_eq!(request.step_name, "create-delivery");
    let (task, _) = time_out(task, &workflow, &order, request);
    let claim = on_run(&task, &workflow, &order, "s3", now);
    let mut task = claim.next.clone().expect("claimed");
    let mut decision = claim;
    while let Some(request) = dispatched(&decision).first().map(|r| (*r).clone()) {
        let outcome = match request.step_name.as_str() {
            "schedule-drone" => Outcome::Failed {
                error: "already flying".into(),
            },
            _ => ok(),
        };
        decision = on_response(&task, &workflow, &order, &respond(&request, outcome), now);
        task = decision.next.clone().expect("recorded");
    }
    use StepState::{CompensationFailed, TimedOut};
    assert_eq!(
        states(&task),
        [Done, Compensated, Done, CompensationFailed, TimedOut]
    );
    assert_eq!(task.state, TaskState::Error);
    let alert = alert_of(&decision).expect("alerted");
    assert_eq!(alert.compensation_failed, ["schedule-drone"]);
    assert_eq!(alert.not_undone, ["create-delivery"], "the alert lists it");
    assert_eq!(task.not_undone, ["create-delivery"]);
    assert!(task.needs_a_person(), "kept until a person acts");

    // Run again as it is: the package, undone, and the drone, undone by hand as
    // the alert asks, under the new run's keys; the delivery, perhaps in place
    // and with nothing to undo it, under the key it had.
    let decision = resubmit(&task, &workflow, &order, again(), now).expect("resubmitted");
    let task = decision.next.expect("reset");
    assert!(task.not_undone.is_empty() && !task.needs_a_person());
    assert_eq!(
        keys_called(task, &workflow, &order),
        [
            "t1/2/create-package",
            "t1/2/schedule-drone",
            "t1/1/create-delivery"
        ]
    );
}

#[test]
fn an_edited_resubmission_runs_every_step_again_unless_an_effect_may_be_in_place() {
    let workflow = drone();
    let now = Timestamp(0);
    let edit = |input: Value| Resubmit {
        request: operator(None),
        input: Some(input),
    };
    let new = json!({"customer_id": "c2", "pickup": "a", "dropoff": "b", "weight_kg": 1});

    // Refused for good at the delivery: every effect is undone or never was.
    let (task, order, request) = run_to(&workflow, 4, now);
    let refused = Outcome::Failed {
        error: "address not served".into(),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&request, refused), now);
    let (task, _, _) = answer_all(
        decision.next.clone().expect("recorded"),
        &workflow,
        &order,
        decision,
    );
    assert_eq!(task.state, TaskState::Error);
    let decision = resubmit(&task, &workflow, &order, edit(new.clone()), now).expect("ok");
    let edited = decision.order.expect("a new input");
    let task = decision.next.expect("resubmitted");
    assert_eq!(
        states(&task),
        [Untouched; 5],
        "the checks see the new input"
    );
    let claim = on_run(&task, &workflow, &edited, "s1", now);
    let first = dispatched(&claim)[0];
    assert_eq!(
        (first.step_name.as_str(), first.idempotency_key.as_str()),
        ("check-account", "t1/2/check-account")
    );
    assert_eq!(first.payload.value()["input"], new);

    // An input the steps' requests could not carry with their results.
    let mut errored = task.clone();
    errored.state = TaskState::Error;
    let huge = json!({"customer_id": "x".repeat(limits::MAX_TASK_DATA), "pickup": "a", "dropoff": "b", "weight_kg": 1});
    assert!(matches!(
        resubmit(&errored, &workflow, &edited, edit(huge), now),
        Err(Refused::InputTooLarge(size)) if size > limits::MAX_TASK_DATA
    ));

    // The delivery timed out: it may have been made with the old input.
    let (task, order, request) = run_to(&workflow, 4, now);
    let (task, _) = time_out(task, &workflow, &order, request);
    let claim = on_run(&task, &workflow, &order, "s3", now);
    let (task, _, _) = answer_all(
        claim.next.clone().expect("claimed"),
        &workflow,
        &order,
        claim,
    );
    assert_eq!(task.state, TaskState::Error);
    let refused = resubmit(&task, &workflow, &order, edit(new), now);
    assert_eq!(
        refused,
        Err(Refused::EffectsInPlace(vec!["create-delivery".into()]))
    );
    assert!(
        refused
            .expect_err("refused")
            .to_string()
            .contains("create-delivery"),
        "the refusal names the step"
    );
}
