//! The owner's and operator's actions on tasks: resubmit, cancel, pause and resume,
//! one task or every task a filter matches (bulk actions).

use std::time::Duration;

use tracing::warn;

use crate::ports::{Chain, HistoryPage, StoreError};
use sas_domain::decide::{self, Decision, Move, MovePlan, Refused, Repair, RepairPlan, Resubmit};
use sas_domain::ids::TaskId;
use sas_domain::machine::history::entered_with;
use std::sync::Arc;

use sas_domain::task::{Order, Request, Step, StepState, Task, TaskState, WorkflowRef};
use sas_domain::time::Timestamp;
use sas_domain::workflow::Workflow;

use super::{App, TaskError};

/// Why an action on a task (a resubmission, a cancellation) was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// No such task.
    #[error("no task '{0}'")]
    NotFound(TaskId),
    /// The task's state, or the request, does not allow it.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The task could not be moved on.
    #[error(transparent)]
    Task(#[from] TaskError),
}

impl From<StoreError> for ActionError {
    fn from(error: StoreError) -> Self {
        Self::Task(error.into())
    }
}

/// What a bulk action does to each task it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkAction {
    /// Resubmits it (it must be in Error).
    Resubmit,
    /// Cancels it (it must be running).
    Cancel,
    /// Pauses it (it must be running forward, and not paused).
    Pause,
    /// Resumes it (it must be paused).
    Resume,
}

impl BulkAction {
    /// Whether it takes `task` at all: a pause takes a task not paused, a resume a
    /// paused one, so that a page counts the others as left alone.
    fn applies_to(self, task: &Task) -> bool {
        match self {
            Self::Resubmit | Self::Cancel => true,
            Self::Pause => task.paused.is_none(),
            Self::Resume => task.paused.is_some(),
        }
    }
}

/// Which tasks a bulk action takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// Their state.
    pub state: TaskState,
    /// Their workflow's name, if it matters.
    pub workflow: Option<String>,
    /// Their workflow's version, if it matters.
    pub version: Option<u32>,
    /// Submitted at or after this.
    pub created_after: Option<Timestamp>,
    /// Submitted before this.
    pub created_before: Option<Timestamp>,
    /// With this text in their error.
    pub error_contains: Option<String>,
    /// Stopped at this step: it failed there, or is at work there.
    pub step: Option<String>,
    /// Of this owner (the principal that submitted them).
    pub owner: Option<String>,
    /// With these search attributes' values, by name, as text: the tasks are then
    /// listed from the index of the first, not from their state's listing.
    pub attributes: Vec<(String, String)>,
}

impl Filter {
    /// Whether `task` is one of them.
    #[must_use]
    pub fn matches(&self, task: &Task) -> bool {
        task.state == self.state
            && self
                .workflow
                .as_ref()
                .is_none_or(|w| **w == *task.workflow.name)
            && self.version.is_none_or(|v| v == task.workflow.version)
            && self.created_after.is_none_or(|at| task.created_at >= at)
            && self.created_before.is_none_or(|at| task.created_at < at)
            && self.error_contains.as_ref().is_none_or(|text| {
                task.error
                    .as_ref()
                    .is_some_and(|error| error.contains(text.as_str()))
            })
            && (self.owner.as_ref()).is_none_or(|owner| {
                (task.owner.as_ref()).is_some_and(|o| o.as_str() == owner.as_str())
            })
            && (self.step.as_ref())
                .is_none_or(|name| (task.steps.iter()).any(|s| *s.name == **name && stopped_at(s)))
            && super::search::has_attributes(task, &self.attributes)
    }
}

/// Whether a task stopped at `step`: it failed there, or is at work there.
fn stopped_at(step: &Step) -> bool {
    !step.is_settled()
        && step.state != StepState::Compensated
        && (step.state != StepState::Pending || step.was_sent() || step.waiting.is_some())
}

