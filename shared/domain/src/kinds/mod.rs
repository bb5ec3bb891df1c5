//! The kinds of step, one module each: what a step does, from its definition and the
//! checks of its settings to its decisions and its view.
//!
//! - [`call`]: a call of a service, through its agent (and its gates' slots);
//! - [`callback`]: a wait for a callback, alone or after a call;
//! - [`sleep`]: a timer, for a while or until an instant;
//! - [`children`]: a child workflow, or a map of one child per item;
//! - [`parallel`]: branches of steps at once. It arranges the others and has no
//!   record or decision of its own: it is no [`StepKind`];
//! - a state machine's Parallel or Map, a child task per branch or item, is
//!   [`crate::machine::BranchesStep`], beside the machine it belongs to.
//!
//! The core reaches a kind through the [`Kind`] trait alone: a step's kind is worked
//! out once, when its file loads ([`load`]), and every event the core hands a step
//! (its start, its undo, its lease's end, its task's cancellation) goes through
//! [`StepKind::kind`], whose one `match` is where a new kind is added; the compiler
//! then lists every event it must answer. The events a kind has of its own (a call's
//! answer, a callback's use, a child's end) are its module's public decisions.

pub mod call;
pub mod callback;
pub mod children;
pub mod parallel;
pub mod sleep;

use std::collections::{BTreeMap, HashSet};

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::decide::change::Change;
use crate::task::{Order, Step};
use crate::workflow::file::{Fault, Resolver, StepFile};
use crate::workflow::{FieldSource, Supervision, Workflow};

pub use call::CallStep;
pub use callback::{CallbackSettings, WaitStep};
pub use children::ChildrenStep;
pub use sleep::SleepStep;

/// What a step does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepKind {
    /// It calls a service, through the service's agent.
    Call(Box<CallStep>),
    /// It starts child tasks: one (a child workflow) or one per item (a map).
    Children(ChildrenStep),
    /// It sleeps, for a while or until an instant.
    Sleep(SleepStep),
    /// A state machine's Parallel or Map: a child task per branch or item.
    Branches(crate::machine::BranchesStep),
    /// It calls nothing and waits for its callback (a person's approval).
    Wait(WaitStep),
}

impl StepKind {
    /// The kind's answers to the core's events: the one place each kind is named.
    pub(crate) fn kind(&self) -> &dyn Kind {
        match self {
            Self::Call(call) => call.as_ref(),
            Self::Children(children) => children,
            Self::Sleep(sleep) => sleep,
            Self::Branches(branches) => branches,
            Self::Wait(wait) => wait,
        }
    }

    /// What a caller sees of its settings.
    #[must_use]
    pub fn view(&self) -> KindView {
        self.kind().view()
    }

    /// What it is, what it does and what undoes it, in a few words, for a person.
    #[must_use]
    pub fn summary(&self) -> Summary {
        self.kind().summary()
    }

    /// Whether `other` does the same kind of work at the same place (the same service,
    /// or the same child workflow): what a started step may be moved onto.
    #[must_use]
    pub fn same_work(&self, other: &Self) -> bool {
        let (one, two) = (self.kind(), other.kind());
        one.summary().kind == two.summary().kind && one.service() == two.service()
    }
}

/// A step's kind, what it does and what undoes it, in a few words: what a console or
/// a command line shows of any kind without knowing it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Summary {
    /// Its kind: `call`, `child_workflow`, `map`, `sleep` or `wait`.
    pub kind: &'static str,
    /// What it does: its call (`/bookings`, `DELETE /bookings/{id}`), `map: ship-parcel
    /// over input.parcels`, `sleep 10m`.
    pub does: String,
    /// What undoes it: its compensation, its children's own, or nothing to undo;
    /// none when its effect stays.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undo: Option<String>,
}

/// What each kind of step answers to the events the core hands every step. Nothing
/// has a default: a new kind answers each, or does not compile.
pub(crate) trait Kind {
    /// Step `index`'s turn has come and its conditions hold: it starts (or fails at
    /// once, failing the task, when it cannot).
    fn start(&self, change: &mut Change, workflow: &Workflow, order: &Order, index: usize);

