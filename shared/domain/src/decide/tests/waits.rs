//! Steps that wait: timers, callbacks (alone, or after a call), heartbeats. The
//! helpers here serve the pause's tests and the conditions' too.

use super::*;
use crate::callback::Token;
use crate::limits::MAX_DELAY;
use crate::messages::Notification;
use crate::task::{Actor, Caller, Waiting};

pub(super) const MINUTE: Duration = Duration::from_secs(60);
pub(super) const HOUR: Duration = Duration::from_secs(3600);

/// `a` (undone by a compensation), then `middle` (the steps given, as JSON), then `b`.
pub(super) fn around(middle: &str) -> Workflow {
    let text = format!(
        r#"{{"name": "waits", "version": 1,
        "input": {{"amount": "number", "at": "string"}},
        "steps": [
            {{"name": "a", "agent": "s", "call": "/a", "compensation": "/a/undo"}},
            {middle},
            {{"name": "b", "agent": "s", "call": "/b"}}
        ]}}"#
    );
    Workflow::parse("waits.json", &text).expect("valid")
}

pub(super) fn order_at(at: &str) -> Order {
    Order {
        task_id: TaskId::parse("t1").expect("id"),
        input: std::sync::Arc::new(json!({"amount": 50, "at": at})),
        earlier: Vec::new(),
    }
}

/// A task of `workflow` claimed and its first step answered: the decision of that
/// answer.
pub(super) fn past_a(workflow: &Workflow, order: &Order, now: Timestamp) -> Decision {
    let submission = Submission {
        input: Value::clone(&order.input),
        ..submission(true)
    };
    let (task, _, _) = submit(workflow, submission, now);
    let claim = on_run(&task, workflow, order, "s1", now);
    let task = claim.next.clone().expect("claimed");
    let request = dispatched(&claim)[0].clone();
    on_response(&task, workflow, order, &respond(&request, ok()), now)
}

pub(super) fn scheduled(decision: &Decision) -> bool {
    decision
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Schedule { delay, .. } if delay.is_zero()))
}

pub(super) fn notifications(decision: &Decision) -> Vec<&Notification> {
    decision
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Notify { outbound, .. } => Some(&outbound.notification),
            _ => None,
        })
        .collect()
}

fn use_token(token: &str, outcome: CallbackOutcome) -> CallbackUse {
    let token = Token::parse(token).expect("a token");
    CallbackUse {
        step: token.step,
        token: Some(token),
        by: Caller::Token,
        outcome,
    }
}

fn approved() -> CallbackOutcome {
    CallbackOutcome::Output(json!({"approved_by": "ana"}))
}

