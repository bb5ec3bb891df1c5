//! A task's history: the last events that happened to it, each with when and who.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::messages::Operation;
use crate::time::Timestamp;

use super::{Caller, TaskState};

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
    /// Someone repaired it: patched it, or ran it again from a step, in a new run.
    Repaired {
        /// The run.
        run: u32,
        /// Who.
        by: Actor,
        /// Why, in their words.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Someone moved it onto another version of its workflow.
    Moved {
        /// The version it was on.
        from_version: u32,
        /// The version it is on.
        to_version: u32,
        /// Who.
        by: Actor,
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
