//! A step's definition, every setting resolved: the service it calls, its
//! operations, its budget, the agent's retries and the supervisor's.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::flow::Limit;
use crate::workflow::children::ChildrenStep;
use crate::workflow::file::{
    default_attempts, default_extended_wait, default_initial_backoff, default_max_backoff,
    default_threshold, default_true, duration_text, optional_duration_text,
};
use crate::workflow::parallel::Branch;
use crate::workflow::values::{Endpoint, FieldSource};
use crate::workflow::waits::{CallbackSettings, Guard, SleepStep, WaitStep};
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
    pub(super) fn is_array(self) -> bool {
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

/// What a step does: each kind has its definition here, its decisions in
/// [`crate::decide`] and its view in the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepKind {
    /// It calls a service, through the service's agent.
    Call(Box<CallStep>),
    /// It starts child tasks: one (a child workflow) or one per item (a map).
    Children(ChildrenStep),
    /// It sleeps, for a while or until an instant.
    Sleep(SleepStep),
    /// It calls nothing and waits for its callback (a person's approval).
    Wait(WaitStep),
}

/// A step that calls a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallStep {
    /// The agent (remote service) that performs the step.
    pub agent: String,
    /// The service's operation the step calls.
    pub call: Endpoint,
    /// The operation that undoes the step, if it must be undone on failure.
    pub compensation: Option<Endpoint>,
    /// The step changes nothing at its service (a check, a read): it is run again
    /// freely, under a new idempotency key, by any resubmission, and never undone. A
    /// step that is not read-only and has no compensation has an effect that cannot
    /// be undone.
    pub read_only: bool,
    /// The time the step has to complete, from its dispatch.
    pub complete_by: Duration,
    /// The agent's retries.
    pub retry: RetryPolicy,
    /// The supervisor's recovery.
    pub supervision: Supervision,
    /// What the step sends its service, by field name, when the definition says: then
    /// the service sees only these, not the whole input and every earlier result.
    pub fields: Option<BTreeMap<String, FieldSource>>,
    /// With it, the call carries a callback token and the step ends when the token is
    /// used, not when the service answers.
    pub callback: Option<CallbackSettings>,
    /// The step's own limit, narrower than its service's ([`crate::flow`]).
    pub limit: Option<Limit>,
    /// Its service's limit, as the deployment's settings give it
    /// ([`crate::workflow::Registry::limit_services`]).
    pub service_limit: Option<Limit>,
}

impl CallStep {
    /// The gates a call of step `step` of workflow `workflow` passes, in order (its
    /// own, then its service's), for a task with `input`: each gate's name and limit.
    #[must_use]
    pub fn gates(&self, workflow: &str, step: &str, input: &Value) -> Vec<(String, &Limit)> {
        let own = self
            .limit
            .as_ref()
            .map(|limit| (limit.gate(&format!("step:{workflow}/{step}"), input), limit));
        let service = self
            .service_limit
            .as_ref()
            .map(|limit| (limit.gate(&format!("service:{}", self.agent), input), limit));
        own.into_iter().chain(service).collect()
    }
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

    /// The callback it waits for, with a call or alone.
    #[must_use]
    pub fn callback(&self) -> Option<&CallbackSettings> {
        match &self.kind {
            StepKind::Call(call) => call.callback.as_ref(),
            StepKind::Wait(wait) => Some(&wait.callback),
            StepKind::Children(_) | StepKind::Sleep(_) => None,
        }
    }

    /// What the supervisor does when its complete-by passes, for a step that is
    /// retried then: a call, or a wait for a callback. (A timer's end is its success,
    /// and children are watched.)
    #[must_use]
    pub fn supervision(&self) -> Option<&Supervision> {
        match &self.kind {
            StepKind::Call(call) => Some(&call.supervision),
            StepKind::Wait(wait) => Some(&wait.supervision),
            StepKind::Children(_) | StepKind::Sleep(_) => None,
        }
    }

    /// Whether it has something that undoes it: a compensation, or children undone
    /// by their own compensations.
    #[must_use]
    pub fn can_be_undone(&self) -> bool {
        match &self.kind {
            StepKind::Call(call) => call.compensation.is_some(),
            StepKind::Children(_) => true,
            StepKind::Sleep(_) | StepKind::Wait(_) => false,
        }
    }

    /// Whether a failed task leaves nothing of the step in place: it has a
    /// compensation, or, read-only, no effect; children are undone by their own; a
    /// timer or a wait has no effect.
    #[must_use]
    pub fn is_undone_on_failure(&self) -> bool {
        match &self.kind {
            StepKind::Call(call) => call.read_only || call.compensation.is_some(),
            StepKind::Children(_) | StepKind::Sleep(_) | StepKind::Wait(_) => true,
        }
    }
}
