//! The database's tables, and how values go in and out of them.

use std::cell::RefCell;
use std::time::Duration;

use lz4_flex::block::{CompressTable, compress_into_with_table, get_maximum_output_size};

use rusqlite::Connection;
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, ValueRef};
use sas_core::ports::{Cause, StoreError};

pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY, version INTEGER NOT NULL, state TEXT NOT NULL,
    lease_expires INTEGER, created_at INTEGER NOT NULL, record TEXT NOT NULL,
    leased INTEGER);
-- No index holds `lease_expires`, which moves at every step: the leases are swept
-- from memory (`leases`), loaded through the state index for the tasks in flight,
-- and the partial index on `leased` (1 for an ended task that keeps a lease).
CREATE INDEX IF NOT EXISTS tasks_state ON tasks(state, created_at, id);
CREATE TABLE IF NOT EXISTS orders (task_id TEXT PRIMARY KEY, input TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS earlier_inputs (task_id TEXT PRIMARY KEY, inputs TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workflows (
    name TEXT NOT NULL, version INTEGER NOT NULL, digest TEXT NOT NULL, source TEXT NOT NULL,
    PRIMARY KEY (name, version));
-- The names of the definitions registered at run time (state machines created
-- through the API), each at the version its new tasks start on.
CREATE TABLE IF NOT EXISTS registrations (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL, deleted INTEGER NOT NULL, details TEXT);
CREATE TABLE IF NOT EXISTS queues (
    name TEXT PRIMARY KEY, visibility_timeout_ms INTEGER NOT NULL,
    max_receive_count INTEGER, dead_letter TEXT);
-- A message's id is given by the store, never again: above every id in the table and
-- below the reservation in `counters` (see `queues::reserve_message_ids`).
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY, queue TEXT NOT NULL, body TEXT NOT NULL,
    visible_at INTEGER NOT NULL, receive_count INTEGER NOT NULL DEFAULT 0, sent_at INTEGER NOT NULL,
    trace TEXT);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
-- The deployment's own secrets, by name: the key that seals owners' listing cursors.
CREATE TABLE IF NOT EXISTS secrets (name TEXT PRIMARY KEY, value BLOB NOT NULL);
-- The queues are served from memory: their table is read whole at the start and
-- written by id, so it has no index to keep at every send and delete (databases
-- written before had one).
DROP INDEX IF EXISTS messages_ready;
CREATE TABLE IF NOT EXISTS gates (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS gate_lines (
    gate TEXT NOT NULL, position INTEGER NOT NULL, call TEXT NOT NULL, waiter TEXT NOT NULL,
    PRIMARY KEY (gate, position, call));
-- The histories of state machines' executions, a row a task's write that added
-- events, appended (`history`).
CREATE TABLE IF NOT EXISTS history_writes (
    seq INTEGER PRIMARY KEY, task_id TEXT NOT NULL, last_event INTEGER NOT NULL,
    events BLOB NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS history_writes_of ON history_writes(task_id, last_event);
-- The visits of Tasks on activities that no worker has taken (`activities`).
CREATE TABLE IF NOT EXISTS activity_offers (
    task_id TEXT PRIMARY KEY, activity TEXT NOT NULL, since INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS activity_offers_by_age ON activity_offers(activity, since, task_id);
-- The tasks by their search attributes (`attributes`), a row an attribute.
CREATE TABLE IF NOT EXISTS task_attributes (
    name TEXT NOT NULL, value TEXT NOT NULL, created_at INTEGER NOT NULL, task_id TEXT NOT NULL,
    PRIMARY KEY (name, value, created_at, task_id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS task_attributes_of ON task_attributes(task_id);
CREATE TABLE IF NOT EXISTS alerts (
    id INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT NOT NULL, raised_at INTEGER NOT NULL, alert TEXT NOT NULL);
";

pub(crate) fn unavailable(error: impl Into<Cause>) -> StoreError {
    StoreError::Unavailable(error.into())
}

pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(e.into()))
}

pub(crate) fn encode<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.into()))
}

/// Text compressed with LZ4 (its length first), stored as a blob: how a task's
/// record (its JSON) and a message's body are written. A drone delivery's record, 2.9
/// KB of JSON at its end, is 1.0 KB compressed, in about 3 µs: it stays in its row's
/// page of 1 KiB instead of running over into pages of its own, freed and taken again
/// (with the free list and the header page) at every step's rewrite; so does an
/// agent's request carrying the results before it.
pub(crate) struct Compressed(pub(crate) Vec<u8>);

/// The bytes of a compressed value's length, before it.
const SIZE_PREFIX: usize = 4;

thread_local! {
    /// LZ4's hash table (8 KiB), kept by each thread and cleared at each use: made
    /// afresh at every compression, its allocation and zeroing cost more than the
    /// compression of a message's body.
    static LZ4_TABLE: RefCell<CompressTable> = RefCell::new(CompressTable::default());
}

impl Compressed {
    /// `text`, compressed after its length (little-endian `u32`, as
    /// `lz4_flex::compress_prepend_size` writes it).
    ///
    /// # Errors
    /// [`StoreError::TooLarge`] for text over 4 GiB, which no record or body is.
    pub(crate) fn text(text: &str) -> Result<Self, StoreError> {
        let input = text.as_bytes();
        let size = u32::try_from(input.len())
            .map_err(|_| StoreError::TooLarge(format!("{} bytes", input.len())))?;
        let mut output = vec![0; SIZE_PREFIX + get_maximum_output_size(input.len())];
        output[..SIZE_PREFIX].copy_from_slice(&size.to_le_bytes());
        let written = LZ4_TABLE
            .with_borrow_mut(|table| {
                compress_into_with_table(input, &mut output[SIZE_PREFIX..], table)
            })
            .map_err(|e| StoreError::Corrupt(e.into()))?;
        output.truncate(SIZE_PREFIX + written);
        Ok(Self(output))
    }

    pub(crate) fn json<T: serde::Serialize>(value: &T) -> Result<Self, StoreError> {
        Self::text(&encode(value)?)
    }
}

impl rusqlite::ToSql for Compressed {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        self.0.to_sql()
    }
}

