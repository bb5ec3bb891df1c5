//! Who asked what of a task: a request (by whom, for which batch), a resubmission,
//! a submission refused.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::time::Timestamp;

use super::Actor;

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
    /// Of a repair: why, and what it changed ([`crate::decide::repair`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<RepairNote>,
}

/// What a repair changed, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RepairNote {
    /// Why, in the operator's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The patches as given: `{"input": ..., "outputs": {"<step>": ...}}`.
    pub patch: serde_json::Value,
    /// The step it ran the task again from, when it named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The steps it ran again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_again: Vec<String>,
}
