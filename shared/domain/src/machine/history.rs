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
use serde_json::value::RawValue;
use serde_json::{Map, Value};

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

/// One event of an execution's history, as a store reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEvent {
    /// Its id: the execution's count of events when it happened.
    pub id: u64,
    /// When it happened.
    pub at: Timestamp,
    /// Its type and details, as Step Functions writes them
    /// (`{"type": "TaskStateEntered", "stateEnteredEventDetails": {...}}`).
    #[serde(deserialize_with = "restored")]
    pub event: Value,
}

/// One event as a write makes it: the same fields, its JSON written once, when the
/// event happened, so that a store copies it rather than encodes a tree of values.
#[derive(Debug, Clone, Serialize)]
pub struct WrittenEvent {
    /// Its id ([`HistoryEvent::id`]).
    pub id: u64,
    /// When it happened.
    pub at: Timestamp,
    /// Its type and details ([`HistoryEvent::event`]), as JSON text.
    pub event: Box<RawValue>,
}

/// A state's entry or exit, as its event names it.
#[derive(Debug)]
pub struct Passage {
    /// The event's type: `PassStateEntered`, `TaskStateExited`, ...
    pub kind: String,
    /// The state's name.
    pub name: String,
}

impl WrittenEvent {
    /// Its bytes, as a write keeps them (about).
    #[must_use]
    pub fn size(&self) -> usize {
        self.event.get().len() + 32
    }

    /// The event as a store gives it back.
    #[must_use]
    pub fn read(&self) -> HistoryEvent {
        HistoryEvent {
            id: self.id,
            at: self.at,
            event: serde_json::from_str(self.event.get()).map_or(Value::Null, texts_again),
        }
    }

    /// Of a `…StateEntered` or `…StateExited` event, the state's entry or exit, read
    /// without its payload into values; `None` for any other event.
    #[must_use]
    pub fn passage(&self) -> Option<Passage> {
        #[derive(Deserialize)]
        struct Named {
            name: String,
        }
        #[derive(Deserialize)]
        struct Event {
            #[serde(rename = "type")]
            kind: String,
            #[serde(rename = "stateEnteredEventDetails")]
            entered: Option<Named>,
            #[serde(rename = "stateExitedEventDetails")]
            exited: Option<Named>,
        }
        let event: Event = serde_json::from_str(self.event.get()).ok()?;
        let named = event.entered.or(event.exited)?;
        Some(Passage {
            kind: event.kind,
            name: named.name,
        })
    }
}

impl MachineRun {
    /// The events this write makes, as a store gives them back.
    #[must_use]
    pub fn written_events(&self) -> Vec<HistoryEvent> {
        self.new_events.iter().map(WrittenEvent::read).collect()
    }
}

impl PartialEq for WrittenEvent {
    fn eq(&self, other: &Self) -> bool {
        (self.id, self.at, self.event.get()) == (other.id, other.at, other.event.get())
    }
}

/// The fields of an event's details that hold a value as its JSON text, as Step
/// Functions gives them.
const VALUE_FIELDS: [&str; 3] = ["input", "output", "parameters"];

/// A value as an event keeps it: its JSON, or, past the limit, its text cut there.
pub(crate) enum Detail {
    Whole(Box<RawValue>),
    Cut(String),
}

impl Detail {
    /// `value`'s, written straight to bytes: `Value`'s `Display` goes through the
    /// formatter a piece at a time, at about twice the instructions.
    pub(crate) fn of(value: &Value) -> Self {
        Self::of_json(crate::to_raw_json(value))
    }

    /// Of a value already written as `json`.
    fn of_json(json: Box<RawValue>) -> Self {
        if json.get().len() <= DETAIL_LIMIT {
            return Self::Whole(json);
        }
        let mut end = DETAIL_LIMIT;
        while !json.get().is_char_boundary(end) {
            end -= 1;
        }
        Self::Cut(json.get()[..end].to_owned())
    }
}

/// A value a write kept as JSON rather than as its text: a step's JSON kept
/// once instead of escaped within a string is a fifth fewer bytes to compress and
/// write. A string, and a text cut, are kept as text, so that what is not text is
/// always a value to be written out again.
fn keeps_as_json(detail: &Detail) -> Option<&RawValue> {
    match detail {
        Detail::Whole(json) if !json.get().starts_with('"') => Some(json),
        _ => None,
    }
}

/// `event` as Step Functions gives it, from the JSON a write kept: each value its
/// details hold as JSON ([`keeps_as_json`]) its text again.
fn texts_again(mut event: Value) -> Value {
    let details = event
        .as_object_mut()
        .and_then(|event| event.values_mut().find_map(Value::as_object_mut));
    if let Some(details) = details {
        for field in VALUE_FIELDS {
            if let Some(value) = details.get_mut(field)
                && !value.is_string()
            {
                *value = Value::String(crate::to_json(value));
            }
        }
    }
    event
}

fn restored<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
    Value::deserialize(deserializer).map(texts_again)
}

