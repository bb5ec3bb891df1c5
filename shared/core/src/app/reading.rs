//! Reading tasks: one, a wait for its end, and a caller's or an operator's listing.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::App;
use super::cursors::Seal;
use crate::ports::{HistoryPage, StoreError, TaskPage};
use sas_domain::ids::{Owner, TaskId};
use sas_domain::machine::history::HistoryEvent;
use sas_domain::task::{Order, Task, TaskState};
use sas_domain::time::Timestamp;

/// The most pages of the store one listing page kept to an owner's tasks (or to a
/// predicate's) reads.
pub const OWNED_LISTING_READS: usize = 5;

/// The most tasks one listing page kept to an owner's tasks (or to a predicate's)
/// reads from the store, all its pages together: the store lists every owner's tasks
/// by state, so a caller with few among many would otherwise have each request read
/// five pages of others'.
pub const OWNED_LISTING_TASKS: usize = 200;

/// How soon a wait for a task's end first reads it again when another process may
/// finish it (a Lambda function waits on tasks the scheduler function finishes);
/// each read after waits twice as long, up to [`MAX_WAIT_POLL`].
const WAIT_POLL: Duration = Duration::from_millis(250);

/// The longest a wait for a task's end goes without reading it again.
const MAX_WAIT_POLL: Duration = Duration::from_secs(2);

/// The most waits for a task's end one process holds at once; a request beyond them
/// is answered at once, with the task as it is. A wait costs a parked future and,
/// after its first few seconds, a read every [`MAX_WAIT_POLL`]; past the 64 this once
/// was, 128 clients that wait for each task's end ran a third as many tasks a second
/// as 64, asking again at once.
pub(super) const MAX_WAITS: usize = 1_024;

/// The most buffered submissions a process remembers having accepted, and for how
/// long (longer than a submission stays in the ingest queue is of no use to a wait).
const MAX_ACCEPTED: usize = 200_000;
const ACCEPTED_MEMORY: Duration = Duration::from_secs(60);

