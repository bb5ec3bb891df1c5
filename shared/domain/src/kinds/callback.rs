//! A wait for a callback: `{"name": "approve", "callback": {"timeout": "24h",
//! "heartbeat": "1h"}}`. Without an `agent`, the step calls nothing and waits (for a
//! person's approval, say): a [`WaitStep`]. With one, the call carries the token and
//! the step ends when it is used, not when its service answers: the call's own
//! setting ([`CallbackSettings`], in [`super::call`]).
//!
//! A wait is a lease like a call's: its complete-by is its next heartbeat or its
//! timeout, and its end a failure the supervisor retries as an expired call's; the
//! callback's use ([`on_callback`]) ends it sooner.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    Kind, KindView, LeaseEnd, NOTHING_TO_UNDO, Reads, StepKind, Summary, UndoOnFailure,
    foreign_setting,
};
use crate::callback::Token;
use crate::decide::change::Change;
use crate::decide::steps::task_data;
use crate::decide::{Decision, Refused, Verdict};
use crate::limits;
use crate::messages::{Operation, Outcome};
use crate::task::{Caller, Happened, Order, Step, StepState, Task, Waiting};
use crate::time::Timestamp;
use crate::workflow::Supervision;
use crate::workflow::Workflow;
use crate::workflow::file::{Fault, StepFile, duration_text, optional_duration_text};

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

/// A step that calls nothing and waits for its callback: a person's approval, say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitStep {
    /// How long it waits.
    pub callback: CallbackSettings,
    /// What the supervisor does when it times out.
    pub supervision: Supervision,
}

/// Checks the settings of a step that waits (`callback`), beside its call if it has
/// one.
pub(crate) fn check(step: &StepFile, callback: &CallbackSettings) -> Result<(), Fault> {
    let at = |field: &str, message: &str| step.fault(field, message);
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

/// Resolves a step with a `callback` and no `agent`: it waits, calling nothing.
pub(crate) fn resolve(
    step: &StepFile,
    callback: CallbackSettings,
    supervision: Supervision,
) -> Result<StepKind, Fault> {
    check(step, &callback)?;
    if let Some(field) = foreign_setting(step, &["callback", "supervisor"]) {
        return Err(step.fault(
            field,
            "a callback step without an agent calls nothing: name the agent, or leave the call's settings out",
        ));
    }
    Ok(StepKind::Wait(WaitStep {
        callback,
        supervision,
    }))
}

impl Kind for WaitStep {
    /// A state machine's visit waits as long as its state works out for it.
    fn start(&self, change: &mut Change, _: &Workflow, _: &Order, index: usize) {
        let callback = crate::machine::visit_callback(&change.task, &self.callback);
        change.start_wait(index, &callback);
    }

    /// Never asked: a wait has nothing to undo.
    fn undo(&self, _: &mut Change, _: &Workflow, _: &Order, _: usize) {}

    fn cancel(&self, _: &mut Change, _: usize) {}

    fn lease_ended(&self, _: &Step) -> LeaseEnd<'_> {
        LeaseEnd::Expired(&self.supervision)
    }

    fn undo_on_failure(&self) -> UndoOnFailure {
        UndoOnFailure::NothingToUndo
    }

    fn callback(&self) -> Option<&CallbackSettings> {
        Some(&self.callback)
    }

    fn reads(&self) -> Reads<'_> {
        Reads::default()
    }

    fn service(&self) -> Option<&str> {
        None
    }

    fn view(&self) -> KindView {
        KindView::Wait(WaitView {
            callback: CallbackView::of(&self.callback),
            supervisor: serde_json::json!(self.supervision),
        })
    }

    fn summary(&self) -> Summary {
        Summary {
            kind: "wait",
            does: format!(
                "wait for its callback, {} at most",
                humantime::format_duration(self.callback.timeout)
            ),
            undo: Some(NOTHING_TO_UNDO.to_owned()),
        }
    }
}

