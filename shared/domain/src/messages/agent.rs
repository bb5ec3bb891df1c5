//! The agents' contract, published as JSON Schemas (`shared/domain/schemas/`): what
//! the scheduler asks of an agent ([`AgentRequest`]) and what the agent answers
//! ([`AgentMessage`]). An agent in any language implements it: a change here is a
//! change to a published contract (see `CHANGELOG.md`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::ids::TaskId;
use crate::time::Timestamp;
use crate::workflow::RetryPolicy;

/// Run the step's remote call, or undo it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// The step's own call.
    Call,
    /// The step's compensation.
    Compensate,
}

impl Operation {
    /// Its name, as messages write it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Call => "call",
            Self::Compensate => "compensate",
        }
    }
}

/// The HTTP method of a step's operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    /// POST, unless the workflow names another.
    #[default]
    Post,
    /// PUT.
    Put,
    /// PATCH.
    Patch,
    /// DELETE.
    Delete,
}

impl Method {
    /// Its name, as HTTP has it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Patch => "PATCH",
            Self::Delete => "DELETE",
        }
    }
}

/// What the scheduler asks of an agent, on the agent-request queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentRequest {
    /// The task.
    pub task_id: TaskId,
    /// The task's run (bumped by a resubmission).
    pub run: u32,
    /// The step's index in the workflow.
    pub step: usize,
    /// The step's name.
    pub step_name: String,
    /// The step's attempt; the response must carry it back.
    pub attempt: u32,
    /// Call or compensate.
    pub operation: Operation,
    /// The remote service.
    pub agent: String,
    /// The service's operation: its method (POST when a message has none)...
    #[serde(default)]
    pub method: Method,
    /// ...and its path.
    pub path: String,
    /// After this instant the agent stops and answers nothing.
    pub complete_by: Timestamp,
    /// The same for every attempt of this step in this run.
    pub idempotency_key: String,
    /// How the agent retries.
    pub retry: RetryPolicy,
    /// The body sent to the remote service.
    #[schemars(with = "Value")]
    pub payload: Payload,
    /// The task as the write that sent this request left it, sealed: opaque to the
    /// agent, which gives it back with its response, from which the scheduler
    /// decides without reading the task again (where reads are billed). Absent
    /// elsewhere; an agent that drops it costs a read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed_task: Option<String>,
    /// When the task was created, to give back with the response: a task whose id is
    /// used again once the first expired repeats its runs, steps and attempts, and
    /// only this tells their answers apart. Absent from requests of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_created_at: Option<Timestamp>,
    /// Whether the payload's parts too large for a message are references to values
    /// kept in its task's scope ([`crate::payload::by_reference`]), which the agent
    /// reads back before the call. Absent where the payload is whole.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parts_apart: bool,
}

/// A request's body, kept as the JSON text it was written as: carried to the
/// agent and sent on to the service without being parsed and written again.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Payload(Box<RawValue>);

impl Payload {
    /// `value` written as JSON.
    ///
    /// # Errors
    /// When `value` cannot be written as JSON (a map with keys that are not text).
    pub fn of(value: &impl Serialize) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(Self)
    }

    /// The JSON text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The JSON as a value, to look into.
    #[must_use]
    pub fn value(&self) -> Value {
        // Valid JSON by construction: written by `of`, or checked when read.
        serde_json::from_str(self.0.get()).unwrap_or_default()
    }
}

/// Equal when the texts are.
impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

/// How a remote call ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// The service did it.
    Succeeded {
        /// The service's answer.
        output: Value,
    },
    /// The service refused for good (a non-transient error).
    Failed {
        /// The service's reason.
        error: String,
    },
    /// The service did it, but its answer cannot be kept (larger than a step's
    /// output may be, or not JSON): the effect is in place; the answer is dropped.
    Unusable {
        /// What was too large, and the limit.
        error: String,
    },
}

/// An agent's answer to an [`AgentRequest`], sent only before its complete-by time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentResponse {
    /// The task.
    pub task_id: TaskId,
    /// The run of the request.
    pub run: u32,
    /// The step's index.
    pub step: usize,
    /// The attempt of the request.
    pub attempt: u32,
    /// Call or compensate.
    pub operation: Operation,
    /// The result.
    pub outcome: Outcome,
    /// The request's `sealed_task`, given back as it came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed_task: Option<String>,
    /// The request's `task_created_at`, given back as it came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_created_at: Option<Timestamp>,
    /// Whether a succeeded outcome's `output` is a reference to the value the agent
    /// stored among its task's values, too large for a message, which the scheduler
    /// reads back. Absent where the output is whole.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_apart: bool,
}

impl AgentResponse {
    /// `outcome`, answering `request`: its task, run, step, attempt and operation,
    /// and its sealed task and its task's creation given back.
    #[must_use]
    pub fn answering(request: AgentRequest, outcome: Outcome) -> Self {
        Self {
            task_id: request.task_id,
            run: request.run,
            step: request.step,
            attempt: request.attempt,
            operation: request.operation,
            outcome,
            sealed_task: request.sealed_task,
            task_created_at: request.task_created_at,
            output_apart: false,
        }
    }
}

/// What an agent sends on the agent-response queue: its [`AgentResponse`], tagged
/// `"type": "response"`, as the scheduler reads it among its [`SchedulerMessage`]s.
/// With [`AgentRequest`], the contract an agent in any language implements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMessage {
    /// The answer.
    Response(AgentResponse),
}
