//! Step Functions state machines (Amazon States Language) run as tasks of this engine.
//!
//! A definition `NAME.asl.json` loads as a workflow whose steps are its states that
//! wait for something (a Task's call, a Wait's timer), one record each ([`load`]); the
//! states that only choose or shape data (Pass, Choice, Succeed, Fail) are folded into
//! the write of the transition that reaches them. What a plain workflow decides from
//! its steps' order, a machine decides from the state it is in, kept in the task's
//! record as a [`MachineRun`] ([`decide`]): each state's entry and exit are `sas-asl`'s
//! pure transitions. A state entered again (a Choice's loop) is a new visit of its
//! step's record, whose idempotency key names the visit.
//!
//! A Parallel's branches and a Map's items run as child tasks of the same machine,
//! each from its branch's (or the item processor's) start ([`branches`]), as a
//! workflow's map runs its children: names are unique in a whole machine, so every
//! state of every branch is a step of the one workflow.

pub mod activities;
mod branches;
pub mod catalog;
mod decide;
pub mod graph;
pub mod history;
mod load;
mod redrive;
mod results;
#[cfg(test)]
mod tests;
mod work;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use sas_asl::definition::StateMachine;

use crate::messages::Payload;
use crate::time::Timestamp;

pub use branches::{BranchesStep, BranchesView};
pub(crate) use load::{is_machine_file, is_machine_text, named, workflow};
pub use redrive::{StoppedAt, is_redrivable, redrive, repair_execution, stopped_state};
pub use sas_asl::http::Request as HttpRequest;

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// The agent that calls Lambda functions for a machine's Task states.
pub const LAMBDA_AGENT: &str = "lambda";

/// The agent that calls the project's services for `arn:aws:states:::http:invoke`.
pub const HTTP_AGENT: &str = "http";

/// The agent that reads a distributed Map's items from S3 (`ItemReader`) and writes
/// its results there (`ResultWriter`).
pub const S3_AGENT: &str = "s3";

/// The S3 operation of a distributed Map's reader of an object: its text.
pub const READ_ITEMS: &str = "GetObject";

/// The S3 operation of a distributed Map's reader of a listing (`{"Bucket",
/// "Prefix"}`): its objects' descriptions, as a JSON array's text.
pub const LIST_ITEMS: &str = "ListObjectsV2";

/// The S3 operation of the reader on `resource`, if this engine runs it.
pub(crate) fn reader_operation(resource: &str) -> Option<&'static str> {
    match resource {
        sas_asl::definition::GET_OBJECT => Some(READ_ITEMS),
        sas_asl::definition::LIST_OBJECTS => Some(LIST_ITEMS),
        _ => None,
    }
}

/// The S3 operation of a distributed Map's writer: objects put in order,
/// `{"Bucket", "Objects": [{"Key", "Body"}]}` ([`sas_asl::run::writer::export`]).
pub const WRITE_RESULTS: &str = "PutObject";

/// After a distributed Map's name, the names of the steps that read its items and
/// write its results, each an S3 call of its own.
const READER_STEP: &str = " (ItemReader)";
const WRITER_STEP: &str = " (ResultWriter)";

/// The step of the distributed Map `state` that makes the S3 call `operation`: its
/// reader's, or its writer's.
pub(crate) fn s3_step(state: &str, operation: &str) -> String {
    [state, s3_step_suffix(operation)].concat()
}

/// What the name of [`s3_step`] adds to its state's.
fn s3_step_suffix(operation: &str) -> &'static str {
    if operation == WRITE_RESULTS {
        WRITER_STEP
    } else {
        READER_STEP
    }
}

/// The state whose visit step `step` is (a reader's or writer's Map).
fn state_of_step(step: &str) -> &str {
    (step.strip_suffix(READER_STEP))
        .or_else(|| step.strip_suffix(WRITER_STEP))
        .unwrap_or(step)
}

