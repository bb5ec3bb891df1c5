//! What operators read: the names of outcomes in logs, metrics and reports.

use super::*;
use sas_domain::decide::Verdict;

/// The names dashboards, alarms and the sweep's report use: renaming a variant
/// must not rename what operators read.
#[test]
fn outcomes_keep_the_names_logs_metrics_and_reports_use() {
    use Verdict::*;
    let names = [
        (NotWaitingForScheduler, "not waiting for a scheduler"),
        (Claimed, "claimed"),
        (StaleResponse, "stale response"),
        (Recorded, "recorded"),
        (AlertedAgain, "alerted again"),
        (NotifiedAgain, "notified again"),
        (NotificationsSent, "notifications sent"),
        (NotificationsClearedAlready, "notifications cleared already"),
        (LeaseLive, "lease live"),
        (Granted, "granted"),
        (GrantUnused, "grant unused"),
        (SlotsAskedAgain, "slots asked again"),
        (LeaseWatched, "lease watched"),
        (SentAgain, "sent again"),
        (GaveUp, "gave up"),
        (Retry, "retry"),
        (DeadlineSuperseded, "deadline superseded"),
        (DeadlineMoved, "deadline moved"),
        (AlertClearedAlready, "alert cleared already"),
        (AlertPublished, "alert published"),
        (Resubmitted, "resubmitted"),
        (CancelRequested, "cancel requested"),
        (CancelledAlready, "cancelled already"),
        (SubmissionRefused, "submission refused"),
        (RefusedAlready, "refused already"),
    ];
    for (verdict, name) in names {
        assert_eq!(verdict.as_str(), name);
    }
    let recoveries = [
        Recovery::Decided(Retry),
        Recovery::Vanished,
        Recovery::Quarantined,
        Recovery::Failed,
    ];
    assert_eq!(
        serde_json::to_value(SweepReport::from(recoveries.map(|r| (r, 1)))).expect("json"),
        serde_json::json!({"retry": 1, "vanished": 1, "quarantined": 1, "failed": 1})
    );
    assert_eq!(
        [
            Handled::UnknownTask,
            Handled::DeadlineChained,
            Handled::Created,
            Handled::Repeated,
            Handled::GateMoved
        ]
        .map(Handled::as_str),
        [
            "unknown task",
            "deadline chained",
            "created",
            "repeated",
            "gate moved"
        ]
    );
}
