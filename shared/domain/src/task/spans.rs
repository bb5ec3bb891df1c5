//! The spans a write of a task finishes, read from what the write changed: a span is
//! told once its end is durable, by whichever process wrote it, with the times the
//! record keeps. A write tried again after its answer was lost tells the same spans
//! again, under the same ids.
//!
//! A task's trace: its run (`task`), under its caller's span if it had one; under the
//! run, each operation of a step (`step NAME`, `compensate NAME`, from its begin to
//! its end, a wait included, or to the expiry of its lease); under a step, its
//! agent's call, the children it started, and the supervisor's finding that its lease
//! expired (`recover NAME`).

use crate::messages::Operation;
use crate::time::Timestamp;
use crate::trace::{
    SpanId, TraceContext, TraceId, own_trace, recovery_span, state_span, step_span,
};

use super::{Event, StepState, Task};

impl Task {
    /// The trace of its spans: its caller's or parent's, or one of its own.
    #[must_use]
    pub fn trace_id(&self) -> TraceId {
        self.trace.as_ref().map_or_else(
            || own_trace(&self.id, self.created_at),
            |trace| trace.trace_id,
        )
    }

    /// Whether its trace is recorded: unless its caller said not.
    #[must_use]
    pub fn sampled(&self) -> bool {
        self.trace.as_ref().is_none_or(|trace| trace.sampled)
    }

    /// The span of its run `run`: from the run's start to its end.
    #[must_use]
    pub fn run_span(&self, run: u32) -> SpanId {
        crate::trace::run_span(&self.id, self.created_at, run)
    }

    /// The trace what its current run sends or starts continues: its run's span.
    #[must_use]
    pub fn run_trace(&self) -> TraceContext {
        self.continuing(self.run_span(self.run))
    }

    /// The trace step `index`'s operation under way (the one it last began) passes
    /// on: to its agent's call, and to the children it starts.
    #[must_use]
    pub fn step_trace(&self, index: usize) -> TraceContext {
        self.continuing(self.operation_span(index))
    }

    /// The span of step `index`'s operation last begun: its call, or its
    /// compensation, by when it began.
    fn operation_span(&self, index: usize) -> SpanId {
        let (operation, began) = self
            .steps
            .get(index)
            .map_or(("call", self.created_at), |step| {
                let undoing = matches!(
                    step.state,
                    StepState::Compensating
                        | StepState::Compensated
                        | StepState::CompensationFailed
                );
                let operation = if undoing { "compensate" } else { "call" };
                (operation, step.started_at.unwrap_or(self.created_at))
            });
        step_span(&self.id, self.created_at, self.run, index, operation, began)
    }

