//! The actors at work: each reads state through the ports, asks the domain what
//! to do, writes the new state conditionally, then performs the effects. The
//! Lambda functions and the local process both call these.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use tracing::{error, info, warn};

use crate::clock::Clock;
use crate::ports::{
    Alerts, Chain, DeadLetters, ExpiredCursor, Metrics, NoMetrics, Outgoing, OutgoingMessage,
    QueueError, Queues, StateStore, StoreError, TaskPage,
};
use sas_domain::decide::{self, Decision, Effect, Refused, Resubmit, Verdict};
use sas_domain::ids::{Owner, QueueName, TaskId};
use sas_domain::limits::MAX_DELAY;
use sas_domain::messages::{AgentRequest, Buffered, SchedulerMessage};
use sas_domain::submission::Submission;
use sas_domain::task::{Order, Request, Task, TaskState, WorkflowRef};
use sas_domain::time::Timestamp;
use sas_domain::workflow::{InputError, Registry, Workflow};

/// A conditional write lost this many times in a row means something is wrong.
const MAX_CONFLICT_RETRIES: usize = 8;

/// The queues of the pattern, by role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueNames {
    /// Run messages for the scheduler.
    pub scheduler: QueueName,
    /// Requests for the agents.
    pub agent_requests: QueueName,
    /// Agents' responses, read by the scheduler.
    pub agent_responses: QueueName,
}

/// A queue a scheduler reads: each takes only the messages meant for it, so that
/// an agent allowed to answer cannot create or move tasks by other means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inbox {
    /// The scheduler's queue: Run and Deadline messages, which the system sends.
    Scheduler,
    /// The agents' responses.
    AgentResponses,
    /// Buffered submissions, which the API accepted (checked again on arrival).
    Ingest,
}

impl Inbox {
    /// Whether `message` is one this queue takes.
    fn accepts(self, message: &SchedulerMessage) -> bool {
        matches!(
            (self, message),
            (
                Self::Scheduler,
                SchedulerMessage::Run { .. } | SchedulerMessage::Deadline { .. }
            ) | (Self::AgentResponses, SchedulerMessage::Response(_))
                | (Self::Ingest, SchedulerMessage::Submit(_))
        )
    }

    /// Its name, in errors.
    const fn as_str(self) -> &'static str {
        match self {
            Self::Scheduler => "scheduler",
            Self::AgentResponses => "agent-response",
            Self::Ingest => "ingest",
        }
    }

    /// The messages it takes, in errors.
    const fn takes(self) -> &'static str {
        match self {
            Self::Scheduler => "run and deadline messages",
            Self::AgentResponses => "agents' responses",
            Self::Ingest => "buffered submissions",
        }
    }
}

/// Why a task could not be moved on.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// A task names a workflow version no longer known anywhere.
    #[error("workflow {0} version {1} is not defined")]
    UnknownWorkflow(String, u32),
    /// A task's steps are not its workflow's: a definition changed under the task.
    #[error("task {task} has {steps} steps and its workflow {defined}")]
    StepsMismatch {
        /// The task.
        task: TaskId,
        /// Its steps.
        steps: usize,
        /// The workflow's.
        defined: usize,
    },
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A queue failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// Why a message could not be handled; the message is then left for redelivery
/// and, after the queue's maxReceiveCount, the dead-letter queue.
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    /// The message is not one this handler understands: a poison message.
    #[error("undecodable message: {0}")]
    Poison(String),
    /// The message is one this handler understands, but not from where it came (a
    /// control message on the agents' response queue), or a submission that does not
    /// pass the checks the API makes: a poison message too.
    #[error("refused message: {0}")]
    Refused(String),
    /// Its task could not be moved on.
    #[error(transparent)]
    Task(#[from] TaskError),
}

impl From<StoreError> for HandleError {
    fn from(error: StoreError) -> Self {
        Self::Task(error.into())
    }
}

impl From<QueueError> for HandleError {
    fn from(error: QueueError) -> Self {
        Self::Task(error.into())
    }
}

/// An actor's error for one message: a poison message, which no retry mends (it
/// goes to the dead-letter queue after the queue's maxReceiveCount), or a failure
/// that another delivery may get past.
pub trait MessageError: std::error::Error + Send + Sync + 'static {
    /// Whether the message itself is at fault.
    fn is_poison(&self) -> bool;
}

impl MessageError for HandleError {
    fn is_poison(&self) -> bool {
        matches!(self, Self::Poison(_) | Self::Refused(_))
    }
}

/// The most pages of the store one owner's listing page reads.
pub const OWNED_LISTING_READS: usize = 5;

/// The most tasks one owner's listing page reads from the store, all its pages
/// together: the store lists every owner's tasks by state, so a caller with few
/// among many would otherwise have each request read five pages of others'.
pub const OWNED_LISTING_TASKS: usize = 200;

/// Why a submission was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// No workflow of that name.
    #[error("unknown workflow '{0}'")]
    UnknownWorkflow(String),
    /// The input does not fit the workflow.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A task with that id exists, from a different request.
    #[error("task '{0}' exists with a different request")]
    Conflict(TaskId),
    /// The notification queue is one of the pattern's own.
    #[error("notify: '{0}' is one of the system's own queues")]
    ReservedQueue(QueueName),
    /// The notification queue is not named as the functions may post to.
    #[error(
        "notify: '{queue}' cannot be posted to: notification queues' names must start with '{prefix}'"
    )]
    UnreachableQueue {
        /// The queue named.
        queue: QueueName,
        /// How the queues the functions may post to are named.
        prefix: String,
    },
    /// The notification queue is not named as the owner's queues are.
    #[error(
        "notify: '{queue}' is not one of yours: your queues' names end with '{suffix}' (see GET /me)"
    )]
    ForeignQueue {
        /// The queue named.
        queue: QueueName,
        /// How the owner's queues' names end.
        suffix: String,
    },
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The scheduler's queue failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

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
}

