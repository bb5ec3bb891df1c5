//! How the API shows a task's history: each event, its times in RFC 3339.

use schemars::JsonSchema;
use serde::Serialize;

use sas_domain::messages::Operation;
use sas_domain::task::{Actor, Answer, Caller, Event, Happened, TaskState};
use sas_domain::time::Timestamp;

/// An instant as a caller reads it: RFC 3339.
pub(crate) fn time(at: Option<Timestamp>) -> Option<String> {
    at.map(Timestamp::to_rfc3339)
}

/// Something that happened to a task, and when.
#[derive(Debug, Serialize, JsonSchema)]
pub struct EventView {
    /// When.
    at: String,
    /// What.
    #[serde(flatten)]
    what: HappenedView,
}

/// What happened to a task ([`Happened`], with its times in RFC 3339).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum HappenedView {
    /// A step's call or compensation was sent to its agent.
    Sent {
        /// The step's index.
        step: usize,
        /// Its call, or its compensation.
        operation: Operation,
        /// Which attempt.
        attempt: u32,
        /// When it must be done by.
        complete_by: String,
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
        /// When the supervisor's retry is due; null when it gave up.
        retry_at: Option<String>,
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
        #[serde(skip_serializing_if = "Option::is_none")]
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
        /// When the wait ends.
        until: String,
    },
    /// A step's call waits for its service's slots.
    Queued {
        /// The step's index.
        step: usize,
        /// Its call, or its compensation.
        operation: Operation,
        /// Which attempt.
        attempt: u32,
    },
    /// A step's wait ended: its timer, or its callback used.
    Woke {
        /// The step's index.
        step: usize,
        /// Who used its callback (`token`, `owner`, `operator`); absent for a timer.
        #[serde(skip_serializing_if = "Option::is_none")]
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

impl EventView {
    pub(crate) fn of(event: &Event) -> Self {
        let what = match event.what().clone() {
            Happened::Sent {
                step,
                operation,
                attempt,
                complete_by,
            } => HappenedView::Sent {
                step,
                operation,
                attempt,
                complete_by: complete_by.to_rfc3339(),
            },
            Happened::Answered {
                step,
                operation,
                attempt,
                outcome,
            } => HappenedView::Answered {
                step,
                operation,
                attempt,
                outcome,
            },
            Happened::Expired {
                step,
                operation,
                attempt,
                retry_at,
            } => HappenedView::Expired {
                step,
                operation,
                attempt,
                retry_at: time(retry_at),
            },
            Happened::Cancelled { by } => HappenedView::Cancelled { by },
            Happened::Resubmitted { run } => HappenedView::Resubmitted { run },
            Happened::Repaired { run, by, reason } => HappenedView::Repaired { run, by, reason },
            Happened::Moved {
                from_version,
                to_version,
                by,
            } => HappenedView::Moved {
                from_version,
                to_version,
                by,
            },
            Happened::State { state } => HappenedView::State { state },
            Happened::Refused => HappenedView::Refused,
            Happened::Skipped { step } => HappenedView::Skipped { step },
            Happened::Waiting {
                step,
                attempt,
                until,
            } => HappenedView::Waiting {
                step,
                attempt,
                until: until.to_rfc3339(),
            },
            Happened::Queued {
                step,
                operation,
                attempt,
            } => HappenedView::Queued {
                step,
                operation,
                attempt,
            },
            Happened::Woke { step, by } => HappenedView::Woke { step, by },
            Happened::Paused { by } => HappenedView::Paused { by },
            Happened::Resumed { by } => HappenedView::Resumed { by },
        };
        Self {
            at: event.at().to_rfc3339(),
            what,
        }
    }
}
