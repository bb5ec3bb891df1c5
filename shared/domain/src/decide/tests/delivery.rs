//! Notifications and alerts, kept with their change until known delivered.

use super::*;

#[test]
fn an_alert_not_published_is_raised_again_until_it_is() {
    let workflow = drone();
    let now = Timestamp(0);
    let (decision, _) = refused_at_first(&workflow, "no such account", now);
    let alert = alert_of(&decision).expect("alerted");
    let in_error = decision.next.expect("in Error");
    assert_eq!(in_error.state, TaskState::Error);

    let early = now.plus(ALERT_REDELIVERY - Duration::from_millis(1));
    assert_eq!(
        on_expired(&in_error, &workflow, &any_order(), early).next,
        None
    );
    let late = now.plus(ALERT_REDELIVERY);
    let again = on_expired(&in_error, &workflow, &any_order(), late);
    assert_eq!(again.verdict, Verdict::AlertedAgain);
    assert_eq!(alert_of(&again), Some(alert.clone()), "the same alert");
    assert!(
        again
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Notify { outbound, .. }
            if outbound.notification.state == TaskState::Error)),
        "the caller told again"
    );
    let retried = again.next.expect("a new lease");
    assert_eq!(retried.complete_by, Some(late.plus(ALERT_REDELIVERY)));

    let told = notifications_sent(&retried, &outboxed(&retried), late);
    let published = alert_published(&told.next.expect("told"), &alert, late);
    let cleared = published.next.expect("cleared");
    assert_eq!(
        (cleared.pending_alert.clone(), cleared.complete_by),
        (None, None)
    );
    assert_eq!(cleared.state, TaskState::Error);
    assert_eq!(alert_published(&cleared, &alert, late).next, None, "once");
    assert_eq!(
        on_expired(
            &cleared,
            &workflow,
            &any_order(),
            late.plus(ALERT_REDELIVERY)
        )
        .next,
        None
    );
}

#[test]
fn a_finished_task_keeps_its_last_lease_for_its_notifications_only_when_it_ends_within_a_minute() {
    let workflow = drone();
    let now = Timestamp(0);
    let (mut task, order, request) = run_to(&workflow, 4, now);
    let response = respond(&request, ok());
    for (lease, kept) in [
        (
            now.plus(ALERT_REDELIVERY / 2),
            now.plus(ALERT_REDELIVERY / 2),
        ),
        (now.plus(ALERT_REDELIVERY * 2), now.plus(ALERT_REDELIVERY)),
    ] {
        task.complete_by = Some(lease);
        let done = on_response(&task, &workflow, &order, &response, now)
            .next
            .expect("processed");
        assert_eq!(done.state, TaskState::Processed);
        assert_eq!(
            done.complete_by,
            Some(kept),
            "the last lease ending at {lease:?}"
        );
    }
}

#[test]
fn a_notification_is_kept_with_its_change_until_sent_and_sent_again_until_then() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, request) = run_to(&workflow, 4, now);
    let finished = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
    assert_eq!(told(&finished.effects), [TaskState::Processed]);
    let done = finished.next.expect("processed");
    use TaskState::{Pending, Processed, Processing};
    let kept: Vec<_> = done.outbox.iter().map(|o| o.notification.state).collect();
    assert_eq!(kept, [Pending, Processing, Processed], "none known sent");
    let lease = task.complete_by.expect("the last step's lease");
    assert_eq!(
        done.complete_by,
        Some(lease),
        "the last step's lease kept: no index entry moved, no deadline message more"
    );

    // The Pending and Processing notifications were sent; the Processed one was
    // not (the send failed, or the function stopped after the write).
    let early: Vec<_> = outboxed(&done)[..2].to_vec();
    let told_early = notifications_sent(&done, &early, now);
    let task = told_early.next.expect("cleared");
    assert_eq!(
        notifications_sent(&task, &early, now).verdict,
        Verdict::NotificationsClearedAlready
    );
    assert_eq!(task.complete_by, Some(lease));
    let late = lease;
    assert_eq!(
        on_expired(&task, &workflow, &any_order(), now).next,
        None,
        "not yet"
    );
    let again = on_expired(&task, &workflow, &any_order(), late);
    assert_eq!(again.verdict, Verdict::NotifiedAgain);
    assert_eq!(told(&again.effects), [Processed], "the same notification");
    let Effect::Notify { outbound, .. } = &again.effects[0] else {
        panic!("a notification first: {:?}", again.effects);
    };
    assert_eq!(
        outbound, &task.outbox[0],
        "its version kept, for a caller to deduplicate"
    );
    let task = again.next.expect("a new lease");
    assert_eq!(task.complete_by, Some(late.plus(ALERT_REDELIVERY)));
    let task = notifications_sent(&task, &outboxed(&task), late)
        .next
        .expect("sent at last");
    assert!(task.outbox.is_empty());
    assert_eq!(task.complete_by, None, "nothing left to deliver");
}

#[test]
fn a_change_that_passes_through_a_state_tells_only_where_it_ends() {
    let workflow = drone();
    let now = Timestamp(0);
    // The first step is refused: Compensating, with nothing to undo, then Error,
    // in one write of one version.
    let (decision, _) = refused_at_first(&workflow, "no such customer", now);
    assert_eq!(told(&decision.effects), [TaskState::Error]);
    let task = decision.next.expect("in error");
    let versions: Vec<_> = task
        .outbox
        .iter()
        .map(|o| (o.notification.version, o.notification.state))
        .collect();
    assert_eq!(
        versions,
        [
            (1, TaskState::Pending),
            (2, TaskState::Processing),
            (task.version, TaskState::Error)
        ],
        "a version names one notification"
    );
}