/// What a caller sees of a wait for a callback alone.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct WaitView {
    /// Its timeout, and its heartbeat.
    pub callback: CallbackView,
    /// The supervisor's retries across attempts.
    pub supervisor: Value,
}

/// What a caller sees of a callback's settings.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CallbackView {
    /// The longest wait, as written (`"24h"`).
    pub timeout: String,
    /// How often its holder must say it is alive, if it must.
    pub heartbeat: Option<String>,
}

impl CallbackView {
    /// The view of `callback`.
    #[must_use]
    pub fn of(callback: &CallbackSettings) -> Self {
        Self {
            timeout: humantime::format_duration(callback.timeout).to_string(),
            heartbeat: callback
                .heartbeat
                .map(|heartbeat| humantime::format_duration(heartbeat).to_string()),
        }
    }
}

/// How a step's wait for its callback ends.
#[derive(Debug, Clone, PartialEq)]
pub enum CallbackOutcome {
    /// It succeeded: the step's result.
    Output(Value),
    /// It failed: the task is undone as for any step's error.
    Error(String),
}

/// A use of a step's callback: by its token, or on the owner's or operator's route.
#[derive(Debug, Clone, PartialEq)]
pub struct CallbackUse {
    /// The step, by index.
    pub step: usize,
    /// Its token; `None` on the owner's and operator's routes, which end whichever
    /// wait is current.
    pub token: Option<Token>,
    /// Who uses it.
    pub by: Caller,
    /// How the step ends.
    pub outcome: CallbackOutcome,
}

impl Change {
    /// Starts step `index`'s wait for its callback, which calls nothing.
    pub(crate) fn start_wait(&mut self, index: usize, callback: &CallbackSettings) {
        let until = self.now.plus(callback.timeout);
        let complete_by = next_heartbeat(callback, self.now, until);
        let waiting = Waiting::Callback {
            until,
            after_call: false,
        };
        self.begin_wait(index, complete_by, waiting);
    }

    /// Step `index`, whose call its service took, waits for its callback from now:
    /// its lease ends at its first heartbeat, or its timeout.
    pub(crate) fn wait_for_callback(&mut self, index: usize, callback: &CallbackSettings) {
        let until = self.now.plus(callback.timeout);
        let step = &mut self.task.steps[index];
        step.waiting = Some(Waiting::Callback {
            until,
            after_call: true,
        });
        step.complete_by = Some(next_heartbeat(callback, self.now, until));
        self.log_wait(index);
    }

    /// Step `index`'s call, whose callback came while it was out, is settled (its
    /// agent answered, or its lease ended and it answers no more): the step ends as
    /// the callback said. Whether it did is returned.
    pub(crate) fn settle_callback(&mut self, index: usize) -> bool {
        let Some(outcome) = self.task.steps[index].called_back.take() else {
            return false;
        };
        self.record(index, Operation::Call, outcome);
        true
    }
}

/// When a wait for `callback` from `now` until `until` needs its next heartbeat (its
/// timeout, without heartbeats).
fn next_heartbeat(callback: &CallbackSettings, now: Timestamp, until: Timestamp) -> Timestamp {
    callback
        .heartbeat
        .map_or(until, |heartbeat| now.plus(heartbeat).min(until))
}

/// Whether step `index` of `task` waits for the callback `token` was made for (or
/// any, without one), or may yet (its call is out, and its service may call back
/// before the scheduler records its answer; once only), now: a wait past its time
/// (its timeout, a heartbeat missed) is over before the supervisor finds it.
///
/// # Errors
/// [`Refused::UnknownCallback`] for a token `task` did not sign;
/// [`Refused::NotWaiting`] when the step waits for no such callback.
fn check_wait(
    task: &Task,
    workflow: &Workflow,
    index: usize,
    token: Option<&Token>,
    now: Timestamp,
) -> Result<(), Refused> {
    if token.is_some_and(|token| !token.is_signed_for(task) || token.step != index) {
        return Err(Refused::UnknownCallback);
    }
    let Some(step) = task.steps.get(index) else {
        return Err(Refused::UnknownCallback);
    };
    // A call's wait, or a started execution's: its token names the call's visit.
    let after_call = match &workflow.steps[index].kind {
        StepKind::Call(_) => true,
        StepKind::Branches(step) => step.token.is_some(),
        _ => false,
    };
    let waits = !task.state.is_final()
        && workflow.steps[index].callback().is_some()
        && step.state == StepState::Processing
        && step.called_back.is_none()
        && step.complete_by.is_none_or(|at| now < at)
        && token.is_none_or(|token| token.is_current(task, after_call));
    if waits {
        Ok(())
    } else {
        Err(Refused::NotWaiting(step.name.to_string()))
    }
}

