//! The histories of state machines' executions ([`ExecutionHistory`]): a row per
//! write of a task that added events, holding those events, in the transaction that
//! writes its task's record.
//!
//! The rows are appended in the order they are written (`seq`), so that a commit
//! adds to the table's last page instead of a page somewhere among every running
//! execution's; what is found by task is the index of `(task_id, last_event)`,
//! whose entries are small. A row an event, kept by `(task_id, event_id)`, put 27
//! rows of 220 bytes each a delivery into pages all over the table: the pages a
//! commit wrote (and read back when they had left the cache) were most of what a
//! state machine's task cost beside a workflow's (BENCHMARKS.md).

use async_trait::async_trait;
use rusqlite::{Connection, params};

use sas_core::ports::{ExecutionHistory, HistoryPage, StoreError};
use sas_domain::ids::TaskId;
use sas_domain::machine::history::HistoryEvent;
use sas_domain::task::Task;

use crate::Embedded;
use crate::schema::{Compressed, Stored, Vocabulary, decode, execute, query_row, unavailable};

/// The history events a task's write made, encoded before the writer's turn: the id
/// of the last, and all of them.
pub(crate) struct EventRows(Option<(i64, Compressed)>);

impl EventRows {
    pub(crate) fn of(task: &Task) -> Result<Self, StoreError> {
        let events = task
            .machine
            .as_deref()
            .map_or(&[][..], |run| &run.new_events);
        let Some(last) = events.last() else {
            return Ok(Self(None));
        };
        let last = i64::try_from(last.id).unwrap_or(i64::MAX);
        Ok(Self(Some((
            last,
            Compressed::json(&events, Vocabulary::StateMachines)?,
        ))))
    }

    /// Writes them for the task `id`, in the transaction of its record: a write
    /// tried again replaces its row with itself.
    pub(crate) fn write(&self, c: &Connection, id: &str) -> Result<(), StoreError> {
        let Some((last, events)) = &self.0 else {
            return Ok(());
        };
        execute(
            c,
            "INSERT OR REPLACE INTO history_writes (task_id, last_event, events) VALUES (?1, ?2, ?3)",
            params![id, last, events],
        )
        .map(drop)
        .map_err(unavailable)
    }
}

/// The events of one row: a JSON array, or one event (a row of the table of an event
/// a row, moved by [`gather_history`]).
fn events_of(row: Stored) -> Result<Vec<HistoryEvent>, StoreError> {
    let text = row.into_text()?;
    if text.trim_start().starts_with('[') {
        decode(&text)
    } else {
        decode(&text).map(|event| vec![event])
    }
}

/// Moves the rows of a database written with a row an event into `history_writes`,
/// each a row of its own, in one transaction.
pub(crate) fn gather_history(c: &Connection) -> Result<(), StoreError> {
    let earlier: bool = query_row(
        c,
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'history')",
        [],
        |row| row.get(0),
    )
    .map_err(unavailable)?;
    if !earlier {
        return Ok(());
    }
    c.execute_batch(
        "BEGIN IMMEDIATE;
         INSERT OR REPLACE INTO history_writes (task_id, last_event, events)
             SELECT task_id, event_id, event FROM history ORDER BY task_id, event_id;
         DROP TABLE history;
         COMMIT;",
    )
    .map_err(unavailable)
}

/// Adds to `page`, until it holds `limit`, the events `keep` takes of the rows `sql`
/// selects (its parameters a task's id and an event's id), in the rows' order, each
/// row's latest first when `latest_first`.
fn read_into(
    c: &Connection,
    sql: &str,
    (id, event): (&str, i64),
    latest_first: bool,
    keep: impl Fn(u64) -> bool,
    page: &mut Vec<HistoryEvent>,
    limit: usize,
) -> Result<(), StoreError> {
    let mut select = c.prepare_cached(sql).map_err(unavailable)?;
    let mut rows = select.query(params![id, event]).map_err(unavailable)?;
    while page.len() < limit {
        let Some(row) = rows.next().map_err(unavailable)? else {
            break;
        };
        let mut events = events_of(row.get(0).map_err(unavailable)?)?;
        if latest_first {
            events.reverse();
        }
        let room = limit - page.len();
        page.extend(events.into_iter().filter(|e| keep(e.id)).take(room));
    }
    Ok(())
}

#[async_trait]
impl ExecutionHistory for Embedded {
    async fn history(
        &self,
        task: &TaskId,
        page: HistoryPage,
    ) -> Result<Vec<HistoryEvent>, StoreError> {
        let id = task.to_string();
        let limit = page.limit;
        self.read(move |c| {
            let mut events = Vec::with_capacity(limit.min(1000));
            if page.reverse {
                let before = page.after.unwrap_or(u64::MAX);
                let at = (id.as_str(), i64::try_from(before).unwrap_or(i64::MAX));
                // The first row at or after `before` may hold events before it too;
                // then the rows before it, latest first.
                for rows in [
                    "SELECT events FROM history_writes WHERE task_id = ?1 AND last_event >= ?2
                         ORDER BY last_event LIMIT 1",
                    "SELECT events FROM history_writes WHERE task_id = ?1 AND last_event < ?2
                         ORDER BY last_event DESC",
                ] {
                    let keep = |event| event < before;
                    read_into(c, rows, at, true, keep, &mut events, limit)?;
                }
            } else {
                let after = page.after.unwrap_or(0);
                read_into(
                    c,
                    "SELECT events FROM history_writes WHERE task_id = ?1 AND last_event > ?2
                         ORDER BY last_event",
                    (id.as_str(), i64::try_from(after).unwrap_or(i64::MAX)),
                    false,
                    |event| event > after,
                    &mut events,
                    limit,
                )?;
            }
            Ok(events)
        })
        .await
    }
}
