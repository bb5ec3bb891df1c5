//! The embedded backend: state store, queues and alerts in one SQLite database
//! (WAL), with the semantics the AWS services have: conditional writes that fail
//! on a stale version, multi-item transactions, visibility timeouts, receive
//! counts, a dead-letter queue after maxReceiveCount, and delayed messages.
//! Committed writes survive a kill -9; with [`Durability::Full`], a power cut too.
//!
//! A task's writes are answered once committed. A plain send is answered, and its
//! messages are receivable, as soon as they are written in the open transaction,
//! before its commit: whatever a receiver then writes is committed after them (one
//! writer, commits in order), so no state can outlive the message it came from, and
//! a message lost with its commit is one whose receiver's work is lost too, to be
//! done again from the message before it (whose delete is committed after). It
//! takes an fsync wait off every step's critical path.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::{Notify, oneshot};

use sas_core::domain::ids::{QueueName, TaskId};
use sas_core::domain::messages::Alert;
use sas_core::domain::task::{Order, Task, TaskState};
use sas_core::domain::workflow::Workflow;
use sas_core::ports::{
    AlertError, Alerts, Consumer, Delivery, Expired, Outgoing, OutgoingMessage, QueueError, Queues,
    StateStore, StoreError, TaskPage,
};
use sas_core::time::{Clock, Timestamp};

/// What a commit waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync on every commit: a commit survives a power cut (SQLite `synchronous=FULL`).
    Full,
    /// fsync at WAL checkpoints only: a commit survives a crash or kill -9 of the
    /// process, not a power cut (SQLite `synchronous=NORMAL`).
    Process,
}

impl Durability {
    /// What is fsynced, and when, in words.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::Full => "sqlite WAL, synchronous=FULL: fsync of the WAL at every commit",
            Self::Process => {
                "sqlite WAL, synchronous=NORMAL: fsync at checkpoints only (survives kill -9, not power loss)"
            }
        }
    }
}

/// When the writer answers a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Once its transaction is committed.
    Committed,
    /// Once it is written in the open transaction, before the commit.
    Written,
}

/// How a queue treats its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSettings {
    /// How long a received message stays invisible before it is delivered again.
    pub visibility_timeout: Duration,
    /// Receives after which a message moves to the dead-letter queue.
    pub max_receive_count: Option<u32>,
    /// Where messages go after `max_receive_count` receives.
    pub dead_letter: Option<QueueName>,
}

impl Default for QueueSettings {
    fn default() -> Self {
        Self {
            visibility_timeout: Duration::from_secs(30),
            max_receive_count: None,
            dead_letter: None,
        }
    }
}

/// Messages waiting in a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Depth {
    /// Ready to be received.
    pub visible: u64,
    /// Received and not deleted, or delayed.
    pub invisible: u64,
}

/// The embedded backend. Writes go to one writer thread, which commits every
/// write waiting at the time in one transaction (group commit: one fsync for many
/// writers), each in a savepoint of its own so that one failing write does not undo
/// the others; reads go to their own connections, concurrently.
pub struct Embedded {
    /// The writer thread's jobs; `None` once the store is dropped.
    writer: Mutex<Option<mpsc::Sender<Job>>>,
    /// Joined on drop, so that the writes answered before their commit are committed.
    writer_thread: Option<std::thread::JoinHandle<()>>,
    readers: Arc<Vec<Mutex<Connection>>>,
    next_reader: AtomicUsize,
    clock: Arc<dyn Clock>,
    wakers: Mutex<HashMap<String, Arc<Notify>>>,
    durability: Durability,
    queues: Mutex<Messages>,
    /// Message ids are given here, not by SQLite: an id made receivable before its
    /// commit stays unique even if the commit fails and SQLite would give it again.
    last_message_id: AtomicI64,
}

