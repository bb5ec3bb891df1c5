//! The actors at work: each reads state through the ports, asks the domain what
//! to do, writes the new state conditionally, then performs the effects. The
//! Lambda functions and the local process both call these.
//!
//! One room a job: `submission` creates tasks, `scheduler` takes each message of
//! the scheduler's queues to its task's decision, `supervisor` sweeps expired
//! leases, `operator` resubmits and cancels (one task or in bulk), `reading`
//! reads and lists tasks, `definitions` registers definitions at run time,
//! `schedules` keeps schedules and starts their runs, `uploads` takes the large
//! values callers name by reference, and `effects` writes each decision and carries out its effects, for all of them.

use foldhash::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::clock::Clock;
use crate::offload::Offloading;
use crate::ports::{
    Alerts, DeadLetters, Metrics, NoMetrics, Payloads, QueueError, Queues, Spans, StateStore,
    StoreError, TaskStore, Wakeups,
};
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::time::Timestamp;
use sas_domain::workflow::{Registry, Workflow};

mod activities;
mod catalog;
mod children;
mod cursors;
mod definitions;
mod effects;
mod flow;
mod limits;
mod locks;
mod operator;
mod reading;
mod scheduler;
mod schedules;
mod sealed;
mod search;
mod submission;
mod supervisor;
#[cfg(test)]
mod tests;
mod uploads;
mod waits;

pub use catalog::{CatalogFailure, Catalogued, Current};
pub use definitions::DefineError;
pub use limits::{GateReport, LINE_COUNTED, LimitReport, ServiceReport};
pub use operator::{ActionError, BulkAction, BulkPage, BulkReport, Filter};
pub use reading::{Listed, Listing, OWNED_LISTING_READS, OWNED_LISTING_TASKS};
pub use scheduler::Handled;
pub use schedules::{FiringReport, ScheduleFailure};
pub use search::{Found, SEARCH_EXAMINES, Search, SearchError};
pub use submission::{SubmitError, Submitted};
pub use supervisor::{Recovery, SweepReport};
pub use uploads::{StoredValue, UPLOAD_REQUEST_LASTS, UploadError};

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

/// Whether a submission may be created claimed now ([`App::with_submissions_claimed`]).
type ClaimsNow = Box<dyn Fn() -> bool + Send + Sync>;

/// A workflow's name and version: its name shared with the tasks that name it, so
/// that a transition's lookup copies nothing.
type WorkflowKey = (Arc<str>, u32);

/// Submission, scheduler, supervisor and operator actions over the ports.
pub struct App {
    store: Arc<dyn StateStore>,
    /// The tasks' records: the store itself, or the store with large values kept
    /// apart ([`App::with_payloads`]).
    tasks: Arc<dyn TaskStore>,
    /// Where large values are kept apart, if anywhere ([`App::with_payloads`]).
    payloads: Option<Arc<dyn Payloads>>,
    /// The tasks' records with their large values kept apart, where they are: it
    /// reads back the answers their agents stored among them.
    offloading: Option<Arc<Offloading>>,
    queues: Arc<dyn Queues>,
    alerts: Arc<dyn Alerts>,
    metrics: Arc<dyn Metrics>,
    clock: Arc<dyn Clock>,
    workflows: Arc<Registry>,
    names: QueueNames,
    instance: String,
    /// Wakes the requests waiting for a task to finish, when this process finishes it.
    finished: Mutex<HashMap<TaskId, Arc<Notify>>>,
    /// The waits for a task's end under way: at most [`MAX_WAITS`](reading::MAX_WAITS) at once.
    waits: tokio::sync::Semaphore,
    /// Buffered submissions this process accepted, by id, with when: a wait on one of
    /// them waits for its creation; a wait on another unknown id is answered at once.
    accepted: Mutex<HashMap<TaskId, Timestamp>>,
    /// The workflow versions this process has stored (or found stored).
    stored: Mutex<HashSet<(String, u32)>>,
    /// Held while a definition is stored, one at a time ([`App::store_workflow`]).
    storing: tokio::sync::Mutex<()>,
    /// The definitions tasks run, by name and version, as checked against the store.
    checked: Mutex<HashMap<WorkflowKey, Arc<Workflow>>>,
    /// The names this process has found registered at run time ([`definitions`]):
    /// their current version is read from the store, another process's to change.
    registered: Mutex<HashSet<String>>,
    /// Whether a lease taken sends a deadline message ([`App::with_deadline_messages`]).
    deadline_messages: bool,
    /// The queue of buffered submissions this process's scheduler drains, and whether
    /// it buffers submissions there.
    ingest: Ingest,
    /// Whether a direct submission's task is created claimed by this process, now
    /// ([`App::with_submissions_claimed`]).
    claims_submissions: Option<ClaimsNow>,
    /// How notification queues must be named ([`App::with_notification_prefix`]).
    notification_prefix: Option<String>,
    /// The dead-letter queues, where the process can reach them ([`App::with_dead_letters`]).
    dead_letters: Option<Arc<dyn DeadLetters>>,
    /// The gates this process is changing, one at a time each ([`flow::GateLocks`]).
    gate_locks: flow::GateLocks,
    /// The tasks this process is writing, one transition at a time each: answers for
    /// one task that come together (a parallel step's, a map's children's ends) take
    /// turns at its record, where they raced and all but one lost a write.
    task_locks: locks::Striped<1024>,
    /// Seals owners' listing cursors ([`cursors`]) and the tasks carried in agents'
    /// requests ([`sealed`]), once the store's key is read.
    seal: tokio::sync::OnceCell<cursors::Seal>,
    /// Whether an agent's request carries its task sealed ([`sealed`]).
    carries_tasks: bool,
    /// What wakes the engine at schedules' runs beside the supervisor's sweep
    /// ([`App::with_wakeups`]).
    wakeups: Option<Arc<dyn Wakeups>>,
    /// Where the spans its writes finish go, if anywhere ([`App::with_spans`]).
    spans: Option<Arc<dyn Spans>>,
}

