//! The state a task and each of its steps keep in the state store.

use std::collections::BTreeMap;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ids::{Owner, QueueName, TaskId};
use super::messages::{Alert, Notification, Operation, Outcome};
use crate::limits::MAX_DELAY;
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

/// The state of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum StepState {
    /// Not started, or to be retried.
    Pending,
    /// Sent to its agent; must complete by its complete-by time.
    Processing,
    /// Its remote call succeeded.
    Processed,
    /// Its remote call failed for good.
    Error,
    /// Its complete-by time passed more often than the supervisor allows; its
    /// effect may be in place, so it is compensated like a processed step.
    TimedOut,
    /// Its call succeeded but its answer cannot be kept: larger than a step's output
    /// may be ([`crate::limits`]), or not JSON; or the callback it then waited for
    /// was refused. Its effect is in place, so it is compensated like a processed
    /// step.
    Unusable,
    /// Its compensation was sent to its agent.
    Compensating,
    /// Its compensation succeeded: its effect is undone.
    Compensated,
    /// Its compensation failed for good: an operator must undo it.
    CompensationFailed,
    /// Its condition (`when`) did not hold at its turn: it did nothing, and the steps
    /// after it run as after a Processed step.
    Skipped,
}

/// One step's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The step's name in the workflow.
    pub name: String,
    /// Where the step is.
    pub state: StepState,
    /// Times the step (or its compensation) was sent to an agent; a response
    /// counts only if it names the current attempt.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempt: u32,
    /// When the current attempt must have completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete_by: Option<Timestamp>,
    /// Times the step's complete-by passed in the current run.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failure_count: u32,
    /// Times its compensation's complete-by passed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub compensation_failure_count: u32,
    /// The state the step had when its compensation was sent, to return to when
    /// the compensation's complete-by passes and it is to be undone again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undoing: Option<StepState>,
    /// What the remote service answered (shared: a task is copied at every
    /// decision, its outputs are not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Arc<Value>>,
    /// Why the step or its compensation failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the current attempt was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// When the step reached its last state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Timestamp>,
    /// The run whose idempotency keys the step's call and compensation carry
    /// (`<task>/<key_run>/<step>`): the run that first sent it since its effect was
    /// last known absent. A resubmission keeps it while the step's effect may be in
    /// place, so that the service deduplicates the call; 0 until the step is sent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub key_run: u32,
    /// When a step waiting for its retry may be sent again, while steps of other
    /// branches run (a task with nothing else running waits for its retry as a
    /// whole, released to the schedulers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<Timestamp>,
    /// The step's place among the task's steps whose effects came to be in place
    /// (1 for the first): they are undone in the reverse of this order. 0 while its
    /// effect is not in place.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub done_order: u32,
    /// Of a step that starts child tasks (a child workflow, a map): where they are,
    /// in counts, never a record per child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children: Option<Children>,
    /// Of a running step that waits (a timer, a callback): for what, and until when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
    /// The gates whose slots its call holds, by name ([`crate::flow`]): given back
    /// when the call ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<String>,
    /// How long its last call waited for its gates' slots, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_ms: Option<u64>,
    /// Of a call that waits for its callback: how the callback that came while the
    /// call was still out ends the step, once the call is settled (answered, or its
    /// lease ended). Until then the call holds its slots and nothing is undone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub called_back: Option<Outcome>,
}

/// What a running step waits for, holding nothing: its lease (complete-by) is when
/// the wait ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "for", rename_all = "snake_case")]
pub enum Waiting {
    /// Its timer: it ends, Processed, at its complete-by.
    Timer,
    /// Its callback: its token ends it; its complete-by is when the next heartbeat
    /// is due, or `until`.
    Callback {
        /// Its timeout: no heartbeat pushes its complete-by past this.
        until: Timestamp,
        /// After its call, taken by its service: its token is the call's
        /// ([`crate::callback::Token::issue`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        after_call: bool,
    },
    /// A slot of each of its service's gates ([`crate::flow`]), before its call is
    /// sent: its complete-by is when the supervisor asks again, never a failure; its
    /// call's own starts when it is given them.
    Slot {
        /// Since when.
        since: Timestamp,
    },
}

