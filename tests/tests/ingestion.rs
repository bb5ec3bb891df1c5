//! Ingestion on the local system. Direct: the process, its own scheduler, creates a
//! submission's task claimed, its creation its claim; a repeat whose first messages
//! were lost sends them again. Buffered: a submission is checked and queued, then
//! created by the scheduler. A repeat is the same task; a different request for the
//! same id, too late for a 409, is refused on the task and told; a message delivered
//! twice creates one task; a creation whose messages were lost sends them when its
//! message comes again. Submissions that come together store their workflow's
//! definition once. (A kill -9 between acceptance and creation, and in the middle of
//! a batch: `functions/local/tests/kill_restart.rs`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sas_api::{self as api, ApiRequest, Caller};
use sas_core::app::{Ports, Submitted};
use sas_core::ports::{Metrics, OutgoingMessage, QueueError, Queues, TaskStore, Unit};
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::submission::Submission;
use sas_domain::task::TaskState;
use sas_domain::workflow::{Registry, Workflow};
use sas_testkit::memory::Memory;
use sas_tests::{
    Buffering, Harness, accepted_submission, delivery_input, notified_states, step_states,
};
use serde_json::{Value, json};

fn quick(notify: Option<&str>) -> Value {
    json!({ "workflow": "drone-delivery-quick", "input": delivery_input(), "notify": notify })
}

/// The queue of buffered submissions of a harness.
fn ingest_queue(harness: &Harness) -> QueueName {
    harness.running.system.ingest.clone()
}

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

