//! Calls that wait for their gates' slots: queued, sent when given them (their
//! complete-by from then), their slots given back when they end.

use super::*;
use crate::flow::{Admission, CallRef, Grant};
use crate::task::Waiting;

const SECOND: Duration = Duration::from_secs(1);

/// `a` (a call limited to one at a time per customer, undone by a compensation),
/// then `b`.
fn limited() -> Workflow {
    let text = r#"{"name": "limited", "version": 1, "input": {"customer_id": "string"},
        "defaults": {"complete_by": "10s"},
        "steps": [
            {"name": "a", "agent": "s", "call": "/a", "compensation": "/a/undo",
             "limit": {"max_concurrency": 1, "key": "input.customer_id"}},
            {"name": "b", "agent": "s", "call": "/b"}
        ]}"#;
    Workflow::parse("limited.json", text).expect("valid")
}

fn admitted(decision: &Decision) -> Vec<&Admission> {
    decision
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Admit(admission) => Some(admission),
            _ => None,
        })
        .collect()
}

fn released(decision: &Decision) -> Vec<(&CallRef, &Vec<String>)> {
    decision
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Release { call, gates } => Some((call, gates)),
            _ => None,
        })
        .collect()
}

/// `call` given its slots at `at`, held its budget and a margin.
fn grant(call: &CallRef, at: Timestamp) -> Grant {
    Grant {
        call: call.clone(),
        until: at.plus(Duration::from_secs(15)),
    }
}

/// A task of `workflow`, with priority `priority`, claimed: its claim.
fn claimed(workflow: &Workflow, priority: u8, now: Timestamp) -> (Decision, Order) {
    let submission = Submission {
        input: json!({"customer_id": "c-1"}),
        priority,
        ..submission(false)
    };
    let (task, order, _) = submit(workflow, submission, now);
    (on_run(&task, workflow, &order, "s1", now), order)
}

#[test]
fn a_limited_call_waits_for_its_slot_and_its_complete_by_starts_when_given_it() {
    let workflow = limited();
    let now = Timestamp(1_000_000);
    let (claim, order) = claimed(&workflow, 1, now);
    assert!(
        dispatched(&claim).is_empty(),
        "nothing sent before its slot"
    );
    let admission = admitted(&claim)[0];
    assert_eq!(admission.gates.len(), 1);
    assert_eq!(admission.gates[0].name, "step:limited/a/c-1");
    assert_eq!(admission.position, now, "priority 1: no later than it came");
    assert_eq!(
        admission.hold,
        Duration::from_secs(15),
        "its budget and a margin"
    );
    let task = claim.next.clone().expect("claimed");
    let a = &task.steps[0];
    assert_eq!(a.state, StepState::Processing);
    assert_eq!(a.waiting, Some(Waiting::Slot { since: now }));
    assert_eq!(
        a.complete_by,
        Some(now.plus(SLOT_RECHECK)),
        "no failure while it waits"
    );

    // The supervisor asks again at the recheck: not a failure.
    let recheck = now.plus(SLOT_RECHECK);
    let asked = on_expired(&task, &workflow, &order, recheck);
    assert_eq!(asked.verdict, Verdict::SlotsAskedAgain);
    assert_eq!(admitted(&asked)[0].position, now, "its place kept");
    let task = asked.next.clone().expect("written");
    assert_eq!(task.steps[0].failure_count, 0);

    let later = recheck.plus(SECOND);
    let call = admission.call.clone();
    let granted = on_granted(&task, &workflow, &order, &grant(&call, later), later);
    assert_eq!(granted.verdict, Verdict::Granted);
    let request = dispatched(&granted)[0].clone();
    assert_eq!(request.complete_by, later.plus(Duration::from_secs(10)));
    let task = granted.next.clone().expect("written");
    let a = &task.steps[0];
    assert_eq!(a.waiting, None);
    assert_eq!(a.slots, ["step:limited/a/c-1"]);
    assert_eq!(a.waited_ms, Some(301_000));
    let again = on_granted(&task, &workflow, &order, &grant(&call, later), later);
    assert_eq!(again.verdict, Verdict::GrantUnused, "a grant twice");
    assert!(
        released(&again).is_empty(),
        "the call holds these very slots: they are given back when it ends"
    );

    let answered = on_response(&task, &workflow, &order, &respond(&request, ok()), later);
    let gone = released(&answered);
    assert_eq!(gone.len(), 1, "the answer gives its slot back");
    assert_eq!(
        (gone[0].0, gone[0].1.as_slice()),
        (&call, ["step:limited/a/c-1".to_owned()].as_slice())
    );
    let task = answered.next.clone().expect("written");
    assert!(task.steps[0].slots.is_empty());
    assert_eq!(dispatched(&answered)[0].step_name, "b", "b has no limit");
}

