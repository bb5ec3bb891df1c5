//! The state store's listings of tasks by state, page by page.

use async_trait::async_trait;

use sas_domain::ids::TaskId;
use sas_domain::task::{Task, TaskState};

use super::StoreError;

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

/// The tasks in a state, for operators and owners.
#[async_trait]
pub trait TaskListing: Send + Sync {
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

    /// Up to `limit` tasks whose visit of a Task on `activity` no worker has taken,
    /// longest offered first ([`sas_domain::machine::activities::offer`]): an index
    /// written with each task's record, which may lag it on DynamoDB (a worker's take
    /// is a conditional write of the record, which settles it).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] or [`StoreError::Corrupt`].
    async fn offered(&self, activity: &str, limit: usize) -> Result<Vec<TaskId>, StoreError>;

    /// Indexes `task` under its attributes `changed` (name and value as text), before
    /// the write that gives them to its record: an entry whose write is lost, or
    /// whose value the task no longer has, is one a search passes over, as it checks
    /// each task's record. A store that indexes attributes in the transaction of the
    /// record (the embedded one), or not at all, has nothing to do: the default.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn index_attributes(
        &self,
        _task: &Task,
        _changed: &[(String, String)],
    ) -> Result<(), StoreError> {
        Ok(())
    }

    /// Up to `limit` tasks whose search attribute `name` has the value written
    /// `value` ([`attribute_text`]), by creation, from the cursor `after` of an
    /// earlier page (a [`TaskPage`] cursor); a task whose attribute has changed since
    /// it was indexed may be among them (a search checks each task's record).
    ///
    /// [`attribute_text`]: sas_domain::workflow::attribute_text
    ///
    /// # Errors
    /// As [`TaskListing::list`]'s.
    async fn with_attribute(
        &self,
        name: &str,
        value: &str,
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError>;
}

/// The states whose tasks a store lists (Processed tasks are many, and expire).
pub const LISTED: [TaskState; 4] = [
    TaskState::Pending,
    TaskState::Processing,
    TaskState::Compensating,
    TaskState::Error,
];