/// Where the child tasks of a step are: counts, and the few running. A child's id
/// is its parent's, its step's and its item's ([`TaskId::child`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Children {
    /// The items, one child each (1 for a child workflow).
    pub total: u32,
    /// Children started, items `0..started`.
    pub started: u32,
    /// The items whose children were started (or, while the step is undone, told to
    /// undo) and whose end is not yet known: at most the step's `max_concurrency`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<u32>,
    /// Children that ended Processed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub succeeded: u32,
    /// Children that ended in Error, or could not be started.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: u32,
    /// While the step is undone: children told to undo, items `0..undo_started`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub undo_started: u32,
    /// Children known undone (or with nothing to undo).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub undone: u32,
    /// Children whose undoing left an effect in place: a person must look at them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub not_undone: u32,
}

/// Zero counters are left out of the stored record: most are zero, and on DynamoDB
/// every byte of a task's item is paid at every write.
#[allow(clippy::trivially_copy_pass_by_ref)] // serde's signature
fn is_zero(count: &u32) -> bool {
    *count == 0
}

impl Step {
    /// A step not yet started.
    #[must_use]
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            state: StepState::Pending,
            attempt: 0,
            complete_by: None,
            failure_count: 0,
            compensation_failure_count: 0,
            undoing: None,
            output: None,
            error: None,
            started_at: None,
            finished_at: None,
            key_run: 0,
            retry_at: None,
            done_order: 0,
            children: None,
            waiting: None,
            slots: Vec::new(),
            waited_ms: None,
            called_back: None,
        }
    }

    /// The run whose idempotency keys its calls carry when sent in run `run`: the
    /// one it keeps ([`Self::key_run`]), or `run`'s.
    #[must_use]
    pub fn key_run_in(&self, run: u32) -> u32 {
        if self.key_run == 0 { run } else { self.key_run }
    }

    /// Whether the step was sent under its current key, and may have taken effect,
    /// even while it waits to be sent again.
    #[must_use]
    pub fn was_sent(&self) -> bool {
        self.attempt > 0 || self.key_run > 0
    }

    /// Whether the steps after it may run: it is Processed, or was skipped.
    #[must_use]
    pub fn is_settled(&self) -> bool {
        matches!(self.state, StepState::Processed | StepState::Skipped)
    }

    /// Whether the step's effect may be in place: its call succeeded, or may have
    /// (it timed out), and no compensation is known to have undone it.
    #[must_use]
    pub fn effect_may_be_in_place(&self) -> bool {
        matches!(
            self.state,
            StepState::Processed
                | StepState::TimedOut
                | StepState::Unusable
                | StepState::CompensationFailed
        ) || (self.state == StepState::Error
            && self.children.as_ref().is_some_and(|c| c.succeeded > 0))
    }
}

/// The workflow, by name and the version the task started with.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowRef {
    /// The workflow's name.
    pub name: String,
    /// The version the task keeps to its end.
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
    pub fingerprint: String,
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
    pub locked_by: Option<String>,
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
    /// When it was submitted.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

impl Task {
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

/// The most events a task keeps in its history; older ones are dropped.
pub const MAX_HISTORY: usize = 64;

/// Something that happened to a task, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// When.
    pub at: Timestamp,
    /// What.
    #[serde(flatten)]
    pub what: Happened,
}

