//! Expired leases: retries to the threshold, compensation, pickups and deadline
//! messages.

use super::*;

#[test]
fn an_expired_step_is_retried_until_its_threshold_then_compensated() {
    let workflow = drone();
    let threshold = supervision(&workflow.steps[3]).failure_threshold;
    let mut now = Timestamp(0);
    let (mut task, order, mut request) = run_to(&workflow, 3, now);
    assert_eq!(request.step_name, "schedule-drone");
    assert_eq!(
        on_expired(&task, &workflow, &any_order(), now).next,
        None,
        "the lease is live"
    );
    for failure in 1..=threshold {
        now = request.complete_by;
        let decision = on_expired(&task, &workflow, &any_order(), now);
        task = decision.next.clone().expect("retry");
        assert_eq!(decision.verdict, Verdict::Retry);
        assert_eq!(
            (task.state, task.locked_by.clone()),
            (TaskState::Pending, None)
        );
        assert_eq!(
            (task.steps[3].failure_count, task.failure_count),
            (failure, failure)
        );
        let wait = if failure == threshold {
            supervision(&workflow.steps[3]).extended_wait
        } else {
            Duration::ZERO
        };
        assert!(decision.effects.contains(&Effect::Schedule {
            task_id: task.id.clone(),
            delay: wait
        }));
        if !wait.is_zero() {
            let early = on_run(&task, &workflow, &order, "s2", now);
            assert_eq!(
                early.verdict,
                Verdict::NotWaitingForScheduler,
                "a Run message before the extended wait is over sends nothing"
            );
        }
        // The retry's Run message, after its wait.
        now = now.plus(wait);
        let claim = on_run(&task, &workflow, &order, "s2", now);
        task = claim.next.clone().expect("claimed again");
        request = dispatched(&claim)[0].clone();
        assert_eq!((request.step, request.attempt), (3, failure + 1));
        assert_eq!(
            request.idempotency_key, "t1/1/schedule-drone",
            "the same key on every attempt"
        );
    }
    now = request.complete_by;
    let decision = on_expired(&task, &workflow, &any_order(), now);
    task = decision.next.clone().expect("gave up");
    assert_eq!(decision.verdict, Verdict::GaveUp);
    assert_eq!(task.steps[3].failure_count, threshold + 1);
    assert_eq!(
        (task.state, task.steps[3].state),
        (TaskState::Compensating, StepState::TimedOut)
    );

    // Compensation runs in reverse order: the timed-out drone, then the package.
    let claim = on_run(&task, &workflow, &order, "s3", now);
    task = claim.next.clone().expect("claimed for compensation");
    let mut undone = vec![];
    let mut decision = claim;
    while let Some(request) = dispatched(&decision).first().map(|r| (*r).clone()) {
        assert_eq!(request.operation, Operation::Compensate);
        assert!(request.idempotency_key.ends_with("/compensate"));
        undone.push(request.step_name.clone());
        decision = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
        task = decision.next.clone().expect("compensated");
    }
    assert_eq!(undone, ["schedule-drone", "create-package"]);
    let alert = alert_of(&decision).expect("alerted");
    assert_eq!(alert.reason, "step 'schedule-drone' timed out 4 times");
    assert_eq!(
        (task.state, task.locked_by.clone(), task.complete_by),
        (TaskState::Error, None, Some(now.plus(ALERT_REDELIVERY))),
        "a lease until the alert is published"
    );
    assert_eq!(task.pending_alert.as_ref(), Some(&alert));
}

#[test]
fn a_timed_out_step_whose_compensation_times_out_is_still_timed_out() {
    let workflow = drone();
    let threshold = supervision(&workflow.steps[3]).failure_threshold;
    let (mut task, order, mut request) = run_to(&workflow, 3, Timestamp(0));
    let mut now = Timestamp(0);
    for _ in 0..=threshold {
        now = request.complete_by;
        task = on_expired(&task, &workflow, &any_order(), now)
            .next
            .expect("expired");
        // The retry's Run message, after its wait.
        now = task.steps[3].retry_at.unwrap_or(now);
        let claim = on_run(&task, &workflow, &order, "s", now);
        task = claim.next.clone().expect("claimed");
        request = dispatched(&claim)[0].clone();
    }
    assert_eq!(request.operation, Operation::Compensate, "gave up, undoing");
    assert_eq!(task.steps[3].state, StepState::Compensating);

    let decision = on_expired(&task, &workflow, &any_order(), request.complete_by);
    assert_eq!(decision.verdict, Verdict::Retry);
    let task = decision.next.expect("to be undone again");
    assert_eq!(
        task.steps[3].state,
        StepState::TimedOut,
        "as it was, not Processed"
    );
    let claim = on_run(&task, &workflow, &order, "s", now);
    assert_eq!(
        (dispatched(&claim)[0].step, dispatched(&claim)[0].operation),
        (3, Operation::Compensate),
        "undone again"
    );
}

