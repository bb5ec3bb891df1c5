//! Steps that wait without holding anything: a timer,
//! `{"name": "cool-off", "sleep": "10m"}` or
//! `{"name": "at-window", "sleep_until": "input.window_start"}`; a callback,
//! `{"name": "approve", "callback": {"timeout": "24h", "heartbeat": "1h"}}` (with an
//! `agent`, the call carries the token and the step ends when it is used; without,
//! the step calls nothing and waits for a person); and any step's condition,
//! `"when": "results['check-account'].tier == 'gold'"`.
//!
//! A waiting step is a lease like a call's: its complete-by is the timer's instant
//! or the callback's timeout, and the deadline message or the supervisor's sweep
//! finds it when that passes.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde::Deserialize;

use crate::workflow::Condition;
use crate::workflow::file::{Fault, StepFile, duration_text, optional_duration_text};
use crate::workflow::step::{FieldType, StepKind, Supervision};
use crate::workflow::values::{FieldSource, Results, Scope};

/// How long a step waits for its callback, and how often its holder must say it is
/// alive.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallbackSettings {
    /// The longest wait for the callback, from when the step starts waiting.
    #[serde(with = "duration_text")]
    pub timeout: Duration,
    /// With it, the callback's holder sends a heartbeat at least this often, or the
    /// step has timed out.
    #[serde(default, with = "optional_duration_text")]
    pub heartbeat: Option<Duration>,
}

/// A step that sleeps: for a while, or until an instant named in the input or an
/// earlier result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SleepStep {
    /// For this long, from the step's turn.
    For(Duration),
    /// Until the RFC 3339 instant this names.
    Until(FieldSource),
}

/// A step that calls nothing and waits for its callback: a person's approval, say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitStep {
    /// How long it waits.
    pub callback: CallbackSettings,
    /// What the supervisor does when it times out.
    pub supervision: Supervision,
}

/// A condition a step runs under: the step's own `when`, or a parallel step's around
/// it. It sees the results of the steps done before its place, and no others, so that
/// it holds the same however the branches beside it run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    /// The expression.
    pub condition: Condition,
    /// The steps whose results it sees, by name.
    pub sees: Vec<String>,
}

impl Guard {
    /// Whether it holds, for the task's input and the results of its steps so far.
    ///
    /// # Errors
    /// The expression's failure (a missing field, a value that is not a boolean).
    pub fn holds(&self, input: &serde_json::Value, results: &Results<'_>) -> Result<bool, String> {
        let seen: Results<'_> = results
            .iter()
            .filter(|(name, _)| self.sees.iter().any(|seen| seen == *name))
            .map(|(name, value)| (*name, *value))
            .collect();
        self.condition.holds(input, &seen)
    }
}

/// The guard of `step`'s `when`, if it has one, seeing the steps `known` done: the
/// only results it may read.
pub(super) fn guard(step: &StepFile, known: &HashSet<String>) -> Result<Option<Guard>, Fault> {
    let Some(text) = &step.when else {
        return Ok(None);
    };
    let refused = |message| (Some(step.name.clone()), "when".to_owned(), message);
    let condition = Condition::parse(text).map_err(refused)?;
    if let Some(unknown) = condition
        .results_named()
        .iter()
        .find(|name| !known.contains(*name))
    {
        return Err(refused(format!(
            "'{text}' reads the result of '{unknown}', which is not a step done before this one"
        )));
    }
    let mut sees: Vec<String> = known.iter().cloned().collect();
    sees.sort();
    Ok(Some(Guard { condition, sees }))
}

/// Checks the settings of a step that waits (`callback`), beside its call if it has
/// one.
pub(super) fn check_callback(step: &StepFile, callback: &CallbackSettings) -> Result<(), Fault> {
    let at = |field: &str, message: &str| {
        (
            Some(step.name.clone()),
            field.to_owned(),
            message.to_owned(),
        )
    };
    if callback.timeout.is_zero() {
        return Err(at("callback.timeout", "must be more than zero"));
    }
    match callback.heartbeat {
        Some(heartbeat) if heartbeat.is_zero() => {
            Err(at("callback.heartbeat", "must be more than zero"))
        }
        Some(heartbeat) if heartbeat > callback.timeout => Err(at(
            "callback.heartbeat",
            "must not be more than the timeout",
        )),
        _ => Ok(()),
    }
}

/// Resolves a step that sleeps (`sleep` or `sleep_until`), the steps named `known`
/// done by then; `None` for a step that does not sleep.
pub(super) fn resolve_sleep(
    step: &StepFile,
    input: &BTreeMap<String, FieldType>,
    known: &HashSet<String>,
) -> Result<Option<StepKind>, Fault> {
    let at = |field: &str, message: &str| {
        (
            Some(step.name.clone()),
            field.to_owned(),
            message.to_owned(),
        )
    };
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
    if let Some(field) = step
        .call_settings()
        .into_iter()
        .chain(step.children_settings())
        .chain(step.callback.as_ref().map(|_| "callback"))
        .next()
    {
        return Err(at(
            field,
            "a step that sleeps calls nothing and starts nothing",
        ));
    }
    Ok(Some(StepKind::Sleep(sleep)))
}

/// Resolves a step with a `callback` and no `agent`: it waits, calling nothing.
pub(super) fn resolve_wait(
    step: &StepFile,
    callback: CallbackSettings,
    supervision: Supervision,
) -> Result<StepKind, Fault> {
    check_callback(step, &callback)?;
    if let Some(field) = step
        .call_settings()
        .into_iter()
        .filter(|field| *field != "supervisor")
        .chain(step.children_settings())
        .next()
    {
        return Err((
            Some(step.name.clone()),
            field.to_owned(),
            "a callback step without an agent calls nothing: name the agent, or leave the call's settings out".to_owned(),
        ));
    }
    Ok(StepKind::Wait(WaitStep {
        callback,
        supervision,
    }))
}