/// Which page of a bulk action one call takes, and its pace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkPage {
    /// The listing's cursor to start from; `None` for the start.
    pub after: Option<String>,
    /// How many tasks to list.
    pub limit: usize,
    /// How long to wait after each task taken, so as not to flood the remote services.
    pub pace: Duration,
}

/// What one call of a bulk action did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct BulkReport {
    /// Tasks listed in the filter's state.
    pub examined: usize,
    /// Of those, the ones the rest of the filter matched.
    pub matched: usize,
    /// Taken (resubmitted, cancelled, paused or resumed) by this call.
    pub taken: usize,
    /// Taken by this batch already, or no longer in a state the action applies to.
    pub skipped: usize,
    /// Refused for what the action would do to them (a repair that would have a
    /// step act twice, say): see `refusal`.
    pub refused: usize,
    /// Why the first task refused was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// Not taken because the backend failed: run the action again to take them.
    pub failed: usize,
    /// The cursor to continue from (`after`); null once the listing is done.
    pub next: Option<String>,
}

impl App {
    /// An operator (or the owner) restarts a task in Error from its failed step,
    /// with a new input if the resubmission has one ([`decide::resubmit`]).
    ///
    /// # Errors
    /// [`ActionError`] when the task is missing or the resubmission refused.
    pub async fn resubmit(&self, id: &TaskId, resubmit: Resubmit) -> Result<Task, ActionError> {
        self.act(id, |task, workflow, order, now| {
            decide::resubmit(task, workflow, order, resubmit.clone(), now)
        })
        .await
    }

    /// An operator repairs a task: patches its input or its steps' outputs, or names
    /// a step to run it again from ([`decide::repair`]).
    ///
    /// # Errors
    /// [`ActionError`] when the task is missing or the repair refused.
    pub async fn repair(&self, id: &TaskId, repair: Repair) -> Result<Task, ActionError> {
        let repair = self.entered(id, repair).await?;
        self.act(id, |task, workflow, order, now| {
            decide::repair(task, workflow, order, repair.clone(), now)
        })
        .await
    }

    /// What [`App::repair`] would do to each step of task `id`, without doing it.
    ///
    /// # Errors
    /// [`ActionError`] when the task is missing or the repair would be refused.
    pub async fn plan_repair(
        &self,
        id: &TaskId,
        repair: &Repair,
    ) -> Result<RepairPlan, ActionError> {
        let repair = self.entered(id, repair.clone()).await?;
        let (task, order) = (self.tasks.task_with_order(id).await?)
            .ok_or_else(|| ActionError::NotFound(id.clone()))?;
        let workflow = self.workflow(&task.workflow).await?;
        Ok(decide::plan_repair(&task, &workflow, &order, &repair)?)
    }

    /// `repair`, with the input its `from` was last entered with where task `id` is
    /// a state machine's execution: its history's latest entry of that state.
    async fn entered(&self, id: &TaskId, mut repair: Repair) -> Result<Repair, StoreError> {
        const PAGE: usize = 1000;
        let Some(state) = repair
            .from
            .as_deref()
            .filter(|_| repair.entered_with.is_none())
        else {
            return Ok(repair);
        };
        let mut after = None;
        loop {
            let page = HistoryPage {
                after,
                limit: PAGE,
                reverse: true,
            };
            let events = self.store.history(id, page).await?;
            let found = events.iter().find_map(|e| entered_with(&e.event, state));
            if let Some(input) = found {
                repair.entered_with = input.map(Arc::new);
                return Ok(repair);
            }
            match events.last() {
                Some(last) if events.len() == PAGE => after = Some(last.id),
                _ => return Ok(repair),
            }
        }
    }

    /// An operator moves task `id` onto version `to` of its workflow
    /// ([`decide::move_task`]).
    ///
    /// # Errors
    /// [`ActionError`] when the task or the version is missing, or the move refused.
    pub async fn move_task(&self, id: &TaskId, to: u32, moving: Move) -> Result<Task, ActionError> {
        let to = self.version_of(id, to).await?;
        self.act(id, |task, from, order, now| {
            decide::move_task(task, (from, &to), order, moving.clone(), now)
        })
        .await
    }

