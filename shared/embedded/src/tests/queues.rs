//! The queues on SQLite: redrives, visibility timeouts, delays, dead letters, and
//! message ids and receive counts across restarts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sas_core::ports::{Consumer, DeadLetters, OutgoingMessage, Queues, StoreError};
use sas_domain::ids::QueueName;
use sas_domain::time::Timestamp;
use sas_testkit::ManualClock;

use crate::queues::MessageIds;
use crate::writer::{DeferredWrites, Job, commit};
use crate::{Depth, Embedded, QueueSettings};

use super::{committed_count, fresh, open, receive_now, send_now};

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
        trace: None,
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
        trace: None,
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
        trace: None,
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

/// The commits keep the ids' reservation above every id given, raising it as the ids
/// reach it (once in 4,096).
#[tokio::test]
async fn the_message_ids_reservation_stays_above_every_id_given() {
    let (dir, store) = fresh();
    let queue = QueueName::parse("q").expect("name");
    let message = OutgoingMessage {
        body: "m".into(),
        delay: Duration::ZERO,
        trace: None,
    };
    for _ in 0..45 {
        store
            .send(&queue, &vec![message.clone(); 100])
            .await
            .expect("sent");
    }
    drop(store);
    let reserved = committed_count(
        &dir,
        "SELECT value FROM counters WHERE name = 'message_ids'",
    );
    let highest = committed_count(&dir, "SELECT MAX(id) FROM messages");
    assert_eq!(highest, 4_500);
    assert!(
        reserved >= highest && reserved > 4_096,
        "{reserved} for {highest}"
    );
}

/// A reservation whose commit failed is not taken as made: the next commit makes it.
#[test]
fn a_reservation_whose_commit_failed_is_made_by_the_next() {
    let dir = tempfile::tempdir().expect("dir");
    let c = crate::connect(&dir.path().join("sas.db")).expect("connection");
    c.execute_batch(crate::schema::SCHEMA).expect("schema");
    let ids = MessageIds::load(&c).expect("ids");
    assert_eq!(ids.next(), 1);
    let reservation = |c: &rusqlite::Connection| -> Option<i64> {
        c.query_row(
            "SELECT value FROM counters WHERE name = 'message_ids'",
            [],
            |row| row.get(0),
        )
        .ok()
    };
    // A write that fails after writing: the whole commit fails, the reservation with it.
    let failing: Job = Box::new(|transaction| {
        let _ = transaction.map(|transaction| {
            transaction.run(|c| {
                crate::schema::execute(c, "INSERT INTO counters (name, value) VALUES ('x', 1)", [])
                    .map_err(crate::schema::unavailable)?;
                Err::<(), _>(StoreError::Conflict)
            })
        });
        Box::new(|_| ())
    });
    commit(&c, &DeferredWrites::default(), &ids, vec![failing]);
    assert_eq!(reservation(&c), None);

    commit(&c, &DeferredWrites::default(), &ids, Vec::new());
    assert_eq!(reservation(&c), Some(1 + 4_096));
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

/// A receiver waiting on a queue gets a message sent to it before its sender goes
/// on: at concurrency 1 the next call's request is then sent before the sender
/// answers its own caller, which is on no task's path.
#[tokio::test]
async fn a_waiting_receiver_goes_before_the_sender_of_its_message() {
    let (_dir, store) = fresh();
    let store = Arc::new(store);
    let work = QueueName::parse("work").expect("name");
    store
        .create_queue(&work, QueueSettings::default())
        .await
        .expect("queue");
    let received = Arc::new(AtomicBool::new(false));
    let receiver = tokio::spawn({
        let (store, work, received) = (Arc::clone(&store), work.clone(), Arc::clone(&received));
        async move {
            let got = store.receive(&work, 1, Duration::from_secs(10)).await;
            received.store(got.is_ok_and(|got| got.len() == 1), Ordering::SeqCst);
        }
    });
    // The receiver waits first: on this test's one thread, it runs at this yield.
    tokio::task::yield_now().await;
    send_now(&store, &work, "next").await;
    assert!(
        received.load(Ordering::SeqCst),
        "the receiver had its message when the send returned"
    );
    receiver.await.expect("receiver");
}
