//! A step's state in its task's record: where it is, its attempts and failures,
//! what it waits for, its output or error, its children's counts.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::messages::Outcome;
use crate::time::Timestamp;

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

impl StepState {
    /// The state's name, as in the API.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Processing => "Processing",
            Self::Processed => "Processed",
            Self::Error => "Error",
            Self::TimedOut => "TimedOut",
            Self::Unusable => "Unusable",
            Self::Compensating => "Compensating",
            Self::Compensated => "Compensated",
            Self::CompensationFailed => "CompensationFailed",
            Self::Skipped => "Skipped",
        }
    }
}

/// One step's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The step's name in the workflow.
    pub name: Arc<str>,
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
            name: name.into(),
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
