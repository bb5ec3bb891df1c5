//! The histories of state machines' executions ([`ExecutionHistory`]): a row per
//! event, written in the transaction that writes its task's record.

use async_trait::async_trait;
use rusqlite::{Connection, params};

use sas_core::ports::{ExecutionHistory, HistoryPage, StoreError};
use sas_domain::ids::TaskId;
use sas_domain::machine::history::HistoryEvent;
use sas_domain::task::Task;

use crate::Embedded;
use crate::schema::{Compressed, decode_rows, unavailable};
use crate::writer::execute;

/// The history events a task's write made, encoded before the writer's turn.
pub(crate) struct EventRows(Vec<(i64, Compressed)>);

impl EventRows {
    pub(crate) fn of(task: &Task) -> Result<Self, StoreError> {
        let events = task
            .machine
            .as_deref()
            .map_or(&[][..], |run| &run.new_events);
        let rows = events
            .iter()
            .map(|event| {
                Ok((
                    i64::try_from(event.id).unwrap_or(i64::MAX),
                    Compressed::json(event)?,
                ))
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(Self(rows))
    }

    /// Writes them for the task `id`, in the transaction of its record: an event
    /// written again (its write tried again) is replaced by itself.
    pub(crate) fn write(&self, c: &Connection, id: &str) -> Result<(), StoreError> {
        for (event_id, event) in &self.0 {
            execute(
                c,
                "INSERT OR REPLACE INTO history (task_id, event_id, event) VALUES (?1, ?2, ?3)",
                params![id, event_id, event],
            )
            .map_err(unavailable)?;
        }
        Ok(())
    }
}

#[async_trait]
impl ExecutionHistory for Embedded {
    async fn history(
        &self,
        task: &TaskId,
        page: HistoryPage,
    ) -> Result<Vec<HistoryEvent>, StoreError> {
        let id = task.to_string();
        let limit = i64::try_from(page.limit).unwrap_or(i64::MAX);
        let after = page
            .after
            .map(|after| i64::try_from(after).unwrap_or(i64::MAX));
        self.read(move |c| match (page.reverse, after) {
            (false, after) => decode_rows(
                c,
                "SELECT event FROM history WHERE task_id = ?1 AND event_id > ?2
                     ORDER BY event_id LIMIT ?3",
                params![id, after.unwrap_or(0), limit],
            ),
            (true, after) => decode_rows(
                c,
                "SELECT event FROM history WHERE task_id = ?1 AND event_id < ?2
                     ORDER BY event_id DESC LIMIT ?3",
                params![id, after.unwrap_or(i64::MAX), limit],
            ),
        })
        .await
    }
}