/// The queues' messages in memory, beside their rows: a receive, which only
/// changes a message's visibility and receive count, is served from memory without
/// a write. Messages are written when sent and deleted (or dead-lettered) on disk
/// too; after a restart they are all visible at once and their receive counts start
/// again from zero, which only means earlier redeliveries.
#[derive(Default)]
struct Messages {
    settings: HashMap<String, QueueSettings>,
    /// (visible at, id) of each queue's messages, in the order they become visible.
    ready: HashMap<String, BTreeSet<(i64, i64)>>,
    by_id: HashMap<i64, Message>,
}

struct Message {
    queue: String,
    body: String,
    visible_at: i64,
    receive_count: u32,
}

impl Messages {
    fn insert(&mut self, id: i64, message: Message) {
        self.ready
            .entry(message.queue.clone())
            .or_default()
            .insert((message.visible_at, id));
        self.by_id.insert(id, message);
    }

    fn remove(&mut self, id: i64) -> Option<Message> {
        let message = self.by_id.remove(&id)?;
        if let Some(ready) = self.ready.get_mut(&message.queue) {
            ready.remove(&(message.visible_at, id));
        }
        Some(message)
    }
}

/// A write: runs in the writer's transaction, and returns what to do once the
/// transaction has committed (`true`) or failed.
type Job = Box<dyn FnOnce(&Connection) -> Box<dyn FnOnce(bool) + Send> + Send>;

/// Writes committed together at most.
const GROUP: usize = 512;
/// Read connections.
const READERS: usize = 2;
/// Prepared statements kept per connection: every statement this store runs.
const STATEMENTS: usize = 64;