/// What `task` starts with as a branch of a Parallel or a Map (not an execution a
/// Task started, which runs its own machine from its start), if it is one.
fn branch_scope(task: &crate::task::Task) -> Option<&BranchScope> {
    let scope = task.parent.as_ref()?.scope.as_deref()?;
    scope.execution.is_none().then_some(scope)
}

/// The machine `task` runs: its workflow's, or, for a branch of a Parallel or a
/// Map, that branch's; `None` where the branch is not in its machine.
#[must_use]
pub fn machine_of<'a>(
    task: &crate::task::Task,
    workflow: &'a crate::workflow::Workflow,
) -> Option<&'a StateMachine> {
    let machine = &workflow.machine.as_ref()?.0;
    match task
        .parent
        .as_ref()
        .filter(|_| branch_scope(task).is_some())
    {
        None => Some(machine),
        Some(link) => {
            let state = &workflow.steps.get(link.step)?.name;
            machine.branch(state, link.item as usize)
        }
    }
}

/// The step the visit of `state` is at, doing `work`: a distributed Map's reader while
/// it reads, its writer while it writes (an S3 call each), else the state's own.
fn visit_step(
    workflow: &crate::workflow::Workflow,
    state: &str,
    work: Option<&VisitWork>,
) -> Option<usize> {
    match work {
        Some(VisitWork::Service { operation, .. }) => {
            let suffix = s3_step_suffix(operation);
            let own = |name: &str| name.strip_prefix(state) == Some(suffix);
            (workflow.steps.iter().position(|step| own(&step.name)))
                .or_else(|| workflow.step_index(state))
        }
        _ => workflow.step_index(state),
    }
}

/// A loaded state machine, shared by the tasks that run it. Two are equal when their
/// definitions are (the workflow's source says it already).
#[derive(Debug, Clone)]
pub struct Machine(pub Arc<StateMachine>);

impl PartialEq for Machine {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || format!("{:?}", self.0) == format!("{:?}", other.0)
    }
}

impl Eq for Machine {}

/// An execution's status, in Step Functions' words.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// It runs, or waits.
    #[default]
    Running,
    /// It reached a Succeed state, or a state with `End`.
    Succeeded,
    /// A Fail state, or an error nothing caught.
    Failed,
    /// It ran past its `TimeoutSeconds`.
    TimedOut,
    /// It was stopped (cancelled).
    Aborted,
}

impl Status {
    /// As Step Functions writes it: `SUCCEEDED`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Running => "RUNNING",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::TimedOut => "TIMED_OUT",
            Self::Aborted => "ABORTED",
        }
    }
}

/// Where Step Functions' ARNs put this engine, `REGION:ACCOUNT`: set once by the
/// process as it starts ([`set_place`]), [`DEFAULT_PLACE`] until then.
static PLACE: OnceLock<String> = OnceLock::new();

/// The region and account of the ARNs where a process sets none.
pub const DEFAULT_PLACE: &str = "us-east-1:000000000000";

/// Sets the region and account the ARNs name, as the process starts; a later call
/// changes nothing (every ARN a process gives names one place).
pub fn set_place(region: &str, account: &str) {
    let _ = PLACE.set(format!("{region}:{account}"));
}

/// `REGION:ACCOUNT`, as this engine's ARNs name them.
#[must_use]
pub fn place() -> &'static str {
    PLACE.get().map_or(DEFAULT_PLACE, String::as_str)
}

/// The account of this engine's ARNs.
#[must_use]
pub fn account() -> &'static str {
    place().rsplit(':').next().unwrap_or_default()
}

/// The ARN of this engine's state machine `name` (a workflow's).
#[must_use]
pub fn machine_arn(name: &str) -> String {
    format!("arn:aws:states:{}:stateMachine:{name}", place())
}

/// The ARN of the execution `name` (a task's id) of the state machine `machine`.
#[must_use]
pub fn execution_arn(machine: &str, name: &str) -> String {
    format!("arn:aws:states:{}:execution:{machine}:{name}", place())
}