/// An event's fields, in the order Step Functions writes them: a JSON object,
/// serialized without a map of values built first.
struct Fields<'a>(Vec<(&'a str, Field<'a>)>);

/// One field's value.
enum Field<'a> {
    Text(&'a str),
    /// A value's ([`VALUE_FIELDS`]).
    Value(&'a Detail),
    Number(u64),
    Flag(bool),
    Object(Fields<'a>),
}

impl Serialize for Fields<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, field) in &self.0 {
            map.serialize_entry(name, field)?;
        }
        map.end()
    }
}

impl Serialize for Field<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Text(text) => serializer.serialize_str(text),
            Self::Value(detail) => match (keeps_as_json(detail), detail) {
                (Some(json), _) => json.serialize(serializer),
                (None, Detail::Whole(json)) => serializer.serialize_str(json.get()),
                (None, Detail::Cut(text)) => serializer.serialize_str(text),
            },
            Self::Number(number) => serializer.serialize_u64(*number),
            Self::Flag(flag) => serializer.serialize_bool(*flag),
            Self::Object(fields) => fields.serialize(serializer),
        }
    }
}

/// `fields` with `field` (`input`, `output`) holding a value's [`Detail`], and its
/// `…Details` saying whether it was cut.
fn with_value<'a>(
    mut fields: Fields<'a>,
    field: &'a str,
    details: &'a str,
    detail: &'a Detail,
) -> Fields<'a> {
    fields.0.push((field, Field::Value(detail)));
    let truncated = matches!(detail, Detail::Cut(_));
    let cut = Fields(vec![("truncated", Field::Flag(truncated))]);
    fields.0.push((details, Field::Object(cut)));
    fields
}

/// An event of `kind` whose details are under `field`.
fn event(kind: &str, field: &str, details: Fields) -> Box<RawValue> {
    let event = Fields(vec![
        ("type", Field::Text(kind)),
        (field, Field::Object(details)),
    ]);
    crate::to_raw_json(&event)
}

/// An event of `kind` with no details.
fn bare_event(kind: &str) -> Box<RawValue> {
    crate::to_raw_json(&Fields(vec![("type", Field::Text(kind))]))
}

/// `ExecutionStarted`, with the execution's input.
pub(crate) fn execution_started(input: &Value, role_arn: &str) -> Box<RawValue> {
    let input = Detail::of(input);
    let details = Fields(vec![("roleArn", Field::Text(role_arn))]);
    event(
        "ExecutionStarted",
        "executionStartedEventDetails",
        with_value(details, "input", "inputDetails", &input),
    )
}

/// `ExecutionRedriven`: a run again of an execution that ended (a resubmission), from
/// its start here, its history going on.
pub(crate) fn execution_redriven(redrive_count: u64) -> Box<RawValue> {
    event(
        "ExecutionRedriven",
        "executionRedrivenEventDetails",
        Fields(vec![("redriveCount", Field::Number(redrive_count))]),
    )
}

