//! The listings of tasks by state ([`TaskListing`]), through the state index.

use async_trait::async_trait;
use rusqlite::params;

use sas_core::ports::{StoreError, TaskListing, TaskPage};
use sas_domain::ids::TaskId;
use sas_domain::task::{Task, TaskState};

use crate::Embedded;
use crate::activities;
use crate::attributes;
use crate::schema::decode_rows;

/// The tasks by state, by creation then id, from a cursor: up to `fetch` records.
const BY_STATE: &str = "SELECT record FROM tasks WHERE state = ?1 AND ?2 = ?2
     AND (created_at, id) > (?3, ?4) ORDER BY created_at, id LIMIT ?5";

impl Embedded {
    /// A page of up to `limit` tasks of `query` (whose first two parameters are
    /// `keys`, then the cursor's creation time and id, and the rows to fetch), from
    /// the cursor `after`.
    async fn page(
        &self,
        query: &'static str,
        keys: [String; 2],
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        let (after_created, after_id) = match after {
            Some(cursor) => {
                let (created, id) = TaskPage::parse_cursor(cursor)?;
                (created, id.to_owned())
            }
            None => (i64::MIN, String::new()),
        };
        self.read(move |c| {
            let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
            let [first, second] = &keys;
            let mut tasks: Vec<Task> = decode_rows(
                c,
                query,
                params![first, second, after_created, after_id, fetch],
            )?;
            let next = (tasks.len() > limit).then(|| {
                tasks.truncate(limit);
                tasks.last().map(TaskPage::cursor_after).unwrap_or_default()
            });
            Ok(TaskPage::by_creation(tasks, next))
        })
        .await
    }
}

#[async_trait]
impl TaskListing for Embedded {
    async fn list(
        &self,
        state: TaskState,
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        let keys = [state.as_str().to_owned(), String::new()];
        self.page(BY_STATE, keys, limit, after).await
    }

    async fn with_attribute(
        &self,
        name: &str,
        value: &str,
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        let keys = [name.to_owned(), value.to_owned()];
        self.page(attributes::BY_ATTRIBUTE, keys, limit, after)
            .await
    }

    async fn offered(&self, activity: &str, limit: usize) -> Result<Vec<TaskId>, StoreError> {
        let activity = activity.to_owned();
        let ids = self
            .read(move |c| activities::offered(c, &activity, limit))
            .await?;
        ids.iter()
            .map(|id| TaskId::parse(id).map_err(|e| StoreError::Corrupt(e.into())))
            .collect()
    }
}