/// Which tasks a bulk action takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// Their state.
    pub state: TaskState,
    /// Their workflow's name, if it matters.
    pub workflow: Option<String>,
    /// Submitted at or after this.
    pub created_after: Option<Timestamp>,
    /// Submitted before this.
    pub created_before: Option<Timestamp>,
    /// With this text in their error.
    pub error_contains: Option<String>,
}

impl Filter {
    /// Whether `task` is one of them.
    #[must_use]
    pub fn matches(&self, task: &Task) -> bool {
        task.state == self.state
            && self
                .workflow
                .as_ref()
                .is_none_or(|w| *w == task.workflow.name)
            && self.created_after.is_none_or(|at| task.created_at >= at)
            && self.created_before.is_none_or(|at| task.created_at < at)
            && self.error_contains.as_ref().is_none_or(|text| {
                task.error
                    .as_ref()
                    .is_some_and(|error| error.contains(text.as_str()))
            })
    }
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
    /// Resubmitted or cancelled by this call.
    pub taken: usize,
    /// Taken by this batch already, or no longer in a state the action applies to.
    pub skipped: usize,
    /// Not taken because the backend failed: run the action again to take them.
    pub failed: usize,
    /// The cursor to continue from (`after`); null once the listing is done.
    pub next: Option<String>,
}

/// A submission's result.
#[derive(Debug, Clone, PartialEq)]
pub enum Submitted {
    /// A new task.
    Created(Task),
    /// The same request again: the task it made.
    Replayed(Task),
}

/// The ports the actors use.
#[derive(Clone)]
pub struct Ports {
    /// The state store.
    pub store: Arc<dyn StateStore>,
    /// The queues messages are sent to.
    pub queues: Arc<dyn Queues>,
    /// Operator alerts.
    pub alerts: Arc<dyn Alerts>,
    /// Counters.
    pub metrics: Arc<dyn Metrics>,
    /// The time.
    pub clock: Arc<dyn Clock>,
}

impl Ports {
    /// One backend as the store, the queues and the alerts (the embedded one, or a
    /// test's in-memory one), without metrics.
    pub fn of<B>(backend: &Arc<B>, clock: Arc<dyn Clock>) -> Self
    where
        B: StateStore + Queues + Alerts + 'static,
    {
        Self {
            store: Arc::clone(backend) as _,
            queues: Arc::clone(backend) as _,
            alerts: Arc::clone(backend) as _,
            metrics: Arc::new(NoMetrics),
            clock,
        }
    }
}

/// Submission, scheduler, supervisor and operator actions over the ports.
pub struct App {
    store: Arc<dyn StateStore>,
    queues: Arc<dyn Queues>,
    alerts: Arc<dyn Alerts>,
    metrics: Arc<dyn Metrics>,
    clock: Arc<dyn Clock>,
    workflows: Arc<Registry>,
    names: QueueNames,
    instance: String,
    /// Wakes the requests waiting for a task to finish, when this process finishes it.
    finished: Mutex<HashMap<TaskId, Arc<Notify>>>,
    /// The waits for a task's end under way: at most [`MAX_WAITS`] at once.
    waits: tokio::sync::Semaphore,
    /// Buffered submissions this process accepted, by id, with when: a wait on one of
    /// them waits for its creation; a wait on another unknown id is answered at once.
    accepted: Mutex<HashMap<TaskId, Timestamp>>,
    /// The workflow versions this process has stored (or found stored).
    stored: Mutex<HashSet<(String, u32)>>,
    /// The definitions tasks run, by name and version, as checked against the store.
    checked: Mutex<HashMap<(String, u32), Arc<Workflow>>>,
    /// Whether a lease taken sends a deadline message ([`App::with_deadline_messages`]).
    deadline_messages: bool,
    /// Where submissions are buffered, in buffered ingestion ([`App::with_ingestion`]).
    ingest: Option<QueueName>,
    /// How notification queues must be named ([`App::with_notification_prefix`]).
    notification_prefix: Option<String>,
    /// The dead-letter queues, where the process can reach them ([`App::with_dead_letters`]).
    dead_letters: Option<Arc<dyn DeadLetters>>,
}

/// How soon a wait for a task's end first reads it again when another process may
/// finish it (a Lambda function waits on tasks the scheduler function finishes);
/// each read after waits twice as long, up to [`MAX_WAIT_POLL`].
const WAIT_POLL: Duration = Duration::from_millis(250);

/// The longest a wait for a task's end goes without reading it again.
const MAX_WAIT_POLL: Duration = Duration::from_secs(2);

/// The most waits for a task's end one process holds at once; a request beyond them
/// is answered at once, with the task as it is.
const MAX_WAITS: usize = 64;

/// The most buffered submissions a process remembers having accepted, and for how
/// long (longer than a submission stays in the ingest queue is of no use to a wait).
const MAX_ACCEPTED: usize = 200_000;
const ACCEPTED_MEMORY: Duration = Duration::from_secs(60);

/// What the scheduler did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Handled {
    /// A decision about the message's task was made (and written, if it changed it).
    Decided(Verdict),
    /// The message is for a task that does not exist: dropped.
    UnknownTask,
    /// A deadline message due beyond the longest delay a queue allows is sent on.
    DeadlineChained,
    /// A buffered submission's task was created.
    Created,
    /// A buffered submission's task was created already, by the same request.
    Repeated,
}

impl Handled {
    /// Its name in logs.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Decided(verdict) => verdict.as_str(),
            Self::Created => "created",
            Self::Repeated => "repeated",
            Self::UnknownTask => "unknown task",
            Self::DeadlineChained => "deadline chained",
        }
    }
}

/// What the supervisor did with one expired task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Recovery {
    /// A decision about the task was made.
    Decided(Verdict),
    /// The task was gone by the time it was read.
    Vanished,
    /// Its record cannot be decoded: taken off the leases and kept for a person.
    Quarantined,
    /// The store failed; the next pass tries again.
    Failed,
}

impl Recovery {
    /// Its name in logs and in the sweep's report.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Decided(verdict) => verdict.as_str(),
            Self::Vanished => "vanished",
            Self::Quarantined => "quarantined",
            Self::Failed => "failed",
        }
    }
}

