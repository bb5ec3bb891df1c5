//! The conformance suite of the ports: what every adapter of the state store and of
//! the queues must do, as the actors expect AWS to. Each adapter crate runs it on
//! itself: [`state_store`] on a store, [`queues`] on a queue and its dead-letter queue.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use sas_core::ports::{
    Consumer, Delivery, ExpiredCursor, OutgoingMessage, Queues, StateStore, StoreError,
};
use sas_domain::decide::submit;
use sas_domain::flow::{Admission, CallRef, Gate, GateRef, Limit, Waiter};
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::limits::MAX_DELAY;
use sas_domain::messages::Operation;
use sas_domain::submission::Submission;
use sas_domain::task::{EarlierInput, Order, Task, TaskState};
use sas_domain::time::Timestamp;
use sas_domain::workflow::{Registry, Workflow};

use crate::delivery_input;

/// A work queue under test, with a visibility timeout of 1 s and dead-lettered to
/// `dead_letters` after 2 receives, and the adapters that send to it and receive
/// from it.
pub struct WorkQueue {
    /// Sends to the queue.
    pub queues: Arc<dyn Queues>,
    /// Receives from the queue.
    pub consumer: Arc<dyn Consumer>,
    /// The work queue.
    pub work: QueueName,
    /// Its dead-letter queue.
    pub dead_letters: QueueName,
}

/// The state store's conformance: conditional writes and transactions, the sweep's
/// reads, listings, workflow versions, the cursor key and gates.
///
/// # Panics
/// Where the store does not conform.
pub async fn state_store(store: &dyn StateStore) {
    conditional_writes_and_transactions(store).await;
    the_sweep_reads_expired_leases_only(store).await;
    a_pass_reads_each_expired_lease_once(store).await;
    workflow_versions_are_kept(store).await;
    the_first_cursor_key_is_kept(store).await;
    gates_are_versioned_and_their_lines_ordered(store).await;
    a_gate_keyed_by_a_long_value_is_kept(store).await;
}

/// Both suites, on a backend that is its own store, sender and consumer.
///
/// # Panics
/// Where the backend does not conform.
pub async fn backend<B>(backend: Arc<B>, work: QueueName, dead_letters: QueueName)
where
    B: StateStore + Queues + Consumer + 'static,
{
    state_store(backend.as_ref()).await;
    queues(&WorkQueue {
        queues: Arc::clone(&backend) as _,
        consumer: backend,
        work,
        dead_letters,
    })
    .await;
}

/// The queues' conformance: batches, concurrent senders, delays, visibility timeouts,
/// receive counts and dead-lettering, as SQS has them.
///
/// # Panics
/// Where the queues do not conform.
pub async fn queues(queue: &WorkQueue) {
    queues_behave_like_sqs(queue).await;
}

fn drone() -> Arc<Workflow> {
    Registry::built_in()
        .latest("drone-delivery")
        .expect("drone")
}