/// A task created claimed by `creator` (its request and its lease's deadline message
/// sent), its creator dead before those sends (they are dropped here), and `repeat`,
/// its request again: the first repeat sends them again, the same attempt, and
/// writes nothing; once the task has moved on, a repeat sends nothing.
async fn a_repeat_sends_the_lost_first_messages_again(
    buffering: &Buffering,
    creator: &str,
    mut repeat: impl AsyncFnMut(),
) {
    let (clock, memory, names, _) = buffering.parts();
    let sent = |queue: &QueueName| memory.messages(queue);
    let (request, deadline) = (sent(&names.agent_requests), sent(&names.scheduler));
    assert_eq!((request.len(), deadline.len()), (1, 1));
    memory.drop_message(&names.agent_requests, request[0].id);
    memory.drop_message(&names.scheduler, deadline[0].id);

    clock.advance(Duration::from_secs(1));
    repeat().await;
    let bodies =
        |queue: &QueueName| -> Vec<String> { sent(queue).into_iter().map(|m| m.body).collect() };
    assert_eq!(
        bodies(&names.agent_requests),
        [request[0].body.clone()],
        "the first step's request, the same attempt, sent again"
    );
    assert_eq!(bodies(&names.scheduler), [deadline[0].body.clone()]);
    let task = memory.tasks().pop().expect("the task");
    assert_eq!(
        (task.state, task.version, task.locked_by.as_deref()),
        (TaskState::Processing, 2, Some(creator)),
        "nothing written again: the creation and its claim, one write"
    );

    memory.drop_message(&names.agent_requests, sent(&names.agent_requests)[0].id);
    let mut moved = task.clone();
    moved.version += 1;
    TaskStore::update(memory.as_ref(), &moved)
        .await
        .expect("moved on");
    repeat().await;
    assert!(bodies(&names.agent_requests).is_empty());
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

/// The counters an app adds to, by name.
#[derive(Default)]
struct Counted(std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>);

impl Metrics for Counted {
    fn put(&self, name: &'static str, _: (&'static str, &str), value: u64, _: Unit) {
        *self.0.lock().expect("counters").entry(name).or_default() += value;
    }
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
    let counted = Arc::new(Counted::default());
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
    assert_eq!(
        counted.0.lock().expect("counters").get("TasksInError"),
        Some(&1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_accepted_together_and_each_of_its_tasks_created_and_run() {
    let harness = Harness::start_buffered(5).await;
    let named = |id: &str, input: Value| json!({"id": id, "workflow": "drone-delivery-quick", "input": input});
    let batch = json!({"tasks": [
        named("batched-1", delivery_input()),
        named("batched-bad", json!({})),
        named("batched-2", delivery_input()),
        named("batched-1", delivery_input()),
    ]});
    let (status, _, answer) = harness
        .call("POST", "/tasks/batch", Some(batch.to_string().as_bytes()))
        .await;
    assert_eq!(status, 200, "{answer:#}");
    let results = answer["results"].as_array().expect("results");
    let statuses: Vec<_> = results
        .iter()
        .map(|r| (r["status"].as_u64(), r["body"]["status"].as_str()))
        .collect();
    assert_eq!(
        statuses,
        [
            (Some(202), Some("accepted")),
            (Some(400), None),
            (Some(202), Some("accepted")),
            (Some(202), Some("accepted")),
        ],
        "{answer:#}"
    );
    assert_eq!(results[2]["location"], "/tasks/batched-2");
    assert_eq!(results[1]["body"]["error"]["field"], "input.customer_id");
    for id in ["batched-1", "batched-2"] {
        harness.settle_in(id, "Processed").await;
    }
    assert_eq!(
        harness.effects_of("batched-1").await.len(),
        5,
        "the repeat in the batch is the same task"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        harness.depth(&ingest_queue(&harness)).await,
        Default::default(),
        "nothing left, nothing queued for the refused one"
    );
}

/// Queues that refuse, of the messages of a send, those holding [`REFUSED`], and send
/// the others: a SendMessageBatch some of whose entries fail, which the SQS adapter
/// reports as the whole send failing.
struct RefusingSome(Arc<Memory>);

const REFUSED: &str = "refused-by-the-queue";

#[async_trait::async_trait]
impl Queues for RefusingSome {
    async fn send(
        &self,
        queue: &QueueName,
        messages: &[OutgoingMessage],
    ) -> Result<(), QueueError> {
        let (refused, sent): (Vec<_>, Vec<_>) = messages
            .iter()
            .cloned()
            .partition(|message| message.body.contains(REFUSED));
        self.0.send(queue, &sent).await?;
        if refused.is_empty() {
            Ok(())
        } else {
            Err(QueueError::new(queue, "throttled"))
        }
    }
}

/// In a buffered batch, a submission the queue refuses is answered as refused,
/// alone: the others are answered accepted, and exactly they are queued, so that
/// sending the refused one again (without an id, under a new one) makes no second
/// task of any other.
#[tokio::test]
async fn a_buffered_batch_answers_a_submission_the_queue_refused_alone() {
    let buffering = Buffering::new();
    let ports = Ports {
        queues: Arc::new(RefusingSome(Arc::clone(&buffering.memory))),
        ..buffering.ports()
    };
    let app = buffering.app_over(ports, Registry::built_in(), "submission");
    let unnamed = |customer: &str| {
        let mut input = delivery_input();
        input["customer_id"] = json!(customer);
        json!({"workflow": "drone-delivery", "input": input})
    };
    let batch = json!({"tasks": [unnamed("c-1"), unnamed(REFUSED), unnamed("c-3")]});
    let response = api::handle(
        &app,
        ApiRequest {
            caller: &Caller::Anyone,
            method: "POST",
            path: "/tasks/batch",
            query: None,
            body: batch.to_string().as_bytes(),
        },
    )
    .await;
    assert_eq!(response.status, 200, "{}", response.body);
    let answer: Value = serde_json::from_str(&response.body).expect("JSON");
    let results = answer["results"].as_array().expect("results");
    let statuses: Vec<_> = results.iter().map(|r| r["status"].as_u64()).collect();
    assert_eq!(statuses, [Some(202), Some(503), Some(202)], "{answer:#}");
    let accepted: Vec<String> = results
        .iter()
        .filter_map(|r| r["location"].as_str())
        .map(|location| location.trim_start_matches("/tasks/").to_owned())
        .collect();
    let queued = buffering.memory.messages(&buffering.ingest);
    assert_eq!(queued.len(), 2, "the refused one is not queued");
    for id in &accepted {
        assert!(
            queued.iter().any(|m| m.body.contains(id.as_str())),
            "{id} was answered accepted and is queued"
        );
    }
}

/// A submission with `?wait=` is answered with its task once it has ended, as
/// `GET /tasks/{id}?wait=` shows it, in both ingestions; so is the same request again.
/// A task that has not ended within the wait is answered as without it, and so is a
/// different request under an ended task's id (a conflict, direct; buffered, queued to
/// be refused), never with that task. A wait the API cannot take, or another
/// parameter, is refused before anything is submitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_that_waits_is_answered_with_its_end() {
    for (harness, conflicting) in [
        (Harness::start(5).await, 409),
        (Harness::start_buffered(5).await, 202),
    ] {
        let body = quick(None).to_string();
        for _ in 0..2 {
            let (status, _, task) = harness
                .call("PUT", "/tasks/waited?wait=10s", Some(body.as_bytes()))
                .await;
            assert_eq!(
                (status, task["id"].as_str(), task["state"].as_str()),
                (200, Some("waited"), Some("Processed")),
                "{task:#}"
            );
            assert_eq!(step_states(&task), ["Processed"; 5]);
            assert!(task["history"].is_array(), "{task:#}");
        }
        let (status, _, task) = harness
            .call("POST", "/tasks?wait=10s", Some(body.as_bytes()))
            .await;
        assert_eq!((status, task["state"].as_str()), (200, Some("Processed")));

        let mut other = quick(None);
        other["input"]["customer_id"] = json!("someone-else");
        let (status, _, answer) = harness
            .call(
                "PUT",
                "/tasks/waited?wait=1s",
                Some(other.to_string().as_bytes()),
            )
            .await;
        assert_eq!(status, conflicting, "not the ended task: {answer:#}");

        // The harness's clock stands in January 2027.
        let starts_later = json!({ "workflow": "drone-delivery-quick",
                                   "input": delivery_input(), "start_at": "2030-01-01T00:00:00Z" });
        let (status, location, answer) = harness
            .call(
                "PUT",
                "/tasks/later?wait=1s",
                Some(starts_later.to_string().as_bytes()),
            )
            .await;
        assert_eq!(
            (status, location.as_deref()),
            (202, Some("/tasks/later")),
            "{answer:#}"
        );
        assert_ne!(answer["state"], "Processed", "{answer:#}");

        for (query, field) in [
            ("wait=21s", "wait"),
            ("wait=soon", "wait"),
            ("and=1", "and"),
        ] {
            let path = format!("/tasks/refused?{query}");
            let (status, _, refused) = harness.call("PUT", &path, Some(body.as_bytes())).await;
            assert_eq!(
                (status, refused["error"]["field"].as_str()),
                (400, Some(field)),
                "{query}: {refused:#}"
            );
        }
        // Taken after the refusals: once it has ended, a refused one queued (buffered)
        // would have been created.
        let (status, _, _) = harness
            .call(
                "PUT",
                "/tasks/after-refusals?wait=10s",
                Some(body.as_bytes()),
            )
            .await;
        assert_eq!(status, 200);
        let (status, _, _) = harness.call("GET", "/tasks/refused", None).await;
        assert_eq!(status, 404, "a refused submission submits nothing");
    }
}

/// A query parameter on a route that takes none is refused, naming it, and nothing is
/// done: a batch asked to wait is not submitted without waiting, a cancel with a
/// parameter it does not know cancels nothing. A wait's value is percent-decoded, as
/// the other parameters' are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parameter_on_a_route_that_takes_none_is_refused_naming_it() {
    let harness = Harness::start(5).await;
    let mut named = quick(None);
    named["id"] = json!("batched-waiting");
    let batch = json!({ "tasks": [named] }).to_string();
    let (status, _, refused) = harness
        .call("POST", "/tasks/batch?wait=10s", Some(batch.as_bytes()))
        .await;
    assert_eq!(
        (status, refused["error"]["field"].as_str()),
        (400, Some("wait")),
        "{refused:#}"
    );
    let (status, _, _) = harness.call("GET", "/tasks/batched-waiting", None).await;
    assert_eq!(status, 404, "the refused batch submitted nothing");

    // The harness's clock stands in January 2027: this task waits Pending.
    let later = json!({ "workflow": "drone-delivery-quick",
                        "input": delivery_input(), "start_at": "2030-01-01T00:00:00Z" });
    let (status, _, _) = harness
        .call("PUT", "/tasks/kept", Some(later.to_string().as_bytes()))
        .await;
    assert_eq!(status, 202);
    let (status, _, refused) = harness
        .call("POST", "/tasks/kept/cancel?now=1", Some(b"{}"))
        .await;
    assert_eq!(
        (status, refused["error"]["field"].as_str()),
        (400, Some("now")),
        "{refused:#}"
    );
    let (_, _, kept) = harness.call("GET", "/tasks/kept", None).await;
    assert_eq!(
        (kept["state"].as_str(), kept.get("cancelled")),
        (Some("Pending"), None),
        "nothing cancelled: {kept:#}"
    );

    let (status, _, task) = harness
        .call(
            "PUT",
            "/tasks/spaced?wait=9s%20500ms",
            Some(quick(None).to_string().as_bytes()),
        )
        .await;
    assert_eq!(
        (status, task["state"].as_str()),
        (200, Some("Processed")),
        "{task:#}"
    );
}
