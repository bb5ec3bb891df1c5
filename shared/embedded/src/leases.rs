//! The leases the supervisor sweeps ([`LeaseIndex`]), in memory, in the order it
//! sweeps them.
//!
//! A task's lease moves at every step. Kept in an index of the table, each step's
//! commit rewrote two of its pages (the old entry's and the new one's): a commit
//! wrote half its WAL for it. Here a step's write leaves the table's indexes alone:
//! the lease is a column no index holds. The order is rebuilt at the start from the
//! tasks in flight (through the state index) and the ended tasks that keep a lease
//! (flagged `leased`, under a partial index), and kept from then on by the writes of
//! this process, the only one that writes the database, once each is committed.

use std::collections::BTreeSet;
use std::ops::Bound::{Excluded, Unbounded};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use foldhash::HashMap;
use rusqlite::{Connection, OptionalExtension, params};
use sas_core::ports::{
    Expired, ExpiredCursor, LeaseIndex, LeaseKey, ShardProgress, StoreError, Unreadable,
};
use sas_domain::ids::TaskId;
use sas_domain::task::TaskState;
use sas_domain::time::Timestamp;

use crate::Embedded;
use crate::schema::{Stored, execute, query_row, unavailable};

/// The tasks that have a lease, in the order of its end, and each one's.
#[derive(Default)]
pub(crate) struct Leases(Mutex<Order>);

#[derive(Default)]
struct Order {
    /// Keyed by the tasks' ids as the tasks hold them, shared: a write copies none.
    by_end: BTreeSet<(i64, TaskId)>,
    of_task: HashMap<TaskId, i64>,
}

impl Leases {
    fn order(&self) -> std::sync::MutexGuard<'_, Order> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the committed leases of a database: those of the tasks in flight,
    /// through the state index, and of the ended tasks flagged `leased`.
    pub(crate) fn load(c: &Connection) -> Result<Self, StoreError> {
        let leases = Self::default();
        let read = |sql: &str, parameters: &[&dyn rusqlite::ToSql]| {
            let mut select = c.prepare_cached(sql).map_err(unavailable)?;
            let rows = select
                .query_map(parameters, |row| Ok((row.get(0)?, row.get(1)?)))
                .map_err(unavailable)?;
            for row in rows {
                let (id, end): (String, Option<i64>) = row.map_err(unavailable)?;
                // A row whose id no task could have is left off the sweep, not the
                // store's opening failed for it.
                match TaskId::parse(id) {
                    Ok(id) => leases.set(&id, end),
                    Err(error) => {
                        tracing::error!(%error, "a task's id this version cannot read: its lease is not swept")
                    }
                }
            }
            Ok::<_, StoreError>(())
        };
        for state in TaskState::ALL.into_iter().filter(|s| !s.is_final()) {
            read(
                "SELECT id, lease_expires FROM tasks WHERE state = ?1",
                &[&state.as_str()],
            )?;
        }
        read(
            "SELECT id, lease_expires FROM tasks WHERE leased IS NOT NULL",
            &[],
        )?;
        Ok(leases)
    }

    /// Keeps a task's lease as committed: its end, or none.
    pub(crate) fn set(&self, id: &TaskId, end: Option<i64>) {
        let mut order = self.order();
        let Order { by_end, of_task } = &mut *order;
        let before = match end {
            Some(end) => of_task.insert(id.clone(), end),
            None => of_task.remove(id),
        };
        if let Some(before) = before {
            by_end.remove(&(before, id.clone()));
        }
        if let Some(end) = end {
            by_end.insert((end, id.clone()));
        }
    }

    /// Up to `limit` leases ended by `now`, after the lease `after` in their order
    /// (`None`: from the first).
    pub(crate) fn ended(
        &self,
        now: i64,
        after: Option<(i64, TaskId)>,
        limit: usize,
    ) -> Vec<(i64, TaskId)> {
        let from = after.map_or(Unbounded, Excluded);
        self.order()
            .by_end
            .range((from, Unbounded))
            .take_while(|(end, _)| *end <= now)
            .take(limit)
            .cloned()
            .collect()
    }
}