impl App {
    /// A task's state.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn task(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        self.tasks.task(id).await
    }

    /// The tasks of `ids` that exist, in that order, read at once.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn tasks(&self, ids: Vec<TaskId>) -> Result<Vec<Task>, StoreError> {
        let reads = ids.iter().map(|id| self.tasks.task(id));
        let found = futures_util::future::try_join_all(reads).await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// A task's state with its order data.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn task_with_order(&self, id: &TaskId) -> Result<Option<(Task, Order)>, StoreError> {
        self.tasks.task_with_order(id).await
    }

    /// [`App::task_with_order`] as the store keeps it: each value kept apart as its
    /// reference ([`sas_domain::payload`]), none of them read.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn task_with_order_as_stored(
        &self,
        id: &TaskId,
    ) -> Result<Option<(Task, Order)>, StoreError> {
        self.store.task_with_order(id).await
    }

    /// A page of the history of the execution that is task `id` (a state machine's).
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn execution_history(
        &self,
        id: &TaskId,
        page: HistoryPage,
    ) -> Result<Vec<HistoryEvent>, StoreError> {
        self.store.history(id, page).await
    }

    /// A task's state once it is final, or when `wait` has passed, whichever is first.
    /// It reads the task again after [`WAIT_POLL`], then twice as long each time, up
    /// to [`MAX_WAIT_POLL`]; an unknown id is answered at once (but for a buffered
    /// submission this process accepted lately, which may be on its way), and so are a
    /// task that will not move before `wait` ends ([`Task::idle_until`]) and every
    /// request beyond the [`MAX_WAITS`] this process holds.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn wait_final(
        &self,
        id: &TaskId,
        wait: Duration,
    ) -> Result<Option<Task>, StoreError> {
        let Ok(_permit) = self.waits.try_acquire() else {
            return self.tasks.task(id).await;
        };
        let deadline = tokio::time::Instant::now() + wait;
        let waker = {
            let mut finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(finished.entry(id.clone()).or_default())
        };
        let mut poll = WAIT_POLL;
        let result = loop {
            let notified = waker.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let task = self.tasks.task(id).await?;
            let now = tokio::time::Instant::now();
            // In buffered ingestion a task this process accepted may be on its way. A
            // task that will not move before the wait ends (to start later, paused) is
            // answered at once, not held for: on Lambda the wait holds an invocation.
            let waiting = match &task {
                Some(task) => {
                    let ends_by = self
                        .clock
                        .now()
                        .plus(deadline.saturating_duration_since(now));
                    !task.state.is_final() && task.idle_until().is_none_or(|at| at <= ends_by)
                }
                None => self.accepted_here(id),
            };
            if !waiting || now >= deadline {
                break task;
            }
            let _ = tokio::time::timeout((deadline - now).min(poll), notified).await;
            poll = (poll * 2).min(MAX_WAIT_POLL);
        };
        let mut finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
        if Arc::strong_count(&waker) <= 2 {
            finished.remove(id);
        }
        Ok(result)
    }

    /// Remembers that this process accepted a buffered submission for `id` at `at`,
    /// forgetting those accepted long enough ago.
    pub(super) fn remember_accepted(&self, id: &TaskId, at: Timestamp) {
        let mut accepted = self.accepted.lock().unwrap_or_else(PoisonError::into_inner);
        if accepted.len() >= MAX_ACCEPTED {
            let now = self.clock.now();
            accepted.retain(|_, since| since.until(now) < ACCEPTED_MEMORY);
        }
        if accepted.len() < MAX_ACCEPTED {
            accepted.insert(id.clone(), at);
        }
    }

    /// Whether this process accepted a buffered submission for `id` lately.
    fn accepted_here(&self, id: &TaskId) -> bool {
        let accepted = self.accepted.lock().unwrap_or_else(PoisonError::into_inner);
        accepted
            .get(id)
            .is_some_and(|at| at.until(self.clock.now()) < ACCEPTED_MEMORY)
    }

    /// Tasks in a state, a page at a time: everyone's, or `owner`'s only, and of
    /// those the ones `wanted` keeps, where it is given.
    ///
    /// The store lists by state, so a page kept to an owner's tasks or to `wanted`'s
    /// is gathered from up to [`OWNED_LISTING_READS`] of its pages and
    /// [`OWNED_LISTING_TASKS`] of its tasks: it may hold fewer than `limit` tasks and
    /// still have a next one. An owner's cursors are sealed
    /// ([`cursors`](super::cursors)): the store's may name others' tasks.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails, or `after` is not a cursor this listing gave.
    pub async fn list<'a>(
        &'a self,
        state: TaskState,
        limit: usize,
        after: Option<&str>,
        owner: Option<&'a Owner>,
        wanted: Option<&(dyn Fn(&Task) -> bool + Sync)>,
    ) -> Result<Listing<'a>, StoreError> {
        self.list_from(Listed::State(state), limit, after, owner, wanted)
            .await
    }

    /// [`App::list`], from `listed`: the listing of a state, or the index of an
    /// attribute's value.
    ///
    /// # Errors
    /// As [`App::list`]'s.
    pub async fn list_from<'a>(
        &'a self,
        listed: Listed<'_>,
        limit: usize,
        after: Option<&str>,
        owner: Option<&'a Owner>,
        wanted: Option<&(dyn Fn(&Task) -> bool + Sync)>,
    ) -> Result<Listing<'a>, StoreError> {
        let page_of = |limit, after: Option<&str>| {
            let after = after.map(str::to_owned);
            async move {
                match listed {
                    Listed::State(state) => self.store.list(state, limit, after.as_deref()).await,
                    Listed::Attribute { name, value, .. } => {
                        (self
                            .store
                            .with_attribute(name, value, limit, after.as_deref()))
                        .await
                    }
                }
            }
        };
        let state = listed.sealed_as();
        let seal = match owner {
            Some(owner) => Some((self.deployment_seal().await?, owner)),
            None if wanted.is_none() => {
                return Ok(Listing {
                    page: page_of(limit, after).await?,
                    sealed_for: None,
                });
            }
            None => None,
        };
        let mut kept = TaskPage {
            tasks: Vec::new(),
            next: match (after, seal) {
                (Some(cursor), Some((seal, owner))) => Some(seal.open(owner, state, cursor)?),
                (after, _) => after.map(str::to_owned),
            },
            after: Vec::new(),
        };
        let mut budget = OWNED_LISTING_TASKS;
        for _ in 0..OWNED_LISTING_READS {
            let ask = (limit - kept.tasks.len()).min(budget);
            if ask == 0 {
                break;
            }
            budget -= ask;
            // A cursor this listing sealed that the store refuses (a format of an
            // earlier version) is refused as the caller sent it: its text names
            // another's task.
            let page =
                page_of(ask, kept.next.as_deref())
                    .await
                    .map_err(|error| match (error, after) {
                        (StoreError::InvalidCursor(_), Some(sent)) => {
                            StoreError::InvalidCursor(sent.to_owned())
                        }
                        (error, _) => error,
                    })?;
            kept.next = page.next;
            let (tasks, after): (Vec<_>, Vec<_>) = page
                .tasks
                .into_iter()
                .zip(page.after)
                .filter(|(task, _)| owner.is_none_or(|owner| task.owner.as_ref() == Some(owner)))
                .filter(|(task, _)| wanted.is_none_or(|wanted| wanted(task)))
                .unzip();
            kept.tasks.extend(tasks);
            kept.after.extend(after);
            if kept.tasks.len() == limit || kept.next.is_none() {
                break;
            }
        }
        Ok(Listing {
            page: kept,
            sealed_for: seal.map(|(seal, owner)| (seal, owner, state)),
        })
    }
}

