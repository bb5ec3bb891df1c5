//! A state machine's definition, read once and checked as Step Functions checks it when a
//! state machine is created: what is refused is refused here, naming the state and the
//! field, so that running it never meets a definition it cannot follow.

mod actions;
mod check;
mod distributed;
mod fields;
mod kinds;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::choice::ChoiceRule;
use crate::errors::{Catcher, Retrier};

pub use crate::Refusal;
pub use crate::path::Selection;
pub use actions::{ACTIONS, Action, action};
pub use distributed::{GET_OBJECT, LIST_OBJECTS, PUT_OBJECT};

/// How a state's fields are read: JSONPath (`InputPath`, `Parameters`, `.$` keys,
/// intrinsics) or JSONata (`{% %}` expressions, `Arguments`, `Output`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryLanguage {
    JsonPath,
    Jsonata,
}

/// A state machine, or a Parallel branch, or a Map's item processor: they have the same
/// shape and the same rules.
#[derive(Clone, Debug)]
pub struct StateMachine {
    pub start_at: String,
    pub states: BTreeMap<String, State>,
    pub query_language: QueryLanguage,
    /// The execution's whole time (`TimeoutSeconds` at the top level).
    pub timeout_seconds: Option<u64>,
}

impl StateMachine {
    /// Reads and checks a definition: its JSON text, as `CreateStateMachine` takes it.
    pub fn parse(text: &str) -> Result<Self, Refusal> {
        let value: Value = serde_json::from_str(text)
            .map_err(|error| Refusal::new("", format!("the definition is not JSON: {error}")))?;
        Self::from_value(&value)
    }

    /// Reads and checks a definition already parsed as JSON.
    pub fn from_value(value: &Value) -> Result<Self, Refusal> {
        let machine = check::machine(value, "", None)?;
        check::unique_names(&machine)?;
        Ok(machine)
    }

    /// The state `name` of this machine's own states.
    pub fn state(&self, name: &str) -> Option<&State> {
        self.states.get(name)
    }

    /// Every state, its branches' and item processors' included, each with where it
    /// is (`/States/Par/Branches/0/States/A`).
    pub fn all_states(&self) -> Vec<(String, &State)> {
        let mut all = Vec::new();
        self.collect_states("", &mut all);
        all
    }

    fn collect_states<'a>(&'a self, at: &str, all: &mut Vec<(String, &'a State)>) {
        for (name, state) in &self.states {
            let here = format!("{at}/States/{name}");
            match &state.kind {
                StateKind::Parallel { branches } => {
                    for (index, branch) in branches.iter().enumerate() {
                        branch.collect_states(&format!("{here}/Branches/{index}"), all);
                    }
                }
                StateKind::Map(map) => map
                    .processor
                    .collect_states(&format!("{here}/ItemProcessor"), all),
                _ => {}
            }
            all.push((here, state));
        }
    }

    /// The state `name` wherever it is: names are unique in the whole machine.
    pub fn find(&self, name: &str) -> Option<&State> {
        self.all_states()
            .into_iter()
            .find_map(|(_, state)| (state.name == name).then_some(state))
    }

    /// What a Parallel's branch `index`, or a Map's item processor, runs: the
    /// machine of state `name`'s children.
    pub fn branch(&self, name: &str, index: usize) -> Option<&StateMachine> {
        match &self.find(name)?.kind {
            StateKind::Parallel { branches } => branches.get(index),
            StateKind::Map(map) => Some(&map.processor),
            _ => None,
        }
    }
}

/// A state: its kind, where it goes, and how its input becomes its output.
#[derive(Clone, Debug)]
pub struct State {
    pub name: String,
    pub language: QueryLanguage,
    pub kind: StateKind,
    /// `Next`, or `None` where the state ends its machine (`End`, Succeed, Fail).
    pub next: Option<String>,
    pub io: Io,
    /// `Assign`: variables set when the state ends well.
    pub assign: Option<Value>,
    pub retry: Vec<Retrier>,
    pub catch: Vec<Catcher>,
    /// Whether any of its fields may read the context object (`$$`, or
    /// `$states.context` and `$states` whole): a visit of a state that does not is
    /// spared building it.
    pub reads_context: bool,
}

