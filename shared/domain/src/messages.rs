//! The messages between the actors, and what the caller and the operator are sent.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::ids::TaskId;
use super::task::{Task, TaskState};
use super::workflow::RetryPolicy;
use crate::flow::Grant;
use crate::time::Timestamp;

/// What the scheduler consumes: its own queue and the agents' responses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SchedulerMessage {
    /// Claim the task if it waits for a scheduler, and run its next step.
    Run {
        /// The task.
        task_id: TaskId,
    },
    /// An agent's answer.
    Response(AgentResponse),
    /// A submission the API accepted in buffered ingestion, for a scheduler to create.
    Submit(Buffered),
    /// A lease's end: sent when the lease is taken, delayed until it ends, so that
    /// an expired lease is acted on within seconds (the supervisor's sweep is the
    /// backstop when this message is lost).
    Deadline {
        /// The task.
        task_id: TaskId,
        /// The lease's end (complete-by).
        at: Timestamp,
    },
    /// A child task has ended: its parent's step counts it.
    ChildEnded(ChildEnded),
    /// A call waiting for its gates' slots has them: it is sent.
    Granted(Grant),
    /// A gate's rate has a token again: its line moves on.
    Gate {
        /// The gate, by name.
        gate: String,
    },
}

/// A child task's end, told to the step of its parent that started it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildEnded {
    /// The parent task.
    pub task_id: TaskId,
    /// The parent's step, by index.
    pub step: usize,
    /// The item the child is for.
    pub item: u32,
    /// The parent's run the child ran in.
    pub run: u32,
    /// How the child ended: Processed, or Error (failed, undone, or never started).
    pub state: TaskState,
    /// Whether the child, in Error, left an effect that a person must undo.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub needs_a_person: bool,
}

impl ChildEnded {
    /// The end of `child`, a child task that has ended, for its parent.
    #[must_use]
    pub fn of(child: &Task) -> Option<Self> {
        let parent = child.parent.as_ref()?;
        child.state.is_final().then(|| Self {
            task_id: parent.task.clone(),
            step: parent.step,
            item: parent.item,
            run: parent.run,
            state: child.state,
            needs_a_person: child.needs_a_person(),
        })
    }
}

impl SchedulerMessage {
    /// Its `type`, in errors.
    #[must_use]
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Run { .. } => "run",
            Self::Response(_) => "response",
            Self::Submit(_) => "submit",
            Self::Deadline { .. } => "deadline",
            Self::ChildEnded(_) => "child ended",
            Self::Granted(_) => "granted",
            Self::Gate { .. } => "gate",
        }
    }
}

/// A submission accepted and not yet created: what it asks, of which workflow
/// version (stored when it was accepted), and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Buffered {
    /// The workflow and the version it was checked against.
    pub workflow: super::task::WorkflowRef,
    /// The submission, checked.
    pub submission: crate::submission::Submission,
    /// When the API accepted it.
    pub accepted_at: Timestamp,
}

impl Buffered {
    /// The [`SchedulerMessage::Submit`] that carries this submission, written from a
    /// borrow: the same JSON, without a copy of the submission to wrap.
    #[must_use]
    pub fn as_message(&self) -> impl Serialize + '_ {
        #[derive(Serialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        enum Borrowed<'a> {
            Submit(&'a Buffered),
        }
        Borrowed::Submit(self)
    }
}

/// Run the step's remote call, or undo it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// The step's own call.
    Call,
    /// The step's compensation.
    Compensate,
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
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_buffered_submission_written_from_a_borrow_reads_back_as_its_submit_message() {
        let buffered: Buffered = serde_json::from_value(json!({
            "workflow": {"name": "drone-delivery", "version": 2},
            "submission": {"id": "t-1", "input": {"weight_kg": 1.5}, "notify": null},
            "accepted_at": 1_800_000_000_000_u64,
        }))
        .expect("a buffered submission");
        let text = serde_json::to_string(&buffered.as_message()).expect("JSON");
        let read: SchedulerMessage = serde_json::from_str(&text).expect("a scheduler message");
        assert_eq!(read, SchedulerMessage::Submit(buffered.clone()));
        assert_eq!(
            text,
            serde_json::to_string(&SchedulerMessage::Submit(buffered)).expect("JSON")
        );
    }
}