    /// The task is being undone and step `index`'s effect may be in place: it is
    /// undone. Called only for a kind whose [`Kind::undo_on_failure`] is
    /// [`UndoOnFailure::Undone`].
    fn undo(&self, change: &mut Change, workflow: &Workflow, order: &Order, index: usize);

    /// The task is cancelled: what step `index` stops beyond the task's own waits and
    /// retries, which the core stops for every kind.
    fn cancel(&self, change: &mut Change, index: usize);

    /// Step `step`, running, has passed its complete-by: what the supervisor does.
    fn lease_ended(&self, step: &Step) -> LeaseEnd<'_>;

    /// What of it a failed task leaves in place.
    fn undo_on_failure(&self) -> UndoOnFailure;

    /// The callback it waits for, with a call or alone.
    fn callback(&self) -> Option<&CallbackSettings>;

    /// What of its task's data its work is made of: what a repair compares to tell
    /// whether the step must run again.
    fn reads(&self) -> Reads<'_>;

    /// Where its work goes: its call's service, or its children's workflow; none for
    /// a timer or a wait. A task moved to another version keeps a started step on a
    /// step of the same kind that sends its work to the same place.
    fn service(&self) -> Option<&str>;

    /// What a caller sees of its settings.
    fn view(&self) -> KindView;

    /// It, in a few words.
    fn summary(&self) -> Summary;
}

/// What of its task's data a step's work (its request, its children's input, its
/// timer's instant) is made of ([`crate::decide::repair`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reads<'a> {
    /// The whole input.
    pub(crate) input: bool,
    /// The results of every step it comes after.
    pub(crate) earlier: bool,
    /// These values.
    pub(crate) values: Vec<&'a FieldSource>,
}

impl<'a> Reads<'a> {
    /// The whole input and every earlier result: a request that carries them all.
    pub(crate) const EVERYTHING: Self = Self {
        input: true,
        earlier: true,
        values: Vec::new(),
    };

    /// These values alone.
    pub(crate) fn only(values: impl IntoIterator<Item = &'a FieldSource>) -> Self {
        Self {
            values: values.into_iter().collect(),
            ..Self::default()
        }
    }
}

/// What undoes a step with nothing to undo, as a person reads it.
const NOTHING_TO_UNDO: &str = "nothing to undo";

/// What the supervisor does with a running step whose complete-by has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseEnd<'a> {
    /// A failure: counted, and retried under its supervision until its threshold,
    /// then given up (the task undone).
    Expired(&'a Supervision),
    /// Its end: a timer's instant come, or a callback kept while its call was out,
    /// which its call's end (answered, or answering no more) now settles.
    Ended,
    /// Its wait for its gates' slots is asked for again (never a failure).
    SlotsAskedAgain,
    /// Its children are found again (never a failure: a child's own supervisor
    /// fails it).
    ChildrenWatched,
}

/// What of a step a failed task leaves in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UndoOnFailure {
    /// It is undone: by its compensation, or by its children's own.
    Undone,
    /// It has no effect to undo: a read-only call, a timer, a wait.
    NothingToUndo,
    /// Its effect, once in place, stays: a call with no compensation.
    LeftInPlace,
}

/// What a caller sees of a step's settings, as written: its kind's own fields.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum KindView {
    /// A call's.
    Call(Box<call::CallView>),
    /// A child workflow's.
    ChildWorkflow(children::ChildWorkflowView),
    /// A map's.
    Map(children::MapView),
    /// A timer's.
    Sleep(sleep::SleepView),
    /// A wait's for its callback alone.
    Wait(callback::WaitView),
    /// A state machine's Parallel's or Map's.
    Branches(crate::machine::BranchesView),
}

