//! An execution's history, event by event, as Step Functions' `GetExecutionHistory`
//! gives it: each event written by the store beside the task, in the write of the
//! transition that made it ([`MachineRun::new_events`]), so that no item of the task
//! grows with its history, and a history is never ahead of, nor behind, its task.
//!
//! The events' ids are the ones the execution counts ([`MachineRun::events`]), which
//! Step Functions' causes name. The events of a Parallel's branches and a Map's items
//! are their child tasks' own: the parent's history counts them (its ids skip them)
//! and shows the state's start and end.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use sas_asl::Failure;
use sas_asl::definition::{Resource, State, StateKind, Target};

use super::{MachineRun, VisitWork};
use crate::decide::change::Change;
use crate::time::Timestamp;

/// The most bytes of a value an event keeps: Step Functions' own limit of a payload;
/// more is cut, and the event says so (`truncated`).
const DETAIL_LIMIT: usize = 256 * 1024;

/// The most events a write keeps, and their bytes: a decision that passes through
/// more states writes what it has, and the next write goes on.
pub(crate) const EVENTS_A_WRITE: usize = 200;
pub(crate) const EVENT_BYTES_A_WRITE: usize = 1024 * 1024;

/// One event of an execution's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEvent {
    /// Its id: the execution's count of events when it happened.
    pub id: u64,
    /// When it happened.
    pub at: Timestamp,
    /// Its type and details, as Step Functions writes them
    /// (`{"type": "TaskStateEntered", "stateEnteredEventDetails": {...}}`).
    pub event: Value,
}

impl HistoryEvent {
    /// Its bytes, as a write keeps them (about).
    #[must_use]
    pub fn size(&self) -> usize {
        crate::to_json(&self.event).len() + 32
    }
}

