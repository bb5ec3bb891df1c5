//! Tasks by their search attributes ([`sas_domain::workflow::Attribute`]): a row per
//! attribute of a task in `task_attributes`, written in the transaction that writes
//! its record, and read in the order of the tasks' creation.

use rusqlite::{Connection, params};

use sas_core::ports::StoreError;
use sas_domain::task::Task;
use sas_domain::workflow::attribute_text;

use crate::schema::{execute, unavailable};

/// What a task's write does to its rows.
pub(crate) struct AttributeRows {
    created_at: i64,
    rows: Vec<(String, String)>,
}

impl AttributeRows {
    /// The rows of `task`: none for a task whose workflow declares no attribute,
    /// which costs no statement (its record is what a search checks last, so no
    /// row left from an earlier write misleads it).
    pub(crate) fn of(task: &Task) -> Self {
        Self {
            created_at: task.created_at.0,
            rows: (task.attributes.iter())
                .map(|(name, value)| (name.clone(), attribute_text(value)))
                .collect(),
        }
    }

    /// None: the write leaves the rows its version before wrote, with the same
    /// attributes.
    pub(crate) fn unchanged() -> Self {
        Self {
            created_at: 0,
            rows: Vec::new(),
        }
    }

    /// Writes them for the task `id`, in the transaction of its record.
    pub(crate) fn write(&self, c: &Connection, id: &str) -> Result<(), StoreError> {
        if self.rows.is_empty() {
            return Ok(());
        }
        execute(c, "DELETE FROM task_attributes WHERE task_id = ?1", [id]).map_err(unavailable)?;
        for (name, value) in &self.rows {
            execute(
                c,
                "INSERT OR IGNORE INTO task_attributes (name, value, created_at, task_id)
                     VALUES (?1, ?2, ?3, ?4)",
                params![name, value, self.created_at, id],
            )
            .map_err(unavailable)?;
        }
        Ok(())
    }
}

/// The tasks whose attribute `?1` is `?2`, by creation then id, from a cursor: up to
/// `?5` records.
pub(crate) const BY_ATTRIBUTE: &str = "SELECT t.record FROM task_attributes a
     JOIN tasks t ON t.id = a.task_id WHERE a.name = ?1 AND a.value = ?2
     AND (a.created_at, a.task_id) > (?3, ?4) ORDER BY a.created_at, a.task_id LIMIT ?5";
