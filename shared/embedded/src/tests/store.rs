//! The state store on SQLite: conditional writes, the sweep of the leases kept in
//! memory, and the listings.

use std::sync::Arc;
use std::time::Duration;

use rusqlite::params;
use rusqlite::types::Value;
use sas_core::ports::{
    ExpiredCursor, LeaseIndex, Registration, StoreError, TaskListing, TaskStore, Unreadable,
    WorkflowStore,
};
use sas_domain::ids::TaskId;
use sas_domain::task::{Order, TaskState};
use sas_domain::time::Timestamp;
use sas_testkit::ManualClock;

use crate::Embedded;
use crate::schema::{encode, execute, unavailable};

use super::{committed_count, create_tasks, fresh, new_task, open};

#[tokio::test]
async fn writes_are_conditional_and_creation_is_one_transaction() {
    let (_dir, store) = fresh();
    let (task, order) = new_task("a", Timestamp(0));
    store.create(&task, &order).await.expect("created");
    let other_order = Order {
        task_id: task.id.clone(),
        input: std::sync::Arc::new(serde_json::json!({"order_id": "other"})),
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
        let (store, b) = (&store, &b);
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
            store.leases.set(b, lease_end);
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

#[tokio::test]
async fn an_earlier_versions_registrations_are_given_their_details_column() {
    let (dir, _) = fresh();
    rusqlite::Connection::open(dir.path().join("sas.db"))
        .expect("connection")
        .execute_batch(
            "ALTER TABLE registrations DROP COLUMN details;
             INSERT INTO registrations (name, version, created_at, updated_at, deleted)
                 VALUES ('counter', 2, 1000, 2000, 0);",
        )
        .expect("an earlier version's table");
    let store = open(&dir, Arc::new(ManualClock::new(Timestamp(3_000))));
    let kept = store.registration("counter").await.expect("read");
    assert_eq!(
        kept.as_ref().map(|r| (r.version, r.details.clone())),
        Some((2, None))
    );
    let detailed = Registration {
        name: "catalog:counter".to_owned(),
        details: Some("{}".to_owned()),
        ..kept.expect("kept")
    };
    store
        .put_registration(&detailed, None)
        .await
        .expect("written");
    let read = store.registration("catalog:counter").await.expect("read");
    assert_eq!(read, Some(detailed));
}

#[tokio::test]
async fn attribute_rows_follow_a_changed_value() {
    let (dir, store) = fresh();
    let (mut task, order) = new_task("attributed", Timestamp(0));
    task.attributes
        .insert("customer".into(), serde_json::json!("c-1"));
    store.create(&task, &order).await.expect("created");
    let rows = || committed_count(&dir, "SELECT COUNT(*) FROM task_attributes");
    let found = |value: &'static str| {
        let store = &store;
        async move {
            let page = store.with_attribute("customer", value, 10, None).await;
            page.expect("a page").tasks.len()
        }
    };
    assert_eq!((rows(), found("c-1").await), (1, 1));

    task.version += 1;
    task.locked_by = Some("s1".into());
    store.update(&task).await.expect("the same attributes");
    assert_eq!((rows(), found("c-1").await), (1, 1));

    task.version += 1;
    task.attributes
        .insert("customer".into(), serde_json::json!("c-2"));
    store.update(&task).await.expect("a changed attribute");
    assert_eq!((found("c-1").await, found("c-2").await), (0, 1));
    assert_eq!(rows(), 1, "the old value's row replaced");
}

#[tokio::test]
async fn an_earlier_versions_history_of_a_row_an_event_reads_as_before() {
    use sas_core::ports::{ExecutionHistory, HistoryPage};
    use sas_domain::machine::history::HistoryEvent;

    let (dir, _) = fresh();
    let event = |id: u64| HistoryEvent {
        id,
        at: Timestamp(1_000),
        event: serde_json::json!({"type": "PassStateEntered", "id": id}),
    };
    let connection = rusqlite::Connection::open(dir.path().join("sas.db")).expect("connection");
    connection
        .execute_batch(
            "CREATE TABLE history (
                 task_id TEXT NOT NULL, event_id INTEGER NOT NULL, event BLOB NOT NULL,
                 PRIMARY KEY (task_id, event_id)) WITHOUT ROWID;",
        )
        .expect("an earlier version's table");
    for id in 1..=5 {
        let stored = crate::schema::Compressed::json(&event(id), crate::schema::Vocabulary::Tasks)
            .expect("encoded");
        execute(
            &connection,
            "INSERT INTO history (task_id, event_id, event) VALUES ('old', ?1, ?2)",
            params![i64::try_from(id).expect("small"), stored],
        )
        .expect("an event's row");
    }
    drop(connection);
    let store = open(&dir, Arc::new(ManualClock::new(Timestamp(3_000))));
    let id = TaskId::parse("old").expect("id");
    let read = |after, reverse| {
        let store = &store;
        let id = &id;
        async move {
            let page = HistoryPage {
                after,
                limit: 2,
                reverse,
            };
            let events = store.history(id, page).await.expect("a page");
            events.iter().map(|e| e.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(read(None, false).await, [1, 2]);
    assert_eq!(read(Some(2), false).await, [3, 4]);
    assert_eq!(read(None, true).await, [5, 4]);
    assert_eq!(read(Some(4), true).await, [3, 2]);
    let tables = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'history'";
    assert_eq!(
        committed_count(&dir, tables),
        0,
        "the earlier table is gone"
    );
}

#[tokio::test]
async fn a_writes_history_written_again_is_kept_once() {
    use sas_core::ports::{ExecutionHistory, HistoryPage};
    use sas_domain::workflow::Workflow;

    let (dir, store) = fresh();
    let machine = r#"{"StartAt": "P", "States": {"P": {"Type": "Pass", "End": true}}}"#;
    let workflow = Workflow::parse("pass.asl.json", machine).expect("a machine");
    let id = TaskId::parse("again").expect("id");
    let submission = sas_domain::submission::Submission::new(id.clone(), serde_json::json!({}));
    let (task, order, _) = sas_domain::decide::submit(&workflow, submission, Timestamp(0));
    store.create(&task, &order).await.expect("created");
    let decision = sas_domain::decide::on_run(&task, &workflow, &order, "s1", Timestamp(1));
    let task = decision.next.expect("run");
    store.update(&task).await.expect("written");
    let all = HistoryPage {
        after: None,
        limit: 100,
        reverse: false,
    };
    let first: Vec<u64> = (store.history(&id, all).await.expect("read").iter())
        .map(|event| event.id)
        .collect();
    assert!(first.len() > 1, "the run wrote its events: {first:?}");
    // The write's transaction tried again: its events' row written a second time.
    let connection = rusqlite::Connection::open(dir.path().join("sas.db")).expect("connection");
    let rows = crate::history::EventRows::of(&task).expect("encoded");
    rows.write(&connection, id.as_str()).expect("written again");
    let again: Vec<u64> = (store.history(&id, all).await.expect("read").iter())
        .map(|event| event.id)
        .collect();
    assert_eq!(again, first, "each event once");
}
