//! The database's tables, how values go in and out of them, and the statement cache
//! every connection reads and writes through.

use std::cell::RefCell;
use std::time::Duration;

use lz4_flex::block::{decompress_into, decompress_into_with_dict};
use lzzzz::lz4;

use rusqlite::Connection;
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, ValueRef};
use sas_core::ports::{Cause, StoreError};
use sas_domain::task::Task;

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
/// record (its JSON) and a message's body are written, against a dictionary of the
/// names they hold ([`Vocabulary`]). A drone delivery's record, 3.0 KB of JSON at its
/// end, is 0.8 KB compressed (1.0 KB without the dictionary), in about 1 µs: it
/// stays in its row's page of 1 KiB instead of running over into a page of its own,
/// freed and taken again (with the free list and the header page) at every step's
/// rewrite; so does an agent's request carrying the results before it.
pub(crate) struct Compressed(pub(crate) Vec<u8>);

/// The bytes of a compressed value's length, before it.
const SIZE_PREFIX: usize = 4;

thread_local! {
    /// Where a thread compresses a value before copying it out at its length: kept,
    /// so that a compression neither allocates nor zeroes room for its worst case.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Where a thread writes a value's JSON before compressing it: kept too, so that
    /// the text does not grow from nothing, copied at each doubling, at every write.
    static JSON_TEXT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// A thread's LZ4 streams, made at its first compression.
    static COMPRESSORS: RefCell<Option<Compressors>> = const { RefCell::new(None) };
}

/// LZ4's streams (liblz4's): one primed with each dictionary once, and the one each
/// value is compressed with, which looks the dictionary up in a primed stream
/// (`LZ4_attach_dictionary`) instead of hashing it again. Priming a table of its own
/// at every value (as `lz4_flex` does) was a third of a compression's time: a state
/// machine's record of 3.1 KB took 2.5 µs that way, 1.4 µs this way
/// (BENCHMARKS.md). What they write is LZ4's block format, which
/// [`decompress`] reads with `lz4_flex`, as it reads every value written before.
struct Compressors {
    tasks: lz4::Compressor<'static>,
    state_machines: lz4::Compressor<'static>,
    working: lz4::Compressor<'static>,
}

/// liblz4's failure, which no input this store compresses causes (its output has room
/// for the worst case).
fn lz4_failed(error: lzzzz::Error) -> StoreError {
    StoreError::Corrupt(error.into())
}

impl Compressors {
    fn new() -> Result<Self, StoreError> {
        let primed = |dictionary: &'static str| {
            lz4::Compressor::with_dict(dictionary.as_bytes()).map_err(lz4_failed)
        };
        Ok(Self {
            tasks: primed(DICTIONARY)?,
            state_machines: primed(STATE_MACHINE_DICTIONARY)?,
            working: lz4::Compressor::new().map_err(lz4_failed)?,
        })
    }

    /// Compresses `input` alone against `vocabulary`'s dictionary into `output`
    /// (of [`lz4::max_compressed_size`] at least); the bytes written.
    fn compress(
        &mut self,
        input: &[u8],
        vocabulary: Vocabulary,
        output: &mut [u8],
    ) -> Result<usize, StoreError> {
        // Detaching resets the working stream, so that no value refers to the one
        // compressed before it.
        self.working.attach_dict(None);
        self.working.attach_dict(Some(match vocabulary {
            Vocabulary::Tasks => &mut self.tasks,
            Vocabulary::StateMachines => &mut self.state_machines,
        }));
        self.working
            .next(input, output, lz4::ACC_LEVEL_DEFAULT)
            .map_err(lz4_failed)
    }
}

/// The largest [`SCRATCH`] (and [`JSON_TEXT`]) a thread keeps between compressions.
const SCRATCH_KEPT: usize = 1 << 20;

/// Lets go of a thread's kept buffer once it has grown past [`SCRATCH_KEPT`].
fn let_go_if_large(buffer: &mut Vec<u8>) {
    if buffer.capacity() > SCRATCH_KEPT {
        *buffer = Vec::new();
    }
}