/// The queue of buffered submissions, as a process has it.
enum Ingest {
    /// None: submissions are written at once, and never buffered.
    None,
    /// Drained by its scheduler, though it writes submissions at once: those a
    /// buffered run accepted are created ([`App::draining`]).
    Drained(QueueName),
    /// Where it buffers submissions, and its scheduler drains them
    /// ([`App::with_ingestion`]).
    Buffered(QueueName),
}

impl Ingest {
    /// The queue, drained or buffered in.
    fn queue(&self) -> Option<&QueueName> {
        match self {
            Self::None => None,
            Self::Drained(queue) | Self::Buffered(queue) => Some(queue),
        }
    }
}

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
            tasks: store.clone(),
            payloads: None,
            offloading: None,
            store,
            queues,
            alerts,
            metrics,
            clock,
            workflows,
            names,
            instance,
            finished: Mutex::new(HashMap::default()),
            waits: tokio::sync::Semaphore::new(reading::MAX_WAITS),
            accepted: Mutex::new(HashMap::default()),
            stored: Mutex::new(HashSet::default()),
            storing: tokio::sync::Mutex::new(()),
            checked: Mutex::new(HashMap::default()),
            registered: Mutex::new(HashSet::default()),
            gate_locks: flow::GateLocks::default(),
            task_locks: locks::Striped::default(),
            seal: tokio::sync::OnceCell::new(),
            carries_tasks: false,
            deadline_messages: false,
            ingest: Ingest::None,
            claims_submissions: None,
            notification_prefix: None,
            dead_letters: None,
            wakeups: None,
            spans: None,
        }
    }

    /// Tells `spans` the spans of tasks' traces that its writes finish
    /// ([`sas_domain::task::spans`]).
    #[must_use]
    pub fn with_spans(mut self, spans: Arc<dyn Spans>) -> Self {
        self.spans = Some(spans);
        self
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

    /// An agent's request carries its task as written, sealed, and its response
    /// gives it back: a scheduler decides from it without reading the task, as from
    /// a stale read ([`sealed`]). For a store whose reads are billed (DynamoDB); the
    /// default is off, where reads are free and messages are written with the task.
    #[must_use]
    pub fn with_sealed_tasks(mut self, on: bool) -> Self {
        self.carries_tasks = on;
        self
    }

    /// Buffered ingestion: a submission is only checked and queued on `ingest`
    /// ([`App::accept`]); a scheduler consuming `ingest` creates the task.
    #[must_use]
    pub fn with_ingestion(mut self, ingest: QueueName) -> Self {
        self.ingest = Ingest::Buffered(ingest);
        self
    }

    /// A process whose scheduler drains `ingest` though it takes submissions
    /// directly: those a buffered run accepted (answered 202) before are created, not
    /// stranded, and the queue stays its own ([`App::is_own_queue`]).
    #[must_use]
    pub fn draining(mut self, ingest: QueueName) -> Self {
        self.ingest = Ingest::Drained(ingest);
        self
    }

    /// A process that is its own scheduler (the local one) creates a direct
    /// submission's task claimed by itself, while `now` says so
    /// ([`submit_claimed`](sas_domain::decide::submit_claimed)): its creation is its
    /// claim and its first step's request, one write, no Run message. When `now` says
    /// not (a backlog, where a lease would run out waiting), and where the
    /// submission's function is not a scheduler (Lambda), a scheduler claims it.
    #[must_use]
    pub fn with_submissions_claimed(
        mut self,
        now: impl Fn() -> bool + Send + Sync + 'static,
    ) -> Self {
        self.claims_submissions = Some(Box::new(now));
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

    /// Keeps the tasks' large values (inputs, outputs, states' data) in `payloads`,
    /// their records holding references, and the messages larger than SQS takes
    /// ([`crate::offload`]): without it, a value is as large as the store takes.
    #[must_use]
    pub fn with_payloads(mut self, payloads: Arc<dyn Payloads>) -> Self {
        let offloading = Arc::new(Offloading::new(self.store.clone(), payloads.clone()));
        self.queues = Arc::new(offloading.queues(self.queues.clone()));
        self.tasks = offloading.clone();
        self.offloading = Some(offloading);
        self.payloads = Some(payloads);
        self
    }

    /// Sets each schedule's wake-ups through `wakeups` as it changes (EventBridge
    /// Scheduler on AWS); without, the supervisor's sweep alone fires schedules.
    #[must_use]
    pub fn with_wakeups(mut self, wakeups: Arc<dyn Wakeups>) -> Self {
        self.wakeups = Some(wakeups);
        self
    }

    /// The dead-letter queues, if this process can reach them.
    #[must_use]
    pub fn dead_letters(&self) -> Option<&dyn DeadLetters> {
        self.dead_letters.as_deref()
    }

    /// The pattern's queues, by the names of their roles: where there is one, the
    /// ingest queue last (its dead letters are accepted submissions whose task was
    /// not created).
    #[must_use]
    pub fn queues_by_role(&self) -> Vec<(&'static str, &QueueName)> {
        let mut queues = vec![
            ("scheduler", &self.names.scheduler),
            ("agent-requests", &self.names.agent_requests),
            ("agent-responses", &self.names.agent_responses),
        ];
        queues.extend(self.ingest.queue().map(|ingest| ("ingest", ingest)));
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

    /// Where the app counts (a caught panic, say: [`crate::contain`]).
    #[must_use]
    pub fn metrics(&self) -> &dyn Metrics {
        self.metrics.as_ref()
    }
}
