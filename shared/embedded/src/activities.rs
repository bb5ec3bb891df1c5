//! The visits of Tasks on activities that no worker has taken yet, by activity
//! ([`sas_domain::machine::activities::offer`]): a row each in `activity_offers`,
//! written in the transaction that writes its task's record, so that no offer is
//! lost or kept past its record.

use rusqlite::{Connection, params};

use sas_core::ports::StoreError;
use sas_domain::machine::activities;
use sas_domain::task::Task;

use crate::schema::{execute, unavailable};

/// What a task's write does to its row in `activity_offers`.
pub(crate) enum OfferRow {
    /// Nothing: a task of a workflow, which never offers a visit, costs no statement.
    Untouched,
    /// Its row, if it has one, is deleted: the visit was taken, or has ended.
    Withdrawn,
    /// Its row says it offers a visit on `activity` since `since`.
    Offered { activity: String, since: i64 },
}

impl OfferRow {
    pub(crate) fn of(task: &Task) -> Self {
        if task.machine.is_none() {
            return Self::Untouched;
        }
        match activities::offer(task) {
            Some(offer) => Self::Offered {
                activity: offer.activity.to_owned(),
                since: offer.since.0,
            },
            None => Self::Withdrawn,
        }
    }

    /// Writes it for the task `id`, in the transaction of its record.
    pub(crate) fn write(&self, c: &Connection, id: &str) -> Result<(), StoreError> {
        let written = match self {
            Self::Untouched => return Ok(()),
            Self::Withdrawn => execute(c, "DELETE FROM activity_offers WHERE task_id = ?1", [id]),
            Self::Offered { activity, since } => execute(
                c,
                "INSERT OR REPLACE INTO activity_offers (task_id, activity, since)
                     VALUES (?1, ?2, ?3)",
                params![id, activity, since],
            ),
        };
        written.map(drop).map_err(unavailable)
    }
}

/// Up to `limit` ids of the tasks offering a visit on `activity`, longest offered
/// first.
pub(crate) fn offered(
    c: &Connection,
    activity: &str,
    limit: usize,
) -> Result<Vec<String>, StoreError> {
    let mut select = c
        .prepare_cached(
            "SELECT task_id FROM activity_offers WHERE activity = ?1
                 ORDER BY since, task_id LIMIT ?2",
        )
        .map_err(unavailable)?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = select
        .query_map(params![activity, limit], |row| row.get(0))
        .map_err(unavailable)?;
    rows.collect::<Result<_, _>>().map_err(unavailable)
}
