//! Buffered ingestion on the local system: a submission is checked and queued, then
//! created by the scheduler. A repeat is the same task; a different request for the
//! same id, too late for a 409, is refused on the task and told; a message delivered
//! twice creates one task. (A kill -9 between acceptance and creation, and in the
//! middle of a batch: `functions/local/tests/kill_restart.rs`.)

use std::time::Duration;

use sas_core::domain::ids::QueueName;
use sas_core::domain::messages::{Buffered, SchedulerMessage};
use sas_core::domain::task::WorkflowRef;
use sas_core::ports::{OutgoingMessage, Queues};
use sas_core::time::Timestamp;
use sas_tests::{Harness, delivery_input, step_states};
use serde_json::{Value, json};

fn quick(notify: Option<&str>) -> Value {
    json!({ "workflow": "drone-delivery-quick", "input": delivery_input(), "notify": notify })
}

/// The queue of buffered submissions of a harness started buffered.
fn ingest_queue(harness: &Harness) -> QueueName {
    harness
        .running
        .system
        .ingest
        .clone()
        .expect("an ingest queue")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_submission_is_accepted_then_created_and_run() {
    let harness = Harness::start_buffered(5).await;
    let (status, location, accepted) = harness
        .call(
            "PUT",
            "/tasks/buffered-1",
            Some(quick(None).to_string().as_bytes()),
        )
        .await;
    assert_eq!(
        (status, location.as_deref(), accepted["status"].as_str()),
        (202, Some("/tasks/buffered-1"), Some("accepted")),
        "{accepted:#}"
    );
    assert_eq!(accepted["workflow"]["name"], "drone-delivery-quick");
    // Waiting reads through the task's creation to its end.
    let (status, _, task) = harness
        .call("GET", "/tasks/buffered-1?wait=10s", None)
        .await;
    assert_eq!((status, task["state"].as_str()), (200, Some("Processed")));
    assert_eq!(step_states(&task), ["Processed"; 5]);

    // Bad input is still refused at once, and nothing is queued.
    let (status, _, refused) = harness
        .call(
            "PUT",
            "/tasks/buffered-bad",
            Some(
                json!({"workflow": "drone-delivery-quick", "input": {}})
                    .to_string()
                    .as_bytes(),
            ),
        )
        .await;
    assert_eq!(
        (status, refused["error"]["field"].as_str()),
        (400, Some("input.customer_id"))
    );
    let ingest = ingest_queue(&harness);
    assert_eq!(harness.depth(&ingest).await.visible, 0);
    // Nor may a caller be notified on the ingest queue (or its dead letters).
    for queue in ["ingest", "ingest-dlq"] {
        let mut told = quick(Some(queue));
        told["id"] = json!("buffered-told");
        let (status, _, refused) = harness
            .call("POST", "/tasks", Some(told.to_string().as_bytes()))
            .await;
        assert_eq!(
            (status, refused["error"]["field"].as_str()),
            (400, Some("notify")),
            "{refused:#}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_is_the_same_task_and_a_different_request_is_refused_on_it_and_told() {
    let harness = Harness::start_buffered(5).await;
    let first = quick(Some("first-updates"));
    for _ in 0..2 {
        let (status, _) = harness.put_task("taken", &first).await;
        assert_eq!(status, 202);
    }
    harness.settle_in("taken", "Processed").await;
    assert_eq!(
        harness.effects_of("taken").await.len(),
        5,
        "the repeat is the same task: one effect per step"
    );

    let mut other = quick(Some("second-updates"));
    other["input"]["weight_kg"] = json!(9.5);
    let (status, _) = harness.put_task("taken", &other).await;
    assert_eq!(status, 202, "too late to tell: accepted");
    let task = harness
        .wait_for("taken", "the refusal recorded", |t| {
            t["refused_submissions"]
                .as_array()
                .is_some_and(|r| r.len() == 1)
        })
        .await;
    assert_eq!(
        task["input"],
        delivery_input(),
        "the task keeps the first request"
    );
    for queue in ["second-updates", "first-updates"] {
        let told = harness.notifications(queue).await;
        let refusal = told
            .iter()
            .find(|n| n["error"].as_str().is_some_and(|e| e.contains("refused")))
            .unwrap_or_else(|| panic!("{queue} is told: {told:?}"));
        assert_eq!(refusal["task_id"], "taken");
        assert_eq!(refusal["state"], "Processed");
    }

    // The same refused request again (its message delivered twice) is recorded once.
    let (status, _) = harness.put_task("taken", &other).await;
    assert_eq!(status, 202);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ingest = ingest_queue(&harness);
    assert_eq!(harness.depth(&ingest).await, Default::default(), "handled");
    let task = harness.task("taken").await;
    assert_eq!(
        task["refused_submissions"].as_array().map(Vec::len),
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_message_delivered_twice_creates_one_task() {
    let harness = Harness::start_buffered(5).await;
    let ingest = ingest_queue(&harness);
    let submission = serde_json::from_value(json!({
        "id": "twice", "input": delivery_input(), "notify": null
    }))
    .expect("a submission");
    let message = SchedulerMessage::Submit(Buffered {
        workflow: WorkflowRef {
            name: "drone-delivery-quick".into(),
            version: 1,
        },
        submission,
        accepted_at: Timestamp(1_800_000_000_000),
    });
    // Its workflow version is stored when a submission of it is accepted.
    harness.put_task("before", &quick(None)).await;
    let body = serde_json::to_string(&message).expect("JSON");
    let copy = || OutgoingMessage {
        body: body.clone(),
        delay: Duration::ZERO,
    };
    harness
        .running
        .system
        .backend
        .send(&ingest, &[copy(), copy()])
        .await
        .expect("sent twice");
    let task = harness.settle_in("twice", "Processed").await;
    assert_eq!(task["version"], harness.task("twice").await["version"]);
    assert_eq!(
        harness.effects_of("twice").await.len(),
        5,
        "one task, run once"
    );
}