/// What happened to a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Happened {
    /// A step's call or compensation was sent to its agent.
    Sent {
        /// The step's index.
        step: usize,
        /// Its call, or its compensation.
        operation: Operation,
        /// Which attempt.
        attempt: u32,
        /// When it must be done by.
        complete_by: Timestamp,
    },
    /// Its agent answered.
    Answered {
        /// The step's index.
        step: usize,
        /// Its call, or its compensation.
        operation: Operation,
        /// Which attempt.
        attempt: u32,
        /// How it ended.
        outcome: Answer,
    },
    /// Its complete-by passed without an answer.
    Expired {
        /// The step's index.
        step: usize,
        /// Its call, or its compensation.
        operation: Operation,
        /// Which attempt.
        attempt: u32,
        /// When the supervisor's retry is due; `None` when it gave up.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_at: Option<Timestamp>,
    },
    /// Someone asked it to stop.
    Cancelled {
        /// Who.
        by: Actor,
    },
    /// Someone started a new run.
    Resubmitted {
        /// The run.
        run: u32,
    },
    /// It entered a state; its caller, if it named a queue, was told.
    State {
        /// The state.
        state: TaskState,
    },
    /// A submission for its id with a different request was refused.
    Refused,
    /// A step's condition did not hold: it was skipped.
    Skipped {
        /// The step's index.
        step: usize,
    },
    /// A step started to wait: for its timer, or its callback.
    Waiting {
        /// The step's index.
        step: usize,
        /// Which attempt.
        attempt: u32,
        /// When the wait ends (a callback's timeout).
        until: Timestamp,
    },
    /// A step's call waits for its gates' slots ([`crate::flow`]).
    Queued {
        /// The step's index.
        step: usize,
        /// Its call, or its compensation.
        operation: Operation,
        /// Which attempt.
        attempt: u32,
    },
    /// A waiting step's callback was used, or its timer ended.
    Woke {
        /// The step's index.
        step: usize,
        /// Who ended the wait: `None` for a timer, the owner or an operator on their
        /// routes, or the holder of the token.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<Caller>,
    },
    /// Someone paused it.
    Paused {
        /// Who.
        by: Actor,
    },
    /// Someone resumed it.
    Resumed {
        /// Who.
        by: Actor,
    },
}

/// Who ended a step's wait for its callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Caller {
    /// The holder of its token.
    Token,
    /// The task's owner, on its own route.
    Owner,
    /// An operator.
    Operator,
}

/// A submission refused for a task's id: when, and a digest of its request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedSubmission {
    /// When it was refused.
    pub at: Timestamp,
    /// Its request's digest, so that it is refused once however often it comes.
    pub fingerprint: String,
}

/// How an agent's answer ended a step's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// It succeeded.
    Succeeded,
    /// It failed for good.
    Failed,
    /// It succeeded with an answer that cannot be kept.
    Unusable,
}

/// Who acted on a task: the caller who owns it, or an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Actor {
    /// The task's owner, on its own routes.
    Owner,
    /// An operator, on the operator's routes.
    Operator,
    /// Its parent task, which was undone or cancelled, or reran it.
    Parent,
}

impl Actor {
    /// How the API and alerts name it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Owner => "its owner",
            Self::Operator => "an operator",
            Self::Parent => "its parent task",
        }
    }
}

/// Who asked for an action on a task, when, and in which bulk action if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Who asked.
    pub by: Actor,
    /// When.
    pub at: Timestamp,
    /// The bulk action that took the task, by the id its operator gave it: a bulk
    /// action run again takes no task twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
}

/// A resubmission: the run it started, and whether it gave the task a new input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resubmission {
    /// The run it started.
    pub run: u32,
    /// Who asked, and when.
    #[serde(flatten)]
    pub request: Request,
    /// Whether the run has a new input (the one before is kept in [`Order::earlier`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub edited: bool,
}

/// The order (business) data of a task, kept beside its state and written in the
/// same transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    /// The task it belongs to.
    pub task_id: TaskId,
    /// The input of the current run.
    pub input: Value,
    /// The inputs an edited resubmission replaced, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<EarlierInput>,
}

impl Order {
    /// Whether it is older than `task`: the input of the task's last edited
    /// resubmission is not yet in it. A read of a task's two items that is not
    /// consistent may find the task's after that write and the order's before.
    #[must_use]
    pub fn predates(&self, task: &Task) -> bool {
        task.resubmissions
            .iter()
            .rev()
            .find(|resubmission| resubmission.edited)
            .is_some_and(|edited| {
                !self
                    .earlier
                    .iter()
                    .any(|earlier| earlier.until_run + 1 == edited.run)
            })
    }
}

/// An input a resubmission replaced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EarlierInput {
    /// The last run that had it.
    pub until_run: u32,
    /// The input.
    pub input: Value,
}
