//! The ports: what the actors need from the outside world, named by role. The
//! embedded backend implements them for one machine; AWS adapters for Lambda.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use sas_domain::flow::{Gate, Waiter};
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::messages::{Alert, Method, Payload};
use sas_domain::services::{SecretRef, SigV4};
use sas_domain::task::{Order, Task, TaskState};
use sas_domain::time::Timestamp;
use sas_domain::workflow::Workflow;

/// An adapter's own error (an SDK's, SQLite's, or a message where there is none),
/// kept whole as the source of the port's error.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// An error and its sources, each after the one before (`a: b: c`): how logs show
/// an error, whose own text names only what failed at its level.
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}

/// Why the state store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The write's condition failed: someone else changed or created the record first.
    #[error("conditional write lost: the record changed since it was read")]
    Conflict,
    /// The store could not be reached or failed; the caller may retry.
    #[error("state store unavailable")]
    Unavailable(#[source] Cause),
    /// A record could not be decoded.
    #[error("state store record is corrupt")]
    Corrupt(#[source] Cause),
    /// A record is larger than the store takes: no retry will write it.
    #[error("state store record too large: {0}")]
    TooLarge(String),
    /// A listing's cursor is not one the store gave.
    #[error("'{0}' is not a cursor from an earlier page")]
    InvalidCursor(String),
}

/// A page of tasks.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskPage {
    /// The tasks: oldest first, but for the tasks in flight on DynamoDB (in the
    /// order of their leases, shard after shard).
    pub tasks: Vec<Task>,
    /// Where the next page starts, if there is one.
    pub next: Option<String>,
    /// The cursor after each task, in their order: a page cut after its `k`-th task
    /// (to fit an answer) goes on from `after[k - 1]`, with nothing read again.
    pub after: Vec<String>,
}

impl TaskPage {
    /// A page of tasks listed by creation time, then id, each with the cursor after
    /// it ([`TaskPage::cursor_after`]).
    #[must_use]
    pub fn by_creation(tasks: Vec<Task>, next: Option<String>) -> Self {
        let after = tasks.iter().map(Self::cursor_after).collect();
        Self { tasks, next, after }
    }

    /// The cursor after `task` in a listing ordered by creation time, then id:
    /// `<created at, 15 digits>.<id>`, which sorts as they do, and which a client can
    /// put in a URL as it is (digits, `.` and an id's characters need no escaping).
    #[must_use]
    pub fn cursor_after(task: &Task) -> String {
        format!("{:015}.{}", task.created_at.0, task.id)
    }

    /// The creation time and id a cursor of [`TaskPage::cursor_after`] names.
    ///
    /// # Errors
    /// [`StoreError::InvalidCursor`] when it is not such a cursor: its id checked as
    /// a task's, so that no text a store would refuse as a key bound (DynamoDB's, over
    /// 1 KB) reaches it.
    pub fn parse_cursor(cursor: &str) -> Result<(i64, &str), StoreError> {
        cursor
            .split_once('.')
            .filter(|(_, id)| TaskId::parse(*id).is_ok())
            .and_then(|(created, id)| Some((created.parse().ok()?, id)))
            .ok_or_else(|| StoreError::InvalidCursor(cursor.to_owned()))
    }
}

/// The bytes of the key that seals owners' listing cursors ([`StateStore::cursor_key`]).
pub type CursorKey = [u8; 32];

/// An entry of a store's lease index: where a pass over the expired leases has read
/// to in one shard of it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LeaseKey {
    /// The end of the lease as the index sorts it (on DynamoDB, the end of its bucket).
    pub expires: i64,
    /// The task, which orders the leases that end together.
    pub task: TaskId,
}

/// How far a pass over the expired leases has read one shard of the lease index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardProgress {
    /// Not read yet.
    Unread,
    /// Read up to this entry, which it took.
    After(LeaseKey),
    /// Read to its last lease expired by the pass's time.
    Done,
}

