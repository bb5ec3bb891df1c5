//! The embedded backend's own behaviour, beyond the ports' conformance suite.

use std::sync::Arc;
use std::time::Duration;

use rusqlite::params;
use rusqlite::types::Value;
use sas_core::ports::{
    Consumer, CursorKeyStore, DeadLetters, Delivery, ExpiredCursor, LeaseIndex, OutgoingMessage,
    Queues, StoreError, TaskListing, TaskStore, Unreadable,
};
use sas_domain::decide::submit;
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::submission::Submission;
use sas_domain::task::{Order, Task, TaskState};
use sas_domain::time::Timestamp;
use sas_domain::workflow::Registry;
use sas_testkit::ManualClock;

use crate::schema::{Compressed, Stored, encode, unavailable};
use crate::writer::execute;
use crate::{Depth, Durability, Embedded, QueueSettings};

fn open(dir: &tempfile::TempDir, clock: Arc<ManualClock>) -> Embedded {
    Embedded::open(&dir.path().join("sas.db"), clock, Durability::Full).expect("open")
}

/// A store in a new directory, on a clock stopped at 0; the directory goes with it,
/// as the database is deleted when it is dropped.
fn fresh() -> (tempfile::TempDir, Embedded) {
    let dir = tempfile::tempdir().expect("dir");
    let store = open(&dir, Arc::new(ManualClock::new(Timestamp(0))));
    (dir, store)
}

fn new_task(id: &str, now: Timestamp) -> (Task, Order) {
    let workflow = Registry::built_in()
        .latest("order-processing")
        .expect("order");
    let submission = Submission::new(
        TaskId::parse(id).expect("id"),
        serde_json::json!({"order_id": id}),
    );
    let (task, order, _) = submit(&workflow, submission, now);
    (task, order)
}

/// Creates `count` new tasks, `<prefix><n>`.
async fn create_tasks(store: &Embedded, prefix: &str, count: usize) {
    for n in 0..count {
        let (task, order) = new_task(&format!("{prefix}{n}"), Timestamp(0));
        store.create(&task, &order).await.expect("created");
    }
}

#[test]
fn a_new_database_has_small_pages_and_writes_ahead() {
    let (_dir, store) = fresh();
    let connection = store.connection.lock().expect("connection");
    let pragma = |name: &str| -> String {
        connection
            .query_row(&format!("PRAGMA {name}"), [], |row| {
                row.get::<_, rusqlite::types::Value>(0)
            })
            .map(|value| match value {
                rusqlite::types::Value::Integer(n) => n.to_string(),
                rusqlite::types::Value::Text(text) => text,
                other => format!("{other:?}"),
            })
            .expect("pragma")
    };
    assert_eq!(
        (pragma("page_size"), pragma("journal_mode")),
        (crate::PAGE_SIZE.to_string(), "wal".into())
    );
}

#[tokio::test]
async fn writes_are_conditional_and_creation_is_one_transaction() {
    let (_dir, store) = fresh();
    let (task, order) = new_task("a", Timestamp(0));
    store.create(&task, &order).await.expect("created");
    let other_order = Order {
        task_id: task.id.clone(),
        input: serde_json::json!({"order_id": "other"}),
        earlier: Vec::new(),
    };
    assert!(matches!(
        store.create(&task, &other_order).await,
        Err(StoreError::Conflict)
    ));
    let (_, stored_order) = store
        .task_with_order(&task.id)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(stored_order, order, "the failed creation wrote nothing");

    let mut first = task.clone();
    first.version += 1;
    first.locked_by = Some("s1".into());
    let mut second = task.clone();
    second.version += 1;
    second.locked_by = Some("s2".into());
    let (a, b) = tokio::join!(store.update(&first), store.update(&second));
    assert!(
        a.is_ok() != b.is_ok(),
        "exactly one of two racing writes wins: {a:?} {b:?}"
    );
    assert!(matches!(a.err().or(b.err()), Some(StoreError::Conflict)));
}