/// The length's top bit: set where the value was compressed against a dictionary,
/// clear in the values written before there was one.
const WITH_DICTIONARY: u32 = 1 << 31;

/// The length's next bit, set with [`WITH_DICTIONARY`]: the dictionary was
/// [`STATE_MACHINE_DICTIONARY`] rather than [`DICTIONARY`]. No value written before
/// it has the bit: SQLite keeps no value of a GiB.
const OF_STATE_MACHINES: u32 = 1 << 30;

/// The pieces of [`DICTIONARY`], which [`STATE_MACHINE_DICTIONARY`] begins with.
macro_rules! task_names {
    () => {
        concat!(
            r#"{"type":"submit","workflow":{"name":"","version":1},"submission":{"id":"","input":{},"#,
            r#""notify":null},"accepted_at":1{"type":"run","task_id":"{"type":"deadline","task_id":""#,
            r#"{"type":"response","task_id":"","run":1,"step":0,"attempt":1,"operation":"call","#,
            r#""outcome":{"status":"failed","error":""#,
            r#"{"task_id":"","run":1,"step":0,"step_name":"","attempt":1,"operation":"call","agent":"","#,
            r#""method":"POST","path":"/","complete_by":1","idempotency_key":"","retry":{"attempts":4,"#,
            r#""initial_backoff":"100ms","max_backoff":"2s","jitter":true,"call_timeout":null},"#,
            r#""payload":{"input":{},"results":{"":{}},"step":"","task_id":""},"task_created_at":1"#,
            r#"{"id":"","version":1,"write_id":1,"workflow":{"name":"","version":1},"fingerprint":"","#,
            r#""state":"Processing","locked_by":"","complete_by":1,"deadline":1,"failure_count":0,"#,
            r#""run":1,"steps":[{"name":"","state":"Pending"},{"name":"","state":"Processing","#,
            r#""attempt":1,"complete_by":1,"started_at":1,"key_run":1},{"name":"","state":"Processed","#,
            r#""attempt":1,"output":{"id":""},"started_at":1,"finished_at":1,"key_run":1,"done_order":1},"#,
            r#"],"callback_key":"","history":[{"at":1,"event":"state","state":"Pending"},"#,
            r#"{"at":1,"event":"state","state":"Processing"},"#,
            r#"{"at":1,"event":"sent","step":0,"operation":"call","attempt":1,"complete_by":1"#,
            r#"},{"at":1,"event":"answered","step":0,"operation":"call","attempt":1,"outcome":"succeeded"},"#,
            r#"{"at":1,"event":"state","state":"Processed"}],"created_at":1,"updated_at":1}"#,
            r#"{"type":"response","task_id":"","run":1,"step":0,"attempt":1,"operation":"call","#,
            r#""outcome":{"status":"succeeded","output":{"#,
        )
    };
}

/// What LZ4 finds the first occurrence of a value's names in: pieces of the JSON of
/// a task's record, an agent's request and the scheduler's messages, so that only
/// what a value has of its own is written out. Every value compressed since is read
/// with it: it never changes (a test holds its digest); another takes another bit
/// of the length.
pub(crate) const DICTIONARY: &str = task_names!();