/// Where a pass over the expired leases goes on: how far it has read each shard of
/// the store's lease index (DynamoDB's `LEASE_SHARDS`; the other stores have one).
/// The default starts a pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpiredCursor(Vec<ShardProgress>);

impl ExpiredCursor {
    /// The cursor of a store with one shard, read up to `key`.
    #[must_use]
    pub fn after(key: LeaseKey) -> Self {
        Self(vec![ShardProgress::After(key)])
    }

    /// How far shard `shard` has been read.
    #[must_use]
    pub fn progress(&self, shard: usize) -> &ShardProgress {
        const UNREAD: &ShardProgress = &ShardProgress::Unread;
        self.0.get(shard).unwrap_or(UNREAD)
    }

    /// Records how far shard `shard` has been read.
    pub fn advance(&mut self, shard: usize, progress: ShardProgress) {
        if self.0.len() <= shard {
            self.0.resize(shard + 1, ShardProgress::Unread);
        }
        self.0[shard] = progress;
    }
}

/// A task record this version cannot read, and its version as read: its
/// quarantine holds only if nobody has written it since (a newer version's
/// process, say, during a rolling deployment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The task.
    pub id: TaskId,
    /// Its record's version, when the store could read that much.
    pub version: Option<u64>,
}

/// A page of a pass over the expired leases ([`StateStore::expired`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expired {
    /// The tasks whose lease expired, soonest first.
    pub tasks: Vec<Task>,
    /// Tasks with an expired lease whose records this version cannot read: not a
    /// record at all, or of a shape it does not know (a newer version's, left by a
    /// rollback). Nothing here can recover them, and left in place they would be read
    /// at every pass.
    pub unreadable: Vec<Unreadable>,
    /// Where the pass goes on, or `None` when this was its last page.
    pub next: Option<ExpiredCursor>,
}

/// The durable state store: tasks, their order data, and workflow definitions.
#[async_trait]
pub trait StateStore: Send + Sync {
    /// Writes a new task and its order data in one transaction.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when a task with that id exists.
    async fn create(&self, task: &Task, order: &Order) -> Result<(), StoreError>;

    /// Reads a task.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] or [`StoreError::Corrupt`].
    async fn task(&self, id: &TaskId) -> Result<Option<Task>, StoreError>;

    /// Reads a task with its order data.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] or [`StoreError::Corrupt`].
    async fn task_with_order(&self, id: &TaskId) -> Result<Option<(Task, Order)>, StoreError>;

    /// Reads a task with its order data as a replica has it, perhaps a write or more
    /// behind, or not yet there (DynamoDB's eventually consistent read: half the
    /// price). For decisions whose write is conditional on the version read, so that
    /// a stale read loses its race; whatever else such a read leads to is read again
    /// with [`StateStore::task_with_order`]. Stores whose reads are all consistent
    /// keep this default.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] or [`StoreError::Corrupt`].
    async fn task_with_order_eventually_consistent(
        &self,
        id: &TaskId,
    ) -> Result<Option<(Task, Order)>, StoreError> {
        self.task_with_order(id).await
    }

    /// Replaces a task, on condition that the stored version is `task.version - 1`;
    /// where a decision may come from a task carried in a message rather than read
    /// (DynamoDB's), also that the id still names the same task (`created_at`): an id
    /// used again after its task expired starts its versions again.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when the stored version is another, or the id names
    /// another task.
    async fn update(&self, task: &Task) -> Result<(), StoreError>;

    /// Replaces a task as [`StateStore::update`] does, and its order data, in one
    /// transaction (an edited resubmission).
    ///
    /// # Errors
    /// [`StoreError::Conflict`] as [`StateStore::update`].
    async fn update_with_order(&self, task: &Task, order: &Order) -> Result<(), StoreError>;

    /// Replaces a task as [`StateStore::update`] does and sends the messages its
    /// decision requires. A store that keeps the queues too writes both in one
    /// transaction (a transactional outbox) and returns nothing; the others write the
    /// task and return the messages, for the caller to send (a crash between the two
    /// is covered by the task's lease).
    ///
    /// # Errors
    /// [`StoreError::Conflict`] as [`StateStore::update`]; then nothing is sent.
    async fn update_and_send(
        &self,
        task: &Task,
        outbox: Vec<Outgoing>,
    ) -> Result<Vec<Outgoing>, StoreError> {
        self.update(task).await?;
        Ok(outbox)
    }