/// Works out what step `step` does from its settings, the one place that does, and
/// resolves it, once the steps named `known` are done. A setting of another kind is
/// refused, named, with what the step's kind does instead. (A parallel step, which
/// arranges others, is resolved by the resolver before it comes here.)
pub(crate) fn load(
    step: &mut StepFile,
    resolver: &Resolver<'_>,
    known: &HashSet<String>,
) -> Result<StepKind, Fault> {
    let starts_children = match (step.workflow.take(), step.map.take()) {
        (Some(_), Some(_)) => {
            return Err(step.fault("workflow", "a step is a child workflow or a map, not both"));
        }
        (Some(workflow), None) => Some(children::Named::Workflow(workflow)),
        (None, Some(map)) => Some(children::Named::Map(map)),
        (None, None) => None,
    };
    let sleeps = step.sleep.is_some() || step.sleep_until.is_some();
    if step.limit.is_some() && (starts_children.is_some() || sleeps || step.agent.is_none()) {
        return Err(step.fault("limit", "only a step that calls a service has a limit"));
    }
    if let Some(named) = starts_children {
        return children::resolve(step, named, resolver.input, known);
    }
    if let Some(sleep) = sleep::resolve(step, resolver.input, known)? {
        return Ok(sleep);
    }
    match (&step.agent, step.callback.clone()) {
        (None, Some(callback)) => callback::resolve(step, callback, resolver.supervision(step)?),
        _ => call::resolve(step, resolver, known).map(|call| StepKind::Call(Box::new(call))),
    }
}

/// The sources of fields (of a request, or of a child's input), as written.
fn sources(fields: &BTreeMap<String, FieldSource>) -> serde_json::Map<String, Value> {
    fields
        .iter()
        .map(|(name, source)| (name.clone(), Value::String(source.to_string())))
        .collect()
}

/// The first setting `step` names that a step of its kind does not have, among
/// every kind's (the condition and the name, which every step has, aside).
pub(crate) fn foreign_setting(step: &StepFile, own: &[&str]) -> Option<&'static str> {
    step.settings_named().find(|field| !own.contains(field))
}

#[cfg(test)]
mod tests {
    use crate::workflow::Workflow;

    #[test]
    fn each_kind_says_what_it_does_and_what_undoes_it() {
        let workflow = Workflow::parse(
            "w.json",
            r#"{"name": "w", "version": 1, "input": {"parcels": "array<object>", "at": "string"},
                "steps": [
                  {"name": "book", "agent": "drone", "call": "POST /bookings",
                   "compensation": "DELETE /bookings/{results.book.id}"},
                  {"name": "check", "agent": "drone", "call": "POST /checks", "read_only": true},
                  {"name": "charge", "agent": "pay", "call": "POST /charges"},
                  {"name": "each", "map": {"items": "input.parcels", "workflow": "ship"}},
                  {"name": "one", "workflow": "ship"},
                  {"name": "cool-off", "sleep": "10m"},
                  {"name": "at-window", "sleep_until": "input.at"},
                  {"name": "approve", "callback": {"timeout": "24h"}}]}"#,
        )
        .expect("a valid workflow");
        let summaries: Vec<_> = workflow
            .steps
            .iter()
            .map(|step| {
                let summary = step.kind.summary();
                (summary.kind, summary.does, summary.undo)
            })
            .collect();
        let own = |text: &str| Some(text.to_owned());
        assert_eq!(
            summaries,
            [
                (
                    "call",
                    "/bookings".into(),
                    own("DELETE /bookings/{results.book.id}")
                ),
                ("call", "/checks".into(), own("nothing to undo")),
                ("call", "/charges".into(), None),
                (
                    "map",
                    "map: ship over input.parcels".into(),
                    own("the children's own")
                ),
                (
                    "child_workflow",
                    "workflow: ship".into(),
                    own("the children's own")
                ),
                ("sleep", "sleep 10m".into(), own("nothing to undo")),
                (
                    "sleep",
                    "sleep until input.at".into(),
                    own("nothing to undo")
                ),
                (
                    "wait",
                    "wait for its callback, 1day at most".into(),
                    own("nothing to undo")
                ),
            ]
        );
    }
}
