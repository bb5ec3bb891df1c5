//! Parallel branches: sent at once, joined, failed and undone in the reverse of the
//! order their effects came to be, and retried beside each other.

use super::*;
use crate::task::Happened;

/// `a`, then two branches (`b`, then `c`; and `d`), then `e`: every step undone by a
/// compensation, each expiring twice before it is given up.
fn branched() -> Workflow {
    let step = |name: &str| {
        format!(
            r#"{{"name": "{name}", "agent": "s", "call": "/{name}", "compensation": "/{name}/undo"}}"#
        )
    };
    let text = format!(
        r#"{{"name": "branched", "version": 1,
            "input": {{"customer_id": "string", "pickup": "string", "dropoff": "string", "weight_kg": "number"}},
            "defaults": {{"supervisor": {{"failure_threshold": 1, "retry_delay": "5s", "extended_wait": "20s"}}}},
            "steps": [{a}, {{"name": "p", "parallel": [[{b}, {c}], [{d}]]}}, {e}]}}"#,
        a = step("a"),
        b = step("b"),
        c = step("c"),
        d = step("d"),
        e = step("e"),
    );
    Workflow::parse("branched.json", &text).expect("valid")
}

fn names(requests: &[&AgentRequest]) -> Vec<String> {
    requests
        .iter()
        .map(|r| {
            format!(
                "{}{}",
                r.step_name,
                match r.operation {
                    Operation::Call => "",
                    Operation::Compensate => " undo",
                }
            )
        })
        .collect()
}

/// Answers `request` with `outcome` at `now`: the task after, and what was sent.
fn answer(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    request: &AgentRequest,
    outcome: Outcome,
    now: Timestamp,
) -> (Task, Vec<AgentRequest>) {
    let decision = on_response(task, workflow, order, &respond(request, outcome), now);
    let sent = dispatched(&decision).into_iter().cloned().collect();
    (decision.next.expect("recorded"), sent)
}

#[test]
fn branches_are_sent_at_once_and_the_step_after_them_waits_for_every_branch() {
    let workflow = branched();
    let now = Timestamp(0);
    let (task, order, a) = run_to(&workflow, 0, now);
    assert_eq!(a.step_name, "a");
    let (task, sent) = answer(&task, &workflow, &order, &a, ok(), now);
    assert_eq!(
        names(&sent.iter().collect::<Vec<_>>()),
        ["b", "d"],
        "both branches at once"
    );
    let (b, d) = (&sent[0], &sent[1]);
    assert_eq!(task.complete_by, Some(b.complete_by.min(d.complete_by)));
    let (task, sent) = answer(&task, &workflow, &order, d, ok(), now);
    assert!(sent.is_empty(), "e waits for the other branch");
    let (task, sent) = answer(&task, &workflow, &order, b, ok(), now);
    assert_eq!(names(&sent.iter().collect::<Vec<_>>()), ["c"]);
    let (task, sent) = answer(&task, &workflow, &order, &sent[0], ok(), now);
    assert_eq!(names(&sent.iter().collect::<Vec<_>>()), ["e"], "joined");
    let (task, sent) = answer(&task, &workflow, &order, &sent[0], ok(), now);
    assert!(sent.is_empty());
    assert_eq!(task.state, TaskState::Processed);
}

#[test]
fn a_failed_branch_stops_new_steps_waits_for_the_calls_out_then_undoes_in_reverse_of_completion() {
    let workflow = branched();
    let now = Timestamp(0);
    let (task, order, a) = run_to(&workflow, 0, now);
    let (task, sent) = answer(&task, &workflow, &order, &a, ok(), now);
    let (b, d) = (sent[0].clone(), sent[1].clone());
    // b is done before d: d is undone first.
    let (task, sent) = answer(&task, &workflow, &order, &b, ok(), now);
    let c = sent[0].clone();
    let (task, sent) = answer(&task, &workflow, &order, &d, ok(), now);
    assert!(sent.is_empty());
    // c fails: nothing is undone while nothing else is out, at once here.
    let failed = Outcome::Failed {
        error: "refused".into(),
    };
    let (task, sent) = answer(&task, &workflow, &order, &c, failed.clone(), now);
    assert_eq!(task.state, TaskState::Compensating);
    assert_eq!(names(&sent.iter().collect::<Vec<_>>()), ["d undo"]);
    let (task, sent) = answer(&task, &workflow, &order, &sent[0], ok(), now);
    assert_eq!(names(&sent.iter().collect::<Vec<_>>()), ["b undo"]);
    let (task, sent) = answer(&task, &workflow, &order, &sent[0], ok(), now);
    assert_eq!(names(&sent.iter().collect::<Vec<_>>()), ["a undo"]);
    let (task, _) = answer(&task, &workflow, &order, &sent[0], ok(), now);
    assert_eq!(task.state, TaskState::Error);

    // b fails while d is out: nothing new is sent, nothing undone until d answers.
    let (task, order, a) = run_to(&workflow, 0, now);
    let (task, sent) = answer(&task, &workflow, &order, &a, ok(), now);
    let (b, d) = (sent[0].clone(), sent[1].clone());
    let (task, sent) = answer(&task, &workflow, &order, &b, failed, now);
    assert_eq!(task.state, TaskState::Compensating);
    assert!(sent.is_empty(), "d is still out");
    assert_eq!(task.complete_by, Some(d.complete_by), "its lease is d's");
    let (task, sent) = answer(&task, &workflow, &order, &d, ok(), now);
    assert_eq!(
        names(&sent.iter().collect::<Vec<_>>()),
        ["d undo"],
        "the call that finished is undone"
    );
    let (task, sent) = answer(&task, &workflow, &order, &sent[0], ok(), now);
    assert_eq!(names(&sent.iter().collect::<Vec<_>>()), ["a undo"]);
    let (task, _) = answer(&task, &workflow, &order, &sent[0], ok(), now);
    assert_eq!(task.state, TaskState::Error);
    assert_eq!(
        states(&task),
        [
            StepState::Compensated,
            StepState::Error,
            StepState::Pending,
            StepState::Compensated,
            StepState::Pending
        ]
    );
}

