//! One conformance suite for the ports, run against the embedded backend and
//! against the DynamoDB and SQS adapters on moto: both must behave as the actors
//! expect AWS to.

use std::any::Any;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use sas_shared::adapters::dynamodb::{DynamoStore, TableSettings};
use sas_shared::adapters::embedded::{Durability, Embedded, QueueSettings};
use sas_shared::adapters::memory::Memory;
use sas_shared::adapters::sqs::{Sqs, queue_name};
use sas_shared::domain::decide::{Submission, submit};
use sas_shared::domain::ids::{QueueName, TaskId};
use sas_shared::domain::task::{Order, Task, TaskState};
use sas_shared::domain::workflow::{Registry, Workflow};
use sas_shared::ports::{Consumer, OutgoingMessage, Queues, StateStore, StoreError};
use sas_shared::time::{Timestamp, WallClock};
use sas_tests::aws::{Moto, QueuePolicy, create_queue, create_table};
use sas_tests::delivery_input;

/// A backend under test: its ports, a work queue (visibility timeout 1 s, dead-lettered
/// after 2 receives) and that queue's dead-letter queue.
struct Backend {
    store: Arc<dyn StateStore>,
    queues: Arc<dyn Queues>,
    consumer: Arc<dyn Consumer>,
    work: QueueName,
    dead_letters: QueueName,
    _resources: Box<dyn Any>,
}

impl Backend {
    /// A backend that is its own store, sender and consumer.
    fn of<B>(
        backend: Arc<B>,
        work: QueueName,
        dead_letters: QueueName,
        resources: Box<dyn Any>,
    ) -> Self
    where
        B: StateStore + Queues + Consumer + 'static,
    {
        Self {
            store: Arc::clone(&backend) as _,
            queues: Arc::clone(&backend) as _,
            consumer: backend,
            work,
            dead_letters,
            _resources: resources,
        }
    }
}

async fn embedded() -> Backend {
    let dir = tempfile::tempdir().expect("directory");
    let backend = Arc::new(
        Embedded::open(
            &dir.path().join("state.db"),
            Arc::new(WallClock),
            Durability::Full,
        )
        .expect("open"),
    );
    let work = QueueName::parse("work").expect("name");
    let dead_letters = QueueName::parse("work-dlq").expect("name");
    let settings = QueueSettings {
        visibility_timeout: Duration::from_secs(1),
        max_receive_count: Some(2),
        dead_letter: Some(dead_letters.clone()),
    };
    backend.create_queue(&work, settings).await.expect("queue");
    Backend::of(backend, work, dead_letters, Box::new(dir))
}

fn in_memory() -> Backend {
    let backend = Arc::new(Memory::new(Arc::new(WallClock)));
    let work = QueueName::parse("work").expect("name");
    let dead_letters = QueueName::parse("work-dlq").expect("name");
    backend.create_queue(
        &work,
        Duration::from_secs(1),
        Some((2, dead_letters.clone())),
    );
    Backend::of(backend, work, dead_letters, Box::new(()))
}

async fn on_moto() -> Backend {
    let moto = Moto::start();
    let sdk = moto.sdk();
    create_table(&aws_sdk_dynamodb::Client::new(&sdk), "conformance").await;
    let sqs_client = aws_sdk_sqs::Client::new(&sdk);
    let policy = QueuePolicy {
        visibility_seconds: 1,
        max_receive_count: 2,
    };
    let (work_url, dead_letter_url) = create_queue(&sqs_client, "work", policy).await;
    let work = queue_name(&work_url).expect("name");
    let dead_letters = queue_name(&dead_letter_url).expect("name");
    let sqs = Arc::new(Sqs::new(
        &sdk,
        [
            (work.clone(), work_url),
            (dead_letters.clone(), dead_letter_url),
        ],
    ));
    let settings = TableSettings {
        table: "conformance".into(),
        lease_shards: 4,
        lease_bucket: Duration::ZERO,
        retention: Duration::from_secs(86_400),
    };
    Backend {
        store: Arc::new(DynamoStore::new(&sdk, settings)),
        queues: Arc::clone(&sqs) as _,
        consumer: sqs,
        work,
        dead_letters,
        _resources: Box::new(moto),
    }
}

fn drone() -> Arc<Workflow> {
    Registry::load(None)
        .expect("built-ins")
        .latest("drone-delivery")
        .expect("drone")
}

fn new_task(id: &str, now: Timestamp) -> (Task, Order) {
    let submission = Submission {
        id: TaskId::parse(id).expect("id"),
        input: delivery_input(),
        notify: None,
    };
    let (task, order, _) = submit(&drone(), submission, now);
    (task, order)
}