fn new_task(id: &str, now: Timestamp) -> (Task, Order) {
    let submission = Submission::new(TaskId::parse(id).expect("id"), delivery_input());
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

async fn conditional_writes_and_transactions(store: &dyn StateStore) {
    let (task, order) = new_task("cw", Timestamp(1_000));
    store.create(&task, &order).await.expect("created");
    let other_order = Order {
        task_id: task.id.clone(),
        input: serde_json::json!({"other": true}),
        earlier: Vec::new(),
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
        (task.clone(), order.clone()),
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
    let stale_move = changed(&task, |t| t.state = TaskState::Processing);
    assert!(
        matches!(store.update(&stale_move).await, Err(StoreError::Conflict)),
        "a stale version loses, whether or not it changes the state"
    );
    assert!(
        matches!(
            store.update_with_order(&stale, &other_order).await,
            Err(StoreError::Conflict)
        ),
        "a stale version loses, and its order data with it"
    );
    let edited_order = Order {
        earlier: vec![EarlierInput {
            until_run: 1,
            input: order.input.clone(),
        }],
        ..other_order
    };
    let resubmitted = changed(&winner, |t| t.run = 2);
    store
        .update_with_order(&resubmitted, &edited_order)
        .await
        .expect("the task and its order data written");
    assert_eq!(
        store.task_with_order(&task.id).await.expect("read"),
        Some((resubmitted, edited_order)),
        "both changed"
    );
    assert_eq!(
        store
            .task(&TaskId::parse("nobody").expect("id"))
            .await
            .expect("read"),
        None
    );
}

async fn the_sweep_reads_expired_leases_only(store: &dyn StateStore) {
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
    // Leases further off than a deadline message can be delayed, which none watches:
    // swept once one can reach their end, not at it.
    let reach = i64::try_from(MAX_DELAY.as_millis()).expect("minutes");
    for (id, lease) in [("far-near", 9_000 + reach), ("far", 11_000 + reach)] {
        let (task, order) = new_task(id, Timestamp(0));
        let task = Task {
            state: TaskState::Processing,
            complete_by: Some(Timestamp(lease)),
            deadline: None,
            ..task
        };
        store.create(&task, &order).await.expect("created");
    }
    let (done, order) = new_task("done", Timestamp(0));
    store.create(&done, &order).await.expect("created");
    let finished = changed(&done, |t| {
        t.state = TaskState::Processed;
        t.complete_by = None;
    });
    store.update(&finished).await.expect("finished");

    let start = ExpiredCursor::default();
    let expired = store
        .expired(Timestamp(10_000), 10, &start)
        .await
        .expect("sweep");
    assert!(expired.unreadable.is_empty());
    let ids: Vec<_> = expired.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        ["late-a", "late-b", "far-near"],
        "expired leases, and a long one within a message's reach, soonest first"
    );
    let one = store
        .expired(Timestamp(10_000), 1, &start)
        .await
        .expect("sweep");
    assert!(
        one.tasks.len() <= 1 && one.next.is_some(),
        "the limit holds, and the pass goes on: {one:?}"
    );

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
    // A page cut after its first task goes on from the cursor after it.
    assert_eq!(
        listed.after.len(),
        listed.tasks.len(),
        "a cursor after each task"
    );
    let after_first = store
        .list(TaskState::Pending, 3, Some(&listed.after[0]))
        .await
        .expect("the page after the first task");
    let ids = |page: &[Task]| page.iter().map(|t| t.id.to_string()).collect::<Vec<_>>();
    assert_eq!(
        ids(&after_first.tasks),
        ids(&[&listed.tasks[1..], &rest.tasks[..]].concat()),
        "the tasks after the first, in order"
    );
    for state in [TaskState::Pending, TaskState::Error] {
        assert!(
            matches!(
                store.list(state, 2, Some("not-a-cursor")).await,
                Err(StoreError::InvalidCursor(_))
            ),
            "a cursor the store did not give is refused ({state:?})"
        );
    }
    let too_long = format!("1.{}", "a".repeat(2000));
    assert!(
        matches!(
            store.list(TaskState::Error, 2, Some(&too_long)).await,
            Err(StoreError::InvalidCursor(_))
        ),
        "a cursor whose id no task could have is refused, not sent to the store"
    );
    assert!(
        store
            .list(TaskState::Error, 10, None)
            .await
            .expect("page")
            .tasks
            .is_empty()
    );
}

/// A pass, page after page from where the last stopped, reads each expired lease once:
/// its reads grow with the leases, not with their square over the page.
async fn a_pass_reads_each_expired_lease_once(store: &dyn StateStore) {
    const EXPIRED: usize = 25;
    const PAGE: usize = 4;
    // Ending in threes at once (a page ends among leases that end together), all before
    // the other tests' leases, which are live at `now`.
    let now = Timestamp(999);
    let mut expected = BTreeSet::new();
    for n in 0..EXPIRED {
        let (task, order) = new_task(&format!("pass-{n:02}"), Timestamp(0));
        let lease = 100 + i64::try_from(n / 3).expect("small") * 100;
        let task = Task {
            complete_by: Some(Timestamp(lease)),
            ..task
        };
        store.create(&task, &order).await.expect("created");
        expected.insert(task.id.to_string());
    }
    let mut read = Vec::new();
    let mut cursor = ExpiredCursor::default();
    for pages in 1.. {
        assert!(pages <= 2 * EXPIRED, "the pass ends");
        let page = store.expired(now, PAGE, &cursor).await.expect("a page");
        assert!(
            page.tasks.len() <= PAGE,
            "a page reads at most its limit: {}",
            page.tasks.len()
        );
        assert!(page.tasks.is_sorted_by_key(Task::sweep_at), "soonest first");
        read.extend(page.tasks.iter().map(|t| t.id.to_string()));
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert_eq!(
        read.len(),
        EXPIRED,
        "each expired lease read once in a pass: {read:?}"
    );
    assert_eq!(
        read.into_iter().collect::<BTreeSet<_>>(),
        expected,
        "every expired lease"
    );
}

async fn workflow_versions_are_kept(store: &dyn StateStore) {
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

/// The first key drawn for owners' cursors is the one every caller gets, those who
/// drew theirs at the same time included.
async fn the_first_cursor_key_is_kept(store: &dyn StateStore) {
    let kept = tokio::join!(
        store.cursor_key([1; 32]),
        store.cursor_key([2; 32]),
        store.cursor_key([3; 32]),
        store.cursor_key([4; 32]),
    );
    let kept = [kept.0, kept.1, kept.2, kept.3].map(|key| key.expect("kept"));
    assert!(kept.iter().all(|key| *key == kept[0]), "{kept:?}");
    assert!((1..=4).any(|n| kept[0] == [n; 32]), "one of those drawn");
    assert_eq!(store.cursor_key([9; 32]).await.expect("read"), kept[0]);
}

/// What the work queue hands out at once, without waiting.
async fn receive_now(under_test: &WorkQueue) -> Vec<Delivery> {
    under_test
        .consumer
        .receive(&under_test.work, 10, Duration::ZERO)
        .await
        .expect("receive")
}

async fn receive_all(under_test: &WorkQueue, queue: &QueueName, expected: usize) -> Vec<Delivery> {
    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while received.len() < expected && tokio::time::Instant::now() < deadline {
        received.extend(
            under_test
                .consumer
                .receive(queue, 10, Duration::from_millis(200))
                .await
                .expect("receive"),
        );
    }
    received
}

async fn delete_all(under_test: &WorkQueue, deliveries: &[Delivery]) {
    for delivery in deliveries {
        under_test
            .consumer
            .delete(&under_test.work, &delivery.receipt)
            .await
            .expect("delete");
    }
}

async fn queues_behave_like_sqs(under_test: &WorkQueue) {
    let message = |body: String, delay| OutgoingMessage { body, delay };
    let batch: Vec<_> = (0..15)
        .map(|i| message(format!("m{i}"), Duration::ZERO))
        .collect();
    under_test
        .queues
        .send(&under_test.work, &batch)
        .await
        .expect("a batch of 15");
    let received = receive_all(under_test, &under_test.work, 15).await;
    let bodies: BTreeSet<_> = received.iter().map(|m| m.body.clone()).collect();
    assert_eq!(bodies.len(), 15, "every message of the batch, once");
    delete_all(under_test, &received).await;

    // Concurrent senders (on SQS, they share requests): each is answered, and every
    // message arrives once.
    let senders = (0..25).map(|i| {
        let (queues, work) = (Arc::clone(&under_test.queues), under_test.work.clone());
        tokio::spawn(async move {
            let messages = [message(format!("c{i}"), Duration::ZERO)];
            queues.send(&work, &messages).await
        })
    });
    for sender in senders.collect::<Vec<_>>() {
        sender.await.expect("sender").expect("a concurrent send");
    }
    let received = receive_all(under_test, &under_test.work, 25).await;
    let bodies: BTreeSet<_> = received.iter().map(|m| m.body.clone()).collect();
    assert_eq!(
        (received.len(), bodies.len()),
        (25, 25),
        "every concurrent message, once"
    );
    delete_all(under_test, &received).await;

    under_test
        .queues
        .send(
            &under_test.work,
            &[message("delayed".into(), Duration::from_secs(2))],
        )
        .await
        .expect("sent");
    assert!(receive_now(under_test).await.is_empty(), "delayed");
    let delayed = receive_all(under_test, &under_test.work, 1).await;
    assert_eq!(delayed[0].body, "delayed", "visible after its delay");
    under_test
        .consumer
        .delete(&under_test.work, &delayed[0].receipt)
        .await
        .expect("delete");

    under_test
        .queues
        .send(
            &under_test.work,
            &[message("poison".into(), Duration::ZERO)],
        )
        .await
        .expect("sent");
    let first = receive_all(under_test, &under_test.work, 1).await;
    assert_eq!(
        (first[0].body.as_str(), first[0].receive_count),
        ("poison", 1)
    );
    assert!(receive_now(under_test).await.is_empty(), "in flight");
    let second = receive_all(under_test, &under_test.work, 1).await;
    assert_eq!(
        second[0].receive_count, 2,
        "delivered again after the visibility timeout"
    );
    // As in SQS, the message moves when a receive finds it past maxReceiveCount.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let third = receive_now(under_test).await;
    assert!(
        third.is_empty(),
        "a third receive dead-letters it: {third:?}"
    );
    let dead = receive_all(under_test, &under_test.dead_letters, 1).await;
    assert_eq!(
        dead[0].body, "poison",
        "after maxReceiveCount receives, in the dead-letter queue"
    );
}

/// A gate's state is written on condition of its version; its line is read in the
/// order of positions (then calls), a call put in it twice is there once, and the
/// calls a write takes leave it in the same transaction.
async fn gates_are_versioned_and_their_lines_ordered(store: &dyn StateStore) {
    let gate = "service:conformance/c-1";
    let (fresh, line) = store.gate(gate, 10).await.expect("a gate never written");
    assert_eq!(fresh, Gate::default());
    assert!(line.is_empty());
    let limit: Limit =
        serde_json::from_value(serde_json::json!({"max_concurrency": 2})).expect("a limit");
    let waiter = |task: &str, position: i64| waiter_at(gate, &limit, task, position);
    let (late, early, tied) = (
        waiter("late", 3_000),
        waiter("early", 1_000),
        waiter("tied", 3_000),
    );
    for queued in [&late, &early, &tied, &late] {
        store.enqueue(queued).await.expect("in line");
    }
    let (_, line) = store.gate(gate, 10).await.expect("read");
    assert_eq!(
        line,
        [early.clone(), late.clone(), tied.clone()],
        "by position, then call"
    );
    let (_, first) = store.gate(gate, 1).await.expect("read");
    assert_eq!(first, std::slice::from_ref(&early));

    let mut state = Gate::default();
    state
        .holders
        .insert(early.admission.call.id(), Timestamp(16_000));
    store
        .update_gate(gate, &state, std::slice::from_ref(&early))
        .await
        .expect("the first write");
    assert!(
        matches!(
            store.update_gate(gate, &state, &[]).await,
            Err(StoreError::Conflict)
        ),
        "a write from the same version read loses"
    );
    let (written, line) = store.gate(gate, 10).await.expect("read");
    assert_eq!(written.version, 1);
    assert_eq!(written.holders, state.holders);
    assert_eq!(
        line,
        [late.clone(), tied.clone()],
        "the call taken has left the line"
    );
    let mut next = written.clone();
    next.holders.clear();
    store
        .update_gate(gate, &next, &[late, tied])
        .await
        .expect("a write from the version read");
    let (last, line) = store.gate(gate, 10).await.expect("read");
    assert_eq!((last.version, last.holders.len(), line.len()), (2, 0, 0));
}

/// The gate of a keyed limit whose key's value is longer than a DynamoDB key takes
/// (2,048 bytes) is kept all the same: its line, and its state written on condition.
async fn a_gate_keyed_by_a_long_value_is_kept(store: &dyn StateStore) {
    let limit: Limit = serde_json::from_value(
        serde_json::json!({"max_concurrency": 1, "key": "input.customer_id"}),
    )
    .expect("a limit");
    let input = serde_json::json!({"customer_id": "c".repeat(3_000)});
    let gate = limit.gate("service:conformance", &input);
    let waiter = waiter_at(&gate, &limit, "long-key", 1_000);
    store.enqueue(&waiter).await.expect("in line");
    let (_, line) = store.gate(&gate, 10).await.expect("read");
    assert_eq!(line, std::slice::from_ref(&waiter));
    let mut state = Gate::default();
    state
        .holders
        .insert(waiter.admission.call.id(), Timestamp(16_000));
    store
        .update_gate(&gate, &state, std::slice::from_ref(&waiter))
        .await
        .expect("written");
    let (written, line) = store.gate(&gate, 10).await.expect("read");
    assert_eq!(
        (written.version, written.holders, line),
        (1, state.holders, vec![])
    );
}

/// A call of task `task` waiting at `position` in the line of `gate`, its only
/// gate, under `limit`.
fn waiter_at(gate: &str, limit: &Limit, task: &str, position: i64) -> Waiter {
    Waiter {
        admission: Admission {
            call: CallRef {
                task_id: TaskId::parse(task).expect("id"),
                run: 1,
                step: 3,
                attempt: 1,
                operation: Operation::Call,
            },
            gates: vec![GateRef {
                name: gate.to_owned(),
                limit: limit.clone(),
            }],
            service: "conformance".to_owned(),
            since: Timestamp(position),
            position: Timestamp(position),
            hold: Duration::from_secs(15),
        },
        at: 0,
        held_until: None,
    }
}
