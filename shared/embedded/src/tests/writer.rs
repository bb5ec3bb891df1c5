//! The writer's commits: who commits a write, and when the writes nobody waits for
//! are committed.

use std::sync::Arc;
use std::time::Duration;

use sas_core::ports::{Consumer, OutgoingMessage, Queues, TaskStore};
use sas_domain::ids::QueueName;
use sas_domain::time::Timestamp;

use crate::Embedded;

use super::{committed_count, create_tasks, fresh, new_task, receive_now, send_now};

#[tokio::test]
async fn writes_nobody_waits_for_are_committed_before_the_next_write_or_soon() {
    let (dir, store) = fresh();
    let queue = QueueName::parse("q").expect("name");
    let sent = |body: &str| OutgoingMessage {
        body: body.into(),
        delay: Duration::ZERO,
        trace: None,
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