#[tokio::test]
async fn only_expired_leases_are_swept_and_lists_page() {
    let (_dir, store) = fresh();
    for (i, id) in ["a", "b", "c"].iter().enumerate() {
        let (mut task, order) = new_task(id, Timestamp(i64::try_from(i).expect("small")));
        if *id == "c" {
            task.state = TaskState::Processed;
            task.complete_by = None;
        }
        store.create(&task, &order).await.expect("created");
    }
    let lease = Duration::from_secs(30);
    assert!(
        store
            .expired(Timestamp(0).plus(lease), 10, &ExpiredCursor::default())
            .await
            .expect("sweep")
            .tasks
            .len()
            == 1
    );
    let late = Timestamp(10).plus(lease);
    let expired = store
        .expired(late, 10, &ExpiredCursor::default())
        .await
        .expect("sweep");
    let ids: Vec<_> = expired.tasks.iter().map(|t| t.id.to_string()).collect();
    assert_eq!(ids, ["a", "b"], "soonest first, never the finished task");

    let b = TaskId::parse("b").expect("id");
    let stored = store.task(&b).await.expect("read").expect("b");
    let (original, lease_end) = (
        encode(&stored).expect("encoded"),
        stored.complete_by.map(|at| at.0),
    );
    // The record replaced by hand, the lease kept (or given back after a quarantine).
    let rewrite = |record: Value| {
        let store = &store;
        async move {
            let written = store
                .write(move |c| {
                    execute(
                        c,
                        "UPDATE tasks SET record = ?1, lease_expires = ?2, leased = 1 WHERE id = 'b'",
                        params![record, lease_end],
                    )
                    .map_err(unavailable)
                })
                .await;
            store.leases.set("b", lease_end);
            written
        }
    };
    // Garbled (as text, or compressed: its length past what LZ4 can give, or its
    // bytes), and of a shape this version does not know (a newer version's, left by
    // a rollback): none can be recovered here, nor hides the leases behind it.
    for unreadable in [
        Value::Text("garbage".into()),
        Value::Blob(vec![0xff, 0xff, 0xff, 0x7f, 0x10, b'{']),
        Value::Blob(vec![0x08, 0, 0, 0, 0xff, 0xff]),
        Value::Text(r#"{"id": "b", "state": "Teleported"}"#.into()),
    ] {
        rewrite(unreadable.clone()).await.expect("written");
        let expired = store
            .expired(late, 10, &ExpiredCursor::default())
            .await
            .expect("a sweep despite it");
        let read = Unreadable {
            id: b.clone(),
            version: Some(stored.version),
        };
        assert_eq!(
            (expired.unreadable.as_slice(), expired.tasks.len()),
            (std::slice::from_ref(&read), 1),
            "{unreadable:?}"
        );
        // Read at another version than it has now (written since, by a process that
        // can read it): it keeps its lease.
        let stale = Unreadable {
            version: Some(stored.version + 1),
            ..read.clone()
        };
        store.quarantine(&stale).await.expect("not quarantined");
        let expired = store
            .expired(late, 10, &ExpiredCursor::default())
            .await
            .expect("sweep");
        assert_eq!(
            expired.unreadable,
            std::slice::from_ref(&read),
            "{unreadable:?}: still leased"
        );
        store.quarantine(&read).await.expect("quarantined");
        let expired = store
            .expired(late, 10, &ExpiredCursor::default())
            .await
            .expect("sweep");
        assert_eq!((expired.tasks.len(), expired.unreadable.len()), (1, 0));
    }
    rewrite(Value::Text(original))
        .await
        .expect("mended as JSON text, as versions before compression wrote it");

    let page = store.list(TaskState::Pending, 1, None).await.expect("page");
    assert_eq!(page.tasks[0].id.as_str(), "a");
    let page = store
        .list(TaskState::Pending, 1, page.next.as_deref())
        .await
        .expect("page 2");
    assert_eq!((page.tasks[0].id.as_str(), page.next), ("b", None));
}

/// Sends one message of `body`, visible at once.
async fn send_now(store: &Embedded, queue: &QueueName, body: &str) {
    let message = OutgoingMessage {
        body: body.into(),
        delay: Duration::ZERO,
    };
    store.send(queue, &[message]).await.expect("sent");
}

async fn receive_now(store: &Embedded, queue: &QueueName) -> Vec<Delivery> {
    store
        .receive(queue, 10, Duration::ZERO)
        .await
        .expect("receive")
}

/// A redrive by ids moves the messages named, at most `max` of them.
#[tokio::test]
async fn a_redrive_by_ids_moves_at_most_max() {
    let (_dir, store) = fresh();
    let work = QueueName::parse("work").expect("name");
    let dead = QueueName::parse("work-dlq").expect("name");
    let settings = QueueSettings {
        visibility_timeout: Duration::from_secs(10),
        max_receive_count: Some(2),
        dead_letter: Some(dead.clone()),
        committed_sends: false,
    };
    store.create_queue(&work, settings).await.expect("queue");
    let dead_letter = |n: usize| OutgoingMessage {
        body: format!("m{n}"),
        delay: Duration::ZERO,
    };
    let sent: Vec<_> = (0..4).map(dead_letter).collect();
    store.send(&dead, &sent).await.expect("dead-lettered");
    let ids: Vec<String> = store
        .peek(&work, 10)
        .await
        .expect("peeked")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(
        store
            .redrive(&work, Some(&ids[..3]), 2)
            .await
            .expect("redriven"),
        2,
        "at most max"
    );
    assert_eq!(
        store
            .redrive(&work, Some(&ids[..3]), 10)
            .await
            .expect("redriven"),
        1,
        "the one named left"
    );
    assert_eq!(store.count(&work).await.expect("counted"), 1);
}

#[tokio::test]
async fn queues_have_visibility_timeouts_delays_and_a_dead_letter_queue() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = Arc::new(ManualClock::new(Timestamp(0)));
    let store = open(&dir, Arc::clone(&clock));
    let work = QueueName::parse("work").expect("name");
    let dead = QueueName::parse("work-dlq").expect("name");
    let settings = QueueSettings {
        visibility_timeout: Duration::from_secs(10),
        max_receive_count: Some(2),
        dead_letter: Some(dead.clone()),
        committed_sends: false,
    };
    store.create_queue(&work, settings).await.expect("queue");
    let message = |body: &str, delay| OutgoingMessage {
        body: body.into(),
        delay,
    };
    store
        .send(
            &work,
            &[
                message("now", Duration::ZERO),
                message("later", Duration::from_secs(5)),
            ],
        )
        .await
        .expect("sent");

    let first = receive_now(&store, &work).await;
    assert_eq!(
        first.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(),
        ["now"],
        "the delayed one waits"
    );
    assert!(
        receive_now(&store, &work).await.is_empty(),
        "invisible while in flight"
    );
    clock.advance(Duration::from_secs(5));
    let later = receive_now(&store, &work).await;
    assert_eq!(later[0].body, "later");
    store
        .delete(&work, &later[0].receipt)
        .await
        .expect("delete");

    clock.advance(Duration::from_secs(5));
    let again = receive_now(&store, &work).await;
    assert_eq!((again[0].body.as_str(), again[0].receive_count), ("now", 2));
    // A stale receipt deletes nothing: the message reaches the dead-letter queue below.
    store
        .delete(&work, &first[0].receipt)
        .await
        .expect("a stale receipt is no error");
    clock.advance(Duration::from_secs(10));
    assert!(
        receive_now(&store, &work).await.is_empty(),
        "the third receive dead-letters it"
    );
    let dead_letters = store.receive(&dead, 10, Duration::ZERO).await.expect("dlq");
    assert_eq!(dead_letters[0].body, "now");
    assert_eq!(store.depth(&work).await.expect("depth"), Depth::default());
}