impl State {
    /// Reads and checks one state on its own, named `name`, as `TestState` takes it:
    /// the states it goes to need not be there.
    pub fn alone(name: &str, value: &Value) -> Result<Self, Refusal> {
        check::state(name, value, "", QueryLanguage::JsonPath)
    }

    /// The states it may go to, each once, in the order its definition names them:
    /// `Next`, a Choice's rules' and its `Default`, its catchers'.
    pub fn transitions(&self) -> Vec<&str> {
        let mut next: Vec<&str> = self.next.as_deref().into_iter().collect();
        if let StateKind::Choice { choices, default } = &self.kind {
            next.extend(choices.iter().filter_map(|rule| rule.next.as_deref()));
            next.extend(default.as_deref());
        }
        next.extend(self.catch.iter().map(|catcher| catcher.next.as_str()));
        let mut seen = std::collections::BTreeSet::new();
        next.retain(|name| seen.insert(*name));
        next
    }
}

/// The data-flow fields, by language. Absent fields are `None`; a path field set to
/// `null` in the definition is `Some(Selection::Nothing)`.
#[derive(Clone, Debug, Default)]
pub struct Io {
    pub input_path: Option<Selection>,
    pub parameters: Option<Value>,
    pub result_selector: Option<Value>,
    pub result_path: Option<Selection>,
    pub output_path: Option<Selection>,
    /// JSONata's `Arguments` (Task, Parallel, Map's `ItemSelector` is apart).
    pub arguments: Option<Value>,
    /// JSONata's `Output`.
    pub output: Option<Value>,
}

#[derive(Clone, Debug)]
pub enum StateKind {
    Pass {
        result: Option<Value>,
    },
    Task(Task),
    Choice {
        choices: Vec<ChoiceRule>,
        default: Option<String>,
    },
    Wait(WaitFor),
    Succeed,
    Fail {
        error: Option<Text>,
        cause: Option<Text>,
    },
    Parallel {
        branches: Vec<StateMachine>,
    },
    Map(Box<MapState>),
}

impl StateKind {
    /// The state's `Type`, as the definition names it.
    pub fn type_name(&self) -> &'static str {
        match self {
            StateKind::Pass { .. } => "Pass",
            StateKind::Task(_) => "Task",
            StateKind::Choice { .. } => "Choice",
            StateKind::Wait(_) => "Wait",
            StateKind::Succeed => "Succeed",
            StateKind::Fail { .. } => "Fail",
            StateKind::Parallel { .. } => "Parallel",
            StateKind::Map(_) => "Map",
        }
    }
}

/// A Task: what it calls and how long it may take.
#[derive(Clone, Debug)]
pub struct Task {
    pub resource: Resource,
    pub timeout: Option<Amount>,
    pub heartbeat: Option<Amount>,
}

/// What a Task's `Resource` names, and how its caller waits for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    pub arn: String,
    pub target: Target,
    pub pattern: Pattern,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `arn:aws:lambda:REGION:ACCOUNT:function:NAME`: the input is the event.
    LambdaFunction { function: String },
    /// `arn:aws:states:::lambda:invoke`: `FunctionName` and `Payload` in the arguments,
    /// the result wrapped as Lambda's `Invoke` answer.
    LambdaInvoke,
    /// `arn:aws:states:::http:invoke`.
    HttpInvoke,
    /// `arn:aws:states:REGION:ACCOUNT:activity:NAME`.
    Activity { name: String },
    /// `arn:aws:states:::states:startExecution`.
    StartExecution,
    /// `arn:aws:states:::SERVICE:ACTION` for the AWS services this engine calls
    /// (`sqs:sendMessage`, `sns:publish`, `dynamodb:getItem`, ...).
    Service(&'static Action),
}

/// How a Task waits: for the call's answer, for a task token, or for a job to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    RequestResponse,
    WaitForTaskToken,
    Sync,
    Sync2,
}