    /// Its trace, under its span `parent`.
    fn continuing(&self, parent: SpanId) -> TraceContext {
        TraceContext {
            trace_id: self.trace_id(),
            parent,
            sampled: self.sampled(),
            state: self.trace.as_ref().and_then(|trace| trace.state.clone()),
        }
    }
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpanValue {
    /// Text.
    Text(String),
    /// A whole number.
    Int(i64),
}

/// A span that has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedSpan {
    /// What it was: `task`, `step NAME`, `compensate NAME`, `recover NAME`, `call
    /// AGENT`, `attempt N`.
    pub name: String,
    /// Its trace.
    pub trace_id: TraceId,
    /// Its id.
    pub span_id: SpanId,
    /// The span it is part of; `None` at a trace's root.
    pub parent: Option<SpanId>,
    /// When it began.
    pub start: Timestamp,
    /// When it ended.
    pub end: Timestamp,
    /// Whether what it stands for failed.
    pub failed: bool,
    /// What it was about: ids and names, never a value of the task's.
    pub attributes: Vec<(&'static str, SpanValue)>,
    /// What happened during it, by name, with when.
    pub events: Vec<(String, Timestamp)>,
}

/// The spans that `after`, written over `before` (`None`: created), finishes. None when the task's
/// trace is not recorded.
#[must_use]
pub fn finished(before: Option<&Task>, after: &Task) -> Vec<FinishedSpan> {
    if !after.sampled() {
        return Vec::new();
    }
    let mut spans = Vec::new();
    for ended in ended_operations(before, after) {
        let step = &after.steps[ended.index];
        let compensation = matches!(
            step.state,
            StepState::Compensated | StepState::CompensationFailed
        );
        let verb = if compensation { "compensate" } else { "step" };
        let failed = matches!(
            step.state,
            StepState::Error
                | StepState::TimedOut
                | StepState::Unusable
                | StepState::CompensationFailed
        );
        let mut attributes = step_attributes(after, ended.index, step.attempt);
        attributes.push(("sas.step.state", text(step.state.as_str())));
        spans.push(FinishedSpan {
            name: format!("{verb} {}", step.name),
            span_id: after.operation_span(ended.index),
            start: ended.start,
            end: ended.end,
            failed,
            attributes,
            ..in_run(after)
        });
    }
    if let Some(before) = before {
        spans.extend(expiries(before, after));
    }
    spans.extend(pure_states(after));
    let ended = after.state.is_final()
        && before.is_none_or(|before| !before.state.is_final() || before.run != after.run);
    if ended {
        spans.push(run_ended(after));
    }
    spans
}

/// The leases that `after`, written over `before`, found expired: each the end of
/// its operation's span, when the operation is tried again (one given up ends as
/// its step does), so that its call has its parent in the trace; and under it, the
/// finding (`recover NAME`).
fn expiries(before: &Task, after: &Task) -> Vec<FinishedSpan> {
    let mut spans = Vec::new();
    for event in appended(&before.history, &after.history) {
        if let super::Happened::Expired {
            step,
            operation,
            attempt,
            retry_at,
        } = event.what()
        {
            let (step, attempt) = (*step, *attempt);
            let name = after.steps.get(step).map_or("", |s| &*s.name);
            let expired = before.operation_span(step);
            let began = before.steps.get(step).and_then(|s| s.started_at);
            if let (Some(_), Some(start)) = (retry_at, began) {
                let verb = match operation {
                    Operation::Call => "step",
                    Operation::Compensate => "compensate",
                };
                let mut attributes = step_attributes(after, step, attempt);
                attributes.push(("sas.step.state", text("Expired")));
                spans.push(FinishedSpan {
                    name: format!("{verb} {name}"),
                    span_id: expired,
                    start,
                    end: event.at().max(start),
                    failed: true,
                    attributes,
                    ..in_run(after)
                });
            }
            spans.push(FinishedSpan {
                name: format!("recover {name}"),
                span_id: recovery_span(expired, event.at()),
                parent: Some(expired),
                start: event.at(),
                end: event.at(),
                attributes: step_attributes(after, step, attempt),
                ..in_run(after)
            });
        }
    }
    spans
}

/// A step's operation (a call, a wait, its children; or its compensation) that a
/// write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndedOperation {
    /// The step.
    pub index: usize,
    /// When the operation began...
    pub start: Timestamp,
    /// ...and when it ended.
    pub end: Timestamp,
}

/// The operations of steps that `after`, written over `before`, ended, whatever the
/// task's trace: the spans above, and the metrics of steps' durations.
pub fn ended_operations<'a>(
    before: Option<&'a Task>,
    after: &'a Task,
) -> impl Iterator<Item = EndedOperation> + 'a {
    let same_steps = before.filter(|before| before.steps.len() == after.steps.len());
    after
        .steps
        .iter()
        .enumerate()
        .filter_map(move |(index, step)| {
            let earlier = same_steps.and_then(|before| before.steps.get(index));
            let ended = earlier
                .is_none_or(|e| (e.finished_at, e.attempt) != (step.finished_at, step.attempt));
            match (ended, step.started_at, step.finished_at) {
                (true, Some(start), Some(end)) => Some(EndedOperation {
                    index,
                    start,
                    end: end.max(start),
                }),
                _ => None,
            }
        })
}