    /// A page of a pass over the tasks the supervisor must look at by `now` (whose
    /// [`Task::sweep_at`]: their lease's end, or the moment a long lease comes within
    /// reach of a deadline message, is at or before `now`), from `from` (the default cursor at the pass's start, then each page's
    /// [`Expired::next`]): up to `limit` records, each shard of the lease index read in
    /// the order of its leases from where the pass left it, so that a pass reads each
    /// expired lease once. Reads only live leases, never the whole table. A record
    /// this version cannot read is named among [`Expired::unreadable`] rather than
    /// failing the rest.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn expired(
        &self,
        now: Timestamp,
        limit: usize,
        from: &ExpiredCursor,
    ) -> Result<Expired, StoreError>;

    /// Takes a task record this version cannot read off the leases the supervisor
    /// sweeps, and keeps it, marked, for a person to look at; unless it has been
    /// written since it was read (its version moved), when nothing changes.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn quarantine(&self, record: &Unreadable) -> Result<(), StoreError>;

    /// Tasks in `state` (see [`TaskPage`] for the order), from the cursor `after` of an
    /// earlier page.
    ///
    /// # Errors
    /// [`StoreError::InvalidCursor`], [`StoreError::Unavailable`] or
    /// [`StoreError::Corrupt`].
    async fn list(
        &self,
        state: TaskState,
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError>;

    /// The key that seals owners' listing cursors, one for the whole deployment:
    /// `drawn` (at random, by the caller) when none is kept yet, kept from then on;
    /// else the one kept first. Every process of a deployment gets the same, restart
    /// after restart.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] or [`StoreError::Corrupt`].
    async fn cursor_key(&self, drawn: CursorKey) -> Result<CursorKey, StoreError>;

    /// Keeps a workflow definition for the tasks that start with it.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when that name and version is stored with other content.
    async fn save_workflow(&self, workflow: &Workflow) -> Result<(), StoreError>;

    /// A stored definition's source text.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn load_workflow(&self, name: &str, version: u32) -> Result<Option<String>, StoreError>;

    /// Gate `gate`'s state ([`Gate::default`] for one never written) and the first
    /// `first` calls of its line, in the order of their positions (then their ids).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] or [`StoreError::Corrupt`].
    async fn gate(&self, gate: &str, first: usize) -> Result<(Gate, Vec<Waiter>), StoreError>;

    /// Puts a call in the line of its gate [`Waiter::gate`]; again, in the same place.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn enqueue(&self, waiter: &Waiter) -> Result<(), StoreError>;

    /// Writes gate `name`'s state `gate`, its version one more than the version read
    /// (on condition of that one), and takes `taken` off its line, in one transaction.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when the gate was written since it was read; then
    /// nothing is.
    async fn update_gate(
        &self,
        name: &str,
        gate: &Gate,
        taken: &[Waiter],
    ) -> Result<(), StoreError>;
}

/// Why a queue could not be used.
#[derive(Debug, thiserror::Error)]
#[error("queue {queue} failed")]
pub struct QueueError {
    /// The queue.
    pub queue: String,
    /// What went wrong.
    #[source]
    pub cause: Cause,
}

impl QueueError {
    /// `queue` could not be used, because of `cause`.
    pub fn new(queue: impl ToString, cause: impl Into<Cause>) -> Self {
        Self {
            queue: queue.to_string(),
            cause: cause.into(),
        }
    }
}

/// A message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// The body, JSON.
    pub body: String,
    /// How long it stays invisible (at most 15 minutes).
    pub delay: Duration,
}

impl OutgoingMessage {
    /// A message whose body is `message`'s JSON ([`sas_domain::to_json`]).
    pub fn json(message: &impl serde::Serialize, delay: Duration) -> Self {
        Self {
            body: sas_domain::to_json(message),
            delay,
        }
    }
}