#[tokio::test]
async fn committed_state_survives_reopening() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = Arc::new(ManualClock::new(Timestamp(0)));
    let (task, order) = new_task("kept", Timestamp(0));
    let queue = QueueName::parse("q").expect("name");
    {
        let store = open(&dir, Arc::clone(&clock));
        store.create(&task, &order).await.expect("created");
        store.cursor_key([1; 32]).await.expect("cursor key");
        store
            .send(
                &queue,
                &[OutgoingMessage {
                    body: "m".into(),
                    delay: Duration::ZERO,
                }],
            )
            .await
            .expect("sent");
    }
    let store = open(&dir, clock);
    assert_eq!(store.task(&task.id).await.expect("read"), Some(task));
    assert_eq!(store.cursor_key([2; 32]).await.expect("read"), [1; 32]);
    assert_eq!(
        store
            .receive(&queue, 1, Duration::ZERO)
            .await
            .expect("receive")[0]
            .body,
        "m"
    );
}

#[tokio::test]
async fn records_and_bodies_are_stored_compressed_and_text_stored_before_reads_the_same() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = Arc::new(ManualClock::new(Timestamp(0)));
    let (task, order) = new_task("packed", Timestamp(0));
    let json = encode(&task).expect("encoded");
    let queue = QueueName::parse("q").expect("name");
    let body = format!("a body that says it twice: {json} {json}");
    let store = open(&dir, Arc::clone(&clock));
    // A send is committed with the next write waited for: the creation.
    send_now(&store, &queue, &body).await;
    store.create(&task, &order).await.expect("created");
    let stored = |store: &Embedded, sql: &str| -> (String, usize) {
        let connection = store.connection.lock().expect("connection");
        let (kind, bytes): (String, i64) = connection
            .query_row(sql, [], |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("row");
        (kind, usize::try_from(bytes).expect("a length"))
    };
    let record = "SELECT typeof(record), length(record) FROM tasks WHERE id = 'packed'";
    let (kind, bytes) = stored(&store, record);
    assert!(
        kind == "blob" && bytes < json.len(),
        "{kind}: {bytes} bytes for {json}"
    );
    let message = "SELECT typeof(body), length(body) FROM messages";
    let (kind, bytes) = stored(&store, message);
    assert!(
        kind == "blob" && bytes < json.len(),
        "{kind}: {bytes} bytes for {body}"
    );

    // As a version before compression wrote them; read after a restart, from the file.
    store
        .write(move |c| {
            execute(c, "UPDATE tasks SET record = ?1", [json]).map_err(unavailable)?;
            execute(c, "UPDATE messages SET body = 'older'", []).map_err(unavailable)
        })
        .await
        .expect("rewritten");
    assert_eq!(
        (stored(&store, record).0, stored(&store, message).0),
        ("text".into(), "text".into())
    );
    drop(store);
    let store = open(&dir, Arc::clone(&clock));
    assert_eq!(store.task(&task.id).await.expect("read"), Some(task));
    let received = store
        .receive(&queue, 1, Duration::ZERO)
        .await
        .expect("receive");
    assert_eq!(received[0].body, "older");
    send_now(&store, &queue, &body).await;
    drop(store);
    let store = open(&dir, clock);
    let bodies: Vec<_> = store
        .receive(&queue, 2, Duration::ZERO)
        .await
        .expect("receive")
        .into_iter()
        .map(|delivery| delivery.body)
        .collect();
    assert!(bodies.contains(&body), "{bodies:?}");
}