/// Where a task that runs a state machine stands.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineRun {
    /// The state being visited: one that waits (its step's record is its visit), or
    /// the one to enter next. `None` once the execution has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The state is yet to be entered: the execution's start, or a write that
    /// stopped after many states ([`decide`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub to_enter: bool,
    /// The visited state's raw input (the input to enter it with, while `to_enter`).
    pub input: Arc<Value>,
    /// The variables in scope (`Assign`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub variables: Map<String, Value>,
    /// What the visit asked for when it was entered, kept so that a retry sends
    /// the very same (an intrinsic may draw a random value); but for a Task that
    /// gives its task token, whose retry is given a new one, as in Step Functions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work: Option<VisitWork>,
    /// The retries each of the state's retriers has made in this visit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retries: Vec<u64>,
    /// How many times each state that waits has been entered: its visit's number.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub visits: BTreeMap<String, u32>,
    /// The attempts the execution's visits have begun: a visit's first, and each
    /// retry. A task token names the attempt it was given to.
    #[serde(default)]
    pub attempts: u32,
    /// History events so far, as Step Functions counts them: a state's own errors
    /// name the event that entered it.
    pub events: u64,
    /// The events of the task's runs before this one (a resubmission's, a redrive's),
    /// which this run's ids follow: an execution's history goes on, as a redriven
    /// one's does in Step Functions, and no event of an earlier run is written over.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub history_base: u64,
    /// The event that entered the visited state.
    #[serde(default)]
    pub entered_event: u64,
    /// When the execution must end (`TimeoutSeconds`), if ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// Where the execution is.
    pub status: Status,
    /// The execution's result, once it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Arc<Value>>,
    /// Its error and cause, once it failed (either may be absent, as in Step
    /// Functions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its cause, once it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// Where the execution stopped, once it failed, timed out or was aborted in a
    /// state: where a redrive goes on from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<Box<StoppedAt>>,
    /// The history events the decision being written made: the store writes them
    /// beside the task, in the same write; never part of the record. Shared, so that
    /// a copy of the task (each decision begins with one) does not copy them.
    #[serde(skip)]
    pub new_events: Arc<Vec<history::WrittenEvent>>,
}

/// What a visit waits for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum VisitWork {
    /// A Lambda function's `Invoke`: the function and the payload's text.
    Invoke {
        /// The function's name or ARN.
        function: String,
        /// The payload's text.
        payload: String,
        /// `LogType: Tail`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        log_tail: bool,
        /// The state's `TimeoutSeconds` (or its `Path` or JSONata form), worked out
        /// when the state was entered: the call's lease.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_seconds: Option<u64>,
        /// Its `HeartbeatSeconds` (or its forms), worked out the same: how often a
        /// `.waitForTaskToken`'s holder must say it is alive.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        heartbeat_seconds: Option<u64>,
    },
    /// An AWS service's API action (`sqs:sendMessage`, `dynamodb:getItem`, ...),
    /// made by the agent named for its service.
    Service {
        /// The API's operation: `SendMessage`.
        operation: String,
        /// The API's request: shared, as the copies of a task a step makes share it.
        request: Arc<Value>,
        /// As an `Invoke`'s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_seconds: Option<u64>,
        /// As an `Invoke`'s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        heartbeat_seconds: Option<u64>,
    },
    /// A timer.
    Timer {
        /// When it ends.
        until: Timestamp,
        /// What the state leaves with then.
        result: Value,
    },
    /// A Parallel's branches, or a Map's items: one child task each.
    Branches(Box<Branches>),
    /// A Task on an activity: its input, offered to the activity's workers until one
    /// takes it ([`activities`]).
    Activity {
        /// The activity's name.
        activity: String,
        /// The Task's input, as its state worked it out.
        input: Value,
        /// As an `Invoke`'s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_seconds: Option<u64>,
        /// As an `Invoke`'s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        heartbeat_seconds: Option<u64>,
        /// The worker that took it, once one has.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        taken: Option<activities::Taken>,
    },
}