/// Runs `sql` through the connection's statement cache: parsed once per connection,
/// not at every call.
fn execute(c: &Connection, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<usize> {
    c.prepare_cached(sql)?.execute(params)
}

/// Reads one row with `sql`, through the connection's statement cache.
fn query_row<T>(
    c: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    read: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    c.prepare_cached(sql)?.query_row(params, read)
}

/// The writer thread: takes every write waiting, runs them in one transaction,
/// commits once, then answers each.
fn write_loop(connection: Connection, jobs: mpsc::Receiver<Job>) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < GROUP {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let began = execute(&connection, "BEGIN IMMEDIATE", []).is_ok();
        let answers: Vec<_> = batch.into_iter().map(|job| job(&connection)).collect();
        let committed = began && execute(&connection, "COMMIT", []).is_ok();
        if !committed {
            let _ = execute(&connection, "ROLLBACK", []);
        }
        for answer in answers {
            answer(committed);
        }
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY, version INTEGER NOT NULL, state TEXT NOT NULL,
    lease_expires INTEGER, created_at INTEGER NOT NULL, record TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS tasks_lease ON tasks(lease_expires) WHERE lease_expires IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_state ON tasks(state, created_at, id);
CREATE TABLE IF NOT EXISTS orders (task_id TEXT PRIMARY KEY, input TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workflows (
    name TEXT NOT NULL, version INTEGER NOT NULL, digest TEXT NOT NULL, source TEXT NOT NULL,
    PRIMARY KEY (name, version));
CREATE TABLE IF NOT EXISTS queues (
    name TEXT PRIMARY KEY, visibility_timeout_ms INTEGER NOT NULL,
    max_receive_count INTEGER, dead_letter TEXT);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, body TEXT NOT NULL,
    visible_at INTEGER NOT NULL, receive_count INTEGER NOT NULL DEFAULT 0, sent_at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS messages_ready ON messages(queue, visible_at, id);
CREATE TABLE IF NOT EXISTS alerts (
    id INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT NOT NULL, raised_at INTEGER NOT NULL, alert TEXT NOT NULL);
";

fn unavailable(error: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(error.to_string())
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn encode<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

impl Embedded {
    /// Opens (creating if needed) the database at `path`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the file cannot be opened or set up.
    pub fn open(
        path: &Path,
        clock: Arc<dyn Clock>,
        durability: Durability,
    ) -> Result<Self, StoreError> {
        let connection = Connection::open(path).map_err(unavailable)?;
        connection.set_prepared_statement_cache_capacity(STATEMENTS);
        let synchronous = match durability {
            Durability::Full => "FULL",
            Durability::Process => "NORMAL",
        };
        connection
            .execute_batch(&format!(
                "PRAGMA journal_mode=WAL; PRAGMA synchronous={synchronous}; PRAGMA busy_timeout=5000; {SCHEMA}"
            ))
            .map_err(unavailable)?;
        let readers = (0..READERS)
            .map(|_| {
                let reader = Connection::open(path).map_err(unavailable)?;
                reader.set_prepared_statement_cache_capacity(STATEMENTS);
                reader
                    .execute_batch("PRAGMA busy_timeout=5000; PRAGMA query_only=1")
                    .map_err(unavailable)?;
                Ok(Mutex::new(reader))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let queues = Mutex::new(load_messages(&connection)?);
        let last_message_id = AtomicI64::new(last_message_id(&connection)?);
        let (writer, jobs) = mpsc::channel();
        let writer_thread = std::thread::Builder::new()
            .name("sas-embedded-writer".into())
            .spawn(move || write_loop(connection, jobs))
            .map_err(unavailable)?;
        Ok(Self {
            writer: Mutex::new(Some(writer)),
            writer_thread: Some(writer_thread),
            readers: Arc::new(readers),
            next_reader: AtomicUsize::new(0),
            clock,
            wakers: Mutex::new(HashMap::new()),
            durability,
            queues,
            last_message_id,
        })
    }

    /// Messages as rows to insert, each with a new id.
    fn rows<'a>(
        &self,
        messages: impl Iterator<Item = (&'a QueueName, &'a OutgoingMessage)>,
    ) -> Vec<(i64, Row)> {
        let now = self.clock.now().0;
        messages
            .map(|(queue, m)| {
                let id = self.last_message_id.fetch_add(1, Ordering::Relaxed) + 1;
                (
                    id,
                    (queue.to_string(), m.body.clone(), now + millis(m.delay)),
                )
            })
            .collect()
    }

    /// Makes messages whose rows are committed receivable, and wakes their queues.
    fn publish(&self, inserted: Vec<(i64, Row)>) {
        let mut queues = BTreeSet::new();
        let mut messages = self.messages();
        for (id, (queue, body, visible_at)) in inserted {
            queues.insert(queue.clone());
            messages.insert(
                id,
                Message {
                    queue,
                    body,
                    visible_at,
                    receive_count: 0,
                },
            );
        }
        drop(messages);
        for queue in queues {
            self.waker(&queue).notify_one();
        }
    }

    fn messages(&self) -> std::sync::MutexGuard<'_, Messages> {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What each commit waits for.
    #[must_use]
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Queues `work` for the writer; the receiver answers once it is committed, or
    /// with [`Answer::Written`] as soon as it is written in the open transaction.
    fn submit<T, F>(
        &self,
        answer_when: Answer,
        work: F,
    ) -> Result<oneshot::Receiver<Result<T, StoreError>>, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move |c: &Connection| {
            let outcome = execute(c, "SAVEPOINT write", [])
                .map_err(unavailable)
                .and_then(|_| {
                    let result = work(c);
                    if result.is_err() {
                        execute(c, "ROLLBACK TO write", []).map_err(unavailable)?;
                    }
                    execute(c, "RELEASE write", []).map_err(unavailable)?;
                    result
                });
            match answer_when {
                Answer::Committed => Box::new(move |committed: bool| {
                    let answer = if committed {
                        outcome
                    } else {
                        outcome.and(Err(unavailable("the commit failed")))
                    };
                    let _ = reply.send(answer);
                }),
                Answer::Written => {
                    let _ = reply.send(outcome);
                    Box::new(|committed: bool| {
                        if !committed {
                            tracing::error!("a commit failed after its writes were answered");
                        }
                    })
                }
            }
        });
        self.writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .ok_or_else(|| unavailable("the store is closed"))?
            .send(job)
            .map_err(|_| unavailable("the writer thread has stopped"))?;
        Ok(answer)
    }

    /// Runs `work` in the writer's next transaction and waits for its commit (or,
    /// with [`Answer::Written`], for its writes).
    async fn write<T, F>(&self, answer_when: Answer, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.submit(answer_when, work)?
            .await
            .map_err(|_| unavailable("the writer thread has stopped"))?
    }

    /// Runs `work` on a read connection, off the async threads.
    async fn read<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        // A read of the WAL from the page cache takes microseconds: cheaper here than a
        // hand-off to the blocking pool and back.
        let index = self.next_reader.fetch_add(1, Ordering::Relaxed) % self.readers.len();
        let reader = self.readers[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        work(&reader)
    }

    fn waker(&self, queue: &str) -> Arc<Notify> {
        let mut wakers = self.wakers.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(wakers.entry(queue.to_owned()).or_default())
    }

    /// Creates a queue, or updates its settings.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the database fails.
    pub async fn create_queue(
        &self,
        name: &QueueName,
        settings: QueueSettings,
    ) -> Result<(), StoreError> {
        self.messages()
            .settings
            .insert(name.to_string(), settings.clone());
        let name = name.to_string();
        self.write(Answer::Committed, move |c| {
            execute(c,
                "INSERT INTO queues (name, visibility_timeout_ms, max_receive_count, dead_letter)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name) DO UPDATE SET visibility_timeout_ms = ?2, max_receive_count = ?3, dead_letter = ?4",
                params![
                    name,
                    millis(settings.visibility_timeout),
                    settings.max_receive_count,
                    settings.dead_letter.map(String::from)
                ],
            )
            .map_err(unavailable)?;
            Ok(())
        })
        .await
    }

    /// Receives up to `max` visible messages at once, without waiting: from memory;
    /// only a move to the dead-letter queue is written (and not waited for).
    fn receive_now(&self, queue: &QueueName, max: usize) -> Vec<Delivery> {
        let now = self.clock.now().0;
        let mut messages = self.messages();
        let settings = messages
            .settings
            .get(queue.as_str())
            .cloned()
            .unwrap_or_default();
        let due: Vec<(i64, i64)> = messages
            .ready
            .get(queue.as_str())
            .map(|ready| ready.range(..=(now, i64::MAX)).take(max).copied().collect())
            .unwrap_or_default();
        let mut received = Vec::with_capacity(due.len());
        let mut dead_lettered = Vec::new();
        for (_, id) in due {
            let Some(mut message) = messages.remove(id) else {
                continue;
            };
            message.receive_count += 1;
            let exhausted = settings
                .max_receive_count
                .is_some_and(|m| message.receive_count > m);
            if let (true, Some(dead_letter)) = (exhausted, &settings.dead_letter) {
                message.queue = dead_letter.to_string();
                message.visible_at = now;
                message.receive_count = 0;
                messages.insert(id, message);
                dead_lettered.push((id, dead_letter.clone()));
                continue;
            }
            message.visible_at = now + millis(settings.visibility_timeout);
            received.push(Delivery {
                id: id.to_string(),
                body: message.body.clone(),
                receive_count: message.receive_count,
                // A receipt names the receive it came from: stale once received again.
                receipt: format!("{id}:{}", message.receive_count),
            });
            messages.insert(id, message);
        }
        drop(messages);
        for (id, dead_letter) in dead_lettered {
            tracing::warn!(queue = %dead_letter, "message moved to the dead-letter queue");
            let queue = dead_letter.to_string();
            let moved = self.submit(Answer::Committed, move |c| {
                execute(
                    c,
                    "UPDATE messages SET queue = ?2, visible_at = ?3 WHERE id = ?1",
                    params![id, queue, now],
                )
                .map_err(unavailable)?;
                Ok(())
            });
            if let Err(error) = moved {
                tracing::error!(%error, "the move to the dead-letter queue was not written");
            }
            self.waker(dead_letter.as_str()).notify_one();
        }
        received
    }

    /// The messages in a queue.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the database fails.
    pub async fn depth(&self, queue: &QueueName) -> Result<Depth, StoreError> {
        let now = self.clock.now().0;
        let messages = self.messages();
        let mut depth = Depth::default();
        for (visible_at, _) in messages.ready.get(queue.as_str()).into_iter().flatten() {
            if *visible_at <= now {
                depth.visible += 1;
            } else {
                depth.invisible += 1;
            }
        }
        Ok(depth)
    }

    /// The alerts raised, oldest first.
    ///
    /// # Errors
    /// [`StoreError`] when the database fails.
    pub async fn alerts(&self) -> Result<Vec<Alert>, StoreError> {
        self.read(|c| decode_rows(c, "SELECT alert FROM alerts ORDER BY id", []))
            .await
    }

    /// Every task, for checks over the whole store.
    ///
    /// # Errors
    /// [`StoreError`] when the database fails.
    pub async fn all_tasks(&self) -> Result<Vec<Task>, StoreError> {
        self.read(|c| decode_rows(c, "SELECT record FROM tasks ORDER BY created_at, id", []))
            .await
    }
}

impl Drop for Embedded {
    /// Commits what the writer has taken, and stops it.
    fn drop(&mut self) {
        self.writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = self.writer_thread.take() {
            let _ = thread.join();
        }
    }
}

/// A message as a row: its queue, its body, when it becomes visible.
type Row = (String, String, i64);

/// Inserts messages' rows, under the ids they were given; returns them.
fn insert_messages(
    c: &Connection,
    rows: Vec<(i64, Row)>,
    now: i64,
) -> Result<Vec<(i64, Row)>, StoreError> {
    let mut insert = c
        .prepare_cached(
            "INSERT INTO messages (id, queue, body, visible_at, sent_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .map_err(unavailable)?;
    for (id, (queue, body, visible_at)) in &rows {
        insert
            .execute(params![id, queue, body, visible_at, now])
            .map_err(unavailable)?;
    }
    Ok(rows)
}

/// The last message id used, by any row ever written (AUTOINCREMENT's record of it).
fn last_message_id(c: &Connection) -> Result<i64, StoreError> {
    query_row(
        c,
        "SELECT MAX(COALESCE((SELECT MAX(id) FROM messages), 0),
                    COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'messages'), 0))",
        [],
        |row| row.get(0),
    )
    .map_err(unavailable)
}

/// The queues' settings and messages, as stored.
fn load_messages(c: &Connection) -> Result<Messages, StoreError> {
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
        .prepare("SELECT id, queue, body, visible_at FROM messages")
        .map_err(unavailable)?;
    let rows = select
        .query_map([], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                Message {
                    queue: row.get(1)?,
                    body: row.get(2)?,
                    visible_at: row.get(3)?,
                    receive_count: 0,
                },
            ))
        })
        .map_err(unavailable)?;
    for row in rows {
        let (id, message) = row.map_err(unavailable)?;
        loaded.insert(id, message);
    }
    Ok(loaded)
}