/// [`DICTIONARY`], then the names a state machine's record adds (its run, the
/// answers its Tasks keep) and those of its history's events, in Step Functions'
/// words. At the end of a drone delivery of five HTTP Tasks, its record compresses
/// to 984 bytes against this instead of 1,063, and a write's events (a Task's end
/// and the next state's entry) to 567 instead of 759: a commit writes 5% less WAL.
/// Fixed as [`DICTIONARY`] is.
pub(crate) const STATE_MACHINE_DICTIONARY: &str = concat!(
    task_names!(),
    r#""output":{"body":"{}","status":200,"headers":{"content-length":"","#,
    r#""content-type":"application/json","date":""},"status_text":"OK"},"output":{"payload":"{}"},"#,
    r#""machine":{"state":"","to_enter":true,"input":{},"variables":{},"work":{"type":"service","#,
    r#""operation":"","request":{},"timeout_seconds":1,"heartbeat_seconds":1},"retries":[1],"#,
    r#""work":{"type":"invoke","function":"","payload":""},"visits":{"":1},"attempts":1,"#,
    r#""events":1,"history_base":1,"entered_event":1,"deadline":1,"status":"RUNNING","#,
    r#""status":"SUCCEEDED","output":{},"error":"States.TaskFailed","cause":""}"#,
    r#","attributes":{"state_machine":""#,
    r#"[{"id":1,"at":1,"event":{"type":"ExecutionStarted","executionStartedEventDetails":{"#,
    r#""roleArn":"arn:aws:iam::000000000000:role/","input":"{"","inputDetails":{"truncated":false}}}},"#,
    r#"{"id":1,"at":1,"event":{"type":"TaskStateEntered","stateEnteredEventDetails":{"name":"","#,
    r#""input":"{"","inputDetails":{"truncated":false}}}},"#,
    r#"{"id":1,"at":1,"event":{"type":"TaskScheduled","taskScheduledEventDetails":{"#,
    r#""resourceType":"http","resource":"invoke","region":"us-east-1","parameters":"{""}}},"#,
    r#"{"id":1,"at":1,"event":{"type":"TaskStarted","taskStartedEventDetails":{"#,
    r#""resourceType":"lambda","resource":"invoke"}}},"#,
    r#"{"id":1,"at":1,"event":{"type":"TaskSucceeded","taskSucceededEventDetails":{"#,
    r#""resourceType":"http","resource":"invoke","output":"{"Headers":{"content-length":[""#,
    r#""],"content-type":["application/json"],"date":[""#,
    r#" GMT"]},"ResponseBody":{},"StatusCode":"200","StatusText":"OK"}","#,
    r#""outputDetails":{"truncated":false}}}},"#,
    r#"{"ExecutedVersion":"$LATEST","Payload":{},"SdkHttpMetadata":{"AllHttpHeaders":{"#,
    r#""HttpHeaders":{"HttpStatusCode":200},"SdkResponseMetadata":{"RequestId":""#,
    r#""},"StatusCode":200}"#,
    r#"{"id":1,"at":1,"event":{"type":"TaskFailed","taskFailedEventDetails":{"#,
    r#""error":"States.TaskFailed","cause":""}}},"#,
    r#"{"id":1,"at":1,"event":{"type":"TaskStateExited","stateExitedEventDetails":{"name":"","#,
    r#""output":"{"","outputDetails":{"truncated":false}}}},"#,
    r#"{"id":1,"at":1,"event":{"type":"LambdaFunctionScheduled","#,
    r#""lambdaFunctionScheduledEventDetails":{"resource":"arn:aws:lambda:us-east-1:000000000000:function:","#,
    r#""input":"{"FunctionName":"","Payload":{""#,
    r#"{"id":1,"at":1,"event":{"type":"LambdaFunctionStarted"}},"#,
    r#"{"id":1,"at":1,"event":{"type":"LambdaFunctionSucceeded","#,
    r#""lambdaFunctionSucceededEventDetails":{"output":"{"","outputDetails":{"truncated":false}}}},"#,
    r#"{"id":1,"at":1,"event":{"type":"PassStateEntered","ChoiceStateExited","WaitStateEntered","#,
    r#""MapStateStarted","mapStateStartedEventDetails":{"length":1}},"MapStateSucceeded","#,
    r#""ParallelStateStarted","ParallelStateSucceeded","SucceedStateEntered","FailStateEntered","#,
    r#"{"id":1,"at":1,"event":{"type":"ExecutionFailed","executionFailedEventDetails":{"#,
    r#""error":"","cause":""}}}]"#,
    r#"{"id":1,"at":1,"event":{"type":"ExecutionSucceeded","executionSucceededEventDetails":{"#,
    r#""output":"{"","outputDetails":{"truncated":false}}}}]"#,
);

/// Which dictionary a value is compressed against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vocabulary {
    /// [`DICTIONARY`]: a workflow's task, a message.
    Tasks,
    /// [`STATE_MACHINE_DICTIONARY`]: a state machine's task, its history's events.
    StateMachines,
}

