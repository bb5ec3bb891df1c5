//! The writer thread, which commits every write waiting in one transaction; and the
//! checkpointer thread, which copies committed pages into the database off the
//! commits' path.

use std::cell::Cell;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::Connection;
use sas_core::ports::{Chain, StoreError};

use crate::queues::MessageIds;
use crate::schema::{execute, unavailable};

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

/// The writer's open transaction. A write that fails having written nothing leaves it
/// as it was, so that the others in it commit; one that fails after writing breaks it.
/// Dropped before its commit (a write panicked), it is rolled back.
pub(crate) struct Transaction<'c> {
    connection: &'c Connection,
    /// Whether it can no longer commit what its writers are told: a write failed
    /// after writing, so it holds rows whose writer is told it failed; or SQLite
    /// rolled it back itself (a full disk, an I/O error).
    broken: Cell<bool>,
    /// Whether it is still to be committed or rolled back.
    open: bool,
}

impl<'c> Transaction<'c> {
    /// Begins the writer's transaction on `connection`; `None` when it cannot.
    fn begin(connection: &'c Connection) -> Option<Self> {
        if !connection.is_autocommit() {
            tracing::error!("a transaction was left open: rolled back");
            let _ = execute(connection, "ROLLBACK", []);
        }
        match execute(connection, "BEGIN IMMEDIATE", []) {
            Ok(_) => Some(Self {
                connection,
                broken: Cell::new(false),
                open: true,
            }),
            Err(error) => {
                tracing::error!(%error, "a transaction could not begin: its writes are refused");
                None
            }
        }
    }

    fn is_broken(&self) -> bool {
        self.broken.get()
    }

    /// Runs `work` in the transaction. Every write fails, if it does, before it
    /// writes (a conditional write that finds another version changes no row), and
    /// leaves the transaction to the others; SQLite's count of the rows changed tells
    /// one that failed after writing (an error of SQLite's, or a bug), which breaks
    /// the transaction: its writers are all told it failed. A savepoint around each
    /// write would undo that alone, but costs every write two statements and a copy
    /// of each page it changes (3.7% of a drone delivery's instructions,
    /// `BENCHMARKS.md`). Refused once the transaction is broken: where SQLite rolled
    /// it back, the write would be committed on its own.
    pub(crate) fn run<T>(
        &self,
        work: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let c = self.connection;
        if self.is_broken() || c.is_autocommit() {
            self.broken.set(true);
            return Err(unavailable("the transaction was rolled back"));
        }
        let changes = c.total_changes();
        let result = work(c);
        if c.is_autocommit() || (result.is_err() && c.total_changes() != changes) {
            self.broken.set(true);
            return result.and(Err(unavailable("the transaction was rolled back")));
        }
        result
    }

    /// Commits, unless it is broken; rolls back otherwise. The writes answered before
    /// their commit are then lost from the database, as in a crash, though memory
    /// keeps them until a restart: a lost send is sent again when its task's lease
    /// ends, a lost delete is one more delivery. Whether it committed.
    fn commit(mut self) -> bool {
        self.open = false;
        let committed = !self.is_broken()
            && execute(self.connection, "COMMIT", [])
                .inspect_err(|error| tracing::error!(%error, "a commit failed"))
                .is_ok();
        if !committed {
            let _ = execute(self.connection, "ROLLBACK", []);
            tracing::error!("a transaction rolled back: its writers are told it failed");
        }
        committed
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = execute(self.connection, "ROLLBACK", []);
        }
    }
}

/// The writes nobody waits for, in the order they were made. The writer writes them
/// before each write someone waits for, so whatever follows from one (a receiver's
/// write, made after its message was sent) is committed after it.
#[derive(Default)]
pub(crate) struct DeferredWrites(Mutex<Vec<Deferred>>);

impl DeferredWrites {
    pub(crate) fn push(&self, write: Deferred) {
        self.writes().push(write);
    }

    /// Writes every deferred write in `transaction`; those it cannot take, once it is
    /// broken, wait for the next, in their order.
    fn write_all(&self, transaction: &Transaction<'_>) {
        let mut writes = std::mem::take(&mut *self.writes()).into_iter();
        while !transaction.is_broken() {
            let Some(write) = writes.next() else {
                return;
            };
            if let Err(error) = transaction.run(write) {
                tracing::error!(error = %Chain(&error), "a write answered before its commit failed");
            }
        }
        let mut waiting = self.writes();
        let since = std::mem::take(&mut *waiting);
        waiting.extend(writes);
        waiting.extend(since);
    }

