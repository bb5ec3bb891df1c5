//! The leases the supervisor sweeps, in memory, in the order it sweeps them.
//!
//! A task's lease moves at every step. Kept in an index of the table, each step's
//! commit rewrote two of its pages (the old entry's and the new one's): a commit
//! wrote half its WAL for it. Here a step's write leaves the table's indexes alone:
//! the lease is a column no index holds. The order is rebuilt at the start from the
//! tasks in flight (through the state index) and the ended tasks that keep a lease
//! (flagged `leased`, under a partial index), and kept from then on by the writes of
//! this process, the only one that writes the database, once each is committed.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound::{Excluded, Unbounded};
use std::sync::{Mutex, PoisonError};

use rusqlite::Connection;
use sas_core::ports::StoreError;
use sas_domain::task::TaskState;

use crate::schema::unavailable;
use crate::writer::query_row;

/// The tasks that have a lease, in the order of its end, and each one's.
#[derive(Default)]
pub(crate) struct Leases(Mutex<Order>);

#[derive(Default)]
struct Order {
    by_end: BTreeSet<(i64, String)>,
    of_task: HashMap<String, i64>,
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
                leases.set(&id, end);
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
    pub(crate) fn set(&self, id: &str, end: Option<i64>) {
        let mut order = self.order();
        let Order { by_end, of_task } = &mut *order;
        let before = match end {
            Some(end) => of_task.insert(id.to_owned(), end),
            None => of_task.remove(id),
        };
        if let Some(before) = before {
            by_end.remove(&(before, id.to_owned()));
        }
        if let Some(end) = end {
            by_end.insert((end, id.to_owned()));
        }
    }

    /// Up to `limit` leases ended by `now`, after the lease `after` in their order.
    pub(crate) fn ended(
        &self,
        now: i64,
        after: &(i64, String),
        limit: usize,
    ) -> Vec<(i64, String)> {
        self.order()
            .by_end
            .range((Excluded(after.clone()), Unbounded))
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
        // The ended states, as `store::leased` tells them: `TaskState::is_final`.
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