/// A number of seconds given literally, by a JSONPath (`...Path`) or by JSONata.
#[derive(Clone, Debug, PartialEq)]
pub enum Amount {
    Fixed(u64),
    Path(String),
    Jsonata(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum WaitFor {
    Seconds(Amount),
    /// A timestamp, already checked as RFC 3339.
    Timestamp(String),
    TimestampPath(String),
    TimestampJsonata(String),
}

/// A Fail state's `Error` or `Cause`: literal, by path (or intrinsic function), or by
/// JSONata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Text {
    Literal(String),
    Path(String),
    Jsonata(String),
}

/// A Map state: where its items come from and how each is run.
#[derive(Clone, Debug)]
pub struct MapState {
    pub processor: StateMachine,
    pub distributed: bool,
    pub items: Items,
    pub item_selector: Option<Value>,
    pub max_concurrency: Option<Amount>,
    pub tolerated_failure_percentage: Option<Bound>,
    pub tolerated_failure_count: Option<Bound>,
    pub item_reader: Option<ItemReader>,
    pub item_batcher: Option<Batcher>,
    pub result_writer: Option<ResultWriter>,
}

/// A distributed Map's `ResultWriter`: its children's results exported to S3, or
/// only shaped as its output.
#[derive(Clone, Debug, PartialEq)]
pub struct ResultWriter {
    /// The request of `s3:putObject` (`Bucket`, `Prefix`): a template (`Parameters`)
    /// or JSONata (`Arguments`); none where the results are only shaped.
    pub export: Option<Value>,
    /// How each child's result is shaped (`WriterConfig.Transformation`).
    pub transformation: Transformation,
    /// How a file of results is written (`WriterConfig.OutputType`).
    pub output_type: OutputType,
}

/// How a child's result is shaped by a `ResultWriter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transformation {
    /// Its execution's description: ARN, input, output or error, status, dates.
    None,
    /// Its output alone.
    Compact,
    /// Its output, an array's items each a result of its own.
    Flatten,
}

/// How a file of a `ResultWriter`'s results is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputType {
    /// A JSON array.
    Json,
    /// A JSON value a line.
    JsonLines,
}

/// A distributed Map's `ItemReader`: its items read from an object in S3, or a
/// bucket's listing.
#[derive(Clone, Debug, PartialEq)]
pub struct ItemReader {
    /// [`GET_OBJECT`], [`LIST_OBJECTS`], or another reader (refused where the machine
    /// is loaded).
    pub resource: String,
    /// The request (`Bucket`, `Key`, ...): a template (`Parameters`) or JSONata
    /// (`Arguments`).
    pub request: Value,
    /// How the object's items are written (a listing's: JSON).
    pub input_type: InputType,
    /// The most items read (`MaxItems`, its `Path` form, or JSONata).
    pub max_items: Option<Amount>,
}

/// How an object's items are written (`ReaderConfig.InputType`).
#[derive(Clone, Debug, PartialEq)]
pub enum InputType {
    /// A JSON array.
    Json,
    /// A JSON value a line.
    JsonLines,
    /// CSV: each row an object of its columns' text, named by the first row
    /// (`headers` none) or by `CSVHeaders`.
    Csv {
        headers: Option<Vec<String>>,
        delimiter: u8,
    },
}

/// A distributed Map's `ItemBatcher`: its items given to each child in batches,
/// `{"BatchInput", "Items"}`, of at most so many items and so many bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Batcher {
    pub max_items: Option<Amount>,
    pub max_bytes: Option<Amount>,
    /// A template, evaluated on the state's input.
    pub batch_input: Option<Value>,
}

/// Where a Map's items are: `ItemsPath` (JSONPath, default `$`) or `Items` (JSONata, or
/// a literal array).
#[derive(Clone, Debug, PartialEq)]
pub enum Items {
    Path(String),
    Value(Value),
}

/// A tolerated failure threshold: literal, by path, or by JSONata.
#[derive(Clone, Debug, PartialEq)]
pub enum Bound {
    Fixed(f64),
    Path(String),
    Jsonata(String),
}