#[test]
fn values_compressed_one_after_another_on_a_thread_read_back_whole() {
    // The compression's table is the thread's, reused: a value's bytes must not
    // depend on the one before it, small or over 64 KiB (where the table grows).
    let small = r#"{"event":"sent","step":1}"#.repeat(4);
    let large = format!("[{}0]", "1234567,".repeat(12_000));
    for text in [&small, &large, &small, &large] {
        let stored = Stored::Compressed(Compressed::text(text).expect("compressed").0);
        assert_eq!(&stored.into_text().expect("decompressed"), text);
    }
}

#[test]
fn the_messages_table_has_no_index_and_an_earlier_versions_is_dropped() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = Arc::new(ManualClock::new(Timestamp(0)));
    let indexes =
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages'";
    drop(open(&dir, Arc::clone(&clock)));
    assert_eq!(
        committed_count(&dir, indexes),
        0,
        "a send writes the table alone"
    );
    rusqlite::Connection::open(dir.path().join("sas.db"))
        .expect("connection")
        .execute_batch("CREATE INDEX messages_ready ON messages(queue, visible_at, id)")
        .expect("the index an earlier version made");
    drop(open(&dir, clock));
    assert_eq!(committed_count(&dir, indexes), 0);
}

#[tokio::test]
async fn a_message_id_is_never_given_again_not_even_once_its_message_is_deleted() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = Arc::new(ManualClock::new(Timestamp(0)));
    let queue = QueueName::parse("q").expect("name");
    let message = OutgoingMessage {
        body: "m".into(),
        delay: Duration::ZERO,
    };
    let store = open(&dir, Arc::clone(&clock));
    store
        .send(&queue, &[message.clone(), message.clone()])
        .await
        .expect("sent");
    drop(store);
    let highest = committed_count(&dir, "SELECT MAX(id) FROM messages");
    assert_eq!(
        committed_count(
            &dir,
            "SELECT COUNT(*) FROM sqlite_sequence WHERE name = 'messages'"
        ),
        0,
        "a send writes no sqlite_sequence row"
    );

    let store = open(&dir, Arc::clone(&clock));
    for delivery in receive_now(&store, &queue).await {
        store
            .delete(&queue, &delivery.receipt)
            .await
            .expect("deleted");
    }
    drop(store);
    assert_eq!(committed_count(&dir, "SELECT COUNT(*) FROM messages"), 0);

    let store = open(&dir, clock);
    send_now(&store, &queue, "m").await;
    drop(store);
    let next = committed_count(&dir, "SELECT MAX(id) FROM messages");
    assert!(next > highest, "{next} after {highest}");
}