/// A Parallel's or a Map's children, and what they gave so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Branches {
    /// Each child's input, in order.
    pub inputs: Vec<Value>,
    /// Each child's output once it ended (a failed item's `{"Error", "Cause"}`).
    #[serde(default)]
    pub outputs: Vec<Value>,
    /// The most children running at once.
    pub max_concurrency: u32,
    /// A Map's `ToleratedFailureCount`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerated_count: Option<u64>,
    /// A Map's `ToleratedFailurePercentage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerated_percentage: Option<f64>,
    /// The first child's failure: the state's error, where more fail than it tolerates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<BranchFailure>,
    /// History events the children wrote, which later causes count.
    #[serde(default)]
    pub events: u64,
    /// Which start of the state's children this is (the execution's event count
    /// then): in the children's ids, and in their ends, so that a retry's or a later
    /// visit's children are new tasks and an earlier start's late end is told apart.
    #[serde(default)]
    pub round: u64,
    /// Of a Task that started an execution (`states:startExecution`): which, and what
    /// its parent was told of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<Box<StartedExecution>>,
    /// The execution's input, kept once for children that read the context object
    /// (`$$.Execution.Input`); none where they do not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_input: Option<Value>,
    /// Of a Map with a `ResultWriter`: what it keeps of its children for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writing: Option<Box<results::Writing>>,
}

/// An execution of a state machine a Task started: one child task, which runs that
/// machine from its start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedExecution {
    /// The machine it runs: a workflow's name.
    pub machine: String,
    /// The version (its number) or alias its ARN names, whose definition it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qualifier: Option<String>,
    /// What the Task waits for: the execution's end (`.sync`), or only its start.
    pub awaits: Awaited,
    /// What the child told of itself: its start, or its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub told: Option<BranchEnd>,
}

/// What a Task that starts an execution waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Awaited {
    /// Its start (`StartExecution`'s answer).
    Start,
    /// Its end (`.sync`, `.sync:2`).
    End,
}

/// A child's error and cause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchFailure {
    /// Its error.
    pub error: String,
    /// Its cause.
    pub cause: String,
}

/// What a branch of a state machine starts with beyond its input: the variables in
/// scope where its Parallel or Map was entered (it reads them; what it assigns stays
/// its own).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchScope {
    /// Its start's round ([`Branches::round`]).
    #[serde(default)]
    pub round: u64,
    /// The variables.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub variables: Map<String, Value>,
    /// Of an execution a Task started, not a branch: what the Task waits for. It runs
    /// its own machine from its start, with no variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<Awaited>,
    /// The input of the execution the branch is of, where it reads the context object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_input: Option<Value>,
}

/// How a branch of a state machine ended, told to its parent with its end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchEnd {
    /// Its start's round ([`Branches::round`]).
    #[serde(default)]
    pub round: u64,
    /// Its output, once it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Its error, once it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its cause, once it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// The history events it wrote.
    #[serde(default)]
    pub events: u64,
    /// Its status then.
    #[serde(default)]
    pub status: Status,
    /// When it was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
}

impl BranchEnd {
    /// Of a branch (or execution) started in `scope` that never started: failed with
    /// `failure`'s error and cause, or `States.Runtime`.
    #[must_use]
    pub fn unstarted(scope: &BranchScope, failure: Option<(&str, &str)>) -> Self {
        let (error, cause) =
            failure.unwrap_or((sas_asl::errors::RUNTIME, "the branch was never started"));
        Self {
            round: scope.round,
            error: Some(error.to_owned()),
            cause: Some(cause.to_owned()),
            status: Status::Failed,
            ..Self::default()
        }
    }