/// The callback of a step is used: by its token, or on the owner's or operator's
/// route. The step ends with the output given (Processed) or the error (as a step
/// that failed, the task undone); a scheduler takes the task on. A callback that
/// comes while its step's call is still out (its agent's answer not yet recorded)
/// is kept: the call, which may still be retried by its agent, keeps its slots and
/// is undone only once it is settled, by its answer or its lease's end
/// ([`Change::settle_callback`]).
///
/// # Errors
/// [`Refused::UnknownCallback`] for a token the task did not sign;
/// [`Refused::NotWaiting`] when the step does not wait for this callback: it was
/// used, it timed out (and a retry of a wait that calls nothing waits under a new
/// token), or the task ended.
pub fn on_callback(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    callback: CallbackUse,
    now: Timestamp,
) -> Result<Decision, Refused> {
    let index = callback.step;
    check_wait(task, workflow, index, callback.token.as_ref(), now)?;
    let mut change = Change::of(task, now);
    let outcome = match callback.outcome {
        CallbackOutcome::Output(output) => limits::refusal_of(&output, task_data(order, task))
            .map_or(Outcome::Succeeded { output }, |error| Outcome::Unusable {
                error,
            }),
        CallbackOutcome::Error(error) => {
            let error = limits::bounded_error(error);
            // A refusal after a call: the call's effect may be in place, and is undone.
            if workflow.steps[index].call().is_some() {
                Outcome::Unusable { error }
            } else {
                Outcome::Failed { error }
            }
        }
    };
    change.log(Happened::Woke {
        step: index,
        by: Some(callback.by),
    });
    let step = &mut change.task.steps[index];
    if step.waiting.is_none() {
        step.called_back = Some(outcome);
        change.hold(workflow);
        return Ok(change.done(Verdict::CallbackKept));
    }
    change.record(index, Operation::Call, outcome);
    change.waits_changed = true;
    change.move_on(workflow);
    Ok(change.done(Verdict::CallbackUsed))
}

/// The holder of a step's callback says it is alive: its complete-by moves a
/// heartbeat on, never past its timeout.
///
/// # Errors
/// As for [`on_callback`]; [`Refused::NoHeartbeat`] for a step that takes none.
pub fn on_heartbeat(
    task: &Task,
    workflow: &Workflow,
    token: &Token,
    now: Timestamp,
) -> Result<Decision, Refused> {
    let step = token.step;
    check_wait(task, workflow, step, Some(token), now)?;
    let callback = (workflow.steps[step].callback())
        .map(|callback| crate::machine::visit_callback(task, callback));
    let Some(callback) = callback.filter(|c| c.heartbeat.is_some()) else {
        return Err(Refused::NoHeartbeat(task.steps[step].name.to_string()));
    };
    // A heartbeat while the call is still out says nothing the call's own lease does not.
    let Some(Waiting::Callback { until, .. }) = task.steps[step].waiting else {
        return Ok(Decision::ignore(Verdict::HeartbeatEarly));
    };
    let mut change = Change::of(task, now);
    change.task.steps[step].complete_by = Some(next_heartbeat(&callback, now, until));
    change.hold(workflow);
    Ok(change.done(Verdict::HeartbeatRecorded))
}
