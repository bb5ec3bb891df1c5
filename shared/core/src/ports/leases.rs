//! The state store's index of leases: the pass over the expired ones that the
//! supervisor sweeps, and the quarantine of records this version cannot read.

use async_trait::async_trait;

use sas_domain::ids::TaskId;
use sas_domain::task::Task;
use sas_domain::time::Timestamp;

use super::StoreError;

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

/// A page of a pass over the expired leases ([`LeaseIndex::expired`]).
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

/// The tasks' leases, in the order of their ends: what the supervisor sweeps.
#[async_trait]
pub trait LeaseIndex: Send + Sync {
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
}