/// `task` changed as a decision would: its version bumped.
fn changed(task: &Task, change: impl FnOnce(&mut Task)) -> Task {
    let mut next = task.clone();
    next.version += 1;
    change(&mut next);
    next
}

async fn conditional_writes_and_transactions(backend: &Backend) {
    let store = &backend.store;
    let (task, order) = new_task("cw", Timestamp(1_000));
    store.create(&task, &order).await.expect("created");
    let other_order = Order {
        task_id: task.id.clone(),
        input: serde_json::json!({"other": true}),
    };
    assert!(
        matches!(
            store.create(&task, &other_order).await,
            Err(StoreError::Conflict)
        ),
        "the id is taken"
    );
    let (stored, stored_order) = store
        .task_with_order(&task.id)
        .await
        .expect("read")
        .expect("there");
    assert_eq!(
        (stored, stored_order),
        (task.clone(), order),
        "the failed creation changed nothing"
    );

    let first = changed(&task, |t| t.locked_by = Some("s1".into()));
    let second = changed(&task, |t| t.locked_by = Some("s2".into()));
    let (a, b) = tokio::join!(store.update(&first), store.update(&second));
    assert!(
        a.is_ok() != b.is_ok(),
        "exactly one racing write wins: {a:?} {b:?}"
    );
    let winner = if a.is_ok() { first } else { second };
    assert_eq!(
        store.task(&task.id).await.expect("read"),
        Some(winner.clone())
    );
    let stale = changed(&task, |t| t.failure_count = 9);
    assert!(
        matches!(store.update(&stale).await, Err(StoreError::Conflict)),
        "a stale version loses"
    );
    assert_eq!(
        store
            .task(&TaskId::parse("nobody").expect("id"))
            .await
            .expect("read"),
        None
    );
}

async fn the_sweep_reads_expired_leases_only(backend: &Backend) {
    let store = &backend.store;
    let mut expected = Vec::new();
    for (id, lease) in [("late-b", 2_000), ("late-a", 1_000), ("later", 50_000)] {
        let (task, order) = new_task(id, Timestamp(0));
        let task = Task {
            complete_by: Some(Timestamp(lease)),
            ..task
        };
        store.create(&task, &order).await.expect("created");
        if lease < 10_000 {
            expected.push(id);
        }
    }
    let (done, order) = new_task("done", Timestamp(0));
    store.create(&done, &order).await.expect("created");
    let finished = changed(&done, |t| {
        t.state = TaskState::Processed;
        t.complete_by = None;
    });
    store.update(&finished).await.expect("finished");

    let expired = store.expired(Timestamp(10_000), 10).await.expect("sweep");
    assert!(expired.undecodable.is_empty());
    let ids: Vec<_> = expired.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        ["late-a", "late-b"],
        "expired leases only, soonest first"
    );
    let one = store.expired(Timestamp(10_000), 1).await.expect("sweep");
    assert_eq!(one.tasks.len(), 1, "the limit holds");

    let listed = store.list(TaskState::Pending, 2, None).await.expect("page");
    assert_eq!(listed.tasks.len(), 2);
    let rest = store
        .list(TaskState::Pending, 2, listed.next.as_deref())
        .await
        .expect("page 2");
    let all: BTreeSet<_> = listed
        .tasks
        .iter()
        .chain(&rest.tasks)
        .map(|t| t.id.to_string())
        .collect();
    let pending = ["cw", "late-a", "late-b", "later"].map(String::from).into();
    assert_eq!(all, pending, "the pages cover the state, each task once");
    assert_eq!(rest.next, None);
    for state in [TaskState::Pending, TaskState::Error] {
        assert!(
            matches!(
                store.list(state, 2, Some("not-a-cursor")).await,
                Err(StoreError::InvalidCursor(_))
            ),
            "a cursor the store did not give is refused ({state:?})"
        );
    }
    assert!(
        store
            .list(TaskState::Error, 10, None)
            .await
            .expect("page")
            .tasks
            .is_empty()
    );
}

async fn workflow_versions_are_kept(backend: &Backend) {
    let store = &backend.store;
    let workflow = drone();
    store.save_workflow(&workflow).await.expect("saved");
    store
        .save_workflow(&workflow)
        .await
        .expect("the same again");
    let changed = Workflow {
        source: workflow.source.replace("drone", "drones"),
        ..(*workflow).clone()
    };
    assert!(matches!(
        store.save_workflow(&changed).await,
        Err(StoreError::Conflict)
    ));
    assert_eq!(
        store
            .load_workflow(&workflow.name, workflow.version)
            .await
            .expect("load"),
        Some(workflow.source.clone())
    );
    assert_eq!(
        store.load_workflow(&workflow.name, 99).await.expect("load"),
        None
    );
}