/// A message for a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The queue.
    pub queue: QueueName,
    /// The message.
    pub message: OutgoingMessage,
}

/// Sending to the pattern's queues and to callers' notification queues.
#[async_trait]
pub trait Queues: Send + Sync {
    /// Sends messages to one queue; all are sent or an error is returned (some may
    /// have been sent: receivers tolerate duplicates).
    ///
    /// # Errors
    /// [`QueueError`] when the queue is unknown or unreachable.
    async fn send(&self, queue: &QueueName, messages: &[OutgoingMessage])
    -> Result<(), QueueError>;
}

/// A message a queue gave up on, in its dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The message's id in the dead-letter queue, to redrive it by.
    pub id: String,
    /// Its body.
    pub body: String,
}

/// The dead-letter queues of the pattern's queues, each named by the queue whose
/// messages it keeps: what an operator looks at and sends back.
#[async_trait]
pub trait DeadLetters: Send + Sync {
    /// How many messages the dead-letter queue of `source` holds (approximately, on SQS).
    ///
    /// # Errors
    /// [`QueueError`] when the queue cannot be read.
    async fn count(&self, source: &QueueName) -> Result<u64, QueueError>;

    /// Up to `max` of its messages, left where they are.
    ///
    /// # Errors
    /// [`QueueError`] when the queue cannot be read.
    async fn peek(&self, source: &QueueName, max: usize) -> Result<Vec<DeadLetter>, QueueError>;

    /// Sends messages back to `source`: those named by `ids` wherever they are in the
    /// dead-letter queue, or any when none are named; at most `max` either way.
    /// Returns how many went back. A message sent back and lost before its deletion
    /// from the dead-letter queue is sent twice, which every handler tolerates.
    ///
    /// # Errors
    /// [`QueueError`] when a queue fails.
    async fn redrive(
        &self,
        source: &QueueName,
        ids: Option<&[String]>,
        max: usize,
    ) -> Result<usize, QueueError>;
}

/// Why an alert could not be raised.
#[derive(Debug, thiserror::Error)]
#[error("cannot raise alert")]
pub struct AlertError(#[source] pub Cause);

/// Operator alerts (SNS in AWS).
#[async_trait]
pub trait Alerts: Send + Sync {
    /// Raises an alert.
    ///
    /// # Errors
    /// [`AlertError`] when the alert channel fails.
    async fn raise(&self, alert: &Alert) -> Result<(), AlertError>;
}

/// How a remote call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// May succeed if tried again: timeout, 5xx, 429, connection refused.
    #[error("transient: {0}")]
    Transient(String),
    /// May succeed if tried again, but not sooner than `wait`: the service said so
    /// (a 429 or 503 with Retry-After).
    #[error("transient: {reason}; retry after {} s", wait.as_secs())]
    RetryAfter {
        /// What the service answered.
        reason: String,
        /// How long it asked callers to wait.
        wait: Duration,
    },
    /// Will not succeed if tried again: the service refused the request.
    #[error("permanent: {0}")]
    Permanent(String),
    /// The service did it (a 2xx), but its answer cannot be kept: larger than a
    /// step's output may be, or not JSON.
    #[error("unusable answer: {0}")]
    Unusable(String),
}

/// One call to a remote service.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteRequest {
    /// The service, by the agent name of the step.
    pub service: String,
    /// The operation's method.
    pub method: Method,
    /// The operation's path.
    pub path: String,
    /// Sent with every attempt; the service applies the effect once per key.
    pub idempotency_key: String,
    /// The body.
    pub payload: Payload,
    /// The longest the call may take.
    pub timeout: Duration,
}

/// Calls remote services.
#[async_trait]
pub trait RemoteCall: Send + Sync {
    /// Makes one call.
    ///
    /// # Errors
    /// [`RemoteError`], telling whether a retry may help.
    async fn call(&self, request: &RemoteRequest) -> Result<Value, RemoteError>;
}