fn queue_settings(c: &Connection, queue: &str) -> Result<QueueSettings, StoreError> {
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
            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
    })
}

/// The rows of a query of one JSON column, decoded.
fn decode_rows<T: serde::de::DeserializeOwned>(
    c: &Connection,
    sql: &str,
    parameters: impl rusqlite::Params,
) -> Result<Vec<T>, StoreError> {
    let mut select = c.prepare_cached(sql).map_err(unavailable)?;
    let rows = select
        .query_map(parameters, |row| row.get::<_, String>(0))
        .map_err(unavailable)?;
    rows.map(|row| decode(&row.map_err(unavailable)?)).collect()
}

fn read_task(c: &Connection, id: &str) -> Result<Option<Task>, StoreError> {
    let record: Option<String> =
        query_row(c, "SELECT record FROM tasks WHERE id = ?1", [id], |row| {
            row.get(0)
        })
        .optional()
        .map_err(unavailable)?;
    record.as_deref().map(decode).transpose()
}

fn stored_version(task: &Task) -> i64 {
    i64::try_from(task.version).unwrap_or(i64::MAX)
}

fn lease(task: &Task) -> Option<i64> {
    task.complete_by.map(|t| t.0)
}

#[async_trait]
impl StateStore for Embedded {
    async fn create(&self, task: &Task, order: &Order) -> Result<(), StoreError> {
        let record = encode(task)?;
        let input = encode(&order.input)?;
        let (id, version, state, lease, created) = (
            task.id.to_string(),
            stored_version(task),
            task.state.as_str(),
            lease(task),
            task.created_at.0,
        );
        self.write(Answer::Committed, move |c| {
            let inserted = execute(
                c,
                "INSERT INTO tasks (id, version, state, lease_expires, created_at, record)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (id) DO NOTHING",
                params![id, version, state, lease, created, record],
            )
            .map_err(unavailable)?;
            if inserted == 0 {
                return Err(StoreError::Conflict);
            }
            execute(
                c,
                "INSERT INTO orders (task_id, input) VALUES (?1, ?2)",
                params![id, input],
            )
            .map_err(unavailable)?;
            Ok(())
        })
        .await
    }