impl serde::Serialize for Recovery {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// What a supervisor sweep did: how many expired tasks came to each end.
pub type SweepReport = BTreeMap<Recovery, usize>;

impl App {
    /// Wires the actors to their ports; `instance` names this process in LockedBy.
    #[must_use]
    pub fn new(
        ports: Ports,
        workflows: Arc<Registry>,
        names: QueueNames,
        instance: String,
    ) -> Self {
        let Ports {
            store,
            queues,
            alerts,
            metrics,
            clock,
        } = ports;
        Self {
            store,
            queues,
            alerts,
            metrics,
            clock,
            workflows,
            names,
            instance,
            finished: Mutex::new(HashMap::new()),
            waits: tokio::sync::Semaphore::new(MAX_WAITS),
            accepted: Mutex::new(HashMap::new()),
            stored: Mutex::new(HashSet::new()),
            checked: Mutex::new(HashMap::new()),
            deadline_messages: false,
            ingest: None,
            notification_prefix: None,
            dead_letters: None,
        }
    }

    /// Sends a deadline message for every lease taken, delayed until its end, which a
    /// scheduler acts on as the supervisor would: an expired lease is found within
    /// seconds, where the supervisor's schedule is a minute or more (Lambda). Without
    /// them (the default: the local process sweeps every second), the supervisor alone
    /// finds expired leases.
    #[must_use]
    pub fn with_deadline_messages(mut self, on: bool) -> Self {
        self.deadline_messages = on;
        self
    }

    /// Buffered ingestion: a submission is only checked and queued on `ingest`
    /// ([`App::accept`]); a scheduler consuming `ingest` creates the task.
    #[must_use]
    pub fn with_ingestion(mut self, ingest: QueueName) -> Self {
        self.ingest = Some(ingest);
        self
    }

    /// Refuses submissions whose notification queue is not named with `prefix`: the
    /// functions may post only to those (IAM), and a notification that can never be
    /// sent would be sent again for a day.
    #[must_use]
    pub fn with_notification_prefix(mut self, prefix: String) -> Self {
        self.notification_prefix = Some(prefix);
        self
    }

    /// Lets operators see and redrive the dead-letter queues of the pattern's queues.
    #[must_use]
    pub fn with_dead_letters(mut self, dead_letters: Arc<dyn DeadLetters>) -> Self {
        self.dead_letters = Some(dead_letters);
        self
    }

    /// The dead-letter queues, if this process can reach them.
    #[must_use]
    pub fn dead_letters(&self) -> Option<&dyn DeadLetters> {
        self.dead_letters.as_deref()
    }

    /// The pattern's queues, by the names of their roles: in buffered ingestion, the
    /// ingest queue last (its dead letters are accepted submissions whose task was
    /// not created).
    #[must_use]
    pub fn queues_by_role(&self) -> Vec<(&'static str, &QueueName)> {
        let mut queues = vec![
            ("scheduler", &self.names.scheduler),
            ("agent-requests", &self.names.agent_requests),
            ("agent-responses", &self.names.agent_responses),
        ];
        queues.extend(self.ingest.iter().map(|ingest| ("ingest", ingest)));
        queues
    }

    /// The time now, by the app's clock.
    #[must_use]
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The workflow registry.
    #[must_use]
    pub fn workflows(&self) -> &Registry {
        &self.workflows
    }

    /// Stores every known workflow definition, so that a task can finish on the
    /// version it started with after the files change.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when a stored version differs from its file.
    pub async fn register_workflows(&self) -> Result<(), StoreError> {
        for workflow in self.workflows.all() {
            self.store_workflow(&workflow).await?;
        }
        Ok(())
    }