#[test]
fn an_unclaimed_task_is_sent_again_without_counting_a_failure() {
    let workflow = drone();
    let (task, _, _) = submit(&workflow, submission(false), Timestamp(0));
    let late = task.complete_by.expect("lease");
    let decision = on_expired(&task, &workflow, &any_order(), late);
    let next = decision.next.expect("sent again");
    assert_eq!((next.failure_count, next.state), (0, TaskState::Pending));
    assert!(next.complete_by > task.complete_by);
    assert_eq!(
        decision.effects,
        [
            Effect::Schedule {
                task_id: task.id.clone(),
                delay: Duration::ZERO
            },
            Effect::Deadline {
                task_id: task.id,
                at: next.complete_by.expect("a new lease"),
            }
        ],
        "a Run, and a deadline message for the new lease (the last one is spent)"
    );
}

#[test]
fn a_deadline_message_follows_each_tasks_lease_one_at_a_time() {
    let workflow = drone();
    let deadlines = |decision: &Decision| -> Vec<Timestamp> {
        decision
            .effects
            .iter()
            .filter_map(|e| match e {
                Effect::Deadline { at, .. } => Some(*at),
                _ => None,
            })
            .collect()
    };
    let now = Timestamp(0);
    let (task, order, effects) = submit(&workflow, submission(false), now);
    let pickup = task.complete_by.expect("the pickup lease");
    assert!(effects.contains(&Effect::Deadline {
        task_id: task.id.clone(),
        at: pickup,
    }));
    assert_eq!(task.deadline, Some(pickup));
    let claim = on_run(&task, &workflow, &order, "s", now);
    let claimed = claim.next.clone().expect("claimed");
    let first = claimed.complete_by.expect("the step's lease");
    assert!(first < pickup);
    assert_eq!(
        deadlines(&claim),
        [first],
        "a lease ending sooner: a message of its own"
    );
    let request = dispatched(&claim)[0].clone();
    let later = Timestamp(1_000);
    let answered = on_response(&claimed, &workflow, &order, &respond(&request, ok()), later);
    let second = answered.next.clone().expect("recorded");
    assert!(
        deadlines(&answered).is_empty(),
        "a lease ending later: the message on its way follows it"
    );

    // The pickup's message is spent: dropped without a write.
    let spent = on_deadline(&second, &workflow, &any_order(), pickup, pickup);
    assert_eq!(
        (spent.verdict, spent.next, spent.effects),
        (Verdict::DeadlineSuperseded, None, vec![])
    );
    // The first step's comes at its end, finds the lease moved on and is followed
    // by one for the new end; there the lease has expired: acted on as the
    // supervisor would, and the next lease watched.
    let moved = on_deadline(&second, &workflow, &any_order(), first, first);
    assert_eq!(moved.verdict, Verdict::DeadlineMoved);
    let second_end = second.complete_by.expect("the second step's lease");
    assert_eq!(deadlines(&moved), [second_end]);
    let watched = moved.next.expect("the new end recorded");
    let expired = on_deadline(&watched, &workflow, &any_order(), second_end, second_end);
    assert_eq!(expired.verdict, Verdict::Retry);
    let retried = expired.next.clone().expect("sent back");
    let pickup_again = retried.complete_by.expect("a pickup lease");
    assert_eq!(deadlines(&expired), [pickup_again]);

    // Claimed again: a lease ending sooner, one message more; the pickup's is
    // spent when it comes. One chain, however often the task is sent back.
    let claim = on_run(&retried, &workflow, &order, "s", second_end);
    let reclaimed = claim.next.clone().expect("claimed again");
    assert_eq!(
        deadlines(&claim),
        [reclaimed.complete_by.expect("its lease")]
    );
    assert_eq!(
        on_deadline(
            &reclaimed,
            &workflow,
            &any_order(),
            pickup_again,
            pickup_again
        )
        .verdict,
        Verdict::DeadlineSuperseded
    );

    // The supervisor, finding a lease expired (its message lost), watches the new one.
    let lost = reclaimed.complete_by.expect("lease");
    let swept = on_expired(&reclaimed, &workflow, &any_order(), lost);
    assert_eq!(
        deadlines(&swept),
        [swept.next.expect("retried").complete_by.expect("lease")]
    );

    // A task that ends keeps a lease while its notifications are not known sent;
    // once they are, it has none to watch, and the chain ends.
    let (last, order, request) = run_to(&workflow, 4, now);
    let finished = on_response(&last, &workflow, &order, &respond(&request, ok()), later);
    let done = finished.next.clone().expect("processed");
    let held = done.complete_by.expect("held for its notifications");
    assert!(
        done.deadline.is_some_and(|due| due <= held),
        "the message on its way watches it"
    );
    let told = notifications_sent(&done, &outboxed(&done), later);
    let told = told.next.expect("cleared");
    assert_eq!(told.complete_by, None);
    let end = on_deadline(&told, &workflow, &any_order(), held, held);
    assert_eq!((end.next, end.effects), (None, vec![]));
}