    /// Where the branch (or execution) `child`, started in `scope`, stands.
    #[must_use]
    pub fn of(scope: &BranchScope, child: &crate::task::Task) -> Option<Self> {
        use crate::task::TaskState;
        let Some(run) = child.machine.as_deref() else {
            // A workflow of the project's language, started as an execution.
            scope.execution?;
            let status = match child.state {
                TaskState::Processed => Status::Succeeded,
                TaskState::Error => Status::Failed,
                _ => Status::Running,
            };
            return Some(Self {
                round: scope.round,
                error: child.error.clone(),
                status,
                started_at: Some(child.created_at),
                ..Self::default()
            });
        };
        Some(Self {
            round: scope.round,
            output: run.output.as_deref().cloned(),
            error: run.error.clone(),
            cause: run.cause.clone(),
            events: run.events - run.history_base,
            status: run.status,
            started_at: Some(child.created_at),
        })
    }
}

/// What the scheduler asks the Lambda agent: one `Invoke`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvokeRequest {
    /// The function's name or ARN.
    pub function: String,
    /// The payload's text (none: an empty payload).
    pub payload: String,
    /// `LogType: Tail`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub log_tail: bool,
}

/// What the Lambda agent answers: what `Invoke` did, a function's error included (the
/// scheduler shapes it as Step Functions does).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvokeAnswer {
    /// The payload's text.
    pub payload: String,
    /// `X-Amz-Function-Error`, when the function failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_error: Option<String>,
    /// `X-Amz-Log-Result`, with `log_tail`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_result: Option<String>,
}

/// What a service's agent answers when the API took the call: its body, status and
/// headers (a refusal fails the call instead, with the error as Step Functions names
/// it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceAnswer {
    /// The answer's body.
    pub body: Value,
    /// The HTTP answer's status.
    pub status: u16,
    /// The HTTP answer's headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The status's reason phrase (`Not Found`), where the agent gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_text: Option<String>,
}

impl InvokeAnswer {
    /// The result of the Task on `resource` that this answered, or its error, as Step
    /// Functions shapes them.
    ///
    /// # Errors
    /// The function's error, or a result past the limit.
    pub fn task_result(
        &self,
        resource: &sas_asl::definition::Resource,
    ) -> Result<Value, sas_asl::Failure> {
        let answer = sas_asl::lambda::Answer {
            payload: self.payload.as_bytes(),
            function_error: self.function_error.as_deref(),
            log_result: self.log_result.as_deref(),
        };
        sas_asl::lambda::task_result(&resource.target, &resource.arn, answer)
    }
}

/// The name a step's idempotency key carries: a state machine's step names its
/// visit (`State#2`), so that each visit of a state in a loop is its own call.
#[must_use]
pub fn key_name(task: &crate::task::Task, step: &str) -> String {
    match &task.machine {
        Some(run) => format!("{step}#{}", run.visit(state_of_step(step))),
        None => step.to_owned(),
    }
}

/// The path and the payload of the call the visit of `task`'s state asks for, if it
/// asks for one: an `Invoke` (its path unused), or an API action's request.
///
/// # Errors
/// The request cannot be written as JSON.
pub(crate) fn visit_request(
    task: &crate::task::Task,
) -> Option<Result<(String, Payload), serde_json::Error>> {
    match task.machine.as_ref()?.work.as_ref()? {
        VisitWork::Invoke {
            function,
            payload,
            log_tail,
            ..
        } => Some(
            Payload::of(&InvokeRequest {
                function: function.clone(),
                payload: payload.clone(),
                log_tail: *log_tail,
            })
            .map(|payload| (String::new(), payload)),
        ),
        VisitWork::Service {
            operation, request, ..
        } => Some(Payload::of(request).map(|payload| (operation.clone(), payload))),
        VisitWork::Timer { .. } | VisitWork::Branches(_) | VisitWork::Activity { .. } => None,
    }
}

