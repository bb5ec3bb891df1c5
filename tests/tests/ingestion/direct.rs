//! Direct ingestion: the process, its own scheduler, creates a submission's task
//! claimed (or pending behind a backlog); a repeat whose first messages were lost sends
//! them again; submissions that come together store their workflow's definition once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sas_core::app::Submitted;
use sas_core::ports::{OutgoingMessage, Queues};
use sas_domain::ids::TaskId;
use sas_domain::submission::Submission;
use sas_tests::{Buffering, Harness, delivery_input, notified_states, step_states};
use serde_json::json;

use super::{a_repeat_sends_the_lost_first_messages_again, quick};

/// A direct submission on the local system is answered with its task created
/// claimed: its creation (version 1) and claim (2) one write, no Run message for a
/// scheduler; its caller told Pending, then Processing, before the answer. It runs
/// to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_submission_is_created_claimed_and_run() {
    let harness = Harness::start(5).await;
    let (status, created) = harness
        .put_task("claimed-1", &quick(Some("my-updates")))
        .await;
    assert_eq!(
        (
            status,
            created["state"].as_str(),
            created["version"].as_u64()
        ),
        (202, Some("Processing"), Some(2)),
        "{created:#}"
    );
    assert!(
        created["locked_by"]
            .as_str()
            .is_some_and(|by| by.starts_with("local-")),
        "{created:#}"
    );
    let scheduler = harness.running.system.queues.scheduler.clone();
    assert_eq!(harness.depth(&scheduler).await.visible, 0, "no Run message");
    let task = harness.settle_in("claimed-1", "Processed").await;
    assert_eq!(step_states(&task), ["Processed"; 5]);
    // Told before the answer; its end may not be told yet.
    let updates = harness.notifications("my-updates").await;
    assert_eq!(
        notified_states("claimed-1", &updates)[..2],
        ["Pending", "Processing"]
    );
}

/// While the agents' queue holds twice the requests they take at once (16 in the
/// harness), a direct submission is created Pending, for the scheduler to claim:
/// a burst waits where no lease runs, not among the agents' requests, where its first
/// step's would run out. It runs to its end all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_submission_behind_a_backlog_is_created_pending() {
    let harness = Harness::start(5).await;
    let system = &harness.running.system;
    // Requests no agent can handle: taken, failed, and held until their visibility
    // ends, which the manual clock never reaches.
    let backlog: Vec<_> = (0..32)
        .map(|i| OutgoingMessage::json(&json!({ "backlog": i }), Duration::ZERO))
        .collect();
    Queues::send(
        system.backend.as_ref(),
        &system.queues.agent_requests,
        &backlog,
    )
    .await
    .expect("sent");
    let (status, created) = harness.put_task("behind", &quick(None)).await;
    assert_eq!(
        (
            status,
            created["state"].as_str(),
            created["locked_by"].as_str()
        ),
        (202, Some("Pending"), None),
        "{created:#}"
    );
    let (status, _, task) = harness.call("GET", "/tasks/behind?wait=10s", None).await;
    assert_eq!((status, task["state"].as_str()), (200, Some("Processed")));
    assert_eq!(step_states(&task), ["Processed"; 5]);
}

/// The local process created a direct submission's task claimed and died before
/// sending its first step's request and its lease's deadline message: the same
/// request again sends them, the same attempt, rather than leave the task to its
/// lease's end; nothing is written again. Once the task has moved on, a repeat sends
/// nothing. So too when the repeat comes while the agents' queue is backed up, when
/// a new submission would be created Pending. Over the in-memory backend, on a
/// manual clock.
#[tokio::test]
async fn a_direct_creation_whose_messages_were_lost_sends_them_when_it_is_submitted_again() {
    for claims_at_repeat in [true, false] {
        let buffering = Buffering::new();
        let claims = Arc::new(AtomicBool::new(true));
        let local = buffering
            .direct_over(buffering.ports(), "local-1")
            .with_submissions_claimed({
                let claims = Arc::clone(&claims);
                move || claims.load(Ordering::Relaxed)
            });
        let submission = Submission::new(TaskId::parse("resent").expect("id"), delivery_input());
        let submit = async || local.submit("drone-delivery", submission.clone()).await;
        assert!(matches!(submit().await, Ok(Submitted::Created(_))));
        claims.store(claims_at_repeat, Ordering::Relaxed);
        a_repeat_sends_the_lost_first_messages_again(&buffering, "local-1", async || {
            assert!(matches!(submit().await, Ok(Submitted::Replayed(_))));
        })
        .await;
    }
}

/// Submissions that come together to a process that has not yet stored their
/// workflow's definition (a function's first batch, direct or buffered) store it
/// once, not once each: it is a write of the whole definition, billed by its size.
#[tokio::test]
async fn a_workflow_definition_is_stored_once_for_submissions_that_come_together() {
    for buffered in [false, true] {
        let buffering = Buffering::new();
        let api = if buffered {
            buffering.app("api")
        } else {
            buffering.direct_over(buffering.ports(), "api")
        };
        let submissions = (0..10).map(|i| {
            let submission = Submission::new(
                TaskId::parse(format!("together-{i}")).expect("id"),
                delivery_input(),
            );
            let api = &api;
            async move {
                if buffered {
                    api.accept("drone-delivery", submission).await.map(|_| ())
                } else {
                    api.submit("drone-delivery", submission).await.map(|_| ())
                }
            }
        });
        for submitted in futures_util::future::join_all(submissions).await {
            submitted.expect("taken");
        }
        assert_eq!(
            buffering.memory.workflow_writes(),
            1,
            "buffered: {buffered}: the definition written once"
        );
    }
}
