//! The writer thread, which commits every write waiting in one transaction; the
//! checkpointer thread, which copies committed pages into the database off the
//! commits' path; and the statement cache every connection reads and writes through.

use std::cell::Cell;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::Connection;
use sas_core::ports::{Chain, StoreError};

use crate::schema::unavailable;

/// A write someone waits for: runs in the writer's transaction (given `None` when
/// none could begin, it writes nothing), and returns what to do once the transaction
/// has committed (`true`) or failed.
pub(crate) type Job =
    Box<dyn FnOnce(Option<&Transaction<'_>>) -> Box<dyn FnOnce(bool) + Send> + Send>;

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

/// The writer's open transaction, whose writes each run in a savepoint of their own.
pub(crate) struct Transaction<'c> {
    connection: &'c Connection,
    /// Whether a savepoint could not be closed (rolled back or released): the
    /// transaction then holds writes whose writers are told they failed, and must not
    /// commit.
    broken: Cell<bool>,
}

impl<'c> Transaction<'c> {
    /// Begins the writer's transaction on `connection`; `None` when it cannot.
    fn begin(connection: &'c Connection) -> Option<Self> {
        match execute(connection, "BEGIN IMMEDIATE", []) {
            Ok(_) => Some(Self {
                connection,
                broken: Cell::new(false),
            }),
            Err(error) => {
                tracing::error!(%error, "a transaction could not begin: its writes are refused");
                None
            }
        }
    }

    /// Runs `work` in a savepoint of its own, so that its failure undoes its writes
    /// only, not the others' in the transaction.
    pub(crate) fn in_savepoint<T>(
        &self,
        work: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let c = self.connection;
        execute(c, "SAVEPOINT write", []).map_err(unavailable)?;
        let result = work(c);
        let closed = match result {
            Ok(_) => execute(c, "RELEASE write", []),
            Err(_) => {
                execute(c, "ROLLBACK TO write", []).and_then(|_| execute(c, "RELEASE write", []))
            }
        };
        if let Err(error) = closed {
            self.broken.set(true);
            return Err(unavailable(error));
        }
        result
    }

    /// Commits, unless a savepoint broke; rolls back otherwise (the writes answered
    /// before their commit are then lost, as in a crash). Whether it committed.
    fn commit(self) -> bool {
        let committed = !self.broken.get() && execute(self.connection, "COMMIT", []).is_ok();
        if !committed {
            let _ = execute(self.connection, "ROLLBACK", []);
            tracing::error!("a commit failed: its writes are undone, and their writers told");
        }
        committed
    }
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

    fn write_all(&self, transaction: &Transaction<'_>) {
        let writes = std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner));
        for write in writes {
            if let Err(error) = transaction.in_savepoint(write) {
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
/// transaction; commits it and answers each. When no transaction can begin, the
/// batch writes nothing and is refused, and the deferred writes wait for the next.
pub(crate) fn commit(connection: &Connection, deferred: &DeferredWrites, batch: Vec<Job>) {
    let transaction = Transaction::begin(connection);
    let answers: Vec<_> = batch
        .into_iter()
        .map(|job| {
            if let Some(transaction) = &transaction {
                deferred.write_all(transaction);
            }
            job(transaction.as_ref())
        })
        .collect();
    let committed = transaction.is_some_and(|transaction| {
        deferred.write_all(&transaction);
        transaction.commit()
    });
    for answer in answers {
        answer(committed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// What each writer was told, by name: committed or not.
    type Told = Arc<Mutex<Vec<(&'static str, bool)>>>;

    /// A database with a table of names, and its writer's connection, which waits for
    /// no lock.
    fn database(dir: &tempfile::TempDir) -> Connection {
        let c = Connection::open(dir.path().join("db")).expect("open");
        c.busy_timeout(Duration::ZERO).expect("timeout");
        c.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE names (name TEXT PRIMARY KEY);")
            .expect("schema");
        c
    }

    /// A job that does `work`, telling `told` under `name` what it is told: committed,
    /// or not.
    fn job(
        name: &'static str,
        told: &Told,
        work: impl FnOnce(&Connection) -> Result<(), StoreError> + Send + 'static,
    ) -> Job {
        let told = Arc::clone(told);
        Box::new(move |transaction| {
            let outcome = transaction.map(|transaction| transaction.in_savepoint(work));
            Box::new(move |committed| {
                let written = committed && matches!(outcome, Some(Ok(())));
                told.lock().expect("told").push((name, written));
            })
        })
    }

    fn insert(c: &Connection, name: &str) -> Result<(), StoreError> {
        execute(c, "INSERT INTO names (name) VALUES (?1)", [name])
            .map(drop)
            .map_err(unavailable)
    }

    fn stored(c: &Connection) -> Vec<String> {
        let mut select = c
            .prepare("SELECT name FROM names ORDER BY name")
            .expect("select");
        select
            .query_map([], |row| row.get(0))
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("names")
    }

    /// Every writer told its write committed finds it stored, and none told it failed.
    fn told_as_stored(c: &Connection, told: &Told) {
        let committed: Vec<String> = told
            .lock()
            .expect("told")
            .iter()
            .filter(|(_, committed)| *committed)
            .map(|(name, _)| (*name).to_owned())
            .collect();
        assert_eq!(
            stored(c),
            committed,
            "told: {:?}",
            told.lock().expect("told")
        );
    }

    #[test]
    fn a_write_whose_savepoint_cannot_be_rolled_back_fails_its_whole_commit() {
        let dir = tempfile::tempdir().expect("dir");
        let c = database(&dir);
        let told = Told::default();
        // The second write closes its savepoint itself, then fails: its savepoint can
        // no longer be rolled back, and what it wrote stays in the transaction.
        let batch = vec![
            job("first", &told, |c| insert(c, "first")),
            job("second", &told, |c| {
                insert(c, "second")?;
                execute(c, "RELEASE write", []).map_err(unavailable)?;
                Err(StoreError::Conflict)
            }),
        ];

        commit(&c, &DeferredWrites::default(), batch);

        told_as_stored(&c, &told);
        assert_eq!(told.lock().expect("told").len(), 2, "each writer answered");
    }

    #[test]
    fn a_write_whose_transaction_cannot_begin_writes_nothing() {
        let dir = tempfile::tempdir().expect("dir");
        let c = database(&dir);
        let other = Connection::open(dir.path().join("db")).expect("open");
        other
            .execute_batch("BEGIN IMMEDIATE")
            .expect("the lock taken");
        let told = Told::default();
        // The write's transaction cannot begin while the other connection holds the
        // lock; the write lets it go, and could then write on its own.
        let batch = vec![job("alone", &told, move |c| {
            other.execute_batch("ROLLBACK").map_err(unavailable)?;
            insert(c, "alone")
        })];

        commit(&c, &DeferredWrites::default(), batch);

        told_as_stored(&c, &told);
        assert_eq!(*told.lock().expect("told"), [("alone", false)]);
    }
}
