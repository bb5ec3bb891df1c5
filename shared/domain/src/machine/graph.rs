//! An execution as its state graph: the machine's states in layers from its start,
//! where each goes, and what its history says of each (its visits, how the last one
//! went, its input and output), with the path taken. What the console draws and
//! `sas` prints.

use std::collections::{BTreeMap, VecDeque};

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use sas_asl::definition::StateMachine;

use super::history::HistoryEvent;

/// The most states of the path an execution's graph names, its latest.
const PATH_SHOWN: usize = 200;

/// An execution's state graph.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ExecutionGraph {
    /// The machine's `StartAt`.
    pub start_at: String,
    /// Its states (its own, not its branches'), layer by layer from its start.
    pub states: Vec<StateNode>,
    /// The states entered, in order: the latest [`PATH_SHOWN`] of them.
    pub path: Vec<String>,
    /// Whether the path is whole: the history read held the execution's start.
    pub whole: bool,
}

/// How a state's last visit went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Visited {
    /// Never entered.
    NotVisited,
    /// Entered, not left: the execution is in it.
    Running,
    /// Left with its output.
    Succeeded,
    /// Failed, and a catcher took the error on.
    Caught,
    /// Failed: the execution with it.
    Failed,
}

/// A state of the graph.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct StateNode {
    /// Its name.
    pub name: String,
    /// Its `Type`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Where it may go ([`sas_asl::definition::State::transitions`]).
    pub next: Vec<String>,
    /// Its distance from the start, in transitions.
    pub layer: usize,
    /// The times it was entered.
    pub visits: u32,
    /// How its last visit went.
    pub visited: Visited,
    /// Its last visit's input, where the history has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// Its last visit's output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Its last visit's error, where it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// And its cause.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

/// A payload as an event holds it (JSON text), read back: its value, or its text
/// where it does not read (cut at the limit).
fn payload(details: &Value, field: &str) -> Option<Value> {
    let text = details.get(field)?.as_str()?;
    Some(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())))
}

/// `machine`'s graph, with what `events` (its history, in order) say of its states.
#[must_use]
pub fn graph(machine: &StateMachine, events: &[HistoryEvent]) -> ExecutionGraph {
    let mut states = layered(machine);
    let index: BTreeMap<String, usize> = (states.iter().enumerate())
        .map(|(at, node)| (node.name.clone(), at))
        .collect();
    let mut path = Vec::new();
    let mut current: Option<usize> = None;
    for event in events {
        let kind = event.event["type"].as_str().unwrap_or_default();
        let details = (event.event.as_object())
            .and_then(|fields| {
                fields
                    .iter()
                    .find(|(name, _)| name.ends_with("EventDetails"))
            })
            .map_or(&Value::Null, |(_, details)| details);
        let named = details["name"]
            .as_str()
            .and_then(|name| index.get(name).copied());
        if kind.ends_with("StateEntered") {
            current = named;
            if let Some(node) = named.map(|at| &mut states[at]) {
                node.visits += 1;
                node.visited = Visited::Running;
                node.input = payload(details, "input");
                (node.output, node.error, node.cause) = (None, None, None);
                path.push(node.name.clone());
            }
        } else if kind.ends_with("StateExited") {
            if let Some(node) = named.map(|at| &mut states[at]) {
                node.output = payload(details, "output");
                if node.visited == Visited::Running {
                    node.visited = Visited::Succeeded;
                }
            }
            current = None;
        } else if kind.ends_with("Succeeded") && !kind.starts_with("Execution") {
            // Its work (or a retry of it) went well.
            if let Some(node) = current.map(|at| &mut states[at]) {
                (node.error, node.cause) = (None, None);
                node.visited = Visited::Running;
            }
        } else if kind.ends_with("Failed")
            || kind.ends_with("TimedOut")
            || kind.ends_with("Aborted")
        {
            // A state's failure (a Task's, a branch's) or the execution's: the state it
            // is in fails, until a catcher leaves it.
            if let Some(node) = current.map(|at| &mut states[at]) {
                node.error = details["error"]
                    .as_str()
                    .map(str::to_owned)
                    .or(node.error.take());
                node.cause = details["cause"]
                    .as_str()
                    .map(str::to_owned)
                    .or(node.cause.take());
                node.visited = if kind.starts_with("Execution") {
                    Visited::Failed
                } else {
                    Visited::Caught
                };
            }
        }
    }
    let whole = events.first().is_some_and(|event| event.id == 1);
    let skipped = path.len().saturating_sub(PATH_SHOWN);
    path.drain(..skipped);
    ExecutionGraph {
        start_at: machine.start_at.clone(),
        states,
        path,
        whole,
    }
}

/// The machine's states, layer by layer from its start (breadth first, each state's
/// transitions in their order), those no transition reaches after them.
fn layered(machine: &StateMachine) -> Vec<StateNode> {
    let mut layers: BTreeMap<&str, usize> = BTreeMap::new();
    let mut order = Vec::new();
    let mut queue = VecDeque::from([(machine.start_at.as_str(), 0)]);
    while let Some((name, layer)) = queue.pop_front() {
        let Some(state) = machine.state(name) else {
            continue;
        };
        if layers.contains_key(name) {
            continue;
        }
        layers.insert(name, layer);
        order.push(state);
        queue.extend(
            state
                .transitions()
                .into_iter()
                .map(|next| (next, layer + 1)),
        );
    }
    let deepest = layers.values().max().map_or(0, |deepest| deepest + 1);
    order.extend(
        (machine.states.values()).filter(|state| !layers.contains_key(state.name.as_str())),
    );
    order
        .into_iter()
        .map(|state| StateNode {
            name: state.name.clone(),
            kind: state.kind.type_name().to_owned(),
            next: state.transitions().into_iter().map(str::to_owned).collect(),
            layer: layers.get(state.name.as_str()).copied().unwrap_or(deepest),
            visits: 0,
            visited: Visited::NotVisited,
            input: None,
            output: None,
            error: None,
            cause: None,
        })
        .collect()
}
