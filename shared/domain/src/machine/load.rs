//! A state machine's definition loaded as a workflow: its states that wait, one step
//! each; what this engine does not run yet refused, naming the state.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sas_asl::definition::{Amount, Pattern, StateKind, StateMachine, Target};

use super::branches::TokenWait;
use super::{BranchesStep, HTTP_AGENT, LAMBDA_AGENT, Machine, S3_AGENT, WRITE_RESULTS};
use crate::kinds::{CallStep, CallbackSettings, SleepStep, StepKind, WaitStep};
use crate::messages::Method;
use crate::workflow::file::{NAME_RULE, default_retry, default_supervision, is_workflow_name};
use crate::workflow::{DefinitionError, Endpoint, StepDefinition, Supervision, Workflow};

/// A state machine's file: `NAME.asl.json`.
const SUFFIX: &str = ".asl.json";

/// How long a Task's call may take when its state says no `TimeoutSeconds`: the
/// supervisor sends it again after this, as it does a workflow's call.
const DEFAULT_CALL_TIME: Duration = Duration::from_secs(300);

/// How long a `.waitForTaskToken` Task waits without a `TimeoutSeconds`: a year, as
/// long as a Step Functions execution may run.
const LONGEST_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// How long a new task waits for a scheduler before the supervisor sends it again.
const PICKUP_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) fn is_machine_file(file: &str) -> bool {
    file.ends_with(SUFFIX)
}

/// The workflow of the state machine in `file` (named for it), from its `text`.
pub(crate) fn workflow(file: &str, text: &str) -> Result<Workflow, DefinitionError> {
    let base = file.rsplit(['/', '\\']).next().unwrap_or(file);
    named(base.strip_suffix(SUFFIX).unwrap_or(base), file, text)
}

/// Whether a stored definition's `text` is a state machine's (its `StartAt` and
/// `States`), not a workflow's.
pub(crate) fn is_machine_text(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text)
        .is_ok_and(|value| value.get("StartAt").is_some() && value.get("States").is_some())
}

/// The workflow `name` of the state machine in `text`; `file` names it in errors.
pub(crate) fn named(name: &str, file: &str, text: &str) -> Result<Workflow, DefinitionError> {
    let name = name.to_owned();
    let error = |step: Option<String>, field: String, message: String| DefinitionError {
        file: file.to_owned(),
        step,
        field,
        message,
    };
    if !is_workflow_name(&name) {
        return Err(error(
            None,
            "name".to_owned(),
            format!("'{name}' (the file's name) {NAME_RULE}"),
        ));
    }
    let machine = StateMachine::parse(text).map_err(|refusal| {
        let state = state_of(&refusal.at);
        error(state, refusal.at.clone(), refusal.message)
    })?;
    let mut steps = Vec::new();
    for (at, state) in machine.all_states() {
        let state_name = &state.name;
        // A step that comes after the state's own (a distributed Map's writer).
        let mut after = None;
        let refuse = |field: &str, what: &str| {
            error(
                Some(state_name.clone()),
                format!("{at}/{field}"),
                format!("{what} is not run by this engine yet"),
            )
        };
        let kind = match &state.kind {
            // An execution of a machine, a child task: waited for, or only started, or
            // given its task token, then waited for until the token is used.
            StateKind::Task(task) if task.resource.target == Target::StartExecution => {
                let token = (task.resource.pattern == Pattern::WaitForTaskToken).then(|| {
                    Box::new(TokenWait {
                        callback: callback(task),
                        supervision: token_supervision(),
                    })
                });
                StepKind::Branches(BranchesStep {
                    state_type: "Task",
                    token,
                })
            }
            // A wait for a worker to take the visit and end it with its token.
            StateKind::Task(task) if matches!(task.resource.target, Target::Activity { .. }) => {
                StepKind::Wait(WaitStep {
                    callback: callback(task),
                    supervision: token_supervision(),
                })
            }
            StateKind::Task(task) => {
                let unsupported =
                    || refuse("Resource", &format!("the resource '{}'", task.resource.arn));
                // The agent that makes the call, and the operation it is asked for.
                let (agent, operation) = match task.resource.target {
                    Target::LambdaFunction { .. } | Target::LambdaInvoke => {
                        (LAMBDA_AGENT, "Invoke")
                    }
                    Target::Service(action) => (action.service, action.operation),
                    Target::HttpInvoke if task.resource.pattern == Pattern::RequestResponse => {
                        (HTTP_AGENT, "Invoke")
                    }
                    _ => return Err(unsupported()),
                };
                // What the Task waits for beyond its call: nothing, or its task token's use.
                let callback = match task.resource.pattern {
                    Pattern::RequestResponse => None,
                    Pattern::WaitForTaskToken => Some(callback(task)),
                    Pattern::Sync | Pattern::Sync2 => return Err(unsupported()),
                };
                StepKind::Call(Box::new(call(
                    agent,
                    operation,
                    task.timeout.is_some(),
                    callback,
                )))
            }
            StateKind::Wait(_) => StepKind::Sleep(SleepStep::Visit),
            StateKind::Parallel { .. } => StepKind::Branches(BranchesStep {
                state_type: "Parallel",
                token: None,
            }),
            StateKind::Map(map) => {
                // Its items read from S3 by a step of its own, before its children.
                if let Some(reader) = &map.item_reader {
                    let Some(operation) = super::reader_operation(&reader.resource) else {
                        let what = format!("the reader '{}'", reader.resource);
                        return Err(refuse("ItemReader/Resource", &what));
                    };
                    let read = s3_call(&machine, state_name, &at, "ItemReader", operation)
                        .map_err(|(field, why)| error(Some(state_name.clone()), field, why))?;
                    steps.push(read);
                }
                // Its results written to S3 by a step of its own, after its children.
                if map
                    .result_writer
                    .as_ref()
                    .is_some_and(|w| w.export.is_some())
                {
                    let write =
                        s3_call(&machine, state_name, &at, "ResultWriter", WRITE_RESULTS)
                            .map_err(|(field, why)| error(Some(state_name.clone()), field, why))?;
                    after = Some(write);
                }
                StepKind::Branches(BranchesStep {
                    state_type: "Map",
                    token: None,
                })
            }
            StateKind::Pass { .. }
            | StateKind::Choice { .. }
            | StateKind::Succeed
            | StateKind::Fail { .. } => continue,
        };
        steps.push(step(state_name.clone(), kind));
        steps.extend(after);
    }
    Ok(Workflow {
        name,
        version: 1,
        description: String::new(),
        input: BTreeMap::new(),
        pickup_timeout: PICKUP_TIMEOUT,
        steps,
        source: text.to_owned(),
        file: file.to_owned(),
        machine: Some(Machine(Arc::new(machine))),
        attributes: Vec::new(),
    })
}