/// The URL the call of the visit of `task`'s state is made to, where it names one
/// (`http:invoke`'s `ApiEndpoint`).
pub(crate) fn visit_endpoint(task: &crate::task::Task) -> Option<&str> {
    match task.machine.as_ref()?.work.as_ref()? {
        VisitWork::Service { request, .. } => request.get("endpoint")?.as_str(),
        _ => None,
    }
}

/// How long the call of the visit of `task`'s state may take, when its state says
/// (`TimeoutSeconds` and its forms): the call's lease, whose end is `States.Timeout`.
pub(crate) fn call_time(task: &crate::task::Task) -> Option<std::time::Duration> {
    match task.machine.as_ref()?.work.as_ref()? {
        VisitWork::Invoke {
            timeout_seconds, ..
        }
        | VisitWork::Service {
            timeout_seconds, ..
        } => timeout_seconds.map(|seconds| std::time::Duration::from_secs(seconds.max(1))),
        VisitWork::Timer { .. } | VisitWork::Branches(_) | VisitWork::Activity { .. } => None,
    }
}

/// How the visit of `task`'s state waits for its task token's use: `settings` (its
/// state's, as loaded), with the timeout and heartbeat the visit worked out where its
/// state gives them (`TimeoutSeconds`, `HeartbeatSeconds`, their `Path` forms, JSONata).
pub(crate) fn visit_callback(
    task: &crate::task::Task,
    settings: &crate::kinds::CallbackSettings,
) -> crate::kinds::CallbackSettings {
    let mut settings = settings.clone();
    let work = task.machine.as_ref().and_then(|run| run.work.as_ref());
    if let Some(
        VisitWork::Invoke {
            timeout_seconds,
            heartbeat_seconds,
            ..
        }
        | VisitWork::Service {
            timeout_seconds,
            heartbeat_seconds,
            ..
        }
        | VisitWork::Activity {
            timeout_seconds,
            heartbeat_seconds,
            ..
        },
    ) = work
    {
        let seconds = |seconds: u64| std::time::Duration::from_secs(seconds.max(1));
        if let Some(timeout) = *timeout_seconds {
            settings.timeout = seconds(timeout);
        }
        if let Some(heartbeat) = *heartbeat_seconds {
            settings.heartbeat = Some(seconds(heartbeat));
        }
    }
    settings
}

/// The error of the call the visit of `task`'s state made to give its task token,
/// when what it answered is a failure of its own (a Lambda function's error): the
/// state fails with it at once, as in Step Functions, rather than wait for a token no
/// one will use. `output` is the agent's answer.
pub(crate) fn token_call_failure(
    task: &crate::task::Task,
    workflow: &crate::workflow::Workflow,
    output: &Value,
) -> Option<String> {
    let run = task.machine.as_deref()?;
    if !matches!(run.work, Some(VisitWork::Invoke { .. })) {
        return None;
    }
    let answer: InvokeAnswer = serde_json::from_value(output.clone()).ok()?;
    answer.function_error.as_ref()?;
    let state = workflow.machine.as_ref()?.0.find(run.state.as_deref()?)?;
    let sas_asl::definition::StateKind::Task(state_task) = &state.kind else {
        return None;
    };
    let failure = answer.task_result(&state_task.resource).err()?;
    Some(serde_json::json!({"Error": failure.error, "Cause": failure.cause}).to_string())
}

impl MachineRun {
    /// A run of a task whose earlier run ended with `before`: not started, its
    /// history to go on after the earlier one's.
    #[must_use]
    pub fn after(before: &Self) -> Self {
        Self {
            // The earlier run's end is an event of its own, uncounted.
            history_base: before.events + 1,
            ..Self::default()
        }
    }

    /// Whether the execution has yet to begin: no state to visit, and no end.
    #[must_use]
    pub fn is_unstarted(&self) -> bool {
        self.state.is_none() && self.status == Status::Running
    }

    /// The visit's number of `state` (1 for its first).
    #[must_use]
    pub fn visit(&self, state: &str) -> u32 {
        self.visits.get(state).copied().unwrap_or(0)
    }
}