    async fn task(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        let id = id.to_string();
        self.read(move |c| read_task(c, &id)).await
    }

    async fn task_with_order(&self, id: &TaskId) -> Result<Option<(Task, Order)>, StoreError> {
        let id = id.clone();
        self.read(move |c| {
            // A subquery rather than a join: SQLite re-plans a join on an indexed
            // column at every new binding (STAT4), parsing the statement again.
            let row: Option<(String, Option<String>)> = query_row(
                c,
                "SELECT record, (SELECT input FROM orders WHERE task_id = ?1) FROM tasks WHERE id = ?1",
                [id.as_str()],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(unavailable)?;
            let row = row.and_then(|(record, input)| Some((record, input?)));
            row.map(|(record, input)| {
                Ok((decode(&record)?, Order { task_id: id.clone(), input: decode(&input)? }))
            })
            .transpose()
        })
        .await
    }

    async fn update(&self, task: &Task) -> Result<(), StoreError> {
        self.update_and_send(task, Vec::new()).await.map(drop)
    }

    async fn update_and_send(
        &self,
        task: &Task,
        outbox: Vec<Outgoing>,
    ) -> Result<Vec<Outgoing>, StoreError> {
        let record = encode(task)?;
        let (id, version, state, lease) = (
            task.id.to_string(),
            stored_version(task),
            task.state.as_str(),
            lease(task),
        );
        let rows = self.rows(outbox.iter().map(|o| (&o.queue, &o.message)));
        let now = self.clock.now().0;
        let inserted = self
            .write(Answer::Committed, move |c| {
                let updated = execute(
                    c,
                    "UPDATE tasks SET version = ?2, state = ?3, lease_expires = ?4, record = ?5
                         WHERE id = ?1 AND version = ?2 - 1",
                    params![id, version, state, lease, record],
                )
                .map_err(unavailable)?;
                if updated != 1 {
                    return Err(StoreError::Conflict);
                }
                insert_messages(c, rows, now)
            })
            .await?;
        self.publish(inserted);
        Ok(Vec::new())
    }

    async fn expired(&self, now: Timestamp, limit: usize) -> Result<Expired, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |c| {
            let mut select = c
                .prepare_cached(
                    "SELECT id, record FROM tasks
                     WHERE lease_expires IS NOT NULL AND lease_expires <= ?1
                     ORDER BY lease_expires LIMIT ?2",
                )
                .map_err(unavailable)?;
            let rows = select
                .query_map(params![now.0, limit], |row| {
                    Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
                })
                .map_err(unavailable)?;
            let mut expired = Expired::default();
            for row in rows {
                let (id, record) = row.map_err(unavailable)?;
                match serde_json::from_str(&record) {
                    Ok(task) => expired.tasks.push(task),
                    // Well formed, of a shape this version does not know: left for the
                    // version that wrote it.
                    Err(e) if e.classify() == serde_json::error::Category::Data => {
                        tracing::error!(task_id = %id, error = %e, "a task record of an unknown shape: left as it is");
                    }
                    Err(_) => expired
                        .undecodable
                        .push(TaskId::parse(id).map_err(|e| StoreError::Corrupt(e.to_string()))?),
                }
            }
            Ok(expired)
        })
        .await
    }

    async fn quarantine(&self, id: &TaskId) -> Result<(), StoreError> {
        let id = id.to_string();
        self.write(Answer::Committed, move |c| {
            execute(
                c,
                "UPDATE tasks SET lease_expires = NULL WHERE id = ?1",
                [id],
            )
            .map(drop)
            .map_err(unavailable)
        })
        .await
    }

    async fn list(
        &self,
        state: TaskState,
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        let (after_created, after_id) = match after {
            Some(cursor) => {
                let (created, id) = TaskPage::parse_cursor(cursor)?;
                (created, id.to_owned())
            }
            None => (i64::MIN, String::new()),
        };
        self.read(move |c| {
            let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
            let mut tasks: Vec<Task> = decode_rows(
                c,
                "SELECT record FROM tasks WHERE state = ?1 AND (created_at, id) > (?2, ?3)
                 ORDER BY created_at, id LIMIT ?4",
                params![state.as_str(), after_created, after_id, fetch],
            )?;
            let next = (tasks.len() > limit).then(|| {
                tasks.truncate(limit);
                tasks.last().map(TaskPage::cursor_after).unwrap_or_default()
            });
            Ok(TaskPage { tasks, next })
        })
        .await
    }

    async fn save_workflow(&self, workflow: &Workflow) -> Result<(), StoreError> {
        let (name, version, digest, source) = (
            workflow.name.clone(),
            workflow.version,
            workflow.digest(),
            workflow.source.clone(),
        );
        self.write(Answer::Committed, move |c| {
            execute(
                c,
                "INSERT INTO workflows (name, version, digest, source) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name, version) DO NOTHING",
                params![name, version, digest, source],
            )
            .map_err(unavailable)?;
            let stored: String = query_row(
                c,
                "SELECT digest FROM workflows WHERE name = ?1 AND version = ?2",
                params![name, version],
                |row| row.get(0),
            )
            .map_err(unavailable)?;
            if stored == digest {
                Ok(())
            } else {
                Err(StoreError::Conflict)
            }
        })
        .await
    }

    async fn load_workflow(&self, name: &str, version: u32) -> Result<Option<String>, StoreError> {
        let name = name.to_owned();
        self.read(move |c| {
            query_row(
                c,
                "SELECT source FROM workflows WHERE name = ?1 AND version = ?2",
                params![name, version],
                |row| row.get(0),
            )
            .optional()
            .map_err(unavailable)
        })
        .await
    }
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
        let inserted = self
            .write(Answer::Written, move |c| insert_messages(c, rows, now))
            .await
            .map_err(|e| QueueError {
                queue: queue.to_string(),
                reason: e.to_string(),
            })?;
        self.publish(inserted);
        Ok(())
    }
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
            let received = self.receive_now(queue, max.min(10));
            let now = tokio::time::Instant::now();
            if !received.is_empty() || now >= deadline {
                return Ok(received);
            }
            let _ = tokio::time::timeout((deadline - now).min(RECHECK), waker.notified()).await;
        }
    }

    async fn delete(&self, queue: &QueueName, receipt: &str) -> Result<(), QueueError> {
        let failed = |reason: String| QueueError {
            queue: queue.to_string(),
            reason,
        };
        let (id, receive_count) = receipt
            .split_once(':')
            .and_then(|(id, count)| Some((id.parse::<i64>().ok()?, count.parse::<u32>().ok()?)))
            .ok_or_else(|| failed(format!("'{receipt}' is not a receipt of this queue")))?;
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
        self.submit(Answer::Committed, move |c| {
            execute(c, "DELETE FROM messages WHERE id = ?1", [id]).map_err(unavailable)?;
            Ok(())
        })
        .map(drop)
        .map_err(|e| failed(e.to_string()))
    }
}