/// The states of a state machine that no step stands for (a Pass, a Choice, a
/// Succeed, a Fail), each visit a span (`state NAME`) from its entry to its exit, as
/// the events `task`'s write adds to its execution's history tell them.
fn pure_states(task: &Task) -> Vec<FinishedSpan> {
    const PURE: [&str; 4] = ["Pass", "Choice", "Succeed", "Fail"];
    let Some(machine) = task.machine.as_ref() else {
        return Vec::new();
    };
    let passages: Vec<_> = (machine.new_events.iter())
        .map(|event| (event, event.passage()))
        .collect();
    let mut spans = Vec::new();
    for (at, (entered, passage)) in passages.iter().enumerate() {
        let Some(passage) = passage else {
            continue;
        };
        let Some(kind) = (passage.kind)
            .strip_suffix("StateEntered")
            .filter(|k| PURE.contains(k))
        else {
            continue;
        };
        let exit = format!("{kind}StateExited");
        let exited = passages[at + 1..].iter().find_map(|(event, other)| {
            other
                .as_ref()
                .filter(|other| other.kind == exit && other.name == passage.name)
                .map(|_| event)
        });
        let name = passage.name.as_str();
        let mut attributes = task_attributes(task);
        attributes.push(("sas.state.name", text(name)));
        attributes.push(("sas.state.type", text(kind)));
        spans.push(FinishedSpan {
            name: format!("state {name}"),
            span_id: state_span(task.run_span(task.run), entered.id),
            start: entered.at,
            end: exited.map_or(entered.at, |e| e.at.max(entered.at)),
            failed: kind == "Fail",
            attributes,
            ..in_run(task)
        });
    }
    spans
}

/// A span of `task`'s current run, to fill in.
fn in_run(task: &Task) -> FinishedSpan {
    FinishedSpan {
        name: String::new(),
        trace_id: task.trace_id(),
        span_id: task.run_span(task.run),
        parent: Some(task.run_span(task.run)),
        start: task.updated_at,
        end: task.updated_at,
        failed: false,
        attributes: task_attributes(task),
        events: Vec::new(),
    }
}

/// The span of `task`'s current run, which has ended: from its start (the task's
/// creation, or the resubmission that started it) to now, with what happened in it.
fn run_ended(task: &Task) -> FinishedSpan {
    let start = task
        .resubmissions
        .iter()
        .find(|r| r.run == task.run)
        .map_or(task.created_at, |r| r.request.at);
    let events = task
        .history
        .iter()
        .filter(|event| event.at() >= start)
        .map(|event| (event_name(event), event.at()))
        .collect();
    let mut attributes = task_attributes(task);
    attributes.push(("sas.task.state", text(task.state.as_str())));
    FinishedSpan {
        name: "task".into(),
        parent: task.trace.as_ref().map(|trace| trace.parent),
        start,
        end: task.updated_at.max(start),
        failed: task.state == super::TaskState::Error,
        attributes,
        events,
        ..in_run(task)
    }
}

fn text(value: &str) -> SpanValue {
    SpanValue::Text(value.to_owned())
}

fn task_attributes(task: &Task) -> Vec<(&'static str, SpanValue)> {
    let mut attributes = vec![
        ("sas.task.id", text(task.id.as_str())),
        ("sas.workflow.name", text(&task.workflow.name)),
        (
            "sas.workflow.version",
            SpanValue::Int(task.workflow.version.into()),
        ),
        ("sas.task.run", SpanValue::Int(task.run.into())),
    ];
    if let Some(owner) = &task.owner {
        attributes.push(("sas.task.owner", text(owner.as_str())));
    }
    attributes
}

fn step_attributes(task: &Task, index: usize, attempt: u32) -> Vec<(&'static str, SpanValue)> {
    let mut attributes = task_attributes(task);
    let name = task.steps.get(index).map_or("", |s| &*s.name);
    attributes.push(("sas.step.name", text(name)));
    attributes.push((
        "sas.step.index",
        SpanValue::Int(i64::try_from(index).unwrap_or(-1)),
    ));
    attributes.push(("sas.step.attempt", SpanValue::Int(attempt.into())));
    attributes
}

/// An event's name: its `event` tag (`sent`, `answered`, `state`, ...), and for a
/// state, the state.
fn event_name(event: &Event) -> String {
    match event.what() {
        super::Happened::State { state } => format!("state {}", state.as_str()),
        what => serde_json::to_value(what)
            .ok()
            .and_then(|v| v.get("event")?.as_str().map(str::to_owned))
            .unwrap_or_default(),
    }
}

/// The events `after` has that `before` had not: those after `before`'s last (the
/// history keeps the last few, so the two may start apart).
fn appended<'a>(before: &[Event], after: &'a [Event]) -> &'a [Event] {
    match before.last() {
        None => after,
        Some(last) => after
            .iter()
            .rposition(|event| event == last)
            .map_or(after, |at| &after[at + 1..]),
    }
}

#[cfg(test)]
mod tests;