    /// What [`App::move_task`] would do to each step of task `id`, without doing it.
    ///
    /// # Errors
    /// [`ActionError`] when the task or the version is missing, or the move would be
    /// refused.
    pub async fn plan_move(
        &self,
        id: &TaskId,
        to: u32,
        moving: &Move,
    ) -> Result<MovePlan, ActionError> {
        let to = self.version_of(id, to).await?;
        let (task, order) = (self.tasks.task_with_order(id).await?)
            .ok_or_else(|| ActionError::NotFound(id.clone()))?;
        let from = self.workflow(&task.workflow).await?;
        Ok(decide::plan_move(&task, (&from, &to), &order, moving)?)
    }

    /// Version `version` of task `id`'s workflow (shipped, or stored).
    async fn version_of(&self, id: &TaskId, version: u32) -> Result<Arc<Workflow>, ActionError> {
        let task = (self.tasks.task(id).await?).ok_or_else(|| ActionError::NotFound(id.clone()))?;
        let reference = WorkflowRef {
            version,
            ..task.workflow
        };
        match self.workflow(&reference).await {
            Err(TaskError::UnknownWorkflow(name, version)) => Err(Refused::CannotMove(format!(
                "workflow '{name}' has no version {version}"
            ))
            .into()),
            other => Ok(other?),
        }
    }

    /// The owner or an operator asks a task to stop and undo what it did
    /// ([`decide::cancel`]); asking again answers the task as it is.
    ///
    /// # Errors
    /// [`ActionError`] when the task is missing or has ended.
    pub async fn cancel(&self, id: &TaskId, request: Request) -> Result<Task, ActionError> {
        self.act(id, |task, workflow, _, now| {
            decide::cancel(task, workflow, request.clone(), now)
        })
        .await
    }

    /// Step Functions' `StopExecution`: [`App::cancel`], a state machine's execution
    /// aborted with `error` and `cause` where either is given
    /// ([`decide::stop_execution`]).
    ///
    /// # Errors
    /// [`ActionError`] when the task is missing or has ended.
    pub async fn stop_execution(
        &self,
        id: &TaskId,
        request: Request,
        reason: (Option<String>, Option<String>),
    ) -> Result<Task, ActionError> {
        self.act(id, |task, workflow, _, now| {
            decide::stop_execution(task, workflow, request.clone(), now, reason.clone())
        })
        .await
    }

    /// Step Functions' `RedriveExecution`: the execution that is task `id` runs again
    /// from the state where it stopped ([`sas_domain::machine::redrive`]).
    ///
    /// # Errors
    /// [`ActionError`] when the task is missing or its execution may not be redriven.
    pub async fn redrive_execution(
        &self,
        id: &TaskId,
        request: Request,
    ) -> Result<Task, ActionError> {
        self.act(id, |task, workflow, order, now| {
            sas_domain::machine::redrive(task, workflow, order, request.clone(), now)
        })
        .await
    }

    /// An action on a task: the task as the action left it.
    pub(super) async fn act(
        &self,
        id: &TaskId,
        decide: impl Fn(&Task, &Workflow, &Order, Timestamp) -> Result<Decision, Refused>,
    ) -> Result<Task, ActionError> {
        let written = self
            .transition(id, |task, workflow, order, now| {
                decide(task, workflow, order, now).map_err(ActionError::from)
            })
            .await?;
        let task = match written {
            Some((_, Some(task))) => Some(task),
            Some((_, None)) => self.tasks.task(id).await?,
            None => None,
        };
        task.ok_or_else(|| ActionError::NotFound(id.clone()))
    }

