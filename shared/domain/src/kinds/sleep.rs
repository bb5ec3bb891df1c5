//! A timer: `{"name": "cool-off", "sleep": "10m"}`, or
//! `{"name": "at-window", "sleep_until": "input.window_start"}`.
//!
//! A timer is a lease like a call's: its complete-by is its instant, and its end,
//! found by the deadline message or the supervisor's sweep, is its success.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::{
    CallbackSettings, Kind, KindView, LeaseEnd, NOTHING_TO_UNDO, Reads, StepKind, Summary,
    UndoOnFailure, foreign_setting,
};
use crate::decide::change::Change;
use crate::decide::steps::results;
use crate::machine::VisitWork;
use crate::messages::{Operation, Outcome};
use crate::task::{Order, Step, Waiting};
use crate::time::Timestamp;
use crate::workflow::file::{Fault, StepFile};
use crate::workflow::values::Scope;
use crate::workflow::{FieldSource, FieldType, Workflow};

/// A step that sleeps: for a while, or until an instant named in the input or an
/// earlier result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SleepStep {
    /// For this long, from the step's turn.
    For(Duration),
    /// Until the RFC 3339 instant this names.
    Until(FieldSource),
    /// A state machine's Wait state: until the instant its visit worked out when it
    /// was entered ([`crate::machine::VisitWork::Timer`]).
    Visit,
}

/// Resolves a step that sleeps (`sleep` or `sleep_until`), the steps named `known`
/// done by then; `None` for a step that does not sleep.
pub(crate) fn resolve(
    step: &StepFile,
    input: &BTreeMap<String, FieldType>,
    known: &HashSet<String>,
) -> Result<Option<StepKind>, Fault> {
    let at = |field: &str, message: &str| step.fault(field, message);
    let sleep = match (step.sleep, &step.sleep_until) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err(at(
                "sleep",
                "a step sleeps for a while or until an instant, not both",
            ));
        }
        (Some(duration), None) => SleepStep::For(duration),
        (None, Some(text)) => {
            let scope = Scope {
                step: &step.name,
                input,
                earlier: known,
                item: false,
            };
            let source =
                FieldSource::parse(text, &scope).map_err(|message| at("sleep_until", &message))?;
            if let FieldSource::Input(field) = &source
                && input.get(field) != Some(&FieldType::String)
            {
                return Err(at(
                    "sleep_until",
                    &format!("'{text}': must name a string input field (an RFC 3339 instant)"),
                ));
            }
            SleepStep::Until(source)
        }
    };
    if let Some(field) = foreign_setting(step, &["sleep", "sleep_until"]) {
        return Err(at(
            field,
            "a step that sleeps calls nothing and starts nothing",
        ));
    }
    Ok(Some(StepKind::Sleep(sleep)))
}

/// What a Wait state's step shows it sleeps until: its state says, at each visit.
const VISIT_UNTIL: &str = "the instant its Wait state gives";

impl Kind for SleepStep {
    fn start(&self, change: &mut Change, _: &Workflow, order: &Order, index: usize) {
        change.start_sleep(order, index, self);
    }

    /// Never asked: a timer has nothing to undo.
    fn undo(&self, _: &mut Change, _: &Workflow, _: &Order, _: usize) {}

    fn cancel(&self, _: &mut Change, _: usize) {}

    fn lease_ended(&self, _: &Step) -> LeaseEnd<'_> {
        LeaseEnd::Ended
    }

    fn undo_on_failure(&self) -> UndoOnFailure {
        UndoOnFailure::NothingToUndo
    }

    fn callback(&self) -> Option<&CallbackSettings> {
        None
    }

    /// The instant it sleeps until, where it names one.
    fn reads(&self) -> Reads<'_> {
        match self {
            Self::For(_) => Reads::default(),
            Self::Until(source) => Reads::only([source]),
            Self::Visit => Reads::EVERYTHING,
        }
    }

    fn service(&self) -> Option<&str> {
        None
    }

    fn view(&self) -> KindView {
        KindView::Sleep(match self {
            Self::For(duration) => SleepView {
                sleep: Some(humantime::format_duration(*duration).to_string()),
                sleep_until: None,
            },
            Self::Until(source) => SleepView {
                sleep: None,
                sleep_until: Some(source.to_string()),
            },
            Self::Visit => SleepView {
                sleep: None,
                sleep_until: Some(VISIT_UNTIL.to_owned()),
            },
        })
    }

    fn summary(&self) -> Summary {
        Summary {
            kind: "sleep",
            does: match self {
                Self::For(duration) => format!("sleep {}", humantime::format_duration(*duration)),
                Self::Until(source) => format!("sleep until {source}"),
                Self::Visit => format!("sleep until {VISIT_UNTIL}"),
            },
            undo: Some(NOTHING_TO_UNDO.to_owned()),
        }
    }
}

/// What a caller sees of a timer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SleepView {
    /// How long it sleeps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sleep: Option<String>,
    /// What names the instant it sleeps until.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sleep_until: Option<String>,
}

impl Change {
    /// Starts step `index`'s timer: it ends at once when its instant has passed.
    pub(crate) fn start_sleep(&mut self, order: &Order, index: usize, sleep: &SleepStep) {
        let until = match sleep {
            SleepStep::For(duration) => Ok(self.now.plus(*duration)),
            SleepStep::Until(source) => {
                let results = results(&self.task);
                source
                    .lookup(&order.input, &results)
                    .and_then(Value::as_str)
                    .and_then(Timestamp::parse_rfc3339)
                    .ok_or_else(|| format!("sleep_until: {source} is not an RFC 3339 instant"))
            }
            SleepStep::Visit => {
                match self.task.machine.as_ref().and_then(|run| run.work.as_ref()) {
                    Some(VisitWork::Timer { until, .. }) => Ok(*until),
                    _ => Err("a Wait state's visit without its instant".to_owned()),
                }
            }
        };
        let until = match until {
            Ok(until) => until,
            Err(error) => {
                self.record(index, Operation::Call, Outcome::Failed { error });
                return;
            }
        };
        self.begin_wait(index, until, Waiting::Timer);
        if until <= self.now {
            self.wake(index);
        }
    }
}
