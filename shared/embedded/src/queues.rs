//! The queues and consumer ports, and the alerts, over the message rows.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use sas_core::ports::{
    AlertError, Alerts, Cause, Consumer, DeadLetter, DeadLetters, Delivery, OutgoingMessage,
    QueueError, Queues, StoreError,
};
use sas_domain::ids::QueueName;
use sas_domain::messages::Alert;
use sas_domain::trace::TraceContext;

use crate::messages::{Message, Messages};
use crate::schema::{
    Compressed, SCHEMA, Stored, Vocabulary, encode, execute, query_row, unavailable,
};
use crate::{Embedded, QueueSettings, Received};

/// A message as a row: its queue, its body, when it becomes visible.
pub(crate) type Row = (String, String, i64, Option<TraceContext>);

/// Inserts messages' rows, under the ids they were given ([`MessageIds`]); returns
/// them.
pub(crate) fn insert_messages(
    c: &Connection,
    rows: Vec<(i64, Row)>,
    now: i64,
) -> Result<Vec<(i64, Row)>, StoreError> {
    let mut insert = c
        .prepare_cached(
            "INSERT INTO messages (id, queue, body, visible_at, sent_at, trace)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .map_err(unavailable)?;
    for (id, (queue, body, visible_at, trace)) in &rows {
        let trace = trace.as_ref().map(sas_domain::to_json);
        insert
            .execute(params![
                id,
                queue,
                Compressed::text(body, Vocabulary::Tasks)?,
                visible_at,
                now,
                trace
            ])
            .map_err(unavailable)?;
    }
    Ok(rows)
}

/// Message ids reserved at a time: the reservation is written once in so many ids.
const RESERVED_IDS: i64 = 4096;

/// The ids the store gives messages, and their reservation in the database
/// (`counters`), which is kept above every id given: after a restart ids start above
/// it, so none is given again, not even one whose message was deleted (a receipt held
/// across the restart deletes no other message). This replaces `AUTOINCREMENT`, which
/// wrote its `sqlite_sequence` row, a page of WAL, at every commit that sent a
/// message; and the writer raises it in the transaction it commits, not each write
/// that inserts messages, which made a statement of it at every send.
#[derive(Debug, Default)]
pub(crate) struct MessageIds {
    /// The last id given.
    given: AtomicI64,
    /// The reservation as committed.
    reserved: AtomicI64,
}

impl MessageIds {
    /// The ids given and reserved as the database has them: the last id that may
    /// have been given is the highest in the table or reserved.
    pub(crate) fn load(c: &Connection) -> Result<Self, StoreError> {
        let (highest, reserved): (i64, i64) = query_row(
            c,
            "SELECT COALESCE((SELECT MAX(id) FROM messages), 0),
                    COALESCE((SELECT value FROM counters WHERE name = 'message_ids'), 0)",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(unavailable)?;
        Ok(Self {
            given: AtomicI64::new(highest.max(reserved)),
            reserved: AtomicI64::new(reserved),
        })
    }

    /// A new id. An id made receivable before its commit stays unique even if the
    /// commit fails and SQLite would give it again.
    pub(crate) fn next(&self) -> i64 {
        self.given.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// In the transaction about to commit, raises the reservation above the ids
    /// given, if they reached it: every message the transaction inserts has an id
    /// given before. The reservation to keep once it has committed.
    pub(crate) fn reserve(&self, c: &Connection) -> Result<Option<i64>, StoreError> {
        let given = self.given.load(Ordering::Relaxed);
        if given <= self.reserved.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let reserved = given + RESERVED_IDS;
        execute(
            c,
            "INSERT INTO counters (name, value) VALUES ('message_ids', ?1)
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value WHERE value < ?1",
            [reserved],
        )
        .map_err(unavailable)?;
        Ok(Some(reserved))
    }

    /// Keeps the reservation a transaction committed.
    pub(crate) fn committed(&self, reserved: i64) {
        self.reserved.fetch_max(reserved, Ordering::Relaxed);
    }
}

/// Rebuilds a messages table an earlier version made with `AUTOINCREMENT` without it,
/// its last id kept as the reservation, in one transaction.
pub(crate) fn drop_autoincrement(c: &Connection) -> Result<(), StoreError> {
    let definition: String = query_row(
        c,
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages'",
        [],
        |row| row.get(0),
    )
    .map_err(unavailable)?;
    if !definition.contains("AUTOINCREMENT") {
        return Ok(());
    }
    c.execute_batch(&format!(
        "BEGIN IMMEDIATE;
         INSERT INTO counters (name, value)
             SELECT 'message_ids', MAX(COALESCE((SELECT MAX(id) FROM messages), 0),
                 COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'messages'), 0))
             WHERE true
             ON CONFLICT (name) DO UPDATE SET value = MAX(value, excluded.value);
         ALTER TABLE messages RENAME TO messages_before;
         {SCHEMA}
         INSERT INTO messages (id, queue, body, visible_at, receive_count, sent_at)
             SELECT id, queue, body, visible_at, receive_count, sent_at FROM messages_before;
         DROP TABLE messages_before;
         COMMIT;"
    ))
    .map_err(unavailable)
}

/// Gives the messages of a database written before they carried their trace a
/// column for it.
pub(crate) fn add_message_traces(c: &Connection) -> Result<(), StoreError> {
    let added: bool = query_row(
        c,
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info('messages') WHERE name = 'trace')",
        [],
        |row| row.get(0),
    )
    .map_err(unavailable)?;
    if !added {
        c.execute_batch("ALTER TABLE messages ADD COLUMN trace TEXT")
            .map_err(unavailable)?;
    }
    Ok(())
}