#[tokio::test]
async fn a_messages_table_with_autoincrement_is_rebuilt_keeping_its_messages_and_its_last_id() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = Arc::new(ManualClock::new(Timestamp(0)));
    drop(open(&dir, Arc::clone(&clock)));
    // The table as versions before this one made it, its messages up to id 40 sent
    // and all but one deleted.
    rusqlite::Connection::open(dir.path().join("sas.db"))
        .expect("connection")
        .execute_batch(
            "DROP TABLE messages;
             CREATE TABLE messages (
                 id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, body TEXT NOT NULL,
                 visible_at INTEGER NOT NULL, receive_count INTEGER NOT NULL DEFAULT 0,
                 sent_at INTEGER NOT NULL);
             INSERT INTO messages (id, queue, body, visible_at, sent_at) VALUES (7, 'q', 'kept', 0, 0);
             UPDATE sqlite_sequence SET seq = 40 WHERE name = 'messages';",
        )
        .expect("an earlier version's table");
    let store = open(&dir, Arc::clone(&clock));
    let queue = QueueName::parse("q").expect("name");
    let bodies: Vec<_> = receive_now(&store, &queue)
        .await
        .into_iter()
        .map(|delivery| delivery.body)
        .collect();
    assert_eq!(bodies, ["kept"]);
    send_now(&store, &queue, "new").await;
    drop(store);
    assert_eq!(
        committed_count(
            &dir,
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'messages' AND sql LIKE '%AUTOINCREMENT%'"
        ),
        0
    );
    assert!(committed_count(&dir, "SELECT MAX(id) FROM messages") > 40);
}