/// Where a listing reads its tasks from.
#[derive(Debug, Clone, Copy)]
pub enum Listed<'a> {
    /// The store's listing of a state.
    State(TaskState),
    /// The store's index of an attribute's value; an owner's cursors are sealed as
    /// those of the listing of `sealed_as`.
    Attribute {
        /// The attribute.
        name: &'a str,
        /// Its value, as text.
        value: &'a str,
        /// The state its cursors are sealed under.
        sealed_as: TaskState,
    },
}

impl Listed<'_> {
    fn sealed_as(self) -> TaskState {
        match self {
            Self::State(state)
            | Self::Attribute {
                sealed_as: state, ..
            } => state,
        }
    }
}

/// A page of a listing ([`App::list`]), whose cursors are given as its caller goes on
/// from them: an owner's sealed one at a time, where a page holds one for each of its
/// tasks and an answer shows one.
pub struct Listing<'a> {
    page: TaskPage,
    /// The seal, owner and state of an owner's listing.
    sealed_for: Option<(&'a Seal, &'a Owner, TaskState)>,
}

impl Listing<'_> {
    /// The tasks, in the store's order.
    #[must_use]
    pub fn tasks(&self) -> &[Task] {
        &self.page.tasks
    }

    /// Where a page of the first `shown` tasks goes on from, if anywhere: the next
    /// page's start when it shows them all, else the cursor after its last one.
    ///
    /// # Errors
    /// [`StoreError`] when an owner's cursor cannot be sealed.
    pub fn cursor(&self, shown: usize) -> Result<Option<String>, StoreError> {
        let cursor = if shown == self.page.tasks.len() {
            self.page.next.as_ref()
        } else {
            shown
                .checked_sub(1)
                .and_then(|last| self.page.after.get(last))
        };
        match (cursor, self.sealed_for) {
            (Some(cursor), Some((seal, owner, state))) => seal.seal(owner, state, cursor).map(Some),
            (cursor, _) => Ok(cursor.cloned()),
        }
    }
}