#[test]
fn a_later_priority_stands_further_back_and_a_cancelled_call_gives_its_grant_back() {
    let workflow = limited();
    let now = Timestamp(1_000_000);
    let (claim, order) = claimed(&workflow, 3, now);
    let admission = admitted(&claim)[0].clone();
    assert_eq!(admission.position, now.plus(Duration::from_secs(60)));
    let task = claim.next.expect("claimed");
    let request = asked_by(crate::task::Actor::Owner, now);
    let cancelled = cancel(&task, &workflow, request, now).expect("cancelled");
    let task = cancelled.next.expect("written");
    assert_eq!(
        task.steps[0].state,
        StepState::Pending,
        "never sent: nothing to undo"
    );
    let undone = on_run(&task, &workflow, &order, "s2", now);
    assert!(
        dispatched(&undone).is_empty(),
        "no compensation of a call never made"
    );
    assert_eq!(
        undone.next.as_ref().map(|t| t.state),
        Some(TaskState::Error)
    );
    let granted = on_granted(
        &task,
        &workflow,
        &order,
        &grant(&admission.call, now),
        now.plus(SECOND),
    );
    assert_eq!(granted.verdict, Verdict::GrantUnused);
    assert!(
        dispatched(&granted).is_empty(),
        "nothing called after a cancel"
    );
    assert_eq!(released(&granted)[0].1, &["step:limited/a/c-1".to_owned()]);
}

#[test]
fn a_call_that_times_out_gives_its_slot_back() {
    let workflow = limited();
    let now = Timestamp(1_000_000);
    let (claim, order) = claimed(&workflow, 3, now);
    let call = admitted(&claim)[0].call.clone();
    let task = claim.next.expect("claimed");
    let granted = on_granted(&task, &workflow, &order, &grant(&call, now), now);
    let task = granted.next.expect("written");
    let expired = on_expired(&task, &workflow, &order, now.plus(Duration::from_secs(10)));
    assert_eq!(expired.verdict, Verdict::Retry);
    assert_eq!(released(&expired).len(), 1);
    assert!(expired.next.expect("written").steps[0].slots.is_empty());
}

#[test]
fn a_grant_that_comes_late_bounds_its_call_by_its_slots_or_is_asked_for_again() {
    let workflow = limited();
    let now = Timestamp(1_000_000);
    let (claim, order) = claimed(&workflow, 3, now);
    let call = admitted(&claim)[0].call.clone();
    let task = claim.next.expect("claimed");
    // Given at `now`, its slot held until now + 15 s: taken 4 s late, the call has
    // until now + 10 s, not 4 + 10.
    let late = on_granted(
        &task,
        &workflow,
        &order,
        &grant(&call, now),
        now.plus(4 * SECOND),
    );
    assert_eq!(
        dispatched(&late)[0].complete_by,
        now.plus(10 * SECOND),
        "done before its slot lapses"
    );
    // Taken 11 s late: too late to call; asked for again, in its place.
    let stale = on_granted(
        &task,
        &workflow,
        &order,
        &grant(&call, now),
        now.plus(11 * SECOND),
    );
    assert_eq!(stale.verdict, Verdict::SlotsAskedAgain);
    assert!(dispatched(&stale).is_empty());
    assert_eq!(
        admitted(&stale)[0].position,
        now.plus(Duration::from_secs(60))
    );
}

