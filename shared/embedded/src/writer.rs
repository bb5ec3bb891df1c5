//! The writer thread, which commits every write waiting in one transaction; the
//! checkpointer thread, which copies committed pages into the database off the
//! commits' path; and the statement cache every connection reads and writes through.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::Connection;
use sas_core::ports::{Chain, StoreError};

use crate::schema::unavailable;

/// A write someone waits for: runs in the writer's transaction, and returns what to
/// do once the transaction has committed (`true`) or failed.
pub(crate) type Job = Box<dyn FnOnce(&Connection) -> Box<dyn FnOnce(bool) + Send> + Send>;

/// A write nobody waits for (a send answered before its commit, a delete).
pub(crate) type Deferred = Box<dyn FnOnce(&Connection) -> Result<(), StoreError> + Send>;

/// Writes committed together at most.
pub(crate) const GROUP: usize = 512;
/// Read connections.
pub(crate) const READERS: usize = 2;
/// Prepared statements kept per connection: every statement this store runs.
pub(crate) const STATEMENTS: usize = 64;
/// How long deferred writes wait at most for a write someone waits for to commit
/// them with.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(50);
/// How often the checkpointer copies the WAL's committed pages into the database.
pub(crate) const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);
/// WAL pages past which a commit checkpoints by itself (SQLite's default). With
/// commits under way the checkpointer never catches up with the last frame, so the
/// WAL starts again from its beginning only after such a checkpoint: this bounds the
/// WAL at 1 MB of 1 KiB pages, written over the same blocks, where 10,000 pages had
/// it grow to 10 MB first, every commit's flush then also the file's growth (110-130
/// µs against 50-75 on this disk; 331-388 tasks/s at concurrency 1 against 307-330).
pub(crate) const WRITER_CHECKPOINT_PAGES: u32 = 1_000;

/// Runs `sql` through the connection's statement cache: parsed once per connection,
/// not at every call.
pub(crate) fn execute(
    c: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<usize> {
    c.prepare_cached(sql)?.execute(params)
}

/// Reads one row with `sql`, through the connection's statement cache.
pub(crate) fn query_row<T>(
    c: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    read: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    c.prepare_cached(sql)?.query_row(params, read)
}

/// Runs `work` in a savepoint of its own, so that its failure undoes its writes
/// only, not the others' in the transaction.
pub(crate) fn in_savepoint<T>(
    c: &Connection,
    work: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    execute(c, "SAVEPOINT write", []).map_err(unavailable)?;
    let result = work(c);
    if result.is_err() {
        execute(c, "ROLLBACK TO write", []).map_err(unavailable)?;
    }
    execute(c, "RELEASE write", []).map_err(unavailable)?;
    result
}

/// The writes nobody waits for, in the order they were made. The writer writes them
/// before each write someone waits for, so whatever follows from one (a receiver's
/// write, made after its message was sent) is committed after it.
#[derive(Default)]
pub(crate) struct DeferredWrites(Mutex<Vec<Deferred>>);

impl DeferredWrites {
    pub(crate) fn push(&self, write: Deferred) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(write);
    }

    fn write_all(&self, c: &Connection) {
        let writes = std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner));
        for write in writes {
            if let Err(error) = in_savepoint(c, write) {
                tracing::error!(error = %Chain(&error), "a write answered before its commit failed");
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }
}

/// The writer thread: takes every write waiting, runs them in one transaction,
/// commits once (one fsync for many writers), then answers each. Deferred writes
/// go with the next commit, or after [`FLUSH_EVERY`] when none comes: they wake
/// nobody and add no fsync to anyone's path.
pub(crate) fn write_loop(
    connection: &Mutex<Connection>,
    jobs: mpsc::Receiver<Job>,
    deferred: &DeferredWrites,
) {
    loop {
        let mut batch = Vec::new();
        match jobs.recv_timeout(FLUSH_EVERY) {
            Ok(first) => batch.push(first),
            Err(RecvTimeoutError::Timeout) if deferred.is_empty() => continue,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                if !deferred.is_empty() {
                    commit(&lock(connection), deferred, Vec::new());
                }
                return;
            }
        }
        while batch.len() < GROUP {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        commit(&lock(connection), deferred, batch);
    }
}

fn lock(connection: &Mutex<Connection>) -> std::sync::MutexGuard<'_, Connection> {
    connection.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The checkpointer thread: copies the WAL's committed pages into the database, a
/// passive checkpoint (it waits for nobody, and nobody for it) every
/// [`CHECKPOINT_EVERY`], until `stop` is dropped. Off the writer's path: otherwise
/// SQLite runs it inside the commit that passes its threshold, and that commit's
/// writers wait for the copy and the database's fsync.
pub(crate) fn checkpoint_loop(connection: &Connection, stop: &mpsc::Receiver<()>) {
    while let Err(RecvTimeoutError::Timeout) = stop.recv_timeout(CHECKPOINT_EVERY) {
        if let Err(error) = connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(%error, "a checkpoint failed; the next one will try again");
        }
    }
}

/// Writes `batch`, each after the deferred writes made before it, in one
/// transaction; commits it and answers each.
pub(crate) fn commit(connection: &Connection, deferred: &DeferredWrites, batch: Vec<Job>) {
    let began = execute(connection, "BEGIN IMMEDIATE", []).is_ok();
    let answers: Vec<_> = batch
        .into_iter()
        .map(|job| {
            deferred.write_all(connection);
            job(connection)
        })
        .collect();
    deferred.write_all(connection);
    let committed = began && execute(connection, "COMMIT", []).is_ok();
    if !committed {
        let _ = execute(connection, "ROLLBACK", []);
        tracing::error!("a commit failed");
    }
    for answer in answers {
        answer(committed);
    }
}
