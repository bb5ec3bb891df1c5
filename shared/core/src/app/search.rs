//! Tasks found by what they are about: their search attributes, workflow and
//! version, state, creation time and error text ([`Search`]), a page at a time,
//! through the store's index of attributes (or its listing of a state), each task's
//! record checked against every condition.

use sas_domain::task::{Task, TaskState};
use sas_domain::time::Timestamp;
use sas_domain::workflow::attribute_text;

use super::App;
use crate::ports::StoreError;

/// The most index entries one page of a search examines, all its reads together: a
/// search whose first condition matches many tasks and the others few answers a page
/// short, with where to go on.
pub const SEARCH_EXAMINES: usize = 1_000;

/// What a search asks: every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Search {
    /// Search attributes' values, by name, as text ([`attribute_text`]): the first is
    /// looked up in the store's index, the others checked on each task found.
    pub attributes: Vec<(String, String)>,
    /// The workflow.
    pub workflow: Option<String>,
    /// Its version.
    pub version: Option<u32>,
    /// The state; looked up in the store's listing where no attribute is given.
    pub state: Option<TaskState>,
    /// Created at or after.
    pub created_from: Option<Timestamp>,
    /// Created before.
    pub created_before: Option<Timestamp>,
    /// Text its error holds, in any case.
    pub error: Option<String>,
}

/// Why a search was not made.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// It names neither an attribute nor a state: it would read every task.
    #[error("a search names an attribute or a state")]
    Unbounded,
    /// The store failed, or the cursor is not one it gave.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A page of a search.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// The tasks found, in the index's order.
    pub tasks: Vec<Task>,
    /// The cursor after each task: a page cut after its `k`-th goes on from
    /// `after[k - 1]`.
    pub after: Vec<String>,
    /// Where the next page starts, if the index has more.
    pub next: Option<String>,
    /// The index entries examined for this page.
    pub examined: usize,
}

impl Search {
    /// Whether `task` meets every condition.
    #[must_use]
    pub fn matches(&self, task: &Task) -> bool {
        let error = |text: &str| {
            let text = text.to_lowercase();
            (task.error.as_deref()).is_some_and(|e| e.to_lowercase().contains(&text))
        };
        has_attributes(task, &self.attributes)
            && self
                .workflow
                .as_ref()
                .is_none_or(|w| **w == *task.workflow.name)
            && self.version.is_none_or(|v| v == task.workflow.version)
            && self.state.is_none_or(|s| s == task.state)
            && self.created_from.is_none_or(|from| task.created_at >= from)
            && self
                .created_before
                .is_none_or(|before| task.created_at < before)
            && self.error.as_deref().is_none_or(error)
    }
}

/// Whether `task`'s search attributes have each of `values` (by name, as text).
pub(super) fn has_attributes(task: &Task, values: &[(String, String)]) -> bool {
    (values.iter()).all(|(name, value)| {
        (task.attributes.get(name)).is_some_and(|v| attribute_text(v) == *value)
    })
}

/// The attributes of `task` that `before` (its record's, as last written) did not
/// have with those values, as text.
fn changed(before: Option<&Task>, task: &Task) -> Vec<(String, String)> {
    (task.attributes.iter())
        .filter(|(name, value)| before.and_then(|b| b.attributes.get(*name)) != Some(value))
        .map(|(name, value)| (name.clone(), attribute_text(value)))
        .collect()
}

impl App {
    /// Indexes the attributes `task` has that `before` did not, in the store's index,
    /// ahead of the write of its record ([`TaskListing::index_attributes`]).
    ///
    /// # Errors
    /// The store's failure: the record is then not written either.
    ///
    /// [`TaskListing::index_attributes`]: crate::ports::TaskListing::index_attributes
    pub(super) async fn index_attributes(
        &self,
        before: Option<&Task>,
        task: &Task,
    ) -> Result<(), StoreError> {
        let changed = changed(before, task);
        if changed.is_empty() {
            return Ok(());
        }
        self.store.index_attributes(task, &changed).await
    }

    /// Up to `limit` tasks that meet every condition of `search`, from the cursor
    /// `after` of an earlier page, examining at most [`SEARCH_EXAMINES`] entries.
    ///
    /// # Errors
    /// [`SearchError::Unbounded`], or the store's failure.
    pub async fn search(
        &self,
        search: &Search,
        limit: usize,
        after: Option<&str>,
    ) -> Result<Found, SearchError> {
        let mut found = Found {
            tasks: Vec::new(),
            after: Vec::new(),
            next: after.map(str::to_owned),
            examined: 0,
        };
        let batch = limit.clamp(1, SEARCH_EXAMINES);
        loop {
            let cursor = found.next.take();
            let page = match (search.attributes.first(), search.state) {
                (Some((name, value)), _) => {
                    (self.store)
                        .with_attribute(name, value, batch, cursor.as_deref())
                        .await?
                }
                (None, Some(state)) => self.store.list(state, batch, cursor.as_deref()).await?,
                (None, None) => return Err(SearchError::Unbounded),
            };
            found.next = page.next;
            for (task, after) in page.tasks.into_iter().zip(page.after) {
                found.examined += 1;
                if search.matches(&task) {
                    found.tasks.push(task);
                    found.after.push(after);
                    if found.tasks.len() == limit {
                        found.next = found.after.last().cloned();
                        return Ok(found);
                    }
                }
            }
            if found.next.is_none() || found.examined >= SEARCH_EXAMINES {
                return Ok(found);
            }
        }
    }
}