    /// Stores a definition before its first task, once per process: a task can then
    /// always finish on the version it started with, and a start-up stores nothing.
    async fn store_workflow(&self, workflow: &Workflow) -> Result<(), StoreError> {
        let key = (workflow.name.clone(), workflow.version);
        if self
            .stored
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&key)
        {
            return Ok(());
        }
        if let Err(error) = self.store.save_workflow(workflow).await {
            error!(workflow = %workflow.name, version = workflow.version, error = %Chain(&error),
                "cannot store the workflow definition (a version changed without a bump?)");
            return Err(error);
        }
        self.stored
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key);
        Ok(())
    }

    /// Submission: creates the task and its order data in one transaction and asks
    /// a scheduler to run it. The same request again returns the same task.
    ///
    /// # Errors
    /// [`SubmitError`] for an unknown workflow, a bad input, an id taken by another
    /// request, or a backend failure.
    pub async fn submit(
        &self,
        workflow: &str,
        submission: Submission,
    ) -> Result<Submitted, SubmitError> {
        let definition = self.check(workflow, &submission)?;
        self.store_workflow(&definition).await?;
        self.create(&definition, submission, false).await
    }

    /// Buffered ingestion's submission: checked as [`App::submit`] checks it, then
    /// queued, durably, for a scheduler to create its task
    /// ([`App::on_scheduler_message`]) at the rate the store takes. A request for an
    /// id taken by a different one can no longer be refused here: it is refused on
    /// the task when it is created ([`decide::refuse_submission`]).
    ///
    /// # Errors
    /// [`SubmitError`] for an unknown workflow, a bad input, or a backend failure;
    /// [`SubmitError::Queue`] when this process does not buffer submissions, or the
    /// queue fails (it may have been queued all the same: a repeat is the same task).
    pub async fn accept(
        &self,
        workflow: &str,
        submission: Submission,
    ) -> Result<Buffered, SubmitError> {
        let Some(ingest) = &self.ingest else {
            return Err(SubmitError::Queue(QueueError::new(
                "ingest",
                "this process does not buffer submissions",
            )));
        };
        let definition = self.check(workflow, &submission)?;
        self.store_workflow(&definition).await?;
        let buffered = Buffered {
            workflow: WorkflowRef {
                name: definition.name.clone(),
                version: definition.version,
            },
            submission,
            accepted_at: self.clock.now(),
        };
        let message = OutgoingMessage::json(&buffered.as_message(), Duration::ZERO);
        self.queues.send(ingest, &[message]).await?;
        self.remember_accepted(&buffered.submission.id, buffered.accepted_at);
        self.metrics
            .count("TasksAccepted", ("Workflow", &buffered.workflow.name), 1);
        Ok(buffered)
    }

    /// Whether submissions are buffered ([`App::with_ingestion`]).
    #[must_use]
    pub fn buffers_submissions(&self) -> bool {
        self.ingest.is_some()
    }

    /// The workflow a submission names, its input and notification queue checked.
    fn check(&self, workflow: &str, submission: &Submission) -> Result<Arc<Workflow>, SubmitError> {
        let definition = self
            .workflows
            .latest(workflow)
            .ok_or_else(|| SubmitError::UnknownWorkflow(workflow.to_owned()))?;
        self.check_against(&definition, submission)?;
        Ok(definition)
    }

    /// A submission's input and notification queue, checked against `definition`.
    fn check_against(
        &self,
        definition: &Workflow,
        submission: &Submission,
    ) -> Result<(), SubmitError> {
        definition.validate_input(&submission.input)?;
        if let Some(queue) = submission.notify.as_ref().filter(|q| self.is_own_queue(q)) {
            return Err(SubmitError::ReservedQueue(queue.clone()));
        }
        if let (Some(prefix), Some(queue)) = (&self.notification_prefix, &submission.notify)
            && !queue.as_str().starts_with(prefix.as_str())
        {
            return Err(SubmitError::UnreachableQueue {
                queue: queue.clone(),
                prefix: prefix.clone(),
            });
        }
        if let (Some(owner), Some(queue)) = (&submission.owner, &submission.notify) {
            let suffix = format!("-{}", owner.tag());
            if !queue.as_str().ends_with(&suffix) {
                return Err(SubmitError::ForeignQueue {
                    queue: queue.clone(),
                    suffix,
                });
            }
        }
        Ok(())
    }

    /// Creates the task a checked submission asks for, or finds the one the same
    /// request created.
    ///
    /// A scheduler creating a buffered submission's task (`claim`) creates it claimed
    /// ([`decide::submit_claimed`]).
    async fn create(
        &self,
        definition: &Workflow,
        submission: Submission,
        claim: bool,
    ) -> Result<Submitted, SubmitError> {
        let workflow = &definition.name;
        let fingerprint = submission.fingerprint(workflow);
        let id = submission.id.clone();
        let now = self.clock.now();
        let (task, order, effects) = if claim {
            decide::submit_claimed(definition, submission, &self.instance, now)
        } else {
            decide::submit(definition, submission, now)
        };
        match self.store.create(&task, &order).await {
            Ok(()) => {
                info!(task_id = %id, workflow, "task accepted");
                self.metrics
                    .count("TasksSubmitted", ("Workflow", workflow), 1);
                if task.state == TaskState::Error {
                    // Created claimed, and failed at once (its first step's request
                    // could not be made): it enters Error here, not in `transition`.
                    self.metrics
                        .count("TasksInError", ("Workflow", workflow), 1);
                }
                Self::sent_once_written(&id, claim, self.perform(effects).await)?;
                Ok(Submitted::Created(task))
            }
            Err(StoreError::Conflict) => {
                let existing = self.store.task(&id).await?.ok_or(StoreError::Conflict)?;
                if existing.fingerprint != fingerprint {
                    return Err(SubmitError::Conflict(id));
                }
                if existing.version == 1 && existing.state == TaskState::Pending {
                    // The first submission may have failed between its write and its
                    // send. A task moved since (by a scheduler, or the supervisor's
                    // retry after a delay) has messages of its own: a Run now would
                    // cut the supervisor's delay short.
                    Self::sent_once_written(&id, claim, self.schedule(&existing).await)?;
                }
                Ok(Submitted::Replayed(existing))
            }
            Err(error) => Err(error.into()),
        }
    }

    /// How the sends that follow a task's creation ended, for its creator. The API
    /// answers a task written as accepted whatever they did: its pickup lease has the
    /// supervisor send them again, and a failure answered would have a caller without
    /// an id submit a second task. A scheduler creating a buffered task fails its
    /// message instead, which comes again and sends them sooner.
    fn sent_once_written(
        id: &TaskId,
        claim: bool,
        sent: Result<(), QueueError>,
    ) -> Result<(), QueueError> {
        match sent {
            Err(error) if !claim => {
                warn!(task_id = %id, error = %Chain(&error), "task accepted, its message not sent: the supervisor sends it at its lease's end");
                Ok(())
            }
            other => other,
        }
    }

    /// A scheduler, on a buffered submission: creates its task, or finds it created
    /// by the same request, or refuses it on the task another request created.
    async fn ingest(&self, buffered: &Buffered) -> Result<Handled, HandleError> {
        let definition = self.workflow(&buffered.workflow).await?;
        // Checked again here, where it enters the store: whoever may send to the
        // ingest queue, only what the API accepts becomes a task.
        self.check_against(&definition, &buffered.submission)
            .map_err(|e| HandleError::Refused(e.to_string()))?;
        let id = buffered.submission.id.clone();
        match self
            .create(&definition, buffered.submission.clone(), true)
            .await
        {
            Ok(Submitted::Created(_)) => Ok(Handled::Created),
            Ok(Submitted::Replayed(existing)) => {
                self.claim_again(&definition, buffered.submission.clone(), &existing)
                    .await?;
                Ok(Handled::Repeated)
            }
            Err(SubmitError::Conflict(_)) => {
                let written = self
                    .transition(&id, |task, _, _, now| {
                        Ok::<_, TaskError>(decide::refuse_submission(
                            task,
                            &buffered.submission,
                            &buffered.workflow.name,
                            now,
                        ))
                    })
                    .await?;
                Ok(written.map_or(Handled::UnknownTask, |(verdict, _)| {
                    Handled::Decided(verdict)
                }))
            }
            Err(SubmitError::Store(e)) => Err(e.into()),
            Err(SubmitError::Queue(e)) => Err(e.into()),
            Err(other) => Err(HandleError::Refused(other.to_string())),
        }
    }

    /// Whether `queue` is one of the pattern's queues or their dead-letter queues:
    /// where a caller's notifications must not go, and whose messages no caller may
    /// take.
    #[must_use]
    pub fn is_own_queue(&self, queue: &QueueName) -> bool {
        [
            &self.names.scheduler,
            &self.names.agent_requests,
            &self.names.agent_responses,
        ]
        .into_iter()
        .chain(&self.ingest)
        .any(|own| {
            let name = queue.as_str();
            name == own.as_str() || name.strip_suffix("-dlq") == Some(own.as_str())
        })
    }

    /// A task's state.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn task(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        self.store.task(id).await
    }

    /// A task's state with its order data.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn task_with_order(&self, id: &TaskId) -> Result<Option<(Task, Order)>, StoreError> {
        self.store.task_with_order(id).await
    }

    /// A task's state once it is final, or when `wait` has passed, whichever is first.
    /// It reads the task again after [`WAIT_POLL`], then twice as long each time, up
    /// to [`MAX_WAIT_POLL`]; an unknown id is answered at once (but for a buffered
    /// submission this process accepted lately, which may be on its way), and so is
    /// every request beyond the [`MAX_WAITS`] this process holds.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn wait_final(
        &self,
        id: &TaskId,
        wait: Duration,
    ) -> Result<Option<Task>, StoreError> {
        let Ok(_permit) = self.waits.try_acquire() else {
            return self.store.task(id).await;
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
            let task = self.store.task(id).await?;
            let now = tokio::time::Instant::now();
            // In buffered ingestion a task this process accepted may be on its way.
            let waiting = match &task {
                Some(task) => !task.state.is_final(),
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
    fn remember_accepted(&self, id: &TaskId, at: Timestamp) {
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

    /// Tasks in a state, a page at a time: everyone's, or `owner`'s only.
    ///
    /// The store lists by state, so an owner's page is gathered from up to
    /// [`OWNED_LISTING_READS`] of its pages and [`OWNED_LISTING_TASKS`] of its tasks:
    /// it may hold fewer than `limit` tasks and still have a next one.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn list(
        &self,
        state: TaskState,
        limit: usize,
        after: Option<&str>,
        owner: Option<&Owner>,
    ) -> Result<TaskPage, StoreError> {
        let Some(owner) = owner else {
            return self.store.list(state, limit, after).await;
        };
        let mut owned = TaskPage {
            tasks: Vec::new(),
            next: after.map(str::to_owned),
        };
        let mut budget = OWNED_LISTING_TASKS;
        for _ in 0..OWNED_LISTING_READS {
            let ask = (limit - owned.tasks.len()).min(budget);
            if ask == 0 {
                break;
            }
            budget -= ask;
            let page = self.store.list(state, ask, owned.next.as_deref()).await?;
            owned.next = page.next;
            owned.tasks.extend(
                page.tasks
                    .into_iter()
                    .filter(|t| t.owner.as_ref() == Some(owner)),
            );
            if owned.tasks.len() == limit || owned.next.is_none() {
                break;
            }
        }
        Ok(owned)
    }

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

    /// An action on a task: the task as the action left it.
    async fn act(
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
            Some((_, None)) => self.store.task(id).await?,
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
        let listed = self
            .list(filter.state, page.limit, page.after.as_deref(), None)
            .await?;
        let mut report = BulkReport {
            examined: listed.tasks.len(),
            next: listed.next,
            ..BulkReport::default()
        };
        for task in listed.tasks.iter().filter(|t| filter.matches(t)) {
            report.matched += 1;
            let acted = match action {
                BulkAction::Resubmit => {
                    let resubmit = Resubmit {
                        request: request.clone(),
                        input: None,
                    };
                    self.resubmit(&task.id, resubmit).await
                }
                BulkAction::Cancel => self.cancel(&task.id, request.clone()).await,
            };
            match acted {
                Ok(_) => {
                    report.taken += 1;
                    self.clock.sleep(page.pace).await;
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

    /// Which of a scheduler's queues the queue named `queue` is, if it is one.
    fn inbox(&self, queue: &str) -> Option<Inbox> {
        if queue == self.names.scheduler.as_str() {
            Some(Inbox::Scheduler)
        } else if queue == self.names.agent_responses.as_str() {
            Some(Inbox::AgentResponses)
        } else {
            self.ingest
                .as_ref()
                .is_some_and(|ingest| ingest.as_str() == queue)
                .then_some(Inbox::Ingest)
        }
    }

    /// Scheduler: handles one message of one of its queues, named `queue`, which
    /// takes only the messages meant for it ([`Inbox::accepts`]).
    ///
    /// # Errors
    /// [`HandleError`]; the message should then be retried (and dead-lettered in the end).
    pub async fn on_scheduler_message(
        &self,
        queue: &str,
        body: &str,
    ) -> Result<Handled, HandleError> {
        let inbox = self.inbox(queue).ok_or_else(|| {
            HandleError::Refused(format!(
                "a message from '{queue}', which is not the scheduler's"
            ))
        })?;
        let message: SchedulerMessage =
            serde_json::from_str(body).map_err(|e| HandleError::Poison(e.to_string()))?;
        if !inbox.accepts(&message) {
            return Err(HandleError::Refused(format!(
                "a {} message on the {} queue, which takes only {}",
                message.kind(),
                inbox.as_str(),
                inbox.takes()
            )));
        }
        let task_id = match &message {
            SchedulerMessage::Submit(buffered) => return self.ingest(buffered).await,
            SchedulerMessage::Run { task_id } | SchedulerMessage::Deadline { task_id, .. } => {
                task_id
            }
            SchedulerMessage::Response(response) => &response.task_id,
        };
        if let SchedulerMessage::Deadline { at, .. } = message
            && self.clock.now() < at
        {
            // Its delay could not reach the lease's end (SQS delays at most 15
            // minutes): the message goes on.
            self.send(vec![self.deadline(task_id, at)]).await?;
            return Ok(Handled::DeadlineChained);
        }
        let written = self
            .transition(task_id, |task, workflow, order, now| {
                Ok::<_, TaskError>(match &message {
                    SchedulerMessage::Run { .. } => {
                        decide::on_run(task, workflow, order, &self.instance, now)
                    }
                    SchedulerMessage::Response(response) => {
                        decide::on_response(task, workflow, order, response, now)
                    }
                    SchedulerMessage::Deadline { at, .. } => {
                        decide::on_deadline(task, workflow, *at, now)
                    }
                    // Handled above, before any task is read.
                    SchedulerMessage::Submit(_) => {
                        Decision::ignore(Verdict::NotWaitingForScheduler)
                    }
                })
            })
            .await?;
        Ok(written.map_or_else(
            || {
                warn!(task_id = %task_id, "message for an unknown task dropped");
                Handled::UnknownTask
            },
            |(verdict, _)| Handled::Decided(verdict),
        ))
    }

    /// Supervisor: one pass over the tasks whose lease has expired, `batch` at a
    /// time, each read once: each page goes on where the one before stopped. A task
    /// that cannot be recovered now is counted as "failed" and left for the next pass,
    /// so tasks that keep failing neither hold it up nor hide the ones behind them. A
    /// record this version cannot read (garbled, or of a newer version's shape) is
    /// quarantined (taken off the leases, kept for a person) and counted.
    ///
    /// # Errors
    /// [`StoreError`] when the expired leases cannot be read.
    pub async fn sweep(&self, batch: usize) -> Result<SweepReport, StoreError> {
        let mut report = SweepReport::new();
        // The leases expired when the pass began: those expiring meanwhile are the
        // next pass's, so a pass ends under any load.
        let now = self.clock.now();
        let mut cursor = ExpiredCursor::default();
        loop {
            let expired = self.store.expired(now, batch, &cursor).await?;
            for record in expired.unreadable {
                let id = &record.id;
                error!(task_id = %id, "supervisor: this version cannot read the task's record; quarantined for a person");
                self.metrics
                    .count("QuarantinedTasks", ("Store", "tasks"), 1);
                let verdict = match self.store.quarantine(&record).await {
                    Ok(()) => Recovery::Quarantined,
                    Err(error) => {
                        error!(task_id = %id, error = %Chain(&error), "supervisor could not quarantine the task");
                        Recovery::Failed
                    }
                };
                *report.entry(verdict).or_default() += 1;
            }
            for task in expired.tasks {
                let verdict = self.recover(&task.id).await;
                info!(task_id = %task.id, verdict = verdict.as_str(), "supervisor");
                *report.entry(verdict).or_default() += 1;
            }
            match expired.next {
                Some(next) => cursor = next,
                None => return Ok(report),
            }
        }
    }

    /// Supervisor: decides on one task whose lease has expired.
    async fn recover(&self, id: &TaskId) -> Recovery {
        let recovered = self
            .transition(id, |task, workflow, _, now| {
                Ok::<_, TaskError>(decide::on_expired(task, workflow, now))
            })
            .await;
        match recovered {
            Ok(Some((verdict, _))) => Recovery::Decided(verdict),
            Ok(None) => Recovery::Vanished,
            Err(error) => {
                error!(task_id = %id, error = %Chain(&error), "supervisor could not recover the task");
                Recovery::Failed
            }
        }
    }

    /// Reads a task with its order, decides, and writes the decision; a write that
    /// loses a race reads again and decides again. Returns the verdict and the state
    /// written, or `None` when there is no such task.
    ///
    /// The first read may be stale (an eventually consistent read, half the price on
    /// DynamoDB): a decision from it that writes is safe, its write being conditional
    /// on the version read. Anything else it leads to (no such task, a decision that
    /// leaves the task as it is, such as a response taken for a stale one, or an
    /// error) is decided again on a consistent read, unless the task read had ended
    /// Processed, which no later write changes.
    async fn transition<E>(
        &self,
        id: &TaskId,
        decide: impl Fn(&Task, &Workflow, &Order, Timestamp) -> Result<Decision, E>,
    ) -> Result<Option<(Verdict, Option<Task>)>, E>
    where
        E: From<TaskError>,
    {
        let mut consistent = false;
        for _ in 0..MAX_CONFLICT_RETRIES {
            let read = if consistent {
                self.store.task_with_order(id).await
            } else {
                self.store.task_with_order_eventually_consistent(id).await
            };
            let Some((task, order)) = read.map_err(TaskError::from)? else {
                if consistent {
                    return Ok(None);
                }
                consistent = true;
                continue;
            };
            let workflow = self.workflow(&task.workflow).await?;
            if task.steps.len() != workflow.steps.len() {
                return Err(TaskError::StepsMismatch {
                    task: task.id,
                    steps: task.steps.len(),
                    defined: workflow.steps.len(),
                }
                .into());
            }
            let decision = match decide(&task, &workflow, &order, self.clock.now()) {
                Ok(decision) => decision,
                Err(_) if !consistent => {
                    consistent = true;
                    continue;
                }
                Err(error) => return Err(error),
            };
            if !consistent && decision.next.is_none() && task.state != TaskState::Processed {
                consistent = true;
                continue;
            }
            if let Some((verdict, next)) = self.apply(decision).await? {
                // Counted as it enters Error, once a task (always by the scheduler, the
                // dimension the alarm watches), not at each raise of its alert.
                if let Some(failed) = next
                    .as_ref()
                    .filter(|n| n.state == TaskState::Error && task.state != TaskState::Error)
                {
                    self.metrics
                        .count("TasksInError", ("Workflow", &failed.workflow.name), 1);
                }
                return Ok(Some((verdict, next)));
            }
            consistent = true;
        }
        Err(TaskError::from(StoreError::Conflict).into())
    }

    /// The definition a task runs: the one stored under its name and version when
    /// it started, checked once per process against the registry's. A file changed
    /// without a version bump is refused for the tasks of that version (they run
    /// the stored definition, whose steps they have) with an error in the log.
    async fn workflow(&self, reference: &WorkflowRef) -> Result<Arc<Workflow>, TaskError> {
        let key = (reference.name.clone(), reference.version);
        if let Some(workflow) = self
            .checked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            return Ok(Arc::clone(workflow));
        }
        let file = self.workflows.version(&reference.name, reference.version);
        let stored = self
            .store
            .load_workflow(&reference.name, reference.version)
            .await?;
        let workflow = match stored {
            Some(source) => {
                let stored = Workflow::parse(
                    &format!("stored {}@{}", reference.name, reference.version),
                    &source,
                )
                .map_err(|e| StoreError::Corrupt(e.into()))?;
                match file {
                    Some(file) if file.source == stored.source => file,
                    Some(_) => {
                        error!(workflow = %reference.name, version = reference.version,
                            "the workflow file differs from the definition stored under its version: \
                             tasks of that version run the stored one; give a changed definition a new version");
                        Arc::new(stored)
                    }
                    None => Arc::new(stored),
                }
            }
            None => file.ok_or_else(|| {
                TaskError::UnknownWorkflow(reference.name.clone(), reference.version)
            })?,
        };
        self.checked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, Arc::clone(&workflow));
        Ok(workflow)
    }

    /// Writes the decision's state with the messages it requires (in one transaction
    /// where the store can), then performs the rest of its effects. Returns the
    /// verdict and the state written, or `None` when the write lost a race and the
    /// caller must read again.
    async fn apply(
        &self,
        mut decision: Decision,
    ) -> Result<Option<(Verdict, Option<Task>)>, TaskError> {
        if let Some(next) = &mut decision.next {
            next.write_id = fastrand::u64(..);
        }
        let (required, best_effort) = self.split(decision.effects);
        let unsent = match &decision.next {
            Some(next) => {
                let written = match &decision.order {
                    Some(order) => self
                        .store
                        .update_with_order(next, order)
                        .await
                        .map(|()| required.clone()),
                    None => self.store.update_and_send(next, required.clone()).await,
                };
                let unsent = match written {
                    Ok(unsent) => unsent,
                    Err(StoreError::Conflict) if self.landed(next).await? => {
                        info!(task_id = %next.id, version = next.version,
                            "the write had landed and its answer was lost: its effects are performed");
                        required
                    }
                    Err(StoreError::Conflict) => return Ok(None),
                    Err(error) => return Err(error.into()),
                };
                if next.state.is_final() {
                    let finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(waker) = finished.get(&next.id) {
                        waker.notify_waiters();
                    }
                }
                unsent
            }
            None => required,
        };
        self.metrics
            .count("Decisions", ("Verdict", decision.verdict.as_str()), 1);
        self.send(unsent).await?;
        self.perform_best_effort(best_effort).await;
        Ok(Some((decision.verdict, decision.next)))
    }

    /// Whether a write that failed its condition had in fact landed: its answer was
    /// lost and a retry of it (the SDK retries) found the version already moved, by
    /// itself. The record stored is then exactly the one it meant to write, down to
    /// its `write_id` (another actor's identical decision, in the same millisecond,
    /// has another).
    async fn landed(&self, intended: &Task) -> Result<bool, StoreError> {
        Ok(self.store.task(&intended.id).await?.as_ref() == Some(intended))
    }

    /// Clears from a task what was delivered (an alert, notifications), as `decide`
    /// says, so that the supervisor does not deliver it again, and sends the messages
    /// the write requires (a deadline message for a lease it takes). A mark left (the
    /// write failed, or lost every race) only has it delivered again: at least once.
    async fn delivered(&self, task_id: &TaskId, decide: impl Fn(&Task, Timestamp) -> Decision) {
        for _ in 0..MAX_CONFLICT_RETRIES {
            let task = match self.store.task(task_id).await {
                Ok(Some(task)) => task,
                Ok(None) => return,
                Err(error) => {
                    warn!(task_id = %task_id, error = %Chain(&error), "delivered, its mark kept: it will be delivered again");
                    return;
                }
            };
            let decision = decide(&task, self.clock.now());
            let Some(next) = decision.next else { return };
            match self.store.update(&next).await {
                Ok(()) => {
                    self.metrics
                        .count("Decisions", ("Verdict", decision.verdict.as_str()), 1);
                    let (required, _) = self.split(decision.effects);
                    if let Err(error) = self.send(required).await {
                        warn!(task_id = %task_id, error = %Chain(&error), "a deadline message not sent: the supervisor's sweep finds the lease");
                    }
                    return;
                }
                Err(StoreError::Conflict) => {}
                Err(error) => {
                    warn!(task_id = %task_id, error = %Chain(&error), "delivered, its mark kept: it will be delivered again");
                    return;
                }
            }
        }
    }

    /// A deadline message for a lease ending `at`, delayed until then (in whole
    /// seconds, rounded up: never early), or by SQS's longest delay, after which it
    /// is sent on.
    fn deadline(&self, task_id: &TaskId, at: Timestamp) -> Outgoing {
        let wait = self.clock.now().until(at);
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let message = SchedulerMessage::Deadline {
            task_id: task_id.clone(),
            at,
        };
        Outgoing {
            queue: self.names.scheduler.clone(),
            message: OutgoingMessage::json(&message, Duration::from_secs(seconds).min(MAX_DELAY)),
        }
    }

    /// Sends a new task's Run again, with its deadline message.
    async fn schedule(&self, task: &Task) -> Result<(), QueueError> {
        let mut effects = vec![Effect::Schedule {
            task_id: task.id.clone(),
            delay: Duration::ZERO,
        }];
        if let Some(at) = task.deadline {
            effects.push(Effect::Deadline {
                task_id: task.id.clone(),
                at,
            });
        }
        self.perform(effects).await
    }

    /// A task created claimed, if it has not moved since (it is the creation, rebuilt
    /// from the stored instant and instance, but for submissions refused on it
    /// since: [`decide::unmoved_since_created`]): the messages of its creation may
    /// never have been sent (the scheduler died after the write, or the write's
    /// answer was lost and the SDK's retry failed its condition). They are sent again
    /// rather than left to the lease's end; the step's request may come twice, which
    /// its idempotency key and attempt absorb. The caller is not told again.
    async fn claim_again(
        &self,
        definition: &Workflow,
        submission: Submission,
        existing: &Task,
    ) -> Result<(), QueueError> {
        let Some(instance) = &existing.locked_by else {
            return Ok(());
        };
        let (again, _, effects) =
            decide::submit_claimed(definition, submission, instance, existing.created_at);
        if !decide::unmoved_since_created(&again, existing) {
            return Ok(());
        }
        info!(task_id = %existing.id, "a task created claimed, not moved since: its first messages are sent again");
        let unsent = effects
            .into_iter()
            .filter(|effect| !matches!(effect, Effect::Notify { .. }))
            .collect();
        self.perform(unsent).await
    }

    async fn perform(&self, effects: Vec<Effect>) -> Result<(), QueueError> {
        let (required, best_effort) = self.split(effects);
        self.send(required).await?;
        self.perform_best_effort(best_effort).await;
        Ok(())
    }

    /// The messages the effects require (a lease covers their loss), and the
    /// effects performed at best (notifications, alerts).
    fn split(&self, effects: Vec<Effect>) -> (Vec<Outgoing>, Vec<Effect>) {
        let mut required = Vec::new();
        let mut best_effort = Vec::new();
        for effect in effects {
            match effect {
                Effect::Dispatch(request) => required.push(Outgoing {
                    queue: self.names.agent_requests.clone(),
                    message: agent_message(&request),
                }),
                Effect::Schedule { task_id, delay } => required.push(Outgoing {
                    queue: self.names.scheduler.clone(),
                    message: run_message(&task_id, delay),
                }),
                // Sent with the messages that must be, on the scheduler's queue: in
                // the same batch as a Run, and in the same transaction locally.
                Effect::Deadline { task_id, at } if self.deadline_messages => {
                    required.push(self.deadline(&task_id, at));
                }
                other => best_effort.push(other),
            }
        }
        (required, best_effort)
    }

    /// Sends messages, one batch per queue.
    async fn send(&self, outgoing: Vec<Outgoing>) -> Result<(), QueueError> {
        let mut by_queue: BTreeMap<QueueName, Vec<OutgoingMessage>> = BTreeMap::new();
        for Outgoing { queue, message } in outgoing {
            by_queue.entry(queue).or_default().push(message);
        }
        for (queue, messages) in by_queue {
            self.queues.send(&queue, &messages).await?;
        }
        Ok(())
    }

    /// Sends the notifications and raises the alerts of a decision written, then
    /// clears from their tasks those known delivered.
    async fn perform_best_effort(&self, effects: Vec<Effect>) {
        let mut sent: BTreeMap<TaskId, Vec<(QueueName, u64)>> = BTreeMap::new();
        for effect in effects {
            match effect {
                Effect::Notify { task_id, outbound } => {
                    let message = OutgoingMessage::json(&outbound.notification, Duration::ZERO);
                    match self.queues.send(&outbound.queue, &[message]).await {
                        Ok(()) => sent
                            .entry(task_id)
                            .or_default()
                            .push((outbound.queue, outbound.notification.version)),
                        Err(error) => {
                            warn!(task_id = %task_id, error = %Chain(&error), "notification not sent: the supervisor will send it again");
                        }
                    }
                }
                Effect::Alert(alert) => {
                    warn!(task_id = %alert.task_id, reason = %alert.reason, "task in Error: operator alerted");
                    match self.alerts.raise(&alert).await {
                        Ok(()) => {
                            self.delivered(&alert.task_id, |task, now| {
                                decide::alert_published(task, &alert, now)
                            })
                            .await;
                        }
                        Err(error) => {
                            warn!(task_id = %alert.task_id, error = %Chain(&error), "alert not raised: the supervisor will raise it again");
                        }
                    }
                }
                Effect::Dispatch(_) | Effect::Schedule { .. } | Effect::Deadline { .. } => {}
            }
        }
        for (task_id, sent) in sent {
            self.delivered(&task_id, |task, now| {
                decide::notifications_sent(task, &sent, now)
            })
            .await;
        }
    }
}

fn run_message(task_id: &TaskId, delay: Duration) -> OutgoingMessage {
    let message = SchedulerMessage::Run {
        task_id: task_id.clone(),
    };
    OutgoingMessage::json(&message, delay)
}

fn agent_message(request: &AgentRequest) -> OutgoingMessage {
    OutgoingMessage::json(request, Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names dashboards, alarms and the sweep's report use: renaming a variant
    /// must not rename what operators read.
    #[test]
    fn outcomes_keep_the_names_logs_metrics_and_reports_use() {
        use Verdict::*;
        let names = [
            (NotWaitingForScheduler, "not waiting for a scheduler"),
            (Claimed, "claimed"),
            (StaleResponse, "stale response"),
            (Recorded, "recorded"),
            (AlertedAgain, "alerted again"),
            (NotifiedAgain, "notified again"),
            (NotificationsSent, "notifications sent"),
            (NotificationsClearedAlready, "notifications cleared already"),
            (LeaseLive, "lease live"),
            (SentAgain, "sent again"),
            (GaveUp, "gave up"),
            (Retry, "retry"),
            (DeadlineSuperseded, "deadline superseded"),
            (DeadlineMoved, "deadline moved"),
            (AlertClearedAlready, "alert cleared already"),
            (AlertPublished, "alert published"),
            (Resubmitted, "resubmitted"),
            (CancelRequested, "cancel requested"),
            (CancelledAlready, "cancelled already"),
            (SubmissionRefused, "submission refused"),
            (RefusedAlready, "refused already"),
        ];
        for (verdict, name) in names {
            assert_eq!(verdict.as_str(), name);
        }
        let recoveries = [
            Recovery::Decided(Retry),
            Recovery::Vanished,
            Recovery::Quarantined,
            Recovery::Failed,
        ];
        assert_eq!(
            serde_json::to_value(SweepReport::from(recoveries.map(|r| (r, 1)))).expect("json"),
            serde_json::json!({"retry": 1, "vanished": 1, "quarantined": 1, "failed": 1})
        );
        assert_eq!(
            [
                Handled::UnknownTask,
                Handled::DeadlineChained,
                Handled::Created,
                Handled::Repeated
            ]
            .map(Handled::as_str),
            ["unknown task", "deadline chained", "created", "repeated"]
        );
    }
}