/// A value as an event keeps it: its JSON text, cut at the limit (`true` where cut).
/// Written straight to bytes: `Value`'s `Display` goes through the formatter a piece
/// at a time, at about twice the instructions.
pub(crate) fn text(value: &Value) -> (String, bool) {
    let mut text = crate::to_json(value);
    let truncated = text.len() > DETAIL_LIMIT;
    if truncated {
        let mut end = DETAIL_LIMIT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    (text, truncated)
}

/// Details with `field` (`input`, `output`) holding `value` and its `…Details`.
fn with_payload(details: Map<String, Value>, field: &str, value: &Value) -> Value {
    with_text(details, field, text(value))
}

/// Details with `field` holding a value's text as [`text`] gave it.
fn with_text(
    mut details: Map<String, Value>,
    field: &str,
    (text, truncated): (String, bool),
) -> Value {
    details.insert(field.to_owned(), Value::String(text));
    details.insert(format!("{field}Details"), json!({"truncated": truncated}));
    Value::Object(details)
}

/// An event of `kind` whose details are under `field`.
fn event(kind: &str, field: &str, details: Value) -> Value {
    json!({"type": kind, field: details})
}

/// `ExecutionStarted`, with the execution's input.
pub(crate) fn execution_started(input: &Value, role_arn: &str) -> Value {
    let details = Map::from_iter([("roleArn".to_owned(), json!(role_arn))]);
    event(
        "ExecutionStarted",
        "executionStartedEventDetails",
        with_payload(details, "input", input),
    )
}

/// `ExecutionRedriven`: a run again of an execution that ended (a resubmission), from
/// its start here, its history going on.
pub(crate) fn execution_redriven(redrive_count: u64) -> Value {
    event(
        "ExecutionRedriven",
        "executionRedrivenEventDetails",
        json!({"redriveCount": redrive_count}),
    )
}

/// `{Type}StateEntered`, with the state's input's [`text`].
pub(crate) fn state_entered(state: &State, input: (String, bool)) -> Value {
    let details = Map::from_iter([("name".to_owned(), json!(state.name))]);
    event(
        &format!("{}StateEntered", state.kind.type_name()),
        "stateEnteredEventDetails",
        with_text(details, "input", input),
    )
}

/// Of `event`, where it is the entry of `state`: the input it entered with, `None`
/// where the event keeps it cut ([`DETAIL_LIMIT`]). `None` for any other event.
#[must_use]
pub fn entered_with(event: &Value, state: &str) -> Option<Option<Value>> {
    let entered = event["type"].as_str()?.ends_with("StateEntered");
    let details = &event["stateEnteredEventDetails"];
    if !entered || details["name"] != state {
        return None;
    }
    let whole = details["inputDetails"]["truncated"] != true;
    let input = details["input"].as_str().filter(|_| whole);
    Some(input.and_then(|text| serde_json::from_str(text).ok()))
}

/// `{Type}StateExited`, with the state's output's [`text`].
pub(crate) fn state_exited(state: &State, output: (String, bool)) -> Value {
    let details = Map::from_iter([("name".to_owned(), json!(state.name))]);
    event(
        &format!("{}StateExited", state.kind.type_name()),
        "stateExitedEventDetails",
        with_text(details, "output", output),
    )
}

/// How an execution ended: `ExecutionSucceeded` with its output, or
/// `ExecutionFailed`, `ExecutionTimedOut`, `ExecutionAborted` with its error and cause.
pub(crate) fn execution_ended(run: &MachineRun) -> Value {
    use super::Status;
    let failure = |kind: &str, field: &str| {
        let mut details = Map::new();
        if let Some(error) = &run.error {
            details.insert("error".to_owned(), json!(error));
        }
        if let Some(cause) = &run.cause {
            details.insert("cause".to_owned(), json!(cause));
        }
        event(kind, field, Value::Object(details))
    };
    match run.status {
        Status::Succeeded => {
            let output = run.output.as_deref().cloned().unwrap_or(Value::Null);
            event(
                "ExecutionSucceeded",
                "executionSucceededEventDetails",
                with_payload(Map::new(), "output", &output),
            )
        }
        Status::TimedOut => failure("ExecutionTimedOut", "executionTimedOutEventDetails"),
        Status::Aborted => failure("ExecutionAborted", "executionAbortedEventDetails"),
        Status::Failed | Status::Running => {
            failure("ExecutionFailed", "executionFailedEventDetails")
        }
    }
}

/// The events of a visit's work, once it ended with `result`: a Task's three
/// (scheduled, started, and how it ended, in the words of its resource: a Lambda
/// function's, an activity's, or a service integration's); a Parallel's or a Map's
/// start and end. `scheduled` is when its work began.
pub(crate) fn work_events(
    state: &State,
    work: Option<&VisitWork>,
    result: &Result<Value, Failure>,
    timed_out: bool,
) -> Vec<Value> {
    match &state.kind {
        StateKind::Task(task) => task_events(&task.resource, work, result, timed_out),
        StateKind::Parallel { .. } => branch_events(
            "ParallelState",
            "parallelStateStartedEventDetails",
            None,
            result,
        ),
        StateKind::Map(_) => {
            let length = match work {
                Some(VisitWork::Branches(branches)) => branches.inputs.len(),
                _ => 0,
            };
            branch_events(
                "MapState",
                "mapStateStartedEventDetails",
                Some(length),
                result,
            )
        }
        _ => Vec::new(),
    }
}

/// A Parallel's or a Map's start and end (`MapStateStarted` with its `length`).
fn branch_events(
    prefix: &str,
    started_field: &str,
    length: Option<usize>,
    result: &Result<Value, Failure>,
) -> Vec<Value> {
    let started = match length {
        Some(length) => {
            json!({"type": format!("{prefix}Started"), started_field: {"length": length}})
        }
        None => json!({"type": format!("{prefix}Started")}),
    };
    let ended = match result {
        Ok(_) => json!({"type": format!("{prefix}Succeeded")}),
        Err(_) => json!({"type": format!("{prefix}Failed")}),
    };
    vec![started, ended]
}

/// A Task's scheduled, started and ended events, in its resource's words.
fn task_events(
    resource: &Resource,
    work: Option<&VisitWork>,
    result: &Result<Value, Failure>,
    timed_out: bool,
) -> Vec<Value> {
    let (prefix, field_prefix, mut named) = match &resource.target {
        Target::LambdaFunction { .. } => ("LambdaFunction", "lambdaFunction", Map::new()),
        Target::Activity { .. } => ("Activity", "activity", Map::new()),
        _ => {
            let rest = resource.arn.rsplit(":::").next().unwrap_or(&resource.arn);
            let (kind, action) = rest.split_once(':').unwrap_or(("", rest));
            let named = Map::from_iter([
                ("resourceType".to_owned(), json!(kind)),
                ("resource".to_owned(), json!(action)),
            ]);
            ("Task", "task", named)
        }
    };
    let mut scheduled = named.clone();
    match prefix {
        "Task" => {
            scheduled.insert("region".to_owned(), json!(super::place().split(':').next()));
            // Cut as Step Functions cuts a payload: a request of any size stays an event
            // a store can keep.
            let (text, _) = text(&parameters(work));
            scheduled.insert("parameters".to_owned(), json!(text));
        }
        _ => {
            scheduled.insert("resource".to_owned(), json!(resource.arn));
            let (text, truncated) = text(&parameters(work));
            scheduled.insert("input".to_owned(), json!(text));
            scheduled.insert("inputDetails".to_owned(), json!({"truncated": truncated}));
        }
    }
    let detail = |kind: &str| format!("{field_prefix}{kind}EventDetails");
    let scheduled = event(
        &format!("{prefix}Scheduled"),
        &detail("Scheduled"),
        Value::Object(scheduled),
    );
    let started = match work {
        Some(VisitWork::Activity {
            taken: Some(taken), ..
        }) => event(
            "ActivityStarted",
            "activityStartedEventDetails",
            json!({"workerName": taken.worker}),
        ),
        _ if prefix == "Task" => event(
            "TaskStarted",
            "taskStartedEventDetails",
            Value::Object(named.clone()),
        ),
        _ => json!({"type": format!("{prefix}Started")}),
    };
    let ended = match result {
        Ok(output) => {
            let details = with_payload(named, "output", output);
            event(&format!("{prefix}Succeeded"), &detail("Succeeded"), details)
        }
        Err(failure) => {
            named.insert("error".to_owned(), json!(failure.error));
            named.insert("cause".to_owned(), json!(failure.cause));
            let kind = if timed_out { "TimedOut" } else { "Failed" };
            event(
                &format!("{prefix}{kind}"),
                &detail(kind),
                Value::Object(named),
            )
        }
    };
    vec![scheduled, started, ended]
}

/// What a Task asked of its resource, as its scheduled event shows it.
fn parameters(work: Option<&VisitWork>) -> Value {
    match work {
        Some(VisitWork::Invoke {
            function, payload, ..
        }) => {
            let payload = serde_json::from_str(payload).unwrap_or(Value::Null);
            json!({"FunctionName": function, "Payload": payload})
        }
        Some(VisitWork::Service { request, .. }) => request.clone(),
        Some(VisitWork::Activity { input, .. }) => input.clone(),
        Some(VisitWork::Branches(branches)) => {
            json!({"Input": branches.inputs.first().cloned().unwrap_or(Value::Null)})
        }
        Some(VisitWork::Timer { .. }) | None => Value::Null,
    }
}

impl Change {
    /// A visit's work ended with `result`: its history events written
    /// ([`work_events`]), the first as the next event, the last after those
    /// its children counted.
    pub(super) fn work_ended(
        &mut self,
        state: &State,
        result: &Result<Value, Failure>,
        timed_out: bool,
    ) {
        let first = self.run_mut().events;
        self.count_work_events(state);
        let run = self.run_mut();
        let last = run.events;
        let events = work_events(state, run.work.as_ref(), result, timed_out);
        let count = events.len();
        for (index, event) in events.into_iter().enumerate() {
            let id = if index + 1 == count {
                last
            } else {
                first + 1 + index as u64
            };
            self.write_event(id, event);
        }
    }

    /// Writes `event` in the execution's history as its event `id`, now.
    pub(super) fn write_event(&mut self, id: u64, event: Value) {
        let at = self.now;
        Arc::make_mut(&mut self.run_mut().new_events).push(HistoryEvent { id, at, event });
    }

    /// Whether this write keeps as many history events as a write may: the states
    /// after are entered by the next one.
    pub(super) fn history_is_full(&self) -> bool {
        let events = self
            .task
            .machine
            .as_ref()
            .map_or(&[][..], |run| &run.new_events);
        events.len() >= EVENTS_A_WRITE
            || events.iter().map(HistoryEvent::size).sum::<usize>() >= EVENT_BYTES_A_WRITE
    }

    /// A visit's work ended: the history events Step Functions writes of it, which
    /// the ids in later causes count: a Task's attempt three (scheduled, started,
    /// and how it ended); a Parallel's or a Map's two, its branches' own, and two an
    /// item of a Map.
    fn count_work_events(&mut self, state: &State) {
        let run = self.run_mut();
        let branches = match run.work.as_ref() {
            Some(VisitWork::Branches(branches)) => Some((branches.events, branches.inputs.len())),
            _ => None,
        };
        run.events += match (&state.kind, branches) {
            (StateKind::Task(_), _) => 3,
            (StateKind::Parallel { .. }, Some((events, _))) => 2 + events,
            (StateKind::Map(_), Some((events, items))) => 2 + events + 2 * items as u64,
            _ => 0,
        };
    }
}