/// The step `name` of a machine's workflow: no order or condition of a workflow's
/// own, the machine's states choosing which runs.
fn step(name: String, kind: StepKind) -> StepDefinition {
    StepDefinition {
        name,
        kind,
        after: Vec::new(),
        within: Vec::new(),
        when: Vec::new(),
    }
}

/// The state a refusal's place names (`.../States/NAME/...`, its innermost), if it
/// names one.
fn state_of(at: &str) -> Option<String> {
    let (_, rest) = at.rsplit_once("/States/")?;
    Some(rest.split('/').next().unwrap_or(rest).to_owned())
}

/// How a wait for a task token is supervised: it ends, for good, when its timeout or
/// a heartbeat passes.
fn token_supervision() -> Supervision {
    Supervision {
        failure_threshold: 0,
        ..default_supervision()
    }
}

/// How long a `.waitForTaskToken` Task waits for its token's use: its
/// `TimeoutSeconds`, or as long as an execution may run; and its `HeartbeatSeconds`.
/// Where its state works either out at run time (a `Path` form, JSONata), the visit's
/// value takes the place of this one ([`super::visit_callback`]).
fn callback(task: &sas_asl::definition::Task) -> CallbackSettings {
    let fixed = |amount: &Option<Amount>| match amount {
        None => None,
        Some(Amount::Fixed(seconds)) => Some(Duration::from_secs(*seconds)),
        Some(Amount::Path(_) | Amount::Jsonata(_)) => Some(LONGEST_WAIT),
    };
    CallbackSettings {
        timeout: fixed(&task.timeout).unwrap_or(LONGEST_WAIT),
        heartbeat: fixed(&task.heartbeat),
    }
}

/// The step of the distributed Map `state` (at `at`) that makes the S3 call
/// `operation` for its `field` (`ItemReader`, `ResultWriter`); refused, with the
/// field and why, where a state has the step's name.
fn s3_call(
    machine: &StateMachine,
    state: &str,
    at: &str,
    field: &str,
    operation: &str,
) -> Result<StepDefinition, (String, String)> {
    let name = super::s3_step(state, operation);
    if machine
        .all_states()
        .iter()
        .any(|(_, other)| other.name == name)
    {
        return Err((
            format!("{at}/{field}"),
            format!("a state is named '{name}', the name of this Map's {field}"),
        ));
    }
    let call = call(S3_AGENT, operation, false, None);
    Ok(step(name, StepKind::Call(Box::new(call))))
}

/// A Task's call of `operation` by `agent` (Lambda's, or an AWS service's), with
/// what its visit gives ([`super::VisitWork`]). Without a `TimeoutSeconds` it is sent again by
/// the supervisor as any call is; with one (`timed`), its lease is the timeout its
/// visit works out ([`super::call_time`]), and its end is the state's `States.Timeout`.
/// A `.waitForTaskToken` Task then waits for its `callback`, whose end is the same.
fn call(agent: &str, operation: &str, timed: bool, callback: Option<CallbackSettings>) -> CallStep {
    let mut supervision = default_supervision();
    if timed || callback.is_some() {
        supervision.failure_threshold = 0;
    }
    CallStep {
        agent: agent.to_owned(),
        call: Endpoint::literal(Method::Post, operation),
        compensation: None,
        read_only: false,
        complete_by: DEFAULT_CALL_TIME,
        retry: default_retry(),
        supervision,
        fields: None,
        callback,
        limit: None,
        service_limit: None,
        endpoints: None,
    }
}