/// A message whose handler takes the process down at every delivery (here the store
/// is dropped, its delivery not deleted, as a kill leaves it) reaches its dead-letter
/// queue across restarts: each delivery of a message loaded at the opening is counted
/// on disk before it is made. The delivery before the first restart is not counted.
#[tokio::test]
async fn a_message_that_takes_the_process_down_at_each_delivery_is_dead_lettered_across_restarts() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = Arc::new(ManualClock::new(Timestamp(0)));
    let mut store = open(&dir, Arc::clone(&clock));
    let work = send_poison(&store).await;
    let committed = || {
        committed_count(
            &dir,
            "SELECT receive_count FROM messages WHERE queue = 'work'",
        )
    };
    let (mut counts, mut on_disk) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        let delivered = receive_now(&store, &work).await;
        counts.push(
            delivered
                .iter()
                .map(|d| d.receive_count)
                .collect::<Vec<_>>(),
        );
        // Committed before the delivery was handed out, not at the store's close.
        on_disk.push(committed());
        drop(store);
        store = open(&dir, Arc::clone(&clock));
    }
    assert_eq!(counts, [vec![1], vec![1], vec![2], vec![3]]);
    assert_eq!(on_disk, [0, 1, 2, 3]);
    assert!(
        receive_now(&store, &work).await.is_empty(),
        "dead-lettered, not delivered a fifth time"
    );
    drop(store);
    store = open(&dir, Arc::clone(&clock));
    assert!(receive_now(&store, &work).await.is_empty());
    assert_eq!(
        committed_count(
            &dir,
            "SELECT COUNT(*) FROM messages WHERE queue = 'work-dlq' AND receive_count = 0"
        ),
        1,
        "moved on disk, its count cleared"
    );
    let dead_letters = store.peek(&work, 10).await.expect("peeked");
    assert_eq!(
        dead_letters
            .iter()
            .map(|m| m.body.as_str())
            .collect::<Vec<_>>(),
        ["poison"]
    );
}

/// A queue `work` (30 s of visibility, three receives, then `work-dlq`) holding one
/// message, "poison", committed.
async fn send_poison(store: &Embedded) -> QueueName {
    let work = QueueName::parse("work").expect("name");
    let settings = QueueSettings {
        visibility_timeout: Duration::from_secs(30),
        max_receive_count: Some(3),
        dead_letter: Some(QueueName::parse("work-dlq").expect("name")),
        committed_sends: true,
    };
    store.create_queue(&work, settings).await.expect("queue");
    send_now(store, &work, "poison").await;
    work
}

#[tokio::test]
async fn a_delivery_whose_receive_count_cannot_be_written_is_given_back_uncounted() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = Arc::new(ManualClock::new(Timestamp(0)));
    let store = open(&dir, Arc::clone(&clock));
    let work = send_poison(&store).await;
    drop(store);
    // Loaded at a restart, so its receive count is written before it is handed out.
    let store = open(&dir, Arc::clone(&clock));
    let side = crate::connect(&dir.path().join("sas.db")).expect("a connection of its own");
    side.execute_batch(
        "CREATE TRIGGER refuse_counts BEFORE UPDATE OF receive_count ON messages
         BEGIN SELECT RAISE(ABORT, 'the disk refuses'); END;",
    )
    .expect("trigger");
    let refused = store
        .receive(&work, 10, Duration::ZERO)
        .await
        .expect_err("the count's write failed, and so did the receive");
    let why = sas_core::ports::Chain(&refused).to_string();
    assert!(why.contains("the disk refuses"), "{why}");
    side.execute_batch("DROP TRIGGER refuse_counts")
        .expect("dropped");
    // Visible again at once, not hidden for the visibility timeout, and the failed
    // receive not counted.
    let delivered = receive_now(&store, &work).await;
    assert_eq!(
        delivered
            .iter()
            .map(|d| (d.body.as_str(), d.receive_count))
            .collect::<Vec<_>>(),
        [("poison", 1)]
    );
}

/// The committed rows of `sql` (a count), read on a connection of its own, opened as
/// the store opens its own: another process could not open the database while the
/// store has it, and a connection through another VFS would give back the lock the
/// process holds on it.
fn committed_count(dir: &tempfile::TempDir, sql: &str) -> i64 {
    let reader = crate::connect(&dir.path().join("sas.db")).expect("reader");
    reader.query_row(sql, [], |row| row.get(0)).expect("count")
}