/// `{Type}StateEntered`, with the state's input.
pub(crate) fn state_entered(state: &State, input: &Detail) -> Box<RawValue> {
    let details = Fields(vec![("name", Field::Text(&state.name))]);
    event(
        &[state.kind.type_name(), "StateEntered"].concat(),
        "stateEnteredEventDetails",
        with_value(details, "input", "inputDetails", input),
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

/// `{Type}StateExited`, with the state's output.
pub(crate) fn state_exited(state: &State, output: &Detail) -> Box<RawValue> {
    let details = Fields(vec![("name", Field::Text(&state.name))]);
    event(
        &[state.kind.type_name(), "StateExited"].concat(),
        "stateExitedEventDetails",
        with_value(details, "output", "outputDetails", output),
    )
}

/// How an execution ended: `ExecutionSucceeded` with its output, or
/// `ExecutionFailed`, `ExecutionTimedOut`, `ExecutionAborted` with its error and cause.
pub(crate) fn execution_ended(run: &MachineRun) -> Box<RawValue> {
    use super::Status;
    let failure = |kind: &str, field: &str| {
        let mut details = Fields(Vec::new());
        if let Some(error) = &run.error {
            details.0.push(("error", Field::Text(error)));
        }
        if let Some(cause) = &run.cause {
            details.0.push(("cause", Field::Text(cause)));
        }
        event(kind, field, details)
    };
    match run.status {
        Status::Succeeded => {
            let output = Detail::of(run.output.as_deref().unwrap_or(&Value::Null));
            let details = with_value(Fields(Vec::new()), "output", "outputDetails", &output);
            event(
                "ExecutionSucceeded",
                "executionSucceededEventDetails",
                details,
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
) -> Vec<Box<RawValue>> {
    match &state.kind {
        StateKind::Task(task) => task_events(&task.resource, work, result, timed_out),
        StateKind::Parallel { .. } => vec![
            bare_event("ParallelStateStarted"),
            branches_ended("ParallelState", result),
        ],
        StateKind::Map(_) => {
            let length = match work {
                Some(VisitWork::Branches(branches)) => branches.inputs.len() as u64,
                _ => 0,
            };
            let length = Fields(vec![("length", Field::Number(length))]);
            vec![
                event("MapStateStarted", "mapStateStartedEventDetails", length),
                branches_ended("MapState", result),
            ]
        }
        _ => Vec::new(),
    }
}

/// A Parallel's or a Map's end (`prefix`: `ParallelState`, `MapState`), as `result`
/// says: `…Succeeded` or `…Failed`.
fn branches_ended(prefix: &str, result: &Result<Value, Failure>) -> Box<RawValue> {
    let outcome = if result.is_ok() {
        "Succeeded"
    } else {
        "Failed"
    };
    bare_event(&[prefix, outcome].concat())
}

/// A Task's scheduled, started and ended events, in its resource's words.
fn task_events(
    resource: &Resource,
    work: Option<&VisitWork>,
    result: &Result<Value, Failure>,
    timed_out: bool,
) -> Vec<Box<RawValue>> {
    // A service integration's events name it: `resourceType` and `resource`
    // (`lambda`, `invoke`).
    let (prefix, field_prefix, named) = match &resource.target {
        Target::LambdaFunction { .. } => ("LambdaFunction", "lambdaFunction", None),
        Target::Activity { .. } => ("Activity", "activity", None),
        _ => {
            let rest = resource.arn.rsplit(":::").next().unwrap_or(&resource.arn);
            let (kind, action) = rest.split_once(':').unwrap_or(("", rest));
            ("Task", "task", Some((kind, action)))
        }
    };
    let names = || {
        Fields(named.map_or_else(Vec::new, |(kind, action)| {
            vec![
                ("resourceType", Field::Text(kind)),
                ("resource", Field::Text(action)),
            ]
        }))
    };
    let detail = |kind: &str| [field_prefix, kind, "EventDetails"].concat();
    let parameters = parameters(work);
    let region = super::place();
    let mut scheduled = names();
    match named {
        Some(_) => {
            scheduled.0.push((
                "region",
                Field::Text(region.split(':').next().unwrap_or_default()),
            ));
            // Cut as Step Functions cuts a payload: a request of any size stays an
            // event a store can keep.
            scheduled.0.push(("parameters", Field::Value(&parameters)));
        }
        None => {
            scheduled.0.push(("resource", Field::Text(&resource.arn)));
            scheduled = with_value(scheduled, "input", "inputDetails", &parameters);
        }
    }
    let scheduled = event(
        &[prefix, "Scheduled"].concat(),
        &detail("Scheduled"),
        scheduled,
    );
    let started = match work {
        Some(VisitWork::Activity {
            taken: Some(taken), ..
        }) => event(
            "ActivityStarted",
            "activityStartedEventDetails",
            Fields(vec![("workerName", Field::Text(&taken.worker))]),
        ),
        _ if named.is_some() => event("TaskStarted", "taskStartedEventDetails", names()),
        _ => bare_event(&[prefix, "Started"].concat()),
    };
    let ended = match result {
        Ok(output) => {
            let output = Detail::of(output);
            let details = with_value(names(), "output", "outputDetails", &output);
            event(
                &[prefix, "Succeeded"].concat(),
                &detail("Succeeded"),
                details,
            )
        }
        Err(failure) => {
            let mut details = names();
            details.0.push(("error", Field::Text(&failure.error)));
            details.0.push(("cause", Field::Text(&failure.cause)));
            let kind = if timed_out { "TimedOut" } else { "Failed" };
            event(&[prefix, kind].concat(), &detail(kind), details)
        }
    };
    vec![scheduled, started, ended]
}

/// What a Task asked of its resource, as its scheduled event shows it.
fn parameters(work: Option<&VisitWork>) -> Detail {
    match work {
        Some(VisitWork::Invoke {
            function, payload, ..
        }) => {
            // The payload is JSON already: placed as it is, not parsed and written again.
            let function = crate::to_json(function);
            let placed = |payload: &str| {
                RawValue::from_string(format!(
                    r#"{{"FunctionName":{function},"Payload":{payload}}}"#
                ))
            };
            let json = placed(payload).or_else(|_| placed("null"));
            Detail::of_json(json.expect("a name and null are JSON"))
        }
        Some(VisitWork::Service { request, .. }) => Detail::of(request),
        Some(VisitWork::Activity { input, .. }) => Detail::of(input),
        Some(VisitWork::Branches(branches)) => {
            let input = branches.inputs.first().cloned().unwrap_or(Value::Null);
            Detail::of(&Value::Object(Map::from_iter([(
                "Input".to_owned(),
                input,
            )])))
        }
        Some(VisitWork::Timer { .. }) | None => Detail::of(&Value::Null),
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
    pub(super) fn write_event(&mut self, id: u64, event: Box<RawValue>) {
        let at = self.now;
        Arc::make_mut(&mut self.run_mut().new_events).push(WrittenEvent { id, at, event });
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
            || events.iter().map(WrittenEvent::size).sum::<usize>() >= EVENT_BYTES_A_WRITE
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