/// The queues' settings and messages, as stored, at `now`: a message visible by then
/// may have been in flight when the process stopped ([`Message::recovered`]).
pub(crate) fn load_messages(c: &Connection, now: i64) -> Result<Messages, StoreError> {
    let mut loaded = Messages::default();
    let mut select = c.prepare("SELECT name FROM queues").map_err(unavailable)?;
    let names: Vec<String> = select
        .query_map([], |row| row.get(0))
        .map_err(unavailable)?
        .collect::<Result<_, _>>()
        .map_err(unavailable)?;
    for name in names {
        let settings = queue_settings(c, &name)?;
        loaded.settings.insert(name, settings);
    }
    let mut select = c
        .prepare("SELECT id, queue, body, visible_at, receive_count, trace FROM messages")
        .map_err(unavailable)?;
    let rows = select
        .query_map([], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, Stored>(2)?,
                row.get::<_, i64>(3)?,
                row.get::<_, u32>(4)?,
                row.get::<_, Option<String>>(5)?,
            ))
        })
        .map_err(unavailable)?;
    for row in rows {
        let (id, queue, body, visible_at, receive_count, trace) = row.map_err(unavailable)?;
        let message = Message {
            queue,
            body: body.into_text()?,
            visible_at,
            receive_count,
            recovered: visible_at <= now,
            // A trace that no longer reads is dropped: the message goes on untraced.
            trace: trace.and_then(|trace| serde_json::from_str(&trace).ok()),
        };
        loaded.insert(id, message);
    }
    Ok(loaded)
}

pub(crate) fn queue_settings(c: &Connection, queue: &str) -> Result<QueueSettings, StoreError> {
    let row = query_row(
        c,
        "SELECT visibility_timeout_ms, max_receive_count, dead_letter FROM queues WHERE name = ?1",
        [queue],
        |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, Option<u32>>(1)?,
                row.get::<_, Option<String>>(2)?,
            ))
        },
    )
    .optional()
    .map_err(unavailable)?;
    let Some((visibility, max_receive_count, dead_letter)) = row else {
        return Ok(QueueSettings::default());
    };
    Ok(QueueSettings {
        visibility_timeout: Duration::from_millis(u64::try_from(visibility).unwrap_or(0)),
        max_receive_count,
        dead_letter: dead_letter
            .map(QueueName::parse)
            .transpose()
            .map_err(|e| StoreError::Corrupt(e.into()))?,
        committed_sends: false,
    })
}

#[async_trait]
impl Queues for Embedded {
    async fn send(
        &self,
        queue: &QueueName,
        messages: &[OutgoingMessage],
    ) -> Result<(), QueueError> {
        let rows = self.rows(messages.iter().map(|m| (queue, m)));
        let now = self.clock.now().0;
        let committed = self
            .messages()
            .settings
            .get(queue.as_str())
            .is_some_and(|s| s.committed_sends);
        let inserted = if committed {
            self.write(move |c| insert_messages(c, rows, now))
                .await
                .map_err(|e| QueueError::new(queue, e))?
        } else {
            let written = rows.clone();
            self.defer(move |c| insert_messages(c, written, now).map(drop));
            rows
        };
        self.publish(inserted).await;
        Ok(())
    }
}

/// Deliveries taken from memory while their receive counts are written: given back
/// ([`Embedded::give_back`]) unless the write is committed, so that a failed write, or
/// a receive whose caller stopped waiting, neither hides them for a visibility
/// timeout nor spends one of their receives.
struct Taken<'a> {
    store: &'a Embedded,
    queue: &'a QueueName,
    /// (id, receive count) of each delivery not yet handed out.
    deliveries: Vec<(i64, u32)>,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if !self.deliveries.is_empty() {
            self.store.give_back(self.queue, &self.deliveries);
        }
    }
}

/// Writes the receive counts of messages about to be delivered, by id.
fn count_receives(c: &Connection, counts: &[(i64, u32)]) -> Result<(), StoreError> {
    for (id, count) in counts {
        execute(
            c,
            "UPDATE messages SET receive_count = ?2 WHERE id = ?1",
            params![id, count],
        )
        .map_err(unavailable)?;
    }
    Ok(())
}

/// How often a waiting receive looks again, for delayed messages and visibility
/// timeouts that end without a send to wake it.
const RECHECK: Duration = Duration::from_millis(100);