/// A text column as read: text, as versions before compression wrote it, or
/// [`Compressed`] (a blob). Kept as stored until decoded, so that a value that does
/// not decode is told apart from a failed read.
pub(crate) enum Stored {
    Text(String),
    Compressed(Vec<u8>),
}

impl Stored {
    /// Its JSON, decoded.
    pub(crate) fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, StoreError> {
        match self {
            Self::Text(text) => decode(text),
            Self::Compressed(bytes) => serde_json::from_slice(&decompress(bytes)?)
                .map_err(|e| StoreError::Corrupt(e.into())),
        }
    }

    /// Its text.
    pub(crate) fn into_text(self) -> Result<String, StoreError> {
        match self {
            Self::Text(text) => Ok(text),
            Self::Compressed(bytes) => {
                String::from_utf8(decompress(&bytes)?).map_err(|e| StoreError::Corrupt(e.into()))
            }
        }
    }
}

fn decompress(bytes: &[u8]) -> Result<Vec<u8>, StoreError> {
    let corrupt = |e: Cause| StoreError::Corrupt(e);
    let (size, compressed) =
        lz4_flex::block::uncompressed_size(bytes).map_err(|e| corrupt(e.into()))?;
    // LZ4 shrinks 255 bytes to one at most: a larger length is garbled, not a reason
    // to allocate it.
    if size > compressed.len().saturating_mul(255) {
        return Err(corrupt("a compressed value longer than LZ4 allows".into()));
    }
    lz4_flex::block::decompress(compressed, size).map_err(|e| corrupt(e.into()))
}

impl FromSql for Stored {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value {
            ValueRef::Text(_) => value.as_str().map(|text| Self::Text(text.to_owned())),
            ValueRef::Blob(bytes) => Ok(Self::Compressed(bytes.to_vec())),
            _ => Err(FromSqlError::InvalidType),
        }
    }
}

/// The rows of a query of one JSON column, decoded.
pub(crate) fn decode_rows<T: serde::de::DeserializeOwned>(
    c: &Connection,
    sql: &str,
    parameters: impl rusqlite::Params,
) -> Result<Vec<T>, StoreError> {
    let mut select = c.prepare_cached(sql).map_err(unavailable)?;
    let rows = select
        .query_map(parameters, |row| row.get::<_, Stored>(0))
        .map_err(unavailable)?;
    rows.map(|row| row.map_err(unavailable)?.decode()).collect()
}
