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
