//! The pause and resumption of a task, and a task whose start is to come.

use super::waits::{HOUR, MINUTE, around, order_at, past_a, scheduled};
use super::*;
use crate::task::Actor;

/// A task of a call between two steps (`a`, the call `c`, `b`), submitted and claimed at
/// `now`, with the first request it sent.
fn claimed_at_a_call(now: Timestamp) -> (Workflow, Order, Task, AgentRequest) {
    let workflow = around(r#"{"name": "c", "agent": "s", "call": "/c"}"#);
    let order = order_at("x");
    let submission = Submission {
        input: Value::clone(&order.input),
        ..submission(false)
    };
    let (task, _, _) = submit(&workflow, submission, now);
    let claim = on_run(&task, &workflow, &order, "s1", now);
    let request = dispatched(&claim)[0].clone();
    (workflow, order, claim.next.expect("claimed"), request)
}

#[test]
fn a_paused_task_finishes_its_step_starts_nothing_and_goes_on_when_resumed() {
    let now = Timestamp(1_000_000);
    let (workflow, order, task, request) = claimed_at_a_call(now);
    let by = |actor| asked_by(actor, now);
    let paused = pause(&task, &workflow, by(Actor::Owner), now).expect("paused");
    let task = paused.next.expect("written");
    assert!(task.paused.is_some());
    assert_eq!(task.idle_until(), None, "its call out may still end it");
    assert_eq!(
        pause(&task, &workflow, by(Actor::Operator), now)
            .expect("again")
            .verdict,
        Verdict::PausedAlready
    );

    let answered = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
    let task = answered.next.clone().expect("recorded");
    assert_eq!(
        task.steps[0].state,
        StepState::Processed,
        "its running step finished"
    );
    assert!(dispatched(&answered).is_empty(), "nothing new starts");
    assert_eq!(task.state, TaskState::Pending);
    assert_eq!(task.locked_by, None);
    assert_eq!(task.complete_by, None, "it holds no lease while paused");
    assert_eq!(
        task.idle_until(),
        Some(Timestamp::LATEST),
        "nothing moves it now but its resumption"
    );
    let run = on_run(&task, &workflow, &order, "s2", now);
    assert_eq!(run.verdict, Verdict::NotWaitingForScheduler);

    let resumed = resume(&task, &workflow, by(Actor::Operator), now).expect("resumed");
    assert_eq!(resumed.verdict, Verdict::ResumeRequested);
    assert!(scheduled(&resumed));
    let task = resumed.next.expect("written");
    assert!(task.paused.is_none());
    let run = on_run(&task, &workflow, &order, "s2", now);
    assert_eq!(dispatched(&run)[0].step_name, "c");
    let again = resume(&task, &workflow, by(Actor::Owner), now).expect("again");
    assert_eq!(again.verdict, Verdict::NotPaused);
}

#[test]
fn a_paused_task_is_cancelled_and_a_task_being_undone_is_not_paused() {
    let workflow = around(r#"{"name": "c", "agent": "s", "call": "/c"}"#);
    let order = order_at("x");
    let now = Timestamp(1_000_000);
    let (task, _, _) = submit(&workflow, submission(false), now);
    let by = asked_by(Actor::Owner, now);
    let task = pause(&task, &workflow, by.clone(), now)
        .expect("paused")
        .next
        .expect("written");
    assert_eq!(task.complete_by, None);
    let cancelled = cancel(&task, &workflow, by.clone(), now).expect("cancelled");
    let task = cancelled.next.expect("written");
    assert_eq!(task.state, TaskState::Compensating);
    assert!(task.paused.is_none());
    assert_eq!(
        pause(&task, &workflow, by.clone(), now),
        Err(Refused::Undoing)
    );
    let undo = on_run(&task, &workflow, &order, "s1", now);
    let task = undo.next.expect("written");
    assert_eq!(task.state, TaskState::Error);
    // The refusal names what was asked, not another action.
    let refused = pause(&task, &workflow, by, now).expect_err("ended");
    assert_eq!(
        refused.to_string(),
        "the task is Error already: only a task still running can be paused"
    );
}

#[test]
fn a_timer_ends_while_its_task_is_paused_and_the_next_step_waits_for_the_resume() {
    let workflow = around(r#"{"name": "nap", "sleep": "10m"}"#);
    let order = order_at("x");
    let now = Timestamp(1_000_000);
    let mut task = past_a(&workflow, &order, now).next.expect("recorded");
    // Its caller's notifications sent: they hold no lease.
    task.outbox.clear();
    let by = asked_by(Actor::Owner, now);
    let task = pause(&task, &workflow, by.clone(), now)
        .expect("paused")
        .next
        .expect("written");
    assert_eq!(
        task.complete_by,
        Some(now.plus(10 * MINUTE)),
        "the timer runs on"
    );
    let woke = on_expired(&task, &workflow, &order, now.plus(10 * MINUTE));
    let task = woke.next.clone().expect("written");
    assert_eq!(task.steps[1].state, StepState::Processed);
    assert!(!scheduled(&woke), "nothing is sent while paused");
    assert_eq!(task.state, TaskState::Pending);
    assert_eq!(task.locked_by, None);
    let resumed = resume(&task, &workflow, by, now.plus(HOUR)).expect("resumed");
    let run = on_run(
        &resumed.next.expect("written"),
        &workflow,
        &order,
        "s2",
        now.plus(HOUR),
    );
    assert_eq!(dispatched(&run)[0].step_name, "b");
}

#[test]
fn a_task_to_start_later_is_pending_until_then_with_no_message_before() {
    let workflow = around(r#"{"name": "c", "agent": "s", "call": "/c"}"#);
    let order = order_at("x");
    let now = Timestamp(1_000_000);
    let start = now.plus(365 * 24 * HOUR);
    let later = Submission {
        start_at: Some(start),
        ..submission(false)
    };
    let (task, _, effects) = submit(&workflow, later.clone(), now);
    assert_eq!(task.state, TaskState::Pending);
    assert_eq!(task.complete_by, Some(start));
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Schedule { .. })),
        "no Run message before its time"
    );
    let (claimed, _, _) = submit_claimed(&workflow, later, "s1", now);
    assert_eq!(
        claimed.locked_by, None,
        "a buffered one is not claimed before its time"
    );
    let early = on_run(&task, &workflow, &order, "s1", now.plus(HOUR));
    assert_eq!(early.verdict, Verdict::NotWaitingForScheduler);

    let due = on_expired(&task, &workflow, &order, start);
    assert_eq!(due.verdict, Verdict::SentAgain);
    assert!(scheduled(&due));
    let run = on_run(&due.next.expect("written"), &workflow, &order, "s1", start);
    assert_eq!(run.verdict, Verdict::Claimed);
    assert_eq!(dispatched(&run)[0].step_name, "a");
}

#[test]
fn a_pause_ends_with_its_task_and_the_task_resubmitted_runs() {
    let now = Timestamp(1_000_000);
    let (workflow, order, task, request) = claimed_at_a_call(now);
    let task = pause(&task, &workflow, asked_by(Actor::Owner, now), now)
        .expect("paused")
        .next
        .expect("written");
    let refused = Outcome::Failed {
        error: "no such customer".into(),
    };
    let failed = on_response(&task, &workflow, &order, &respond(&request, refused), now);
    let task = failed.next.expect("recorded");
    assert_eq!(task.state, TaskState::Error);
    assert!(task.paused.is_none(), "the pause ended with the task");

    let again = resubmit(&task, &workflow, &order, again(), now).expect("resubmitted");
    let run = on_run(&again.next.expect("written"), &workflow, &order, "s2", now);
    assert_eq!(run.verdict, Verdict::Claimed);
    assert_eq!(dispatched(&run)[0].step_name, "a", "it runs, not held up");
}
