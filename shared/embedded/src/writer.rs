//! The writer thread, which commits every write waiting in one transaction, and the
//! statement cache every connection reads and writes through.

use std::sync::mpsc;

use rusqlite::Connection;

/// A write: runs in the writer's transaction, and returns what to do once the
/// transaction has committed (`true`) or failed.
pub(crate) type Job = Box<dyn FnOnce(&Connection) -> Box<dyn FnOnce(bool) + Send> + Send>;

/// Writes committed together at most.
pub(crate) const GROUP: usize = 512;
/// Read connections.
pub(crate) const READERS: usize = 2;
/// Prepared statements kept per connection: every statement this store runs.
pub(crate) const STATEMENTS: usize = 64;

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

/// The writer thread: takes every write waiting, runs them in one transaction,
/// commits once, then answers each.
pub(crate) fn write_loop(connection: Connection, jobs: mpsc::Receiver<Job>) {
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
