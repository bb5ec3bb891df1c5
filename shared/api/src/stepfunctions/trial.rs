//! `TestState`: one state run on its own with a given input (a state's definition,
//! or a machine's and the state's name), its Task's call (or a Parallel's branches,
//! or a Map's items) answered by a mock, as Step Functions' `TestState` runs it. It
//! makes no call and writes nothing.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use sas_asl::Failure;
use sas_asl::definition::{Pattern, State, StateKind, StateMachine};
use sas_asl::run::Visit;
use sas_asl::run::context::{Execution, Position, context};
use sas_asl::run::trial::{Mock, try_state};
use sas_core::app::App;
use sas_domain::machine::{execution_arn, machine_arn};

use super::{SfnError, body, required};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TestRequest {
    definition: Option<String>,
    role_arn: Option<String>,
    input: Option<String>,
    inspection_level: Option<String>,
    variables: Option<String>,
    state_name: Option<String>,
    mock: Option<MockRequest>,
    context: Option<String>,
    state_configuration: Option<StateConfiguration>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MockRequest {
    result: Option<String>,
    error_output: Option<ErrorOutput>,
}

#[derive(Deserialize)]
struct ErrorOutput {
    error: Option<String>,
    cause: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StateConfiguration {
    retrier_retry_count: Option<u64>,
}

/// The name a state tested on its own has, in its context object.
const ALONE: &str = "TestState";

/// `field`'s JSON text read, `kind` naming what is refused where it is not JSON.
fn json_of(text: &str, field: &str, kind: &'static str) -> Result<Value, SfnError> {
    serde_json::from_str(text)
        .map_err(|e| SfnError::new(kind, format!("{field} is not valid JSON: {e}")))
}

/// The state the request names: its definition alone, or `stateName` of a machine's
/// (the machine's `StartAt` without one).
fn tested(definition: &Value, state_name: Option<&str>) -> Result<State, SfnError> {
    let invalid = |refusal: sas_asl::Refusal| {
        SfnError::new(
            "InvalidDefinition",
            format!("Invalid State Machine Definition: '{refusal}'"),
        )
    };
    if definition.get("States").is_none() {
        if let Some(name) = state_name {
            return Err(SfnError::invalid(
                "stateName",
                &format!("'{name}' names a state of a machine's definition; this is one state's"),
            ));
        }
        return State::alone(ALONE, definition).map_err(invalid);
    }
    let machine = StateMachine::from_value(definition).map_err(invalid)?;
    let name = state_name.unwrap_or(&machine.start_at);
    machine.find(name).cloned().ok_or_else(|| {
        SfnError::invalid(
            "stateName",
            &format!("the definition has no state named '{name}'"),
        )
    })
}

/// The mock's answer: its result (JSON text) or its error.
fn mocked(mock: MockRequest) -> Result<Mock, SfnError> {
    match (mock.result, mock.error_output) {
        (Some(result), None) => Ok(Mock::Result(json_of(
            &result,
            "mock.result",
            "ValidationException",
        )?)),
        (None, Some(error)) => Ok(Mock::Error(Failure::new(
            error.error.unwrap_or_default(),
            error.cause.unwrap_or_default(),
        ))),
        _ => Err(SfnError::invalid(
            "mock",
            "Member must have exactly one of result and errorOutput",
        )),
    }
}

/// `TestState`: the state run once; `inspectionData` at `DEBUG` and `TRACE`.
pub(super) async fn test_state(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: TestRequest = body(bytes)?;
    let detailed = match request.inspection_level.as_deref() {
        None | Some("INFO") => false,
        Some("DEBUG" | "TRACE") => true,
        Some(_) => {
            return Err(SfnError::invalid(
                "inspectionLevel",
                "Member must satisfy enum value set: [INFO, DEBUG, TRACE]",
            ));
        }
    };
    let definition = required(request.definition, "definition")?;
    let definition = json_of(&definition, "definition", "InvalidDefinition")?;
    let state = tested(&definition, request.state_name.as_deref())?;
    let input = json_of(
        request.input.as_deref().unwrap_or("{}"),
        "input",
        "InvalidExecutionInput",
    )?;
    let variables = match request.variables.as_deref() {
        None => Map::new(),
        Some(text) => match json_of(text, "variables", "ValidationException")? {
            Value::Object(variables) => variables,
            _ => {
                return Err(SfnError::invalid(
                    "variables",
                    "Member must be a JSON object",
                ));
            }
        },
    };
    let context = match request.context.as_deref() {
        Some(text) => json_of(text, "context", "ValidationException")?,
        None => {
            let now = app.now().to_rfc3339();
            let execution = Execution {
                id: execution_arn(ALONE, ALONE),
                name: ALONE.to_owned(),
                input: input.clone(),
                role_arn: request.role_arn.unwrap_or_default(),
                start_time: now.clone(),
                redrive_count: 0,
                machine_id: machine_arn(ALONE),
                machine_name: ALONE.to_owned(),
            };
            let waits_for_token = matches!(&state.kind,
                StateKind::Task(task) if task.resource.pattern == Pattern::WaitForTaskToken);
            let position = Position {
                state: &state.name,
                entered_time: &now,
                task_token: waits_for_token.then_some("TestStateTaskToken"),
                ..Position::default()
            };
            context(&execution, &position)
        }
    };
    let mock = request.mock.map(mocked).transpose()?;
    let retried = (request.state_configuration)
        .and_then(|configuration| configuration.retrier_retry_count)
        .unwrap_or(0);
    let retries = vec![retried; state.retry.len()];
    let visit = Visit {
        state: &state,
        input: &input,
        context: &context,
        variables: &variables,
    };
    let trial = try_state(&visit, mock, &retries).map_err(|unmocked| {
        SfnError::invalid(
            "mock",
            &format!(
                "a {} state is tested here with a mock of its answer: no call is made",
                unmocked.0
            ),
        )
    })?;
    let mut answer = json!({ "status": trial.outcome.as_str() });
    if let Some(output) = &trial.output {
        answer["output"] = json!(output.to_string());
    }
    if let Some(next) = &trial.next {
        answer["nextState"] = json!(next);
    }
    if let Some(failure) = &trial.failure {
        answer["error"] = json!(failure.error);
        answer["cause"] = json!(failure.cause);
    }
    if detailed {
        answer["inspectionData"] = Value::Object(trial.inspection);
    }
    Ok(answer)
}
