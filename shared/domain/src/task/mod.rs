//! The state a task keeps in the state store: one record, written only by a
//! conditional write. Its parts: [`step`] (each step's state), [`history`] (what
//! happened to it), [`requests`] (who asked what of it), [`order`] (its input,
//! stored apart).

mod history;
mod order;
mod requests;
pub mod spans;
mod step;

pub use history::{Actor, Answer, Event, Happened, MAX_HISTORY};
pub use order::{EarlierInput, Order};
pub use requests::{Caller, RefusedSubmission, RepairNote, Request, Resubmission};
pub use step::{Children, Step, StepState, Waiting};

use std::collections::BTreeMap;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ids::{Owner, QueueName, TaskId};
use crate::limits::MAX_DELAY;
use crate::machine::MachineRun;
use crate::messages::{Alert, Notification};
use crate::time::Timestamp;

/// The pattern's ProcessState of a task, with the compensation phase the
/// drone-delivery workflow needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TaskState {
    /// Waiting for a scheduler to claim it.
    Pending,
    /// Claimed by a scheduler; its steps are running (one, or one a branch).
    Processing,
    /// Undoing the completed steps, in reverse order, after a failure.
    Compensating,
    /// Every step completed.
    Processed,
    /// Failed; the completed steps have been compensated and an operator alerted.
    Error,
}

impl TaskState {
    /// Every state, for parsing and listing.
    pub const ALL: [Self; 5] = [
        Self::Pending,
        Self::Processing,
        Self::Compensating,
        Self::Processed,
        Self::Error,
    ];

    /// Processed and Error are final until an operator resubmits.
    #[must_use]
    pub fn is_final(self) -> bool {
        matches!(self, Self::Processed | Self::Error)
    }

    /// The state's name, as in the API.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Processing => "Processing",
            Self::Compensating => "Compensating",
            Self::Processed => "Processed",
            Self::Error => "Error",
        }
    }

    /// The state named `name`, if any.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// The workflow, by name and the version the task started with.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowRef {
    /// The workflow's name.
    pub name: Arc<str>,
    /// The version the task runs on: the one it started with, unless an operator
    /// moved it onto another.
    pub version: u32,
}

/// The step of a parent task that started a task as its child.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ParentLink {
    /// The parent task.
    pub task: TaskId,
    /// The step, by index in the parent's workflow.
    pub step: usize,
    /// The item the child is for.
    pub item: u32,
    /// The parent's run that started (or last reran) the child: an end told to the
    /// parent counts only in that run.
    pub run: u32,
    /// Of a branch of a state machine's Parallel or Map: what it starts with beyond
    /// its input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub scope: Option<Box<crate::machine::BranchScope>>,
}