#[tokio::test]
async fn writes_nobody_waits_for_are_committed_before_the_next_write_or_soon() {
    let (dir, store) = fresh();
    let queue = QueueName::parse("q").expect("name");
    let sent = |body: &str| OutgoingMessage {
        body: body.into(),
        delay: Duration::ZERO,
    };
    let messages = "SELECT COUNT(*) FROM messages";
    store.send(&queue, &[sent("first")]).await.expect("sent");
    assert_eq!(
        receive_now(&store, &queue).await.len(),
        1,
        "receivable at once"
    );
    let (task, order) = new_task("after", Timestamp(0));
    store.create(&task, &order).await.expect("created");
    assert_eq!(
        committed_count(&dir, messages),
        1,
        "a message is committed with the next write someone waits for, or before it"
    );

    store.send(&queue, &[sent("alone")]).await.expect("sent");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while committed_count(&dir, messages) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "a message with no write after it is committed all the same"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let delivery = receive_now(&store, &queue).await.remove(0);
    store
        .delete(&queue, &delivery.receipt)
        .await
        .expect("deleted");
    while committed_count(&dir, messages) > 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "a delete is committed all the same"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The thread that ran a write waited for, and whether it was the writer's.
async fn written_on_the_writer_thread(store: &Embedded) -> bool {
    store
        .write(|_| Ok(std::thread::current().name() == Some("sas-embedded-writer")))
        .await
        .expect("written")
}

#[tokio::test]
async fn a_write_alone_is_committed_by_its_caller_and_writes_together_by_the_writer() {
    let (dir, store) = fresh();
    let queue = QueueName::parse("q").expect("name");
    send_now(&store, &queue, "before").await;
    assert!(
        !written_on_the_writer_thread(&store).await,
        "nobody else waits for a commit: no hand-off to the writer thread and back"
    );
    assert_eq!(
        committed_count(&dir, "SELECT COUNT(*) FROM messages"),
        1,
        "the writes nobody waits for are committed with it, before it"
    );

    let store = Arc::new(store);
    let mut writes = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let store = Arc::clone(&store);
        writes.spawn(async move { written_on_the_writer_thread(&store).await });
    }
    let together = writes.join_all().await;
    // Each found the others waiting, but the last to look may find the rest committed
    // already, and be alone.
    assert!(
        together.iter().filter(|on_writer| !**on_writer).count() <= 1,
        "writes waiting together are the writer thread's, committed in a group: {together:?}"
    );
}

#[tokio::test]
async fn a_write_that_loses_a_race_then_reads_the_winners_task() {
    let (_dir, store) = fresh();
    let (mut current, order) = new_task("raced", Timestamp(0));
    store.create(&current, &order).await.expect("created");
    for round in 0..1000 {
        let mut winner = current.clone();
        winner.version += 1;
        winner.write_id = 1;
        let mut loser = winner.clone();
        loser.write_id = 2;
        // The winner's write goes to the writer first; the loser's right after, most
        // often into the same commit; the loser is answered and reads first.
        let mut won = std::pin::pin!(store.update(&winner));
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(won.as_mut().poll(cx))).await;
        let lost = async {
            let refused = store.update(&loser).await;
            (refused, store.task(&current.id).await)
        };
        let ((refused, read), won) = match first {
            std::task::Poll::Ready(won) => (lost.await, won),
            std::task::Poll::Pending => tokio::join!(lost, won),
        };
        won.expect("the first write wins");
        assert!(
            matches!(refused, Err(StoreError::Conflict)),
            "round {round}"
        );
        assert_eq!(
            read.expect("read").map(|t| (t.version, t.write_id)),
            Some((winner.version, 1)),
            "round {round}: the loser reads the winner's write, not the version it lost on"
        );
        current = winner.clone();
    }
}

