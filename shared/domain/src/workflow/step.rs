//! A step's definition, every setting resolved: its kind ([`crate::kinds`]), the
//! steps it waits for, the branches it is in, its conditions; and the settings more
//! than one kind shares: the agent's retries and the supervisor's.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::kinds::parallel::Branch;
use crate::kinds::{CallStep, CallbackSettings, ChildrenStep, StepKind, UndoOnFailure};
use crate::workflow::file::{
    default_attempts, default_extended_wait, default_initial_backoff, default_max_backoff,
    default_threshold, default_true, duration_text, optional_duration_text,
};
use crate::workflow::guard::Guard;
use serde_json::Value;

/// The JSON type an input field must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    /// A JSON string.
    String,
    /// Any JSON number.
    Number,
    /// A JSON number without a fraction.
    Integer,
    /// `true` or `false`.
    Boolean,
    /// A JSON object.
    Object,
    /// A JSON array.
    Array,
    /// A JSON array of strings.
    #[serde(rename = "array<string>")]
    StringArray,
    /// A JSON array of numbers.
    #[serde(rename = "array<number>")]
    NumberArray,
    /// A JSON array of objects (a map's items, say).
    #[serde(rename = "array<object>")]
    ObjectArray,
}

impl FieldType {
    /// Whether its values are arrays.
    pub(crate) fn is_array(self) -> bool {
        matches!(
            self,
            Self::Array | Self::StringArray | Self::NumberArray | Self::ObjectArray
        )
    }

    pub(super) fn admits(self, value: &Value) -> bool {
        let every = |item: Self| {
            value
                .as_array()
                .is_some_and(|items| items.iter().all(|v| item.admits(v)))
        };
        match self {
            Self::String => value.is_string(),
            Self::Number => value.is_number(),
            Self::Integer => value.is_i64() || value.is_u64(),
            Self::Boolean => value.is_boolean(),
            Self::Object => value.is_object(),
            Self::Array => value.is_array(),
            Self::StringArray => every(Self::String),
            Self::NumberArray => every(Self::Number),
            Self::ObjectArray => every(Self::Object),
        }
    }
}

/// How an agent retries a remote call within the step's complete-by time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Calls made at most, the first included.
    #[serde(default = "default_attempts")]
    pub attempts: u32,
    /// The backoff before the second call; it doubles for each call after.
    #[serde(default = "default_initial_backoff", with = "duration_text")]
    #[schemars(with = "String")]
    pub initial_backoff: Duration,
    /// The longest backoff.
    #[serde(default = "default_max_backoff", with = "duration_text")]
    #[schemars(with = "String")]
    pub max_backoff: Duration,
    /// Full jitter: each backoff is drawn uniformly from zero to its nominal value.
    #[serde(default = "default_true")]
    pub jitter: bool,
    /// The longest a single call may take; never past complete-by either way.
    #[serde(default, with = "optional_duration_text")]
    #[schemars(with = "Option<String>")]
    pub call_timeout: Option<Duration>,
}

/// What the supervisor does with a step whose complete-by time has passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Supervision {
    /// Failures (expired complete-by times) a step may have and still be retried;
    /// one more and the task is compensated and set to Error.
    #[serde(default = "default_threshold")]
    pub failure_threshold: u32,
    /// The wait before an ordinary retry.
    #[serde(default, with = "duration_text")]
    pub retry_delay: Duration,
    /// The wait before the last retry, when the failures reach the threshold,
    /// in the hope that the fault is resolved meanwhile.
    #[serde(default = "default_extended_wait", with = "duration_text")]
    pub extended_wait: Duration,
}

/// One step of a workflow, with every setting resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepDefinition {
    /// Unique within the workflow.
    pub name: String,
    /// What the step does.
    pub kind: StepKind,
    /// The steps that must be Processed before this one is sent, by index in the
    /// workflow's steps: the step before it in its branch (or in the workflow), or,
    /// for the first step after a parallel step, the last step of each branch.
    pub after: Vec<usize>,
    /// The branches of parallel steps the step is in, outermost first; empty for a
    /// step of the workflow's main line.
    pub within: Vec<Branch>,
    /// The conditions it runs under, outermost first (a parallel step's, then its
    /// own): when one does not hold at its turn, it is Skipped.
    pub when: Vec<Guard>,
}

impl StepDefinition {
    /// The call it makes, when it is a step that calls a service.
    #[must_use]
    pub fn call(&self) -> Option<&CallStep> {
        match &self.kind {
            StepKind::Call(call) => Some(call.as_ref()),
            _ => None,
        }
    }

    /// The children it starts, when it is a child workflow or a map.
    #[must_use]
    pub fn children(&self) -> Option<&ChildrenStep> {
        match &self.kind {
            StepKind::Children(children) => Some(children),
            _ => None,
        }
    }

    /// Of a state machine's Parallel or Map: its step.
    #[must_use]
    pub fn branches(&self) -> Option<&crate::machine::BranchesStep> {
        match &self.kind {
            StepKind::Branches(branches) => Some(branches),
            _ => None,
        }
    }

    /// The callback it waits for, with a call or alone.
    #[must_use]
    pub fn callback(&self) -> Option<&CallbackSettings> {
        self.kind.kind().callback()
    }

    /// Whether it has something that undoes it: a compensation, or children undone
    /// by their own compensations.
    #[must_use]
    pub fn can_be_undone(&self) -> bool {
        self.kind.kind().undo_on_failure() == UndoOnFailure::Undone
    }

    /// Whether a failed task leaves nothing of the step in place: it is undone, or
    /// has no effect (a read-only call, a timer, a wait).
    #[must_use]
    pub fn is_undone_on_failure(&self) -> bool {
        self.kind.kind().undo_on_failure() != UndoOnFailure::LeftInPlace
    }
}