/// A task's state record: the pattern's fields, and its steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// The task's identifier.
    pub id: TaskId,
    /// Bumped by every write; every write is conditional on the version it read.
    pub version: u64,
    /// Drawn at random for each write by the actor writing it, so that an actor whose
    /// write seems to have failed can tell whether the record stored is its own
    /// (its answer was lost) or another's identical decision.
    #[serde(default)]
    pub write_id: u64,
    /// The workflow it runs.
    pub workflow: WorkflowRef,
    /// A digest of the submission, to tell a repeated submission from a different one.
    pub fingerprint: Arc<str>,
    /// The caller's queue for status messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<QueueName>,
    /// Who submitted it, when the API authenticates its callers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// The step that started it, when it is a child task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// The versions of the workflows its children run, by name: pinned when the task
    /// (or its first ancestor) was submitted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pinned: BTreeMap<String, u32>,
    /// The pattern's ProcessState.
    pub state: TaskState,
    /// The scheduler instance that claimed the task; `None` while it waits for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_by: Option<Arc<str>>,
    /// The lease: the soonest of when its steps out must be done by and when a
    /// scheduler must have picked it up (or a retry it waits for). `None` once the
    /// task is final; the supervisor sweeps tasks whose lease expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete_by: Option<Timestamp>,
    /// The lease end that the task's deadline message on its way watches; a message
    /// for another end is spent ([`crate::decide::on_deadline`]). `None` with a lease
    /// too far off for one message's delay: the supervisor sends it once the end is
    /// within reach ([`Task::sweep_at`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// Expired leases in the current run, all steps together.
    pub failure_count: u32,
    /// Starts at 1; an operator's resubmission starts a new run.
    pub run: u32,
    /// The steps, in workflow order.
    pub steps: Vec<Step>,
    /// Of a task that runs a state machine: the state it is in, its variables, and
    /// how its execution ended ([`crate::machine`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<Box<MachineRun>>,
    /// Why the task failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The operator alert of a task in Error, kept until it is published. While it is
    /// here the task keeps a lease, and the supervisor publishes it again when the
    /// lease expires: a crash or a failed publish between the write of the Error and
    /// the alert does not lose it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_alert: Option<Alert>,
    /// Notifications written with the changes they tell of and not yet known sent,
    /// oldest first: while there are any the task keeps a lease, and the supervisor
    /// sends them again when it expires, so that each reaches its queue at least once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outbox: Vec<Outbound>,
    /// Of a task in Error: the steps whose effect may be in place and that nothing
    /// undoes (no compensation, not read-only). A person decides what became of them;
    /// the task is kept until then, and a resubmission calls them again under the
    /// same idempotency keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_undone: Vec<String>,
    /// Of a task being repaired: the steps it undoes before it runs them again
    /// ([`crate::decide::repair`]). While there are any, the task is Compensating
    /// and undoes these alone; then it runs on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rewind: Vec<String>,
    /// The request to stop it, once someone asked ([`crate::decide::cancel`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<Request>,
    /// The request to pause it, while it is paused ([`crate::decide::pause`]): it
    /// starts no new step until it is resumed, or ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Request>,
    /// When it may start, if its submission said: it is Pending until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<Timestamp>,
    /// Where its calls wait for a limited service, which goes first: 1 (first) to 5
    /// ([`crate::flow`]).
    #[serde(
        default = "crate::flow::default_priority",
        skip_serializing_if = "crate::flow::is_default_priority"
    )]
    pub priority: u8,
    /// Of an execution started through an alias of its state machine: the alias's
    /// name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// The task's own secret, drawn at random when it is created: its callback tokens
    /// are signed with it ([`crate::callback`]). Never shown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub callback_key: String,
    /// The resubmissions that started its runs after the first, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resubmissions: Vec<Resubmission>,
    /// Submissions for its id with a different request, refused after it was created
    /// (buffered ingestion answers before it can tell): the last few.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<RefusedSubmission>,
    /// What happened to it, oldest first: its timeline. The last [`MAX_HISTORY`] events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Event>,
    /// Its workflow's search attributes, by name, as its input and its steps' results
    /// had them at its last write ([`crate::workflow::Attribute`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, serde_json::Value>,
    /// The trace it continues: its caller's, or its parent step's
    /// ([`crate::trace`]). Without one it is a trace's root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::trace::TraceContext>,
    /// When it was submitted.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

impl Task {
    /// Whether it is an execution of its own (of a state machine, or a workflow's
    /// task): one started by a client, or by a Task's `startExecution`, not a
    /// Parallel's or a Map's branch, nor a child a step started.
    #[must_use]
    pub fn is_execution(&self) -> bool {
        self.parent
            .as_ref()
            .is_none_or(|link| (link.scope.as_ref()).is_some_and(|scope| scope.execution.is_some()))
    }

    /// When the task may next move by itself: its start, while it is Pending until
    /// `start_at`; never ([`Timestamp::LATEST`]), while it is paused with no step
    /// running (a running one finishes, and may end the task). `None` when it is at
    /// work, or has ended. A wait for its end answers at once when this is past the
    /// wait's end.
    #[must_use]
    pub fn idle_until(&self) -> Option<Timestamp> {
        match self.state {
            TaskState::Processed | TaskState::Error => None,
            _ if self.paused.is_some() && self.running_steps().next().is_none() => {
                Some(Timestamp::LATEST)
            }
            TaskState::Pending => self.start_at,
            TaskState::Processing | TaskState::Compensating => None,
        }
    }

    /// When the supervisor must look at the task: at its lease's end, or, for a
    /// lease no deadline message watches (one ending further off than a message can
    /// be delayed), as soon as a message can reach that end. So a task waiting a year
    /// is looked at twice, never polled.
    #[must_use]
    pub fn sweep_at(&self) -> Option<Timestamp> {
        let end = self.complete_by?;
        Some(match self.deadline {
            Some(_) => end,
            None => end.minus(MAX_DELAY),
        })
    }

    /// In Error with an effect that may be in place and that nothing undid: a step
    /// whose compensation failed, or one without a compensation ([`Self::not_undone`]).
    /// Such a task is kept until a person acts on it.
    #[must_use]
    pub fn needs_a_person(&self) -> bool {
        self.state == TaskState::Error
            && (!self.not_undone.is_empty()
                || self
                    .steps
                    .iter()
                    .any(|s| s.state == StepState::CompensationFailed))
    }

    /// The steps sent to an agent and not yet answered (a call or a compensation), by
    /// index: one at a time in a straight line of steps, one a branch in parallel ones.
    pub fn running_steps(&self) -> impl Iterator<Item = usize> + '_ {
        self.steps
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.state, StepState::Processing | StepState::Compensating))
            .map(|(index, _)| index)
    }
}

/// A notification for a queue, kept in its task's outbox until it is sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outbound {
    /// The caller's queue.
    pub queue: QueueName,
    /// What it is told.
    pub notification: Notification,
}