/// What the work queue hands out at once, without waiting.
async fn receive_now(backend: &Backend) -> Vec<sas_shared::ports::Delivery> {
    backend
        .consumer
        .receive(&backend.work, 10, Duration::ZERO)
        .await
        .expect("receive")
}

async fn receive_all(
    backend: &Backend,
    queue: &QueueName,
    expected: usize,
) -> Vec<sas_shared::ports::Delivery> {
    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while received.len() < expected && tokio::time::Instant::now() < deadline {
        received.extend(
            backend
                .consumer
                .receive(queue, 10, Duration::from_millis(200))
                .await
                .expect("receive"),
        );
    }
    received
}

async fn delete_all(backend: &Backend, deliveries: &[sas_shared::ports::Delivery]) {
    for delivery in deliveries {
        backend
            .consumer
            .delete(&backend.work, &delivery.receipt)
            .await
            .expect("delete");
    }
}

async fn queues_behave_like_sqs(backend: &Backend) {
    let message = |body: String, delay| OutgoingMessage { body, delay };
    let batch: Vec<_> = (0..15)
        .map(|i| message(format!("m{i}"), Duration::ZERO))
        .collect();
    backend
        .queues
        .send(&backend.work, &batch)
        .await
        .expect("a batch of 15");
    let received = receive_all(backend, &backend.work, 15).await;
    let bodies: BTreeSet<_> = received.iter().map(|m| m.body.clone()).collect();
    assert_eq!(bodies.len(), 15, "every message of the batch, once");
    delete_all(backend, &received).await;

    // Concurrent senders (on SQS, they share requests): each is answered, and every
    // message arrives once.
    let senders = (0..25).map(|i| {
        let (queues, work) = (Arc::clone(&backend.queues), backend.work.clone());
        tokio::spawn(async move {
            let messages = [message(format!("c{i}"), Duration::ZERO)];
            queues.send(&work, &messages).await
        })
    });
    for sent in futures_util::future::join_all(senders).await {
        sent.expect("sender").expect("a concurrent send");
    }
    let received = receive_all(backend, &backend.work, 25).await;
    let bodies: BTreeSet<_> = received.iter().map(|m| m.body.clone()).collect();
    assert_eq!(
        (received.len(), bodies.len()),
        (25, 25),
        "every concurrent message, once"
    );
    delete_all(backend, &received).await;

    backend
        .queues
        .send(
            &backend.work,
            &[message("delayed".into(), Duration::from_secs(2))],
        )
        .await
        .expect("sent");
    assert!(receive_now(backend).await.is_empty(), "delayed");
    let delayed = receive_all(backend, &backend.work, 1).await;
    assert_eq!(delayed[0].body, "delayed", "visible after its delay");
    backend
        .consumer
        .delete(&backend.work, &delayed[0].receipt)
        .await
        .expect("delete");

    backend
        .queues
        .send(&backend.work, &[message("poison".into(), Duration::ZERO)])
        .await
        .expect("sent");
    let first = receive_all(backend, &backend.work, 1).await;
    assert_eq!(
        (first[0].body.as_str(), first[0].receive_count),
        ("poison", 1)
    );
    assert!(receive_now(backend).await.is_empty(), "in flight");
    let second = receive_all(backend, &backend.work, 1).await;
    assert_eq!(
        second[0].receive_count, 2,
        "delivered again after the visibility timeout"
    );
    // As in SQS, the message moves when a receive finds it past maxReceiveCount.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let third = receive_now(backend).await;
    assert!(
        third.is_empty(),
        "a third receive dead-letters it: {third:?}"
    );
    let dead = receive_all(backend, &backend.dead_letters, 1).await;
    assert_eq!(
        dead[0].body, "poison",
        "after maxReceiveCount receives, in the dead-letter queue"
    );
}

async fn conformance(backend: Backend) {
    conditional_writes_and_transactions(&backend).await;
    the_sweep_reads_expired_leases_only(&backend).await;
    workflow_versions_are_kept(&backend).await;
    queues_behave_like_sqs(&backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_backend_conforms() {
    conformance(embedded().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_memory_backend_of_the_simulator_conforms() {
    conformance(in_memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_and_sqs_on_moto_conform() {
    conformance(on_moto().await).await;
}
