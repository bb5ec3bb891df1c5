//! A task's history: the last events that happened to it, each with when and who.

use std::sync::{Arc, OnceLock};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::messages::Operation;
use crate::time::Timestamp;

use super::{Caller, TaskState};

/// The most events a task keeps in its history; older ones are dropped.
pub const MAX_HISTORY: usize = 64;

/// Something that happened to a task, and when. Never changed once made, so that its
/// JSON, written by the first write of the task that keeps it, is kept with it and
/// shared by the task's copies: every later write of the task copies it rather than
/// encodes it again (a drone delivery's record is written six times, its history
/// growing at each).
#[derive(Clone, Deserialize)]
#[serde(from = "Fields<Happened>")]
pub struct Event {
    at: Timestamp,
    what: Happened,
    json: Arc<OnceLock<Box<RawValue>>>,
}

/// An event's fields, as its JSON holds them.
#[derive(Serialize, Deserialize)]
struct Fields<W> {
    at: Timestamp,
    #[serde(flatten)]
    what: W,
}

impl Event {
    /// `what` happened `at`.
    #[must_use]
    pub fn new(at: Timestamp, what: Happened) -> Self {
        Self {
            at,
            what,
            json: Arc::default(),
        }
    }

    /// When.
    #[must_use]
    pub fn at(&self) -> Timestamp {
        self.at
    }

    /// What.
    #[must_use]
    pub fn what(&self) -> &Happened {
        &self.what
    }
}

impl super::Task {
    /// Adds `what`, as of `at`, to its history, which keeps the last [`MAX_HISTORY`].
    pub(crate) fn log(&mut self, at: Timestamp, what: Happened) {
        if self.history.len() >= MAX_HISTORY {
            self.history.remove(0);
        }
        self.history.push(Event::new(at, what));
    }
}

impl From<Fields<Happened>> for Event {
    fn from(Fields { at, what }: Fields<Happened>) -> Self {
        Self::new(at, what)
    }
}

impl Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let json = self.json.get_or_init(|| {
            crate::to_raw_json(&Fields {
                at: self.at,
                what: &self.what,
            })
        });
        json.serialize(serializer)
    }
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        (self.at, &self.what) == (other.at, &other.what)
    }
}

impl Eq for Event {}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (f.debug_struct("Event"))
            .field("at", &self.at)
            .field("what", &self.what)
            .finish_non_exhaustive()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_written_as_its_fields_every_time_and_read_back() {
        let event = Event::new(
            Timestamp(1_000),
            Happened::Sent {
                step: 2,
                operation: Operation::Call,
                attempt: 1,
                complete_by: Timestamp(31_000),
            },
        );
        let copy = event.clone();
        let expected = r#"{"at":1000,"event":"sent","step":2,"operation":"call","attempt":1,"complete_by":31000}"#;
        // The first write makes its JSON; the next, and a copy's, give what it kept.
        assert_eq!(crate::to_json(&event), expected);
        assert_eq!(crate::to_json(&event), expected);
        assert_eq!(crate::to_json(&copy), expected);
        let read: Event = serde_json::from_str(expected).expect("an event");
        assert_eq!(read, event);
        assert_eq!(crate::to_json(&read), expected);
        assert_eq!(
            serde_json::to_value([&event]).expect("a value"),
            serde_json::json!([{"at": 1000, "event": "sent", "step": 2, "operation": "call",
                "attempt": 1, "complete_by": 31000}]),
        );
    }
}
