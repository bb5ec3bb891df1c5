//! The database file: its pages and journal, its values compressed, and what
//! survives reopening it.

use std::sync::Arc;
use std::time::Duration;

use sas_core::ports::{Consumer, CursorKeyStore, OutgoingMessage, Queues, TaskStore};
use sas_domain::ids::QueueName;
use sas_domain::task::Task;
use sas_domain::time::Timestamp;
use sas_testkit::ManualClock;

use crate::Embedded;
use crate::schema::{
    Compressed, DICTIONARY, STATE_MACHINE_DICTIONARY, Stored, Vocabulary, encode, execute,
    unavailable,
};

use super::{fresh, new_task, open, send_now};

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
                    trace: None,
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
fn values_compressed_one_after_another_read_back_whole() {
    // A value's bytes must not depend on the one before it, small or over 64 KiB
    // (where LZ4's table is the larger one).
    let small = r#"{"event":"sent","step":1}"#.repeat(4);
    let large = format!("[{}0]", "1234567,".repeat(12_000));
    for vocabulary in [Vocabulary::Tasks, Vocabulary::StateMachines] {
        for text in [&small, &small, &large, &large, &small] {
            let compressed = Compressed::text(text, vocabulary).expect("compressed");
            let stored = Stored::Compressed(compressed.0);
            assert_eq!(&stored.into_text().expect("decompressed"), text);
        }
    }
}

#[test]
fn a_value_compressed_before_the_dictionary_reads_back() {
    let text = r#"{"task_id":"t-1","run":1,"step":0,"operation":"call"}"#.repeat(3);
    // As `lz4_flex::block::compress_prepend_size` wrote it: the length, then LZ4.
    let mut block = vec![0; lz4_flex::block::get_maximum_output_size(text.len())];
    let written = lz4_flex::block::compress_into(text.as_bytes(), &mut block).expect("LZ4");
    let mut value = u32::try_from(text.len())
        .expect("short")
        .to_le_bytes()
        .to_vec();
    value.extend_from_slice(&block[..written]);
    let stored = Stored::Compressed(value);
    assert_eq!(stored.into_text().expect("decompressed"), text);
}

#[test]
fn a_garbled_value_is_an_error_not_a_panic() {
    for vocabulary in [Vocabulary::Tasks, Vocabulary::StateMachines] {
        let value = Compressed::text(&r#"{"task_id":"t-1","step":2}"#.repeat(20), vocabulary)
            .expect("compressed")
            .0;
        for at in 0..value.len() {
            for flip in [0x01, 0x40, 0x80, 0xff] {
                let mut garbled = value.clone();
                garbled[at] ^= flip;
                // Read whole or refused: either, never a panic or a wild allocation.
                let _ = Stored::Compressed(garbled).into_text();
            }
        }
        for short in [&value[..0], &value[..3]] {
            assert!(Stored::Compressed(short.to_vec()).into_text().is_err());
        }
    }
}

#[test]
fn a_length_naming_no_dictionary_is_refused() {
    // The second bit of the length without the first names no dictionary.
    let mut value = Compressed::text("{}", Vocabulary::StateMachines)
        .expect("compressed")
        .0;
    value[3] &= 0x7f;
    let error = Stored::Compressed(value).into_text().expect_err("refused");
    let error = format!("{error:?}");
    assert!(error.contains("no known dictionary"), "{error}");
}

#[test]
fn the_dictionaries_are_the_ones_every_value_was_compressed_with() {
    // A stored value is read with the dictionary it was written with: changing one
    // makes every value written since unreadable. Another dictionary takes another
    // bit of the length.
    assert_eq!(
        sas_domain::sha256_hex(DICTIONARY),
        "8a038169006d0e204b0822aa2fe5eb84495543412b9f48704e9207c63646f62b"
    );
    assert!(STATE_MACHINE_DICTIONARY.starts_with(DICTIONARY));
    assert_eq!(
        sas_domain::sha256_hex(STATE_MACHINE_DICTIONARY),
        "93e80210ac4244108dc1922bcf2b136cb549e55eb3c18208956e061b21e17a8c"
    );
}

#[test]
fn a_finished_drone_deliverys_record_stays_in_its_page() {
    // A row longer than its page (1 KiB, less 35 bytes of SQLite's) runs over into a
    // page of its own, freed and taken again at each rewrite with the free list and
    // the header page: five frames a commit instead of three. The record leaves room
    // for the row's other columns and an id of 36 characters.
    let task: Task =
        serde_json::from_str(include_str!("drone-delivery-record.json")).expect("a task");
    let record = Compressed::json(&task, Vocabulary::of(&task)).expect("compressed");
    assert!(record.0.len() <= 900, "{} bytes", record.0.len());
}

#[test]
fn a_state_machines_record_and_events_are_compressed_against_their_names() {
    // The same drone delivery as a state machine of five HTTP Tasks, at its end, and
    // the events of one of its writes (a Task's end, the next state's entry): 1,063
    // and 759 bytes against the workflows' dictionary.
    let task: Task =
        serde_json::from_str(include_str!("drone-delivery-asl-record.json")).expect("a task");
    assert_eq!(Vocabulary::of(&task), Vocabulary::StateMachines);
    let record = Compressed::json(&task, Vocabulary::of(&task)).expect("compressed");
    assert!(record.0.len() <= 990, "{} bytes", record.0.len());
    let stored = Stored::Compressed(record.0);
    assert_eq!(stored.decode::<Task>().expect("decoded"), task);
    let events = include_str!("drone-delivery-asl-events.json");
    let written = Compressed::text(events, Vocabulary::StateMachines).expect("compressed");
    assert!(written.0.len() <= 600, "{} bytes", written.0.len());
    let stored = Stored::Compressed(written.0);
    assert_eq!(stored.into_text().expect("decompressed"), events);
}
