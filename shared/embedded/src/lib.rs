//! The embedded backend: state store, queues and alerts in one SQLite database
//! (WAL), with the semantics the AWS services have: conditional writes that fail
//! on a stale version, multi-item transactions, visibility timeouts, receive
//! counts, a dead-letter queue after maxReceiveCount, and delayed messages.
//! Committed writes survive a kill -9; with [`Durability::Full`], a power cut too.
//!
//! A task's writes are answered once committed. A plain send is answered, and its
//! messages are receivable, at once: its rows are written by the writer before the
//! next write someone waits for, and committed with it. It takes an fsync wait off
//! every step's critical path, and is safe because of what a plain send is:
//!
//! - It follows the committed write of the task that requires it, whose lease
//!   covers its loss (a step's request follows the record naming the attempt and its
//!   idempotency key: the call is written ahead of the message that asks for it).
//!   Lost in a crash before its commit, it is sent again when that lease ends (the
//!   supervisor's sweep), under the same key: an effect is not repeated, the step
//!   only waits out its lease. A child's end is found by its parent's watch, a gate's
//!   grant given again when its hold ends.
//! - Whatever a receiver writes in answer is committed after the send's rows (one
//!   writer, commits in order), so no state outlives the message it came from.
//!
//! A caller's acknowledged request (a buffered submission) is never a plain send: its
//! queue's sends are answered once committed (`QueueSettings::committed_sends`).
//! Plain sends, and deletes, are not waited for: they wake no thread and add no fsync
//! of their own to anyone's path (alone, they are committed after
//! `writer::FLUSH_EVERY`).
//!
//! One process keeps a database at a time (see `connect`): the queues and the
//! leases are kept in memory from its own commits.
//!
//! Here: [`Embedded`] and its set-up; `writer` (the writer and checkpointer threads
//! and the statement cache), `schema` (the tables), `messages` (the message index in
//! memory), and the ports over them: the state store's, a file each (`tasks`,
//! `listing`, `leases`, `gates`, `cursor_key`, `workflows`), `queues` (queues,
//! consumer, alerts), and `payloads` (the values stored apart, in a directory). Depends on `sas-core` and SQLite only.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::Duration;

use foldhash::HashMap;
use rusqlite::{Connection, params};
use tokio::sync::{Notify, oneshot};

use sas_core::clock::Clock;
use sas_core::ports::{Delivery, OutgoingMessage, StoreError};
use sas_domain::ids::QueueName;
use sas_domain::messages::Alert;
use sas_domain::task::{Order, Task};

use crate::leases::{Leases, flag_leases};
use crate::messages::{Message, Messages};
use crate::queues::{MessageIds, Row, add_message_traces, drop_autoincrement, load_messages};
use crate::recent::Recent;
use crate::schema::{SCHEMA, decode_rows, execute, millis, unavailable};
use crate::tasks::lease;
use crate::workflows::add_registration_details;
use crate::writer::{
    DeferredWrites, Job, READERS, STATEMENTS, Transaction, WRITER_CHECKPOINT_PAGES,
    checkpoint_loop, commit, write_loop,
};

/// What a commit waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The WAL flushed at every commit: a commit survives a power cut (SQLite
    /// `synchronous=FULL`; the flush an `fdatasync` as this workspace builds SQLite,
    /// `.cargo/config.toml`, else an `fsync`).
    Full,
    /// The WAL flushed at checkpoints only: a commit survives a crash or kill -9 of the
    /// process, not a power cut (SQLite `synchronous=NORMAL`).
    Process,
}

impl Durability {
    /// What is fsynced, and when, in words.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::Full => "sqlite WAL, synchronous=FULL: the WAL flushed at every commit",
            Self::Process => {
                "sqlite WAL, synchronous=NORMAL: flushed at checkpoints only (survives kill -9, not power loss)"
            }
        }
    }
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
    /// A send is answered once committed (fsynced, at `Durability::Full`), not once
    /// written: for a queue whose messages are a caller's acknowledged request, the
    /// buffered submissions. Set by the process at each start; not stored.
    pub committed_sends: bool,
}