#[async_trait]
impl Consumer for Embedded {
    async fn receive(
        &self,
        queue: &QueueName,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        let deadline = tokio::time::Instant::now() + wait;
        let waker = self.waker(queue.as_str());
        loop {
            let Received {
                deliveries,
                taken,
                to_count,
            } = self.receive_now(queue, max.min(10));
            if !to_count.is_empty() {
                let mut taken = Taken {
                    store: self,
                    queue,
                    deliveries: taken,
                };
                self.write(move |c| count_receives(c, &to_count))
                    .await
                    .map_err(|e| QueueError::new(queue, e))?;
                taken.deliveries.clear();
            }
            let now = tokio::time::Instant::now();
            if !deliveries.is_empty() || now >= deadline {
                return Ok(deliveries);
            }
            let _ = tokio::time::timeout((deadline - now).min(RECHECK), waker.notified()).await;
        }
    }

    async fn delete(&self, queue: &QueueName, receipt: &str) -> Result<(), QueueError> {
        let failed = |cause: Cause| QueueError::new(queue, cause);
        let (id, receive_count) = receipt
            .split_once(':')
            .and_then(|(id, count)| Some((id.parse::<i64>().ok()?, count.parse::<u32>().ok()?)))
            .ok_or_else(|| failed(format!("'{receipt}' is not a receipt of this queue").into()))?;
        // A stale receipt deletes nothing, as in SQS: the message is delivered again.
        {
            let mut messages = self.messages();
            let current = messages
                .by_id
                .get(&id)
                .is_some_and(|m| m.receive_count == receive_count && m.queue == queue.as_str());
            if !current {
                return Ok(());
            }
            messages.remove(id);
        }
        // Nobody waits for the commit: a delete lost in a crash only means one more
        // delivery, which every handler tolerates.
        self.defer(move |c| {
            execute(c, "DELETE FROM messages WHERE id = ?1", [id])
                .map(drop)
                .map_err(unavailable)
        });
        Ok(())
    }
}

impl Embedded {
    /// The dead-letter queue of `source`.
    fn dead_letter_queue(&self, source: &QueueName) -> Result<String, QueueError> {
        self.messages()
            .settings
            .get(source.as_str())
            .and_then(|settings| settings.dead_letter.as_ref())
            .map(ToString::to_string)
            .ok_or_else(|| QueueError::new(source, "the queue has no dead-letter queue"))
    }
}

#[async_trait]
impl DeadLetters for Embedded {
    async fn count(&self, source: &QueueName) -> Result<u64, QueueError> {
        let dead_letters = self.dead_letter_queue(source)?;
        let messages = self.messages();
        Ok(messages
            .ready
            .get(&dead_letters)
            .map_or(0, |ready| ready.len() as u64))
    }

    async fn peek(&self, source: &QueueName, max: usize) -> Result<Vec<DeadLetter>, QueueError> {
        let dead_letters = self.dead_letter_queue(source)?;
        let messages = self.messages();
        let ready = messages.ready.get(&dead_letters).into_iter().flatten();
        Ok(ready
            .take(max)
            .filter_map(|(_, id)| {
                Some(DeadLetter {
                    id: id.to_string(),
                    body: messages.by_id.get(id)?.body.clone(),
                })
            })
            .collect())
    }

    async fn redrive(
        &self,
        source: &QueueName,
        ids: Option<&[String]>,
        max: usize,
    ) -> Result<usize, QueueError> {
        let dead_letters = self.dead_letter_queue(source)?;
        let chosen: Vec<i64> = {
            let messages = self.messages();
            let held = messages.ready.get(&dead_letters).into_iter().flatten();
            held.map(|(_, id)| *id)
                .filter(|id| ids.is_none_or(|ids| ids.contains(&id.to_string())))
                .take(max)
                .collect()
        };
        let now = self.clock.now().0;
        let (queue, moved) = (source.to_string(), chosen.clone());
        self.write(move |c| {
            for id in moved {
                execute(
                    c,
                    "UPDATE messages SET queue = ?2, visible_at = ?3, receive_count = 0 WHERE id = ?1",
                    params![id, queue, now],
                )
                .map_err(unavailable)?;
            }
            Ok(())
        })
        .await
        .map_err(|e| QueueError::new(source, e))?;
        let mut messages = self.messages();
        for id in &chosen {
            if let Some(mut message) = messages.remove(*id) {
                message.queue = source.to_string();
                message.visible_at = now;
                message.receive_count = 0;
                messages.insert(*id, message);
            }
        }
        drop(messages);
        self.waker(source.as_str()).notify_one();
        Ok(chosen.len())
    }
}

#[async_trait]
impl Alerts for Embedded {
    async fn raise(&self, alert: &Alert) -> Result<(), AlertError> {
        let text = encode(alert).map_err(|e| AlertError(e.into()))?;
        let (task_id, at) = (alert.task_id.to_string(), alert.at.0);
        self.write(move |c| {
            execute(
                c,
                "INSERT INTO alerts (task_id, raised_at, alert) VALUES (?1, ?2, ?3)",
                params![task_id, at, text],
            )
            .map_err(unavailable)?;
            Ok(())
        })
        .await
        .map_err(|e| AlertError(e.into()))
    }
}
