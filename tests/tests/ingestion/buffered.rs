//! Buffered ingestion: a submission checked and queued, then created by the scheduler;
//! a repeat, a different request too late for a 409, a message delivered twice, one
//! dead-lettered and redriven, a creation whose messages were lost, one created in Error.

use std::sync::Arc;
use std::time::Duration;

use sas_core::app::Ports;
use sas_core::ports::{OutgoingMessage, Queues};
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::submission::Submission;
use sas_domain::task::TaskState;
use sas_domain::workflow::{Registry, Workflow};
use sas_testkit::metrics::Recorded;
use sas_tests::{Buffering, Harness, accepted_submission, delivery_input, step_states};
use serde_json::json;

use super::{a_repeat_sends_the_lost_first_messages_again, ingest_queue, quick};

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
        let refusal = harness
            .notified(queue, "of the refusal", |n| {
                n["error"].as_str().is_some_and(|e| e.contains("refused"))
            })
            .await;
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

/// The message that accepting a quick delivery as task `id` queues.
fn accepted_message(id: &str) -> OutgoingMessage {
    let like = json!({
        "workflow": { "name": "drone-delivery-quick", "version": 1 },
        "input": delivery_input(),
    });
    OutgoingMessage {
        body: accepted_submission(id, &like),
        delay: Duration::ZERO,
        trace: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_message_delivered_twice_creates_one_task() {
    let harness = Harness::start_buffered(5).await;
    let ingest = ingest_queue(&harness);
    // Its workflow version is stored when a submission of it is accepted.
    harness.put_task("before", &quick(None)).await;
    let copy = || accepted_message("twice");
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

/// Puts the accepted submission of task `id` in the ingest queue's dead letters, as
/// an outage through all its receives would; returns that queue.
async fn dead_letter(harness: &Harness, id: &str) -> QueueName {
    let dead_letters = QueueName::parse("ingest-dlq").expect("name");
    harness
        .running
        .system
        .backend
        .send(&dead_letters, &[accepted_message(id)])
        .await
        .expect("dead-lettered");
    dead_letters
}

/// An accepted submission whose message could not be handled (an outage through
/// all its receives) waits in the ingest dead-letter queue: its task does not
/// exist, the operator sees it beside the other dead letters, and redrives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_submission_dead_lettered_is_shown_to_an_operator_who_redrives_it() {
    let harness = Harness::start_buffered(5).await;
    harness.put_task("before", &quick(None)).await;
    let dead_letters = dead_letter(&harness, "dead-lettered").await;
    let (status, _, _) = harness.call("GET", "/tasks/dead-lettered", None).await;
    assert_eq!(status, 404, "its task was not created");

    let (_, _, listed) = harness.call("GET", "/operator/dead-letters", None).await;
    assert_eq!(
        listed["queues"][3],
        json!({"queue": "ingest", "source": "ingest", "messages": 1}),
        "{listed:#}"
    );
    let (_, _, shown) = harness
        .call("GET", "/operator/dead-letters/ingest", None)
        .await;
    assert_eq!(
        shown["messages"][0]["task_id"], "dead-lettered",
        "{shown:#}"
    );
    let (status, _, answer) = harness
        .call(
            "POST",
            "/operator/dead-letters/ingest/redrive",
            Some(
                json!({"ids": [shown["messages"][0]["id"]]})
                    .to_string()
                    .as_bytes(),
            ),
        )
        .await;
    assert_eq!((status, answer["redriven"].as_u64()), (200, Some(1)));
    harness.settle_in("dead-lettered", "Processed").await;
    assert_eq!(harness.depth(&dead_letters).await.visible, 0);
    assert_eq!(harness.effects_of("dead-lettered").await.len(), 5);
}

/// The local route that takes a notification queue's messages takes none of the
/// system's own: an accepted submission in the ingest queue, or dead-lettered, would
/// be lost with its message, its task never created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_queue_route_takes_no_message_of_the_systems_own_queues() {
    let harness = Harness::start_buffered(5).await;
    let dead_letters = dead_letter(&harness, "kept").await;
    for queue in ["ingest-dlq", "ingest", "scheduler", "agent-requests-dlq"] {
        let (status, _, refused) = harness
            .call("GET", &format!("/local/queues/{queue}"), None)
            .await;
        assert_eq!(
            (status, refused["error"]["field"].as_str()),
            (400, Some("name")),
            "{queue}: {refused:#}"
        );
    }
    assert_eq!(
        harness.depth(&dead_letters).await.visible,
        1,
        "the dead letter is still there for the operator"
    );
}

/// A scheduler created a buffered task, claimed, and died before sending its first
/// step's request (or the creation's answer was lost and the SDK's retry failed its
/// condition): the ingest message, delivered again to another scheduler, sends the
/// request and the lease's deadline message, rather than leaving the task to wait
/// for its lease to end. Over the in-memory backend, on a manual clock.
#[tokio::test]
async fn a_creation_whose_messages_were_lost_sends_them_when_its_message_comes_again() {
    let buffering = Buffering::new();
    let (_, memory, _, ingest) = buffering.parts();
    let scheduler = |instance: &str| buffering.app(instance);
    let submission = Submission::new(TaskId::parse("resent").expect("id"), delivery_input());
    scheduler("api")
        .accept("drone-delivery", submission)
        .await
        .expect("accepted");
    let [message] = memory.messages(ingest).try_into().expect("one message");
    let first = scheduler("scheduler-1")
        .on_scheduler_message(ingest.as_str(), &message.body)
        .await
        .expect("created");
    assert_eq!(first.as_str(), "created");
    // Delivered again, to another scheduler.
    a_repeat_sends_the_lost_first_messages_again(&buffering, "scheduler-1", async || {
        let again = scheduler("scheduler-2")
            .on_scheduler_message(ingest.as_str(), &message.body)
            .await
            .expect("handled again");
        assert_eq!(again.as_str(), "repeated");
    })
    .await;
}

/// The same crash, and before the message comes again another request for the same
/// id is refused on the task: the refusal moves the task's version, not its work, so
/// the first message, delivered again, still sends the first step's request rather
/// than leave the task to its lease's end (and a failure counted that never was).
#[tokio::test]
async fn a_creation_whose_messages_were_lost_sends_them_again_after_a_refusal_on_it() {
    let buffering = Buffering::new();
    let (clock, memory, names, ingest) = buffering.parts();
    let scheduler = |instance: &str| buffering.app(instance);
    let submission = |customer: &str| {
        let mut input = delivery_input();
        input["customer_id"] = json!(customer);
        Submission::new(TaskId::parse("refused-on").expect("id"), input)
    };
    for customer in ["c-first", "c-second"] {
        scheduler("api")
            .accept("drone-delivery", submission(customer))
            .await
            .expect("accepted");
    }
    let [first, second] = memory.messages(ingest).try_into().expect("two messages");
    let created = scheduler("scheduler-1")
        .on_scheduler_message(ingest.as_str(), &first.body)
        .await
        .expect("created");
    assert_eq!(created.as_str(), "created");
    let request = memory.messages(&names.agent_requests);
    memory.drop_message(&names.agent_requests, request[0].id);

    clock.advance(Duration::from_secs(1));
    let refused = scheduler("scheduler-2")
        .on_scheduler_message(ingest.as_str(), &second.body)
        .await
        .expect("refused");
    assert_eq!(refused.as_str(), "submission refused");
    let again = scheduler("scheduler-3")
        .on_scheduler_message(ingest.as_str(), &first.body)
        .await
        .expect("handled again");
    assert_eq!(again.as_str(), "repeated");
    let sent: Vec<String> = memory
        .messages(&names.agent_requests)
        .into_iter()
        .map(|m| m.body)
        .collect();
    assert_eq!(
        sent,
        [request[0].body.clone()],
        "the first step's request, sent again"
    );
}

/// A buffered task whose first step's request cannot be made (its path over the
/// limit) is created in Error, and counted in `TasksInError`, the metric its alarm
/// watches, as a task entering Error later is.
#[tokio::test]
async fn a_buffered_task_created_in_error_is_counted_in_error() {
    let buffering = Buffering::new();
    let workflows = Registry::built_in();
    let addressed = r#"{"name": "addressed", "version": 1, "input": {"order": "string"},
        "steps": [{"name": "fetch", "agent": "a", "call": "/orders/{input.order}"}]}"#;
    workflows
        .add(Workflow::parse("addressed.json", addressed).expect("valid"))
        .expect("added");
    let counted = Arc::new(Recorded::default());
    let ports = Ports {
        metrics: Arc::clone(&counted) as _,
        ..buffering.ports()
    };
    let app = buffering.app_over(ports, workflows, "scheduler-1");
    let submission = Submission::new(
        TaskId::parse("too-long").expect("id"),
        json!({"order": "x".repeat(3 * 1024)}),
    );
    app.accept("addressed", submission).await.expect("accepted");
    let [message] = buffering
        .memory
        .messages(&buffering.ingest)
        .try_into()
        .expect("one message");
    app.on_scheduler_message(buffering.ingest.as_str(), &message.body)
        .await
        .expect("created");
    let task = buffering.memory.tasks().pop().expect("the task");
    assert_eq!(task.state, TaskState::Error, "{:?}", task.error);
    assert_eq!(counted.sum("TasksInError"), 1);
}