impl Vocabulary {
    /// A task's record's: its kind's.
    pub(crate) fn of(task: &Task) -> Self {
        if task.machine.is_some() {
            Self::StateMachines
        } else {
            Self::Tasks
        }
    }

    fn dictionary(self) -> &'static [u8] {
        match self {
            Self::Tasks => DICTIONARY.as_bytes(),
            Self::StateMachines => STATE_MACHINE_DICTIONARY.as_bytes(),
        }
    }

    /// The bits of the length that name it.
    fn flags(self) -> u32 {
        match self {
            Self::Tasks => WITH_DICTIONARY,
            Self::StateMachines => WITH_DICTIONARY | OF_STATE_MACHINES,
        }
    }
}

impl Compressed {
    /// `text`, compressed against `vocabulary`'s dictionary after its length
    /// (little-endian `u32`, as `lz4_flex::compress_prepend_size` writes it, with
    /// the vocabulary's bits set).
    ///
    /// # Errors
    /// [`StoreError::TooLarge`] for text of a GiB or more, which no record or body is.
    pub(crate) fn text(text: &str, vocabulary: Vocabulary) -> Result<Self, StoreError> {
        Self::bytes(text.as_bytes(), vocabulary)
    }

    /// As [`Compressed::text`], of text as bytes.
    fn bytes(input: &[u8], vocabulary: Vocabulary) -> Result<Self, StoreError> {
        let size = u32::try_from(input.len())
            .ok()
            .filter(|size| size & (WITH_DICTIONARY | OF_STATE_MACHINES) == 0)
            .ok_or_else(|| StoreError::TooLarge(format!("{} bytes", input.len())))?;
        let bound = lz4::max_compressed_size(input.len());
        SCRATCH.with_borrow_mut(|scratch| {
            if scratch.len() < bound {
                scratch.resize(bound, 0);
            }
            let written = COMPRESSORS.with_borrow_mut(|compressors| {
                let compressors = match compressors {
                    Some(compressors) => compressors,
                    None => compressors.insert(Compressors::new()?),
                };
                compressors.compress(input, vocabulary, &mut scratch[..bound])
            })?;
            let mut output = Vec::with_capacity(SIZE_PREFIX + written);
            output.extend_from_slice(&(size | vocabulary.flags()).to_le_bytes());
            output.extend_from_slice(&scratch[..written]);
            let_go_if_large(scratch);
            Ok(Self(output))
        })
    }

    pub(crate) fn json<T: serde::Serialize>(
        value: &T,
        vocabulary: Vocabulary,
    ) -> Result<Self, StoreError> {
        JSON_TEXT.with_borrow_mut(|text| {
            text.clear();
            serde_json::to_writer(&mut *text, value).map_err(|e| StoreError::Corrupt(e.into()))?;
            let compressed = Self::bytes(text, vocabulary);
            let_go_if_large(text);
            compressed
        })
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
    let (length, compressed) = bytes
        .split_first_chunk::<SIZE_PREFIX>()
        .ok_or_else(|| corrupt("a compressed value shorter than its length".into()))?;
    let length = u32::from_le_bytes(*length);
    let flags = length & (WITH_DICTIONARY | OF_STATE_MACHINES);
    let size = usize::try_from(length & !flags).map_err(|e| corrupt(e.into()))?;
    // LZ4 shrinks 255 bytes to one at most: a larger length is garbled, not a reason
    // to allocate it.
    if size > compressed.len().saturating_mul(255) {
        return Err(corrupt("a compressed value longer than LZ4 allows".into()));
    }
    let vocabulary = [Vocabulary::Tasks, Vocabulary::StateMachines]
        .into_iter()
        .find(|vocabulary| vocabulary.flags() == flags);
    let mut output = vec![0; size];
    let written = match (flags, vocabulary) {
        (0, _) => decompress_into(compressed, &mut output),
        (_, Some(vocabulary)) => {
            decompress_into_with_dict(compressed, &mut output, vocabulary.dictionary())
        }
        (_, None) => return Err(corrupt("a compressed value of no known dictionary".into())),
    }
    .map_err(|e| corrupt(e.into()))?;
    output.truncate(written);
    Ok(output)
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