#[test]
fn a_branchs_step_is_retried_on_its_own_run_message_while_the_other_branch_goes_on() {
    let workflow = branched();
    let now = Timestamp(0);
    let (task, order, a) = run_to(&workflow, 0, now);
    let (task, sent) = answer(&task, &workflow, &order, &a, ok(), now);
    let b = sent[0].clone();
    // Both budgets pass (the default 30 s each).
    let expired = on_expired(&task, &workflow, &any_order(), b.complete_by);
    assert_eq!(expired.verdict, Verdict::Retry);
    let task = expired.next.expect("retried");
    assert_eq!(
        task.state,
        TaskState::Pending,
        "both were out: nothing else runs"
    );
    assert!(
        expired
            .effects
            .iter()
            .filter(|e| matches!(e, Effect::Schedule { .. }))
            .count()
            >= 2,
        "each step waits for a Run message of its own: {:?}",
        expired.effects
    );
    // The extended wait, at the threshold: 20 s.
    let at = b.complete_by.plus(Duration::from_secs(20));
    let claim = on_run(&task, &workflow, &order, "s2", at);
    assert_eq!(names(&dispatched(&claim)), ["b", "d"]);
    let sent: Vec<AgentRequest> = dispatched(&claim).into_iter().cloned().collect();
    let task = claim.next.expect("claimed");
    let (b, d) = (sent[0].clone(), sent[1].clone());

    // d answers in time; b expires again, past its threshold of 1: given up.
    let (task, sent) = answer(&task, &workflow, &order, &d, ok(), at);
    assert!(sent.is_empty());
    let expired = on_expired(&task, &workflow, &any_order(), b.complete_by);
    assert_eq!(expired.verdict, Verdict::GaveUp, "past its threshold of 1");

    // A fresh task: b expires while d is still out.
    let (task, order, a) = run_to(&workflow, 0, now);
    let (task, sent) = answer(&task, &workflow, &order, &a, ok(), now);
    let b = sent[0].clone();
    let mut task = task;
    let d_index = 3;
    task.steps[d_index].complete_by = Some(b.complete_by.plus(Duration::from_secs(60)));
    let expired = on_expired(&task, &workflow, &any_order(), b.complete_by);
    assert_eq!(expired.verdict, Verdict::Retry);
    let task = expired.next.expect("retried");
    assert_eq!(task.state, TaskState::Processing, "d is still out");
    assert!(task.locked_by.is_some());
    let retry_at = task.steps[1].retry_at.expect("b waits for its retry");
    assert_eq!(retry_at, b.complete_by.plus(Duration::from_secs(20)));
    assert_eq!(
        task.complete_by,
        Some(
            retry_at
                .plus(workflow.pickup_timeout)
                .min(b.complete_by.plus(Duration::from_secs(60)))
        ),
    );
    // A Run message before its time sends nothing; at its time, b is sent again.
    let early = on_run(&task, &workflow, &order, "s2", b.complete_by);
    assert_eq!(early.verdict, Verdict::NotWaitingForScheduler);
    let resumed = on_run(&task, &workflow, &order, "s2", retry_at);
    assert_eq!(resumed.verdict, Verdict::Resumed);
    assert_eq!(names(&dispatched(&resumed)), ["b"]);
    assert_eq!(dispatched(&resumed)[0].attempt, 2);
}

