//! What travels between the functions on their own queues: the scheduler's messages
//! (a run, a deadline, a grant, a buffered submission, a child's end). Internal: any
//! of it may change with a release, as long as a message of the release before is
//! still read.

use serde::{Deserialize, Serialize};

use super::AgentResponse;
use crate::flow::Grant;
use crate::ids::TaskId;
use crate::task::{Task, TaskState};
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
    /// Of a branch of a state machine (a Parallel's, a Map's item): how it ended, for
    /// the state's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<Box<crate::machine::BranchEnd>>,
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
            branch: parent
                .scope
                .as_deref()
                .and_then(|scope| crate::machine::BranchEnd::of(scope, child))
                .map(Box::new),
        })
    }

    /// That `child`, an execution a Task started and waits for no more of, has
    /// started: for its parent, which ends its Task with it.
    #[must_use]
    pub fn started(child: &Task) -> Option<Self> {
        let parent = child.parent.as_ref()?;
        let scope = parent.scope.as_deref()?;
        if scope.execution != Some(crate::machine::Awaited::Start) {
            return None;
        }
        let end = crate::machine::BranchEnd::of(scope, child).unwrap_or_else(|| {
            crate::machine::BranchEnd {
                round: scope.round,
                started_at: Some(child.created_at),
                ..crate::machine::BranchEnd::default()
            }
        });
        Some(Self {
            task_id: parent.task.clone(),
            step: parent.step,
            item: parent.item,
            run: parent.run,
            state: child.state,
            needs_a_person: false,
            branch: Some(Box::new(end)),
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
    pub workflow: crate::task::WorkflowRef,
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