/// [`limited`], its first call then waiting for its callback.
fn limited_with_a_callback() -> Workflow {
    let text = r#"{"name": "limited", "version": 1, "input": {"customer_id": "string"},
        "defaults": {"complete_by": "10s"},
        "steps": [
            {"name": "a", "agent": "s", "call": "/a", "compensation": "/a/undo",
             "limit": {"max_concurrency": 1, "key": "input.customer_id"},
             "callback": {"timeout": "30m"}},
            {"name": "b", "agent": "s", "call": "/b"}
        ]}"#;
    Workflow::parse("limited.json", text).expect("valid")
}

/// A task of [`limited_with_a_callback`] whose first call is out, holding its slot:
/// the task, its order, the call's request and the use of its token with `outcome`.
fn called_out(
    outcome: CallbackOutcome,
    now: Timestamp,
) -> (Workflow, Task, Order, AgentRequest, CallbackUse) {
    let workflow = limited_with_a_callback();
    let (claim, order) = claimed(&workflow, 1, now);
    let call = admitted(&claim)[0].call.clone();
    let task = claim.next.expect("claimed");
    let granted = on_granted(&task, &workflow, &order, &grant(&call, now), now);
    let request = dispatched(&granted)[0].clone();
    let token = request.payload.value()["callback_token"]
        .as_str()
        .and_then(crate::callback::Token::parse)
        .expect("a token");
    let callback = CallbackUse {
        step: 0,
        token: Some(token),
        by: crate::task::Caller::Token,
        outcome,
    };
    (
        workflow,
        granted.next.expect("sent"),
        order,
        request,
        callback,
    )
}

#[test]
fn a_callback_while_its_call_is_out_keeps_the_slot_and_undoes_nothing_until_the_call_is_answered() {
    let now = Timestamp(1_000_000);
    let refusal = CallbackOutcome::Error("the courier never came".into());
    let (workflow, task, order, request, callback) = called_out(refusal, now);
    let early = on_callback(&task, &workflow, &order, callback.clone(), now).expect("used");
    assert!(
        released(&early).is_empty(),
        "the call still out holds its slot"
    );
    assert!(dispatched_none(&early.effects), "nothing undone yet");
    let task = early.next.expect("written");
    assert_eq!(
        (task.state, task.steps[0].state),
        (TaskState::Processing, StepState::Processing),
        "its call is still out"
    );
    assert_eq!(task.steps[0].slots, ["step:limited/a/c-1"]);
    assert_eq!(
        on_callback(&task, &workflow, &order, callback, now),
        Err(Refused::NotWaiting("a".into())),
        "used once"
    );

    let answered = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
    assert_eq!(
        answered.verdict,
        Verdict::Recorded,
        "the answer settles the call"
    );
    assert_eq!(released(&answered).len(), 1, "its slot given back");
    let task = answered.next.clone().expect("written");
    assert_eq!(task.state, TaskState::Compensating);
    assert_eq!(
        (task.steps[0].state, task.steps[0].undoing),
        (StepState::Compensating, Some(StepState::Unusable)),
        "refused, as its callback said, and undone"
    );
    assert_eq!(
        admitted(&answered)[0].call.operation,
        Operation::Compensate,
        "undone once the call is settled"
    );
}

#[test]
fn a_callback_while_its_call_is_out_ends_the_step_when_the_calls_lease_ends() {
    let now = Timestamp(1_000_000);
    let output = CallbackOutcome::Output(json!({"picked_up": true}));
    let (workflow, task, order, request, callback) = called_out(output, now);
    let task = on_callback(&task, &workflow, &order, callback, now)
        .expect("used")
        .next
        .expect("written");
    assert_eq!(
        task.complete_by,
        Some(request.complete_by),
        "the call's lease"
    );

    // Its agent answers no more: the call is settled by its lease's end, not retried.
    let ended = on_expired(&task, &workflow, &order, request.complete_by);
    assert_eq!(released(&ended).len(), 1, "its slot given back");
    let task = ended.next.expect("written");
    assert_eq!(task.steps[0].state, StepState::Processed);
    assert_eq!(task.steps[0].failure_count, 0);
    assert_eq!(
        task.steps[0].output.as_deref(),
        Some(&json!({"picked_up": true}))
    );
    let run = on_run(&task, &workflow, &order, "s2", request.complete_by);
    assert_eq!(dispatched(&run)[0].step_name, "b");
}