/// Gives the tasks of a database written before the leases were kept in memory
/// their `leased` flag, and drops the lease index they had, in one transaction;
/// then makes sure the flag's index is there.
pub(crate) fn flag_leases(c: &Connection) -> Result<(), StoreError> {
    let flagged: bool = query_row(
        c,
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info('tasks') WHERE name = 'leased')",
        [],
        |row| row.get(0),
    )
    .map_err(unavailable)?;
    if !flagged {
        // The ended states, as `tasks::leased` tells them: `TaskState::is_final`.
        let ended = TaskState::ALL
            .into_iter()
            .filter(|s| s.is_final())
            .map(|s| format!("'{}'", s.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        c.execute_batch(&format!(
            "BEGIN IMMEDIATE;
             ALTER TABLE tasks ADD COLUMN leased INTEGER;
             UPDATE tasks SET leased = 1
                 WHERE lease_expires IS NOT NULL AND state IN ({ended});
             COMMIT;"
        ))
        .map_err(unavailable)?;
    }
    c.execute_batch(
        "DROP INDEX IF EXISTS tasks_lease;
         CREATE INDEX IF NOT EXISTS tasks_leased ON tasks(id) WHERE leased IS NOT NULL;",
    )
    .map_err(unavailable)
}

#[async_trait]
impl LeaseIndex for Embedded {
    async fn expired(
        &self,
        now: Timestamp,
        limit: usize,
        from: &ExpiredCursor,
    ) -> Result<Expired, StoreError> {
        let after = match from.progress(0) {
            ShardProgress::Unread => None,
            ShardProgress::After(key) => Some((key.expires, key.task.clone())),
            ShardProgress::Done => return Ok(Expired::default()),
        };
        let ended = self.leases.ended(now.0, after, limit);
        let page_is_full = ended.len() == limit;
        self.read(move |c| {
            let mut expired = Expired::default();
            let mut last = None;
            for (end, id) in ended {
                last = Some(LeaseKey {
                    expires: end,
                    task: id.clone(),
                });
                // Read as committed now: a lease moved since, or given up, is not
                // expired any more.
                let row: Option<(Option<i64>, Stored, i64)> = query_row(
                    c,
                    "SELECT lease_expires, record, version FROM tasks WHERE id = ?1",
                    [id.as_str()],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )
                .optional()
                .map_err(unavailable)?;
                let Some((Some(lease), record, version)) = row else {
                    continue;
                };
                if lease > now.0 {
                    continue;
                }
                match record.decode() {
                    Ok(task) => expired.tasks.push(task),
                    // Garbled, or of a shape this version does not know.
                    Err(error) => {
                        tracing::error!(task_id = %id, %error, "a task record this version cannot read");
                        expired.unreadable.push(Unreadable {
                            id,
                            version: u64::try_from(version).ok(),
                        });
                    }
                }
            }
            // A page short of the limit is the last.
            expired.next = last.filter(|_| page_is_full).map(ExpiredCursor::after);
            Ok(expired)
        })
        .await
    }

    async fn quarantine(&self, record: &Unreadable) -> Result<(), StoreError> {
        let id = record.id.to_string();
        let version = record.version.and_then(|v| i64::try_from(v).ok());
        let (leases, quarantined) = (Arc::clone(&self.leases), record.id.clone());
        let work = move |c: &Connection| {
            execute(
                c,
                "UPDATE tasks SET lease_expires = NULL, leased = NULL
                     WHERE id = ?1 AND version IS ?2",
                params![id, version],
            )
            .map_err(unavailable)
        };
        // Off the sweep once committed; unless written since it was read, when its
        // lease is its writer's.
        self.write_then(work, move |updated| {
            if *updated == 1 {
                leases.set(&quarantined, None);
            }
        })
        .await
        .map(drop)
    }
}
