//! The decisions of submission, scheduler, supervisor and operator: each reads a
//! task's state and returns its next state and the effects to perform after it is
//! written. Nothing here does I/O or reads a clock; the one thing drawn at random is
//! a new task's secret ([`crate::callback::new_key`]).
//!
//! One room a job: `submit` creates tasks, `steps` runs their steps
//! in order and undoes them in reverse (each as its kind does, [`crate::kinds`]),
//! `supervise` acts on expired leases, `waits` holds what waiting steps share and
//! the pause, `delivery` keeps what a task owes others (notifications, alerts)
//! until known delivered, and `operator` resubmits and cancels; `change` holds the
//! moves they share. The decisions of one kind's own events live in its module
//! (a call's answer, a callback's use, a child's end), re-exported here.

use std::time::Duration;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::flow::{Admission, CallRef};
use crate::ids::{Owner, QueueName, TaskId};
use crate::messages::{AgentRequest, Alert, ChildEnded};
use crate::task::{Order, Outbound, Task};
use crate::time::Timestamp;

pub(crate) mod change;
mod delivery;
mod migrate;
mod operator;
pub mod repair;
pub(crate) mod steps;
mod submit;
mod supervise;
#[cfg(test)]
mod tests;
mod waits;

pub use crate::kinds::call::{SLOT_RECHECK, on_granted, on_response};
pub use crate::kinds::callback::{CallbackOutcome, CallbackUse, on_callback, on_heartbeat};
pub use crate::kinds::children::{never_started, on_child_ended, rerun_child, stop_as_child};
pub use delivery::{
    ALERT_REDELIVERY, MAX_ALERT_REDELIVERY, MAX_NOTIFICATION_AGE, MAX_OUTBOX, alert_published,
    callback_waits, notifications_sent,
};
pub use migrate::{Move, MovePlan, MovedStep, move_task, plan_move};
pub(crate) use operator::rerun;
pub use operator::{Refused, Resubmit, cancel, resubmit, stop_execution};
pub use repair::{Repair, RepairPlan, plan_repair, repair};
pub use steps::on_run;
pub use submit::{MAX_REFUSED, creation_again, refuse_submission, submit, submit_claimed};
pub(crate) use supervise::HEARTBEAT_MISSED;
pub use supervise::{on_deadline, on_expired};
pub use waits::{pause, resume};

/// Something to do once the new state is written.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Send a request to an agent. Must be sent: a lease covers its loss.
    Dispatch(AgentRequest),
    /// Ask a scheduler to pick the task up after `delay`. Must be sent: a lease covers its loss.
    Schedule {
        /// The task.
        task_id: TaskId,
        /// How long the message stays invisible.
        delay: Duration,
    },
    /// Tell the caller of a status change. Kept in the task's outbox until it is
    /// sent ([`notifications_sent`]): a lease covers its loss.
    Notify {
        /// The task, as stored.
        task_id: TaskId,
        /// The caller's queue, and what it is told.
        outbound: Outbound,
    },
    /// Alert an operator.
    Alert(Alert),
    /// Start child tasks (or find them started, and tell their parent of those that
    /// have ended). Performed after the write; the step's watch covers its loss.
    StartChildren {
        /// Whose children.
        of: ChildrenOf,
        /// Each child's item and input.
        children: Vec<(u32, Value)>,
        /// Whether each is created claimed, its first request sent by the process
        /// that starts it (a scheduler, at the first start); otherwise Pending, with a
        /// Run message for a scheduler (a start again from the step's watch, which
        /// may be the supervisor's: its role sends no agent request).
        claimed: bool,
    },
    /// Have child tasks cancelled if running (or, not yet created, kept from
    /// starting) and, with `undo`, undone if Processed; their parent told when they
    /// have ended. Performed after the write; the step's watch covers its loss.
    StopChildren {
        /// Whose children.
        of: ChildrenOf,
        /// The children's items.
        items: Vec<u32>,
        /// Whether those Processed are undone (the step is undone), or left for the
        /// step's undo, at its cap (the parent was cancelled while they ran).
        undo: bool,
    },
    /// Tell a child's parent that it ended. Must be sent: the parent's watch covers
    /// its loss.
    TellParent(ChildEnded),
    /// Put a call in its gates' lines, and give it their slots when its turn comes
    /// ([`crate::flow`]). Performed after the write; the step's slot wait covers its
    /// loss (the supervisor asks again).
    Admit(Admission),
    /// Give back the slots a call held. Best effort: a slot lost comes back when its
    /// hold ends.
    Release {
        /// The call.
        call: CallRef,
        /// The gates, by name.
        gates: Vec<String>,
    },
    /// Ask a scheduler to check the task's lease when it ends, `at`; best effort:
    /// the supervisor's sweep finds a lease whose deadline message was lost.
    Deadline {
        /// The task.
        task_id: TaskId,
        /// The lease's end.
        at: Timestamp,
    },
}