    /// A bulk action, one page of it: lists up to `page.limit` tasks in the filter's
    /// state from `page.after`, and resubmits or cancels each that matches the filter,
    /// one every `page.pace`, in the batch `request.batch` names. A task the batch took
    /// already (on an earlier call, or one interrupted) is skipped, so the action can
    /// be run again from any page, or from the start, and takes each task once.
    ///
    /// # Errors
    /// [`StoreError`] when the listing fails; a task that fails is counted, not an error.
    pub async fn bulk(
        &self,
        action: BulkAction,
        filter: &Filter,
        page: &BulkPage,
        request: &Request,
    ) -> Result<BulkReport, StoreError> {
        let applies = |task: &Task| action.applies_to(task);
        self.take_page(filter, page, applies, |id: TaskId| async move {
            match action {
                BulkAction::Resubmit => {
                    let resubmit = Resubmit {
                        request: request.clone(),
                        input: None,
                    };
                    self.resubmit(&id, resubmit).await
                }
                BulkAction::Cancel => self.cancel(&id, request.clone()).await,
                BulkAction::Pause => self.pause(&id, request.clone()).await,
                BulkAction::Resume => self.resume(&id, request.clone()).await,
            }
        })
        .await
    }

    /// A bulk repair, one page of it: [`App::bulk`], each task that matches the
    /// filter repaired as `repair` says ([`App::repair`]), in its request's batch.
    ///
    /// # Errors
    /// [`StoreError`] when the listing fails; a task that fails is counted, not an error.
    pub async fn bulk_repair(
        &self,
        filter: &Filter,
        page: &BulkPage,
        repair: &Repair,
    ) -> Result<BulkReport, StoreError> {
        self.take_page(
            filter,
            page,
            |_| true,
            |id: TaskId| async move { self.repair(&id, repair.clone()).await },
        )
        .await
    }

    /// A bulk move, one page of it: [`App::bulk`], each task that matches the filter
    /// and is not on version `to` moved onto it ([`App::move_task`]).
    ///
    /// # Errors
    /// [`StoreError`] when the listing fails; a task that fails is counted, not an error.
    pub async fn bulk_move(
        &self,
        filter: &Filter,
        page: &BulkPage,
        to: u32,
        moving: &Move,
    ) -> Result<BulkReport, StoreError> {
        let elsewhere = |task: &Task| task.workflow.version != to;
        self.take_page(filter, page, elsewhere, |id: TaskId| async move {
            self.move_task(&id, to, moving.clone()).await
        })
        .await
    }

    /// Lists a page of the tasks in the filter's state (or with its first attribute's
    /// value) and takes (`act` on) each that matches the filter and `applies`, one
    /// every `page.pace`, counting how each went.
    async fn take_page<Taken>(
        &self,
        filter: &Filter,
        page: &BulkPage,
        applies: impl Fn(&Task) -> bool,
        act: impl Fn(TaskId) -> Taken,
    ) -> Result<BulkReport, StoreError>
    where
        Taken: Future<Output = Result<Task, ActionError>>,
    {
        let after = page.after.as_deref();
        let listed = match filter.attributes.first() {
            Some((name, value)) => {
                (self.store.with_attribute(name, value, page.limit, after)).await?
            }
            None => self.store.list(filter.state, page.limit, after).await?,
        };
        let mut report = BulkReport {
            examined: listed.tasks.len(),
            next: listed.next,
            ..BulkReport::default()
        };
        for task in listed
            .tasks
            .iter()
            .filter(|t| filter.matches(t) && applies(t))
        {
            report.matched += 1;
            match act(task.id.clone()).await {
                Ok(_) => {
                    report.taken += 1;
                    self.clock.sleep(page.pace).await;
                }
                Err(ActionError::Refused(refused)) if !refused.moved_on() => {
                    report.refused += 1;
                    report.refusal.get_or_insert_with(|| refused.to_string());
                }
                Err(ActionError::Refused(_) | ActionError::NotFound(_)) => report.skipped += 1,
                Err(ActionError::Task(error)) => {
                    warn!(task_id = %task.id, error = %Chain(&error), "bulk action failed on a task");
                    report.failed += 1;
                }
            }
        }
        Ok(report)
    }
}