    fn writes(&self) -> std::sync::MutexGuard<'_, Vec<Deferred>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_empty(&self) -> bool {
        self.writes().is_empty()
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
    ids: &MessageIds,
) {
    loop {
        let mut batch = Vec::new();
        match jobs.recv_timeout(FLUSH_EVERY) {
            Ok(first) => batch.push(first),
            Err(RecvTimeoutError::Timeout) if deferred.is_empty() => continue,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                if !deferred.is_empty() {
                    commit(&lock(connection), deferred, ids, Vec::new());
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
        commit(&lock(connection), deferred, ids, batch);
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
/// transaction, with the message ids' reservation where the ids given reached it;
/// commits it and answers each. When no transaction can begin, the batch writes
/// nothing and is refused, and the deferred writes wait for the next.
pub(crate) fn commit(
    connection: &Connection,
    deferred: &DeferredWrites,
    ids: &MessageIds,
    batch: Vec<Job>,
) {
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
        // No commit is made whose messages' ids might be above the reservation (a
        // broken transaction is not committed at all).
        let reserved = if transaction.is_broken() {
            None
        } else {
            (transaction.run(|c| ids.reserve(c)))
                .inspect_err(|error| {
                    tracing::error!(error = %Chain(error), "the message ids could not be reserved");
                    transaction.broken.set(true);
                })
                .ok()
                .flatten()
        };
        let committed = transaction.commit();
        if let (true, Some(reserved)) = (committed, reserved) {
            ids.committed(reserved);
        }
        committed
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
            let outcome = transaction.map(|transaction| transaction.run(work));
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

    /// The names committed, as another connection reads them.
    fn stored(dir: &tempfile::TempDir) -> Vec<String> {
        let c = Connection::open(dir.path().join("db")).expect("open");
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
    fn told_as_stored(dir: &tempfile::TempDir, told: &Told) {
        let committed: Vec<String> = told
            .lock()
            .expect("told")
            .iter()
            .filter(|(_, committed)| *committed)
            .map(|(name, _)| (*name).to_owned())
            .collect();
        assert_eq!(
            stored(dir),
            committed,
            "told: {:?}",
            told.lock().expect("told")
        );
    }

    /// Commits `batch` on `c`, and checks that every writer is told what is stored.
    fn committed(dir: &tempfile::TempDir, c: &Connection, batch: Vec<Job>, told: &Told) {
        commit(c, &DeferredWrites::default(), &MessageIds::default(), batch);
        told_as_stored(dir, told);
    }

    #[test]
    fn a_write_that_fails_having_written_nothing_leaves_the_others_to_commit() {
        let dir = tempfile::tempdir().expect("dir");
        let c = database(&dir);
        let told = Told::default();
        // A conditional write that finds another version, and a statement SQLite
        // refuses (and undoes) itself: neither changed a row.
        let batch = vec![
            job("first", &told, |c| insert(c, "first")),
            job("conflict", &told, |c| {
                let updated = execute(c, "UPDATE names SET name = 'x' WHERE name = 'none'", [])
                    .map_err(unavailable)?;
                assert_eq!(updated, 0);
                Err(StoreError::Conflict)
            }),
            job("refused", &told, |c| insert(c, "first")),
            job("last", &told, |c| insert(c, "last")),
        ];

        committed(&dir, &c, batch, &told);

        assert_eq!(
            *told.lock().expect("told"),
            [
                ("first", true),
                ("conflict", false),
                ("refused", false),
                ("last", true)
            ]
        );
    }

    #[test]
    fn a_write_that_fails_after_writing_fails_its_whole_commit() {
        let dir = tempfile::tempdir().expect("dir");
        let c = database(&dir);
        let told = Told::default();
        // The second write fails after its insert: what it wrote cannot be undone
        // alone, and the writes after it are refused.
        let batch = vec![
            job("first", &told, |c| insert(c, "first")),
            job("second", &told, |c| {
                insert(c, "second")?;
                Err(StoreError::Conflict)
            }),
            job("third", &told, |c| insert(c, "third")),
        ];

        committed(&dir, &c, batch, &told);

        assert_eq!(
            *told.lock().expect("told"),
            [("first", false), ("second", false), ("third", false)]
        );
    }

    #[test]
    fn after_sqlite_rolls_a_transaction_back_itself_no_write_commits_on_its_own() {
        let dir = tempfile::tempdir().expect("dir");
        let c = database(&dir);
        let told = Told::default();
        // As SQLite does on a full disk or an I/O error: the transaction is gone, and
        // a write after it would be committed on its own.
        let batch = vec![
            job("first", &told, |c| {
                insert(c, "first")?;
                execute(c, "ROLLBACK", []).map(drop).map_err(unavailable)
            }),
            job("second", &told, |c| insert(c, "second")),
        ];

        committed(&dir, &c, batch, &told);

        assert_eq!(
            *told.lock().expect("told"),
            [("first", false), ("second", false)]
        );
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

        committed(&dir, &c, batch, &told);

        assert_eq!(*told.lock().expect("told"), [("alone", false)]);
    }

    #[test]
    fn a_write_that_panics_leaves_no_transaction_open_to_refuse_the_next() {
        let dir = tempfile::tempdir().expect("dir");
        let c = database(&dir);
        let told = Told::default();
        let panicking = vec![job("panicked", &told, |c| {
            insert(c, "panicked")?;
            panic!("a write's bug");
        })];
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            commit(
                &c,
                &DeferredWrites::default(),
                &MessageIds::default(),
                panicking,
            );
        }));
        assert!(panicked.is_err());

        committed(
            &dir,
            &c,
            vec![job("next", &told, |c| insert(c, "next"))],
            &told,
        );

        assert_eq!(*told.lock().expect("told"), [("next", true)]);
    }

    #[test]
    fn deferred_writes_a_broken_transaction_could_not_take_wait_for_the_next() {
        let dir = tempfile::tempdir().expect("dir");
        let c = database(&dir);
        let deferred = DeferredWrites::default();
        deferred.push(Box::new(|c| insert(c, "deferred")));
        let broken = Transaction::begin(&c).expect("begun");
        broken.broken.set(true);

        deferred.write_all(&broken);
        drop(broken);
        let told = Told::default();
        commit(
            &c,
            &deferred,
            &MessageIds::default(),
            vec![job("next", &told, |c| insert(c, "next"))],
        );

        assert_eq!(stored(&dir), ["deferred", "next"]);
        assert_eq!(*told.lock().expect("told"), [("next", true)]);
    }
}