/// Which version of their workflow children run, where not the newest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildVersion {
    /// The version the parent pinned (a Parallel's and a Map's branches: the parent's
    /// own).
    Pinned(u32),
    /// A state machine's published version (its number) or alias (its name), as the
    /// ARN a Task started the execution with names it.
    Qualified(String),
}

impl ChildVersion {
    /// The alias a child is started through, where it is one.
    #[must_use]
    pub fn alias(&self) -> Option<String> {
        match self {
            Self::Qualified(qualifier) => crate::machine::catalog::Qualifier::of(qualifier)
                .alias()
                .map(str::to_owned),
            Self::Pinned(_) => None,
        }
    }
}

/// The children of a step: whose, and what they run.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildrenOf {
    /// The parent.
    pub parent: TaskId,
    /// Its step, by index.
    pub step: usize,
    /// The step's name, in the children's ids.
    pub step_name: String,
    /// The parent's run.
    pub run: u32,
    /// The workflow the children run...
    pub workflow: String,
    /// ...in this version, if any (the newest otherwise).
    pub version: Option<ChildVersion>,
    /// The parent's notification queue, which the children tell too.
    pub notify: Option<QueueName>,
    /// The parent's owner, who owns the children.
    pub owner: Option<Owner>,
    /// The parent's pinned versions, which the children keep.
    pub pinned: BTreeMap<String, u32>,
    /// The parent's priority, which the children keep.
    pub priority: u8,
    /// Of the branches of a state machine's Parallel or Map: what each starts with
    /// beyond its input.
    pub scope: Option<Box<crate::machine::BranchScope>>,
    /// The trace the children continue: their parent step's span.
    pub trace: Option<crate::trace::TraceContext>,
}

/// What a decision decided: logged, and counted in the `Decisions` metric under
/// its name ([`Verdict::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    /// A Run message for a task that is not Pending, or is claimed: ignored.
    NotWaitingForScheduler,
    /// The task is claimed and its first step sent.
    Claimed,
    /// A claimed task's step (in a branch) is sent again after its retry's wait.
    Resumed,
    /// A response of another run, step or attempt: ignored.
    StaleResponse,
    /// A step's result is recorded and the next move made.
    Recorded,
    /// An Error alert not known to be published is raised again.
    AlertedAgain,
    /// Notifications not known to be sent are sent again.
    NotifiedAgain,
    /// Notifications are known sent: the task keeps them no longer.
    NotificationsSent,
    /// Those notifications were known sent already.
    NotificationsClearedAlready,
    /// The lease has not expired: nothing to do.
    LeaseLive,
    /// A call waiting for its gates' slots has them, and is sent.
    Granted,
    /// Slots granted to a call that no longer waits for them: given back.
    GrantUnused,
    /// A call has waited a while for its gates' slots: asked for again.
    SlotsAskedAgain,
    /// A long lease is near enough its end for a deadline message, which is sent.
    LeaseWatched,
    /// A message of a live step or compensation is sent again.
    SentAgain,
    /// Past the failure threshold: the task is compensated and ends in Error.
    GaveUp,
    /// The expired steps are retried (each a Run message of its own, after its wait).
    Retry,
    /// A deadline message for a lease that has since moved or ended: ignored.
    DeadlineSuperseded,
    /// A deadline message came before its lease's end: another is asked for.
    DeadlineMoved,
    /// The alert was marked published already.
    AlertClearedAlready,
    /// The alert is marked published.
    AlertPublished,
    /// An operator resubmitted a task in Error.
    Resubmitted,
    /// An operator repaired a task.
    Repaired,
    /// An operator moved a task onto another version of its workflow.
    Moved,
    /// A task was asked to stop: it compensates once the calls it has out are done.
    CancelRequested,
    /// A task asked to stop already: nothing more to do.
    CancelledAlready,
    /// A step's children were found late: started again, or asked again.
    ChildrenWatched,
    /// A child's end was counted by its parent's step.
    ChildCounted,
    /// A child task was undone (or cancelled) for its parent.
    StoppedForParent,
    /// A child task was run again for its parent's new run.
    RerunForParent,
    /// A buffered submission that differs from the task's own, recorded on the task.
    SubmissionRefused,
    /// That submission again: recorded already.
    RefusedAlready,
    /// A step's callback was used: its result recorded, or its error.
    CallbackUsed,
    /// A step's callback was used while its call was still out: kept until the call
    /// is settled.
    CallbackKept,
    /// A heartbeat pushed a callback's lease on.
    HeartbeatRecorded,
    /// A heartbeat while the call was out, before the wait for the callback began:
    /// nothing to push.
    HeartbeatEarly,
    /// A task was paused.
    PauseRequested,
    /// A task paused already.
    PausedAlready,
    /// A paused task was resumed.
    ResumeRequested,
    /// A task not paused: nothing to resume.
    NotPaused,
    /// A paused task's lease ended with nothing out: it holds none until resumed.
    PausedIdle,
    /// A timer ended: its step is Processed.
    Woke,
    /// A worker took an activity's visit ([`crate::machine::activities`]).
    ActivityTaken,
}