#[test]
fn a_sleep_of_a_year_sends_one_deadline_message_when_it_can_reach_the_end() {
    let workflow = around(r#"{"name": "nap", "sleep": "365d"}"#);
    let order = order_at("x");
    let now = Timestamp(1_000_000);
    let task = past_a(&workflow, &order, now).next.expect("recorded");
    let until = now.plus(365 * 24 * HOUR);
    assert_eq!(task.complete_by, Some(until));
    // The deadline message of `a`'s lease comes, and is the last one for now.
    let first = task.deadline.expect("a deadline message on its way");
    let spent = on_deadline(&task, &workflow, &order, first, first);
    assert_eq!(spent.verdict, Verdict::DeadlineMoved);
    assert!(spent.effects.is_empty(), "{:?}", spent.effects);
    let task = spent.next.expect("written");
    assert_eq!(task.deadline, None, "no message can be delayed a year");
    let reach = until.minus(MAX_DELAY);
    assert_eq!(
        task.sweep_at(),
        Some(reach),
        "swept once a message can reach"
    );

    let month = on_expired(&task, &workflow, &order, now.plus(30 * 24 * HOUR));
    assert_eq!(month.verdict, Verdict::LeaseLive);
    let watched = on_expired(&task, &workflow, &order, reach);
    assert_eq!(watched.verdict, Verdict::LeaseWatched);
    assert_eq!(
        watched.effects,
        [Effect::Deadline {
            task_id: task.id.clone(),
            at: until
        }],
        "one message, for the lease's end"
    );
    let task = watched.next.expect("written");
    assert_eq!(task.sweep_at(), Some(until), "then swept at the end itself");
    assert_eq!(
        on_expired(&task, &workflow, &order, reach.plus(MINUTE)).verdict,
        Verdict::LeaseLive,
        "a second sweep before the end writes nothing"
    );
    let woke = on_deadline(&task, &workflow, &order, until, until);
    assert_eq!(woke.verdict, Verdict::Woke);
}

#[test]
fn a_timer_holds_nothing_but_its_lease_and_its_end_moves_the_task_on() {
    let workflow = around(r#"{"name": "nap", "sleep": "10m"}"#);
    let order = order_at("x");
    let now = Timestamp(1_000_000);
    let decision = past_a(&workflow, &order, now);
    let task = decision.next.clone().expect("recorded");
    assert!(dispatched(&decision).is_empty(), "a timer calls nothing");
    let nap = &task.steps[1];
    assert_eq!(nap.state, StepState::Processing);
    assert_eq!(nap.waiting, Some(Waiting::Timer));
    let until = now.plus(10 * MINUTE);
    assert_eq!(task.complete_by, Some(until));

    let early = on_expired(&task, &workflow, &order, now.plus(9 * MINUTE));
    assert_eq!(early.verdict, Verdict::LeaseLive, "it never ends early");

    // The deadline message of `a`'s lease comes first, and follows the lease.
    let first = task.deadline.expect("a deadline message on its way");
    let moved = on_deadline(&task, &workflow, &order, first, first);
    assert_eq!(moved.verdict, Verdict::DeadlineMoved);
    assert!(moved.effects.contains(&Effect::Deadline {
        task_id: task.id.clone(),
        at: until
    }));
    let task = moved.next.expect("written");
    let woke = on_deadline(&task, &workflow, &order, until, until);
    assert_eq!(woke.verdict, Verdict::Woke);
    let task = woke.next.clone().expect("written");
    assert_eq!(task.steps[1].state, StepState::Processed);
    assert!(
        scheduled(&woke),
        "a scheduler is asked to send the next step"
    );
    assert!(dispatched(&woke).is_empty());

    assert_eq!(task.state, TaskState::Pending, "released to a scheduler");
    let run = on_run(&task, &workflow, &order, "s2", until);
    assert_eq!(run.verdict, Verdict::Claimed);
    assert_eq!(dispatched(&run)[0].step_name, "b");
}

#[test]
fn a_timer_until_an_instant_past_ends_as_it_starts_and_a_bad_instant_fails_the_step() {
    let workflow = around(r#"{"name": "window", "sleep_until": "input.at"}"#);
    let now = Timestamp::parse_rfc3339("2026-11-25T10:00:00Z").expect("instant");
    let past = past_a(&workflow, &order_at("2026-11-25T09:00:00Z"), now);
    assert_eq!(
        past.next.as_ref().expect("recorded").steps[1].state,
        StepState::Processed
    );
    assert_eq!(
        dispatched(&past)[0].step_name,
        "b",
        "the next step goes at once"
    );

    let later = past_a(&workflow, &order_at("2026-11-25T12:30:00+01:00"), now);
    let task = later.next.expect("recorded");
    assert_eq!(
        task.steps[1].complete_by,
        Timestamp::parse_rfc3339("2026-11-25T11:30:00Z")
    );

    let bad = past_a(&workflow, &order_at("tomorrow"), now);
    let task = bad.next.clone().expect("recorded");
    assert_eq!(task.steps[1].state, StepState::Error);
    assert_eq!(
        task.steps[1].error.as_deref(),
        Some("sleep_until: input.at is not an RFC 3339 instant")
    );
    assert_eq!(task.state, TaskState::Compensating, "a is undone");
    assert_eq!(dispatched(&bad)[0].path, "/a/undo");
}

#[test]
fn a_callback_step_waits_its_token_told_and_ends_it_once() {
    let workflow = around(r#"{"name": "approve", "callback": {"timeout": "24h"}}"#);
    let order = order_at("x");
    let now = Timestamp(1_000_000);
    let decision = past_a(&workflow, &order, now);
    let task = decision.next.clone().expect("recorded");
    assert!(dispatched(&decision).is_empty(), "it calls nothing");
    assert_eq!(
        task.steps[1].waiting,
        Some(Waiting::Callback {
            until: now.plus(24 * HOUR),
            after_call: false,
        })
    );
    assert_eq!(task.complete_by, Some(now.plus(24 * HOUR)));
    let told = notifications(&decision);
    let wait = &told.last().expect("told").callbacks[0];
    assert_eq!(wait.step, "approve");
    assert_eq!(wait.until, now.plus(24 * HOUR));
    assert_eq!(callback_waits(&task)[0].token, wait.token);

    let later = now.plus(HOUR);
    let used = on_callback(
        &task,
        &workflow,
        &order,
        use_token(&wait.token, approved()),
        later,
    )
    .expect("used");
    assert_eq!(used.verdict, Verdict::CallbackUsed);
    let done = used.next.clone().expect("written");
    assert_eq!(done.steps[1].state, StepState::Processed);
    assert_eq!(
        done.steps[1].output.as_deref(),
        Some(&json!({"approved_by": "ana"}))
    );
    assert!(dispatched(&used).is_empty(), "the API sends to no agent");
    assert!(scheduled(&used), "a scheduler sends the next step");
    assert!(callback_waits(&done).is_empty());

    let again = on_callback(
        &done,
        &workflow,
        &order,
        use_token(&wait.token, approved()),
        later,
    );
    assert_eq!(again, Err(Refused::NotWaiting("approve".into())));
    let run = on_run(&done, &workflow, &order, "s2", later);
    assert_eq!(dispatched(&run)[0].step_name, "b");
}

#[test]
fn a_wait_ended_with_its_run_message_lost_is_given_to_a_scheduler_at_the_pickup_timeout() {
    let workflow = around(r#"{"name": "approve", "callback": {"timeout": "24h"}}"#);
    let order = order_at("x");
    let now = Timestamp(1_000_000);
    let task = past_a(&workflow, &order, now).next.expect("recorded");
    let token = callback_waits(&task)[0].token.clone();
    let later = now.plus(HOUR);
    let used = on_callback(
        &task,
        &workflow,
        &order,
        use_token(&token, approved()),
        later,
    )
    .expect("used");
    assert!(scheduled(&used));
    let task = used.next.expect("written");
    // Its Run message is lost: the supervisor finds the task at its pickup timeout,
    // not a day later, and a scheduler then claims it and sends the next step.
    let pickup = later.plus(workflow.pickup_timeout);
    assert_eq!(task.state, TaskState::Pending, "waiting for a scheduler");
    assert_eq!(task.complete_by, Some(pickup));
    let swept = on_expired(&task, &workflow, &order, pickup);
    assert_eq!(swept.verdict, Verdict::SentAgain);
    let task = swept.next.expect("written");
    let run = on_run(&task, &workflow, &order, "s2", pickup);
    assert_eq!(run.verdict, Verdict::Claimed);
    assert_eq!(dispatched(&run)[0].step_name, "b");
}

#[test]
fn a_forged_or_foreign_token_is_no_callback_and_an_error_undoes_the_task() {
    let workflow = around(r#"{"name": "approve", "callback": {"timeout": "24h"}}"#);
    let order = order_at("x");
    let now = Timestamp(1_000_000);
    let task = past_a(&workflow, &order, now).next.expect("recorded");
    let token = callback_waits(&task)[0].token.clone();

    // One character of the signature changed, to one it is not: always another token
    // (replacing the end with "AA" was the same token when it ended so, 1 in 1,024).
    let mut forged = token.clone();
    let at = forged.len() - 3;
    let other = if &forged[at..=at] == "A" { "B" } else { "A" };
    forged.replace_range(at..=at, other);
    let refused = on_callback(
        &task,
        &workflow,
        &order,
        use_token(&forged, approved()),
        now,
    );
    assert_eq!(refused, Err(Refused::UnknownCallback));
    let other = past_a(&workflow, &order, now)
        .next
        .expect("another task, same id");
    let refused = on_callback(
        &other,
        &workflow,
        &order,
        use_token(&token, approved()),
        now,
    );
    assert_eq!(
        refused,
        Err(Refused::UnknownCallback),
        "another task's secret signs other tokens"
    );

    let error = CallbackOutcome::Error("refund refused".into());
    let decision =
        on_callback(&task, &workflow, &order, use_token(&token, error), now).expect("used");
    let task = decision.next.clone().expect("written");
    assert_eq!(task.steps[1].state, StepState::Error);
    assert_eq!(task.state, TaskState::Compensating);
    assert_eq!(
        task.locked_by, None,
        "released to a scheduler, which undoes a"
    );
    assert!(scheduled(&decision));
}

#[test]
fn a_callback_past_its_timeout_is_retried_under_a_new_token_and_the_old_one_is_dead() {
    let workflow = around(
        r#"{"name": "approve", "callback": {"timeout": "1h"}, "supervisor": {"failure_threshold": 1}}"#,
    );
    let order = order_at("x");
    let now = Timestamp(1_000_000);
    let task = past_a(&workflow, &order, now).next.expect("recorded");
    let first = callback_waits(&task)[0].token.clone();

    let expired = on_expired(&task, &workflow, &order, now.plus(HOUR));
    assert_eq!(expired.verdict, Verdict::Retry);
    let task = expired.next.expect("written");
    assert_eq!(task.steps[1].state, StepState::Pending);
    assert_eq!(task.steps[1].failure_count, 1);
    assert!(callback_waits(&task).is_empty());
    let dead = on_callback(
        &task,
        &workflow,
        &order,
        use_token(&first, approved()),
        now.plus(HOUR),
    );
    assert_eq!(dead, Err(Refused::NotWaiting("approve".into())));

    let due = task.steps[1].retry_at.expect("a retry");
    let retry = on_run(&task, &workflow, &order, "s2", due);
    let task = retry.next.expect("claimed");
    let second = callback_waits(&task)[0].token.clone();
    assert_ne!(first, second);
    let dead = on_callback(
        &task,
        &workflow,
        &order,
        use_token(&first, approved()),
        now.plus(HOUR),
    );
    assert_eq!(
        dead,
        Err(Refused::NotWaiting("approve".into())),
        "a retry's wait is not the first's"
    );

    let gave_up = on_expired(&task, &workflow, &order, due.plus(HOUR));
    assert_eq!(gave_up.verdict, Verdict::GaveUp);
    let task = gave_up.next.expect("written");
    assert_eq!(task.steps[1].state, StepState::TimedOut);
    assert_eq!(task.state, TaskState::Compensating);
}

#[test]
fn a_token_past_its_time_is_dead_before_the_supervisor_sweeps() {
    let workflow = around(r#"{"name": "scan", "callback": {"timeout": "2h", "heartbeat": "1h"}}"#);
    let order = order_at("x");
    let now = Timestamp(1_000_000);
    let task = past_a(&workflow, &order, now).next.expect("recorded");
    let text = callback_waits(&task)[0].token.clone();
    let token = Token::parse(&text).expect("token");
    let missed = now.plus(HOUR);
    let refused = Err(Refused::NotWaiting("scan".into()));
    assert_eq!(
        on_heartbeat(&task, &workflow, &token, missed),
        refused,
        "a heartbeat after the one missed"
    );
    assert_eq!(
        on_callback(
            &task,
            &workflow,
            &order,
            use_token(&text, approved()),
            missed
        ),
        refused,
        "a callback after a missed heartbeat"
    );
    let beat = on_heartbeat(&task, &workflow, &token, missed.minus(MINUTE)).expect("beat");
    assert!(beat.next.is_some(), "in time");
}

#[test]
fn a_heartbeat_pushes_the_lease_a_heartbeat_on_never_past_the_timeout() {
    let workflow = around(r#"{"name": "scan", "callback": {"timeout": "2h", "heartbeat": "1h"}}"#);
    let order = order_at("x");
    let now = Timestamp(1_000_000);
    let task = past_a(&workflow, &order, now).next.expect("recorded");
    assert_eq!(
        task.complete_by,
        Some(now.plus(HOUR)),
        "the first heartbeat is due"
    );
    let token = Token::parse(&callback_waits(&task)[0].token).expect("token");

    let beat = on_heartbeat(&task, &workflow, &token, now.plus(30 * MINUTE)).expect("beat");
    let task = beat.next.expect("written");
    assert_eq!(task.complete_by, Some(now.plus(90 * MINUTE)));
    let beat = on_heartbeat(&task, &workflow, &token, now.plus(80 * MINUTE)).expect("beat");
    let task = beat.next.expect("written");
    assert_eq!(
        task.complete_by,
        Some(now.plus(2 * HOUR)),
        "the timeout bounds it"
    );

    let silent = around(r#"{"name": "approve", "callback": {"timeout": "2h"}}"#);
    let task = past_a(&silent, &order, now).next.expect("recorded");
    let token = Token::parse(&callback_waits(&task)[0].token).expect("token");
    assert_eq!(
        on_heartbeat(&task, &silent, &token, now),
        Err(Refused::NoHeartbeat("approve".into()))
    );
}

/// `pickup`, a call to the drone's service that then waits 30 minutes for its
/// callback, between `a` and `b`; an order; the time `a` is answered.
fn pickup() -> (Workflow, Order, Timestamp) {
    let workflow = around(
        r#"{"name": "pickup", "agent": "drone", "call": "/pickups", "compensation": "/pickups/undo",
            "callback": {"timeout": "30m"}}"#,
    );
    (workflow, order_at("x"), Timestamp(1_000_000))
}

#[test]
fn a_call_with_a_callback_carries_its_token_and_waits_after_its_service_answers() {
    let (workflow, order, now) = pickup();
    let decision = past_a(&workflow, &order, now);
    let task = decision.next.clone().expect("recorded");
    let request = dispatched(&decision)[0].clone();
    let payload: Value = serde_json::from_str(request.payload.as_str()).expect("json");
    let token = payload["callback_token"]
        .as_str()
        .expect("a token")
        .to_owned();
    assert!(
        callback_waits(&task).is_empty(),
        "not waiting while the call is out"
    );

    let answered = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
    let waiting = answered.next.clone().expect("recorded");
    assert_eq!(waiting.steps[1].state, StepState::Processing);
    assert_eq!(
        waiting.steps[1].waiting,
        Some(Waiting::Callback {
            until: now.plus(30 * MINUTE),
            after_call: true,
        })
    );
    assert_eq!(
        callback_waits(&waiting)[0].token,
        token,
        "the token the service holds"
    );
    assert!(dispatched(&answered).is_empty());

    // The service calls back before its answer is recorded: the callback is kept,
    // and ends the step once the answer comes.
    let early =
        on_callback(&task, &workflow, &order, use_token(&token, approved()), now).expect("used");
    assert_eq!(early.verdict, Verdict::CallbackKept);
    let early = early.next.expect("written");
    assert_eq!(
        early.steps[1].state,
        StepState::Processing,
        "its call is out"
    );
    let late = on_response(&early, &workflow, &order, &respond(&request, ok()), now);
    let late = late.next.expect("recorded");
    assert_eq!(late.steps[1].state, StepState::Processed);
    assert_eq!(
        late.steps[1].output.as_deref(),
        Some(&json!({"approved_by": "ana"}))
    );

    // A refusal after the call took effect: the call is undone, with the steps before.
    let refusal = CallbackOutcome::Error("the courier never came".into());
    let refused =
        on_callback(&waiting, &workflow, &order, use_token(&token, refusal), now).expect("used");
    let task = refused.next.clone().expect("written");
    assert_eq!(
        task.steps[1].state,
        StepState::Unusable,
        "its effect is in place"
    );
    assert_eq!(task.state, TaskState::Compensating);
    let undo = on_run(&task, &workflow, &order, "s2", now);
    let undo = dispatched(&undo);
    assert_eq!(
        (undo[0].step_name.as_str(), undo[0].operation),
        ("pickup", Operation::Compensate)
    );
}

#[test]
fn cancelling_a_waiting_task_stops_its_wait_and_undoes_the_call_that_waited() {
    let (workflow, order, now) = pickup();
    let decision = past_a(&workflow, &order, now);
    let task = decision.next.clone().expect("recorded");
    let request = dispatched(&decision)[0].clone();
    let waiting = on_response(&task, &workflow, &order, &respond(&request, ok()), now)
        .next
        .expect("recorded");
    let cancel = cancel(&waiting, &workflow, asked_by(Actor::Owner, now), now).expect("cancelled");
    let task = cancel.next.clone().expect("written");
    assert_eq!(task.steps[1].state, StepState::TimedOut);
    assert!(callback_waits(&task).is_empty());
    assert_eq!(task.locked_by, None, "a scheduler comes to undo");
    let undo = on_run(&task, &workflow, &order, "s2", now);
    assert_eq!(dispatched(&undo)[0].path, "/pickups/undo");
}

/// The callback token a call's request carries.
fn token_of(request: &AgentRequest) -> String {
    request.payload.value()["callback_token"]
        .as_str()
        .expect("a token")
        .to_owned()
}

#[test]
fn a_retried_call_with_a_callback_carries_the_token_its_service_kept_under_its_key() {
    let (workflow, order, now) = pickup();
    let decision = past_a(&workflow, &order, now);
    let task = decision.next.clone().expect("recorded");
    let first = dispatched(&decision)[0].clone();
    let waiting = on_response(&task, &workflow, &order, &respond(&first, ok()), now)
        .next
        .expect("recorded");
    assert_eq!(callback_waits(&waiting)[0].token, token_of(&first));

    // No callback within its timeout: the call is retried, under the same key.
    let expired = on_expired(&waiting, &workflow, &order, now.plus(30 * MINUTE));
    assert_eq!(expired.verdict, Verdict::Retry);
    let task = expired.next.expect("written");
    let due = task.steps[1].retry_at.expect("a retry");
    let retry = on_run(&task, &workflow, &order, "s2", due);
    let second = dispatched(&retry)[0].clone();
    assert_eq!(second.idempotency_key, first.idempotency_key);
    assert_eq!(
        token_of(&second),
        token_of(&first),
        "the token a service that deduplicates by key kept"
    );
    let task = retry.next.expect("sent");
    let waiting = on_response(&task, &workflow, &order, &respond(&second, ok()), due)
        .next
        .expect("recorded");
    assert_eq!(callback_waits(&waiting)[0].token, token_of(&first));
    let used = on_callback(
        &waiting,
        &workflow,
        &order,
        use_token(&token_of(&first), approved()),
        due,
    )
    .expect("the first token ends the retried call's wait");
    assert_eq!(
        used.next.expect("written").steps[1].state,
        StepState::Processed
    );
}