/// Found by the simulation: a step given up and another due for a retry in the same
/// sweep left the other Pending, its effect perhaps in place and never undone.
#[test]
fn a_call_due_for_a_retry_as_another_branch_gives_up_is_undone_not_retried() {
    let workflow = branched();
    let now = Timestamp(0);
    let (task, order, a) = run_to(&workflow, 0, now);
    let (mut task, sent) = answer(&task, &workflow, &order, &a, ok(), now);
    let b = sent[0].clone();
    // b expired once before; this pass gives it up, and would retry d.
    task.steps[1].failure_count = 1;
    let expired = on_expired(&task, &workflow, &any_order(), b.complete_by);
    assert_eq!(expired.verdict, Verdict::GaveUp);
    assert!(
        !expired
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Schedule { delay, .. } if !delay.is_zero())),
        "no retry is scheduled: {:?}",
        expired.effects
    );
    let task = expired.next.expect("given up");
    assert_eq!(task.state, TaskState::Compensating);
    assert_eq!(
        (task.steps[1].state, task.steps[3].state),
        (StepState::TimedOut, StepState::TimedOut),
        "d, whose effect may be in place, is undone too"
    );
    let announced: Vec<_> = task
        .history
        .iter()
        .filter_map(|e| match *e.what() {
            Happened::Expired { step, retry_at, .. } => Some((step, retry_at)),
            _ => None,
        })
        .collect();
    assert_eq!(
        announced,
        [(1, None), (3, None)],
        "no retry is announced for a call that is undone"
    );
    let claim = on_run(&task, &workflow, &order, "s2", b.complete_by);
    let mut task = claim.next.clone().expect("claimed");
    let mut undone = Vec::new();
    let mut decision = claim;
    while let Some(request) = dispatched(&decision).first().map(|r| (*r).clone()) {
        undone.push(request.step_name.clone());
        decision = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
        task = decision.next.clone().expect("recorded");
    }
    assert_eq!(undone, ["d", "b", "a"], "in the reverse of the order done");
    assert_eq!(task.state, TaskState::Error);
}

/// A branch's step waiting for its retry, then another expiring with nothing else
/// out: each waits for its own time, and the first one's Run message sends it alone.
#[test]
fn two_branches_waiting_for_their_retries_are_each_sent_at_their_own_time() {
    let workflow = branched();
    let now = Timestamp(0);
    let (task, order, a) = run_to(&workflow, 0, now);
    let (mut task, sent) = answer(&task, &workflow, &order, &a, ok(), now);
    let b = sent[0].clone();
    let d_out_until = b.complete_by.plus(Duration::from_secs(10));
    task.steps[3].complete_by = Some(d_out_until);
    let task = on_expired(&task, &workflow, &any_order(), b.complete_by)
        .next
        .expect("b retried");
    let b_due = task.steps[1].retry_at.expect("b waits");
    let task = on_expired(&task, &workflow, &any_order(), d_out_until)
        .next
        .expect("d retried");
    let d_due = task.steps[3].retry_at.expect("d waits too");
    assert_eq!(
        (b_due, d_due),
        (
            b.complete_by.plus(Duration::from_secs(20)),
            d_out_until.plus(Duration::from_secs(20))
        )
    );
    assert_eq!(
        (task.state, task.complete_by),
        (
            TaskState::Pending,
            Some(b_due.plus(workflow.pickup_timeout))
        ),
        "released until the first retry, its pickup the lease"
    );
    let first = on_run(&task, &workflow, &order, "s2", b_due);
    assert_eq!(
        names(&dispatched(&first)),
        ["b"],
        "d's wait is not cut short"
    );
    let task = first.next.expect("claimed");
    let second = on_run(&task, &workflow, &order, "s2", d_due);
    assert_eq!(second.verdict, Verdict::Resumed);
    assert_eq!(names(&dispatched(&second)), ["d"]);
}

/// A cancel while a branch waits for its retry and another's call is out: the retry
/// is stopped, and the lease follows the call out alone.
#[test]
fn a_cancel_beside_a_waiting_retry_leaves_the_lease_on_the_call_out() {
    let workflow = branched();
    let now = Timestamp(0);
    let (task, order, a) = run_to(&workflow, 0, now);
    let (mut task, sent) = answer(&task, &workflow, &order, &a, ok(), now);
    let b = sent[0].clone();
    let d_out_until = b.complete_by.plus(Duration::from_secs(60));
    task.steps[3].complete_by = Some(d_out_until);
    let task = on_expired(&task, &workflow, &any_order(), b.complete_by)
        .next
        .expect("b retried");
    assert!(task.steps[1].retry_at.is_some());
    let cancelled = cancel(&task, &workflow, operator(None), b.complete_by)
        .expect("cancelled")
        .next
        .expect("changed");
    assert_eq!(cancelled.steps[1].state, StepState::TimedOut, "b is undone");
    assert_eq!(cancelled.complete_by, Some(d_out_until));
}