#[async_trait]
impl Alerts for Embedded {
    async fn raise(&self, alert: &Alert) -> Result<(), AlertError> {
        let text = encode(alert).map_err(|e| AlertError(e.to_string()))?;
        let (task_id, at) = (alert.task_id.to_string(), alert.at.0);
        self.write(Answer::Committed, move |c| {
            execute(
                c,
                "INSERT INTO alerts (task_id, raised_at, alert) VALUES (?1, ?2, ?3)",
                params![task_id, at, text],
            )
            .map_err(unavailable)?;
            Ok(())
        })
        .await
        .map_err(|e| AlertError(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sas_core::domain::decide::{Submission, submit};
    use sas_core::domain::workflow::Registry;
    use sas_testkit::ManualClock;

    fn open(dir: &tempfile::TempDir, clock: Arc<ManualClock>) -> Embedded {
        Embedded::open(&dir.path().join("sas.db"), clock, Durability::Full).expect("open")
    }

    fn new_task(id: &str, now: Timestamp) -> (Task, Order) {
        let workflow = Registry::built_in()
            .latest("order-processing")
            .expect("order");
        let submission = Submission {
            id: TaskId::parse(id).expect("id"),
            input: serde_json::json!({"order_id": id}),
            notify: None,
        };
        let (task, order, _) = submit(&workflow, submission, now);
        (task, order)
    }

    #[tokio::test]
    async fn writes_are_conditional_and_creation_is_one_transaction() {
        let dir = tempfile::tempdir().expect("dir");
        let clock = Arc::new(ManualClock::new(Timestamp(0)));
        let store = open(&dir, clock);
        let (task, order) = new_task("a", Timestamp(0));
        store.create(&task, &order).await.expect("created");
        let other_order = Order {
            task_id: task.id.clone(),
            input: serde_json::json!({"order_id": "other"}),
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
        let dir = tempfile::tempdir().expect("dir");
        let clock = Arc::new(ManualClock::new(Timestamp(0)));
        let store = open(&dir, clock);
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
                .expired(Timestamp(0).plus(lease), 10)
                .await
                .expect("sweep")
                .tasks
                .len()
                == 1
        );
        let late = Timestamp(10).plus(lease);
        let expired = store.expired(late, 10).await.expect("sweep");
        let ids: Vec<_> = expired.tasks.iter().map(|t| t.id.to_string()).collect();
        assert_eq!(ids, ["a", "b"], "soonest first, never the finished task");

        let b = TaskId::parse("b").expect("id");
        let original = encode(&store.task(&b).await.expect("read").expect("b")).expect("encoded");
        let corrupt = "garbage".to_owned();
        store
            .write(Answer::Committed, move |c| {
                execute(c, "UPDATE tasks SET record = ?1 WHERE id = 'b'", [corrupt])
                    .map_err(unavailable)
            })
            .await
            .expect("corrupted");
        let expired = store.expired(late, 10).await.expect("a sweep despite it");
        assert_eq!(expired.undecodable, std::slice::from_ref(&b));
        assert_eq!(expired.tasks.len(), 1);
        store.quarantine(&b).await.expect("quarantined");
        let expired = store.expired(late, 10).await.expect("sweep");
        assert_eq!((expired.tasks.len(), expired.undecodable.len()), (1, 0));
        store
            .write(Answer::Committed, move |c| {
                execute(c, "UPDATE tasks SET record = ?1 WHERE id = 'b'", [original])
                    .map_err(unavailable)
            })
            .await
            .expect("mended, for the listing below");

        let page = store.list(TaskState::Pending, 1, None).await.expect("page");
        assert_eq!(page.tasks[0].id.as_str(), "a");
        let page = store
            .list(TaskState::Pending, 1, page.next.as_deref())
            .await
            .expect("page 2");
        assert_eq!((page.tasks[0].id.as_str(), page.next), ("b", None));
    }

    async fn receive_now(store: &Embedded, queue: &QueueName) -> Vec<Delivery> {
        store
            .receive(queue, 10, Duration::ZERO)
            .await
            .expect("receive")
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
        assert_eq!(
            store
                .receive(&queue, 1, Duration::ZERO)
                .await
                .expect("receive")[0]
                .body,
            "m"
        );
    }
}