impl Default for QueueSettings {
    fn default() -> Self {
        Self {
            visibility_timeout: Duration::from_secs(30),
            max_receive_count: None,
            dead_letter: None,
            committed_sends: false,
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
/// writers), where a write that fails (having written nothing) does not undo the
/// others; reads go to their own connections, concurrently. A write waited for
/// while no other is, and no commit under way, is committed by its caller on its
/// own thread, blocking it for the commit as the hand-off would have: a lone step
/// (a task at a time) then wakes no thread for its commit, and its thread had
/// nothing else to run.
pub struct Embedded {
    /// The writer thread's jobs; `None` once the store is dropped.
    writer: Mutex<Option<mpsc::Sender<Job>>>,
    /// The connection every write goes through: the writer thread's, and the caller's
    /// own when nobody else waits for a commit.
    connection: Arc<Mutex<Connection>>,
    /// Writes waited for, taken and not yet committed.
    uncommitted: Arc<AtomicUsize>,
    /// Joined on drop, so that the writes answered before their commit are committed.
    writer_thread: Option<std::thread::JoinHandle<()>>,
    /// Dropped to stop the checkpointer thread.
    checkpoints: Option<mpsc::Sender<()>>,
    checkpoint_thread: Option<std::thread::JoinHandle<()>>,
    readers: Arc<Vec<Mutex<Connection>>>,
    next_reader: AtomicUsize,
    clock: Arc<dyn Clock>,
    wakers: Mutex<HashMap<String, Arc<Notify>>>,
    durability: Durability,
    queues: Mutex<Messages>,
    /// Message ids are given here, not by SQLite, and the writer keeps them reserved.
    message_ids: Arc<MessageIds>,
    /// The tasks written lately, as committed.
    recent: Arc<Recent>,
    /// The leases the supervisor sweeps, as committed.
    leases: Arc<Leases>,
    /// Writes nobody waits for, left to the writer thread.
    deferred: Arc<DeferredWrites>,
}

mod activities;
mod attributes;
mod cursor_key;
mod gates;
mod history;
mod leases;
mod listing;
mod messages;
mod payloads;
mod queues;
mod recent;
mod schema;
mod tasks;
#[cfg(test)]
mod tests;
mod workflows;
mod writer;

pub use payloads::DirectoryPayloads;

/// The page size of a database this store creates, in bytes.
const PAGE_SIZE: u32 = 1024;

/// Opens a connection to the database at `path` through SQLite's `unix-excl` VFS.
/// The first connection takes an exclusive lock on the file that this process holds
/// until its last connection closes: a second process opening the same database
/// gets "database is locked", where its commits would have gone unseen by this
/// one's queues and leases, kept in memory. Within the process the locks between
/// connections are kept in memory and the WAL's index on the heap, so a commit or
/// a read makes no `fcntl` call and no `-shm` file is mapped.
fn connect(path: &Path) -> Result<Connection, StoreError> {
    Connection::open_with_flags_and_vfs(path, rusqlite::OpenFlags::default(), "unix-excl")
        .map_err(unavailable)
}

/// Takes the database's lock for this process with `connection`, its first: at
/// once, with an error that says so when another process holds it.
fn take_the_lock(connection: &Connection, path: &Path) -> Result<(), StoreError> {
    connection
        .busy_timeout(Duration::ZERO)
        .map_err(unavailable)?;
    match connection.query_row("SELECT COUNT(*) FROM sqlite_master", [], |_| Ok(())) {
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::DatabaseBusy =>
        {
            Err(unavailable(format!(
                "{} is in use by another process: one process at a time keeps a database",
                path.display()
            )))
        }
        taken => taken.map_err(unavailable),
    }
}

/// What a receive took from memory.
#[derive(Default)]
struct Received {
    deliveries: Vec<Delivery>,
    /// (id, receive count) of each delivery, as taken.
    taken: Vec<(i64, u32)>,
    /// Those of `taken` whose counts are committed before the deliveries are handed
    /// out: of messages [`Message::recovered`].
    to_count: Vec<(i64, u32)>,
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
        let connection = connect(path)?;
        take_the_lock(&connection, path)?;
        connection.set_prepared_statement_cache_capacity(STATEMENTS);
        let synchronous = match durability {
            Durability::Full => "FULL",
            Durability::Process => "NORMAL",
        };
        // A new database's pages are 1 KiB (set before WAL mode, or it is too late):
        // a commit writes a WAL frame for each page it touches, and a step's touches
        // its task's row, two task indexes and the messages' row and index. 10 KB of
        // WAL a commit at concurrency 1 against 27 KB with SQLite's default 4 KiB
        // (BENCHMARKS.md, "Tried and kept (issue 34)").
        connection
            .execute_batch(&format!(
                "PRAGMA page_size={PAGE_SIZE}; PRAGMA journal_mode=WAL; PRAGMA synchronous={synchronous}; PRAGMA busy_timeout=5000; \
                 PRAGMA wal_autocheckpoint={WRITER_CHECKPOINT_PAGES}; {SCHEMA}"
            ))
            .map_err(unavailable)?;
        drop_autoincrement(&connection)?;
        add_message_traces(&connection)?;
        flag_leases(&connection)?;
        add_registration_details(&connection)?;
        history::gather_history(&connection)?;
        let checkpointer = connect(path)?;
        checkpointer
            .execute_batch(&format!(
                "PRAGMA synchronous={synchronous}; PRAGMA busy_timeout=5000"
            ))
            .map_err(unavailable)?;
        let readers = (0..READERS)
            .map(|_| {
                let reader = connect(path)?;
                reader.set_prepared_statement_cache_capacity(STATEMENTS);
                reader
                    .execute_batch("PRAGMA busy_timeout=5000; PRAGMA query_only=1")
                    .map_err(unavailable)?;
                Ok(Mutex::new(reader))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let queues = Mutex::new(load_messages(&connection, clock.now().0)?);
        let message_ids = Arc::new(MessageIds::load(&connection)?);
        let leases = Arc::new(Leases::load(&connection)?);
        let (writer, jobs) = mpsc::channel();
        let deferred = Arc::new(DeferredWrites::default());
        let writes = Arc::clone(&deferred);
        let ids = Arc::clone(&message_ids);
        let connection = Arc::new(Mutex::new(connection));
        let writers = Arc::clone(&connection);
        let writer_thread = std::thread::Builder::new()
            .name("sas-embedded-writer".into())
            .spawn(move || write_loop(&writers, jobs, &writes, &ids))
            .map_err(unavailable)?;
        let (checkpoints, stop) = mpsc::channel();
        let checkpoint_thread = std::thread::Builder::new()
            .name("sas-embedded-checkpointer".into())
            .spawn(move || checkpoint_loop(&checkpointer, &stop))
            .map_err(unavailable)?;
        Ok(Self {
            writer: Mutex::new(Some(writer)),
            connection,
            uncommitted: Arc::default(),
            writer_thread: Some(writer_thread),
            checkpoints: Some(checkpoints),
            checkpoint_thread: Some(checkpoint_thread),
            readers: Arc::new(readers),
            next_reader: AtomicUsize::new(0),
            clock,
            wakers: Mutex::new(HashMap::default()),
            durability,
            queues,
            message_ids,
            recent: Arc::default(),
            leases,
            deferred,
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
                let id = self.message_ids.next();
                (
                    id,
                    (
                        queue.to_string(),
                        m.body.clone(),
                        now + millis(m.delay),
                        m.trace.clone(),
                    ),
                )
            })
            .collect()
    }

    /// Makes messages whose rows are committed receivable, wakes their queues, and
    /// lets their receivers go first: what the sender does next (answer its HTTP
    /// caller, record its spans) is on none of their paths, where the next call's
    /// request is on its task's.
    async fn publish(&self, inserted: Vec<(i64, Row)>) {
        if self.make_receivable(inserted) {
            tokio::task::yield_now().await;
        }
    }

    /// Makes messages receivable, and wakes their queues; whether there were any.
    fn make_receivable(&self, inserted: Vec<(i64, Row)>) -> bool {
        let mut queues = BTreeSet::new();
        let mut messages = self.messages();
        for (id, (queue, body, visible_at, trace)) in inserted {
            queues.insert(queue.clone());
            messages.insert(
                id,
                Message {
                    queue,
                    body,
                    visible_at,
                    receive_count: 0,
                    recovered: false,
                    trace,
                },
            );
        }
        drop(messages);
        for queue in &queues {
            self.waker(queue).notify_one();
        }
        !queues.is_empty()
    }

    fn messages(&self) -> std::sync::MutexGuard<'_, Messages> {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What each commit waits for.
    #[must_use]
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Runs `work` in the writer's next transaction and waits for its commit.
    async fn write<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.write_then(work, |_| ()).await
    }

    /// [`Embedded::write`], keeping the task written (and its order data, when
    /// written with it) among the recent ones, and its lease, once committed, before
    /// any write's answer: a task read after any later answer is never older than
    /// this write.
    async fn write_keeping<T, F>(
        &self,
        work: F,
        task: Cow<'_, Task>,
        order: Option<&Order>,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (recent, leases) = (Arc::clone(&self.recent), Arc::clone(&self.leases));
        let (task, order) = (task.into_owned(), order.cloned());
        self.write_then(work, move |_| {
            leases.set(&task.id, lease(&task));
            recent.put(task, order);
        })
        .await
    }

    /// Runs `work` in the writer's next transaction and waits for its commit; once
    /// it is committed, and before anyone is answered, the writer thread runs `then`
    /// on what `work` gave.
    async fn write_then<T, F>(
        &self,
        work: F,
        then: impl FnOnce(&T) + Send + 'static,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let taken = Uncommitted::take(&self.uncommitted);
        // The tasks ready to run go first: a write any of them makes in the meantime
        // is one more waiting, and the commit is then the writer thread's, for both.
        tokio::task::yield_now().await;
        let alone = taken.is_alone();
        let job: Job = Box::new(move |transaction: Option<&Transaction<'_>>| {
            let outcome = match transaction {
                Some(transaction) => transaction.run(work),
                None => Err(unavailable("no transaction could begin")),
            };
            Box::new(move |committed: bool| {
                drop(taken);
                let answer = if committed {
                    if let Ok(done) = &outcome {
                        then(done);
                    }
                    outcome
                } else {
                    outcome.and(Err(unavailable("the commit failed")))
                };
                let _ = reply.send(answer);
            })
        });
        // Nobody else waits for a commit and the writer thread is not in one: this
        // thread commits it itself, sparing the two thread wake-ups of a hand-off.
        let job = if alone {
            self.commit_here(job)
        } else {
            Some(job)
        };
        if let Some(job) = job {
            self.writer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .ok_or_else(|| unavailable("the store is closed"))?
                .send(job)
                .map_err(|_| unavailable("the writer thread has stopped"))?;
        }
        answer
            .await
            .map_err(|_| unavailable("the writer thread has stopped"))?
    }

    /// Commits `job` on this thread if the writer thread is not in a commit; gives it
    /// back otherwise.
    fn commit_here(&self, job: Job) -> Option<Job> {
        let Ok(connection) = self.connection.try_lock() else {
            return Some(job);
        };
        commit(&connection, &self.deferred, &self.message_ids, vec![job]);
        None
    }

    /// Leaves `work` to the writer, to be written before the next write someone
    /// waits for and committed with it; nobody waits for it.
    fn defer(&self, work: impl FnOnce(&Connection) -> Result<(), StoreError> + Send + 'static) {
        self.deferred.push(Box::new(work));
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
        self.write(move |c| {
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
    fn receive_now(&self, queue: &QueueName, max: usize) -> Received {
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
        let mut received = Received::default();
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
            received.taken.push((id, message.receive_count));
            if message.recovered {
                received.to_count.push((id, message.receive_count));
            }
            received.deliveries.push(Delivery {
                id: id.to_string(),
                body: message.body.clone(),
                receive_count: message.receive_count,
                // A receipt names the receive it came from: stale once received again.
                receipt: format!("{id}:{}", message.receive_count),
                trace: message.trace.clone(),
            });
            messages.insert(id, message);
        }
        drop(messages);
        for (id, dead_letter) in dead_lettered {
            tracing::warn!(queue = %dead_letter, "message moved to the dead-letter queue");
            let queue = dead_letter.to_string();
            self.defer(move |c| {
                execute(
                    c,
                    "UPDATE messages SET queue = ?2, visible_at = ?3, receive_count = 0 WHERE id = ?1",
                    params![id, queue, now],
                )
                .map(drop)
                .map_err(unavailable)
            });
            self.waker(dead_letter.as_str()).notify_one();
        }
        received
    }

    /// Makes deliveries taken from memory and not handed out visible again, their
    /// receives uncounted: each (id, receive count) that is still as it was taken.
    fn give_back(&self, queue: &QueueName, taken: &[(i64, u32)]) {
        let now = self.clock.now().0;
        let mut messages = self.messages();
        for &(id, count) in taken {
            let Some(mut message) = messages.remove(id) else {
                continue;
            };
            if message.receive_count == count && message.queue == queue.as_str() {
                message.visible_at = now;
                message.receive_count -= 1;
            }
            messages.insert(id, message);
        }
        drop(messages);
        self.waker(queue.as_str()).notify_one();
    }

    /// How many messages a queue holds, visible or not, at once (from memory).
    #[must_use]
    pub fn held(&self, queue: &QueueName) -> usize {
        self.messages()
            .ready
            .get(queue.as_str())
            .map_or(0, std::collections::BTreeSet::len)
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

/// One write waited for, counted among the uncommitted until it is answered (or
/// dropped unanswered).
struct Uncommitted(Arc<AtomicUsize>);

impl Uncommitted {
    fn take(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(count))
    }

    /// No other write is waited for.
    fn is_alone(&self) -> bool {
        self.0.load(Ordering::Acquire) == 1
    }
}

impl Drop for Uncommitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Embedded {
    /// Commits what the writer has taken, and stops it and the checkpointer.
    fn drop(&mut self) {
        self.writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.checkpoints.take();
        for thread in [self.writer_thread.take(), self.checkpoint_thread.take()]
            .into_iter()
            .flatten()
        {
            let _ = thread.join();
        }
    }
}