/// Why a credential could not be had: its text names it (a secret by its reference),
/// never a value.
#[derive(Debug, thiserror::Error)]
#[error("{what} could not be had")]
pub struct CredentialError {
    /// Which: `secretsmanager:prod/key`, `SigV4 for execute-api`...
    pub what: String,
    /// What went wrong.
    #[source]
    pub cause: Cause,
}

impl CredentialError {
    /// `what` could not be had, because of `cause`.
    pub fn new(what: impl ToString, cause: impl Into<Cause>) -> Self {
        Self {
            what: what.to_string(),
            cause: cause.into(),
        }
    }
}

/// A request to sign: what SigV4 signs of it.
#[derive(Debug, Clone, Copy)]
pub struct Unsigned<'a> {
    /// GET, POST...
    pub method: &'a str,
    /// The whole URL.
    pub url: &'a str,
    /// The headers to sign beside `host`.
    pub headers: &'a [(&'a str, &'a str)],
    /// The body.
    pub body: &'a [u8],
}

/// The remote services' credentials: secrets, and signatures made with the process's
/// own identity.
#[async_trait]
pub trait Credentials: Send + Sync {
    /// The secret's current value.
    ///
    /// # Errors
    /// [`CredentialError`] when it cannot be read.
    async fn secret(&self, secret: &SecretRef) -> Result<String, CredentialError>;

    /// The headers that sign `request` with SigV4 as `signing` says.
    ///
    /// # Errors
    /// [`CredentialError`] when there is no identity to sign with.
    async fn sign(
        &self,
        signing: &SigV4,
        request: Unsigned<'_>,
    ) -> Result<Vec<(String, String)>, CredentialError>;
}

/// A message received from a queue, to delete once handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The message's id.
    pub id: String,
    /// The body.
    pub body: String,
    /// Times the message has been received, this time included.
    pub receive_count: u32,
    /// Deletes this receipt of the message.
    pub receipt: String,
}

/// Receiving from queues, as Lambda's event-source mappings do in AWS (and the
/// local process and the tests do themselves).
#[async_trait]
pub trait Consumer: Send + Sync {
    /// Receives up to `max` messages (at most 10), waiting up to `wait` for the first.
    /// A received message stays invisible for the queue's visibility timeout; one
    /// received more than the queue's maxReceiveCount goes to its dead-letter queue.
    ///
    /// # Errors
    /// [`QueueError`] when the queue is unknown or unreachable.
    async fn receive(
        &self,
        queue: &QueueName,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError>;

    /// Deletes a received message.
    ///
    /// # Errors
    /// [`QueueError`] when the queue is unreachable.
    async fn delete(&self, queue: &QueueName, receipt: &str) -> Result<(), QueueError>;
}

/// What a metric's values measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Things that happened, summed.
    Count,
    /// Times, in milliseconds.
    Milliseconds,
}

impl Unit {
    /// Its name in CloudWatch.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Count => "Count",
            Self::Milliseconds => "Milliseconds",
        }
    }
}

/// Counters and times, for dashboards and alarms (CloudWatch metrics in AWS).
pub trait Metrics: Send + Sync {
    /// Records `value`, in `unit`, of the metric `name`, with one dimension.
    fn put(&self, name: &'static str, dimension: (&'static str, &str), value: u64, unit: Unit);

    /// Adds `value` to the counter `name`, with one dimension.
    fn count(&self, name: &'static str, dimension: (&'static str, &str), value: u64) {
        self.put(name, dimension, value, Unit::Count);
    }

    /// Records a time of the metric `name`, with one dimension.
    fn time(&self, name: &'static str, dimension: (&'static str, &str), time: Duration) {
        let millis = u64::try_from(time.as_millis()).unwrap_or(u64::MAX);
        self.put(name, dimension, millis, Unit::Milliseconds);
    }
}

/// Metrics that go nowhere, where nobody reads them.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoMetrics;

impl Metrics for NoMetrics {
    fn put(&self, _: &'static str, _: (&'static str, &str), _: u64, _: Unit) {}
}