impl Verdict {
    /// Its name in logs and metrics.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NotWaitingForScheduler => "not waiting for a scheduler",
            Self::Claimed => "claimed",
            Self::Resumed => "resumed",
            Self::StaleResponse => "stale response",
            Self::Recorded => "recorded",
            Self::AlertedAgain => "alerted again",
            Self::NotifiedAgain => "notified again",
            Self::NotificationsSent => "notifications sent",
            Self::NotificationsClearedAlready => "notifications cleared already",
            Self::LeaseLive => "lease live",
            Self::Granted => "granted",
            Self::GrantUnused => "grant unused",
            Self::SlotsAskedAgain => "slots asked again",
            Self::LeaseWatched => "lease watched",
            Self::SentAgain => "sent again",
            Self::GaveUp => "gave up",
            Self::Retry => "retry",
            Self::DeadlineSuperseded => "deadline superseded",
            Self::DeadlineMoved => "deadline moved",
            Self::AlertClearedAlready => "alert cleared already",
            Self::AlertPublished => "alert published",
            Self::Resubmitted => "resubmitted",
            Self::Repaired => "repaired",
            Self::Moved => "moved",
            Self::CancelRequested => "cancel requested",
            Self::CancelledAlready => "cancelled already",
            Self::ChildrenWatched => "children watched",
            Self::ChildCounted => "child counted",
            Self::StoppedForParent => "stopped for parent",
            Self::RerunForParent => "rerun for parent",
            Self::SubmissionRefused => "submission refused",
            Self::RefusedAlready => "refused already",
            Self::CallbackUsed => "callback used",
            Self::CallbackKept => "callback kept",
            Self::HeartbeatRecorded => "heartbeat recorded",
            Self::HeartbeatEarly => "heartbeat early",
            Self::PauseRequested => "pause requested",
            Self::PausedAlready => "paused already",
            Self::ResumeRequested => "resume requested",
            Self::NotPaused => "not paused",
            Self::PausedIdle => "paused idle",
            Self::Woke => "woke",
            Self::ActivityTaken => "activity taken",
        }
    }
}

/// A decision: the task's next state, if it changes, and the effects to perform
/// once that state is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The state to write, conditional on the version that was read.
    pub next: Option<Task>,
    /// The order data to write with it, in the same transaction, when it changes.
    pub order: Option<Order>,
    /// What to do after the write succeeds.
    pub effects: Vec<Effect>,
    /// What was decided, for logs and metrics.
    pub verdict: Verdict,
}

impl Decision {
    /// A decision that changes nothing.
    #[must_use]
    pub fn ignore(verdict: Verdict) -> Self {
        Self {
            next: None,
            order: None,
            effects: Vec::new(),
            verdict,
        }
    }
}
