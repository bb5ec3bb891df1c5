//! What the system tells others of a task: its caller, by a notification on its
//! queue ([`Notification`]), and an operator, by an alert ([`Alert`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ids::TaskId;
use crate::task::TaskState;
use crate::time::Timestamp;
use crate::trace::TraceContext;

/// A status change, posted to the caller's notification queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    /// The task, as its owner named it, to correlate with the submission.
    pub task_id: TaskId,
    /// Its new state.
    pub state: TaskState,
    /// The task's version once the change is written. A queue keeps no order between
    /// the functions that post to it, so a caller orders the notifications by this;
    /// the states one write goes through (Compensating, then Error when nothing is
    /// left to undo) share it and are posted in that order.
    pub version: u64,
    /// Why it failed, for Error.
    pub error: Option<String>,
    /// When it changed.
    pub at: Timestamp,
    /// The steps that wait for their callback at this version, with their tokens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callbacks: Vec<CallbackWait>,
    /// Of the change a repair made: who made it, when, why, and what it changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<crate::task::Resubmission>,
}

/// A step that waits for its callback: what ends the wait, and until when it may.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CallbackWait {
    /// The step's name.
    pub step: String,
    /// The token that ends its wait: `POST /callbacks/{token}`.
    pub token: String,
    /// When the wait times out.
    pub until: Timestamp,
}

/// An operator must look at a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    /// The task.
    pub task_id: TaskId,
    /// The task's run that failed (an operator's resubmission starts another).
    pub run: u32,
    /// Its workflow.
    pub workflow: String,
    /// Why it failed.
    pub reason: String,
    /// Steps whose compensation failed: their effects must be undone by hand.
    pub compensation_failed: Vec<String>,
    /// Steps whose effect may be in place and that have no compensation: a person
    /// decides whether to undo them by hand; a resubmission calls them again under
    /// the same idempotency keys, so the service does not repeat them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_undone: Vec<String>,
    /// When the task reached Error.
    pub at: Timestamp,
    /// The task's trace, under its run's span: where to look for what it went
    /// through (`trace.trace_id`), and what an alert's subscriber continues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
}