#[tokio::test]
async fn committed_pages_reach_the_database_file_without_a_commit_copying_them() {
    let (dir, store) = fresh();
    create_tasks(&store, "t", 50).await;
    // The database file alone, its WAL ignored: what has been checkpointed. Fifty
    // tasks are far fewer pages than a commit checkpoints at by itself.
    let checkpointed = || -> i64 {
        let uri = format!("file:{}?immutable=1", dir.path().join("sas.db").display());
        let file = rusqlite::Connection::open_with_flags(
            uri,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
        )
        .expect("the file");
        file.query_row("SELECT COUNT(*) FROM tasks", [], |row| row.get(0))
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while checkpointed() < 50 {
        assert!(
            std::time::Instant::now() < deadline,
            "the checkpointer copies committed pages into the database"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Frames in the WAL: written since it was last truncated.
fn wal_frames(dir: &tempfile::TempDir) -> u64 {
    const HEADER: u64 = 32;
    const FRAME: u64 = 24 + crate::PAGE_SIZE as u64;
    let wal = std::fs::metadata(dir.path().join("sas.db-wal")).map_or(0, |m| m.len());
    wal.saturating_sub(HEADER) / FRAME
}

/// Checkpoints the whole WAL and truncates it. The checkpointer thread may be
/// checkpointing at that moment, in which case SQLite answers busy (the first column)
/// and leaves the WAL as it is: tried again until it is not.
async fn empty_the_wal(store: &Embedded) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let busy: i64 = store
            .connection
            .lock()
            .expect("connection")
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| row.get(0))
            .expect("a checkpoint");
        if busy == 0 {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the WAL emptied");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_steps_write_rewrites_its_row_alone_and_the_sweep_follows_its_lease() {
    let (dir, store) = fresh();
    create_tasks(&store, "other-", 100).await;
    let (mut task, order) = new_task("moved", Timestamp(0));
    store.create(&task, &order).await.expect("created");
    let first = task.sweep_at().expect("a lease");
    let swept = |at: Timestamp| {
        let store = &store;
        async move {
            let expired = store
                .expired(at, 1000, &ExpiredCursor::default())
                .await
                .expect("sweep");
            expired.tasks.iter().any(|t| t.id.as_str() == "moved")
        }
    };
    assert!(swept(first).await);

    empty_the_wal(&store).await;
    task.version += 1;
    task.complete_by = task.complete_by.map(|at| at.plus(Duration::from_secs(60)));
    store.update(&task).await.expect("a step's write");
    assert_eq!(
        wal_frames(&dir),
        1,
        "a step that moves the lease and keeps the state writes its row's page alone"
    );
    let moved = task.sweep_at().expect("a lease");
    assert!(!swept(first).await, "its old lease is not swept");
    assert!(swept(moved).await, "its new one is");

    task.version += 1;
    task.state = TaskState::Processed;
    task.complete_by = None;
    store.update(&task).await.expect("ended");
    assert!(!swept(moved).await, "an ended task has no lease to sweep");
}

#[tokio::test]
async fn leases_are_read_back_on_opening_and_an_earlier_versions_lease_index_is_dropped() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = Arc::new(ManualClock::new(Timestamp(0)));
    let (leased, order) = new_task("leased", Timestamp(0));
    let (mut ended, ended_order) = new_task("ended", Timestamp(0));
    ended.state = TaskState::Processed;
    ended.complete_by = None;
    // Ended, its alert not known delivered: it keeps a lease, to raise it again.
    let (mut alerting, alerting_order) = new_task("alerting", Timestamp(0));
    alerting.state = TaskState::Error;
    {
        let store = open(&dir, Arc::clone(&clock));
        store.create(&leased, &order).await.expect("created");
        store.create(&ended, &ended_order).await.expect("created");
        store
            .create(&alerting, &alerting_order)
            .await
            .expect("created");
    }
    let later = leased.sweep_at().expect("a lease");
    let swept = |store: Embedded| async move {
        let expired = store
            .expired(later, 10, &ExpiredCursor::default())
            .await
            .expect("sweep");
        expired
            .tasks
            .iter()
            .map(|t| t.id.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        swept(open(&dir, Arc::clone(&clock))).await,
        ["alerting", "leased"]
    );

    // The table as versions before wrote it: no flag, an index on the lease's end.
    rusqlite::Connection::open(dir.path().join("sas.db"))
        .expect("connection")
        .execute_batch(
            "DROP INDEX tasks_leased; ALTER TABLE tasks DROP COLUMN leased;
             CREATE INDEX tasks_lease ON tasks(lease_expires) WHERE lease_expires IS NOT NULL;",
        )
        .expect("an earlier version's table");
    assert_eq!(swept(open(&dir, clock)).await, ["alerting", "leased"]);
    let index = |name: &str| {
        committed_count(
            &dir,
            &format!("SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = '{name}'"),
        )
    };
    assert_eq!((index("tasks_lease"), index("tasks_leased")), (0, 1));
}
