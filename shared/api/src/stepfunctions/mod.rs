//! Step Functions' own API over the project's tasks, so that the AWS CLI, boto3 and
//! the other SDKs work with nothing changed but the endpoint: the AWS JSON 1.0
//! protocol (`POST /` with `X-Amz-Target: AWSStepFunctions.<Operation>`), requests and
//! answers in Step Functions' shapes (its field names, its timestamps as epoch
//! seconds, its ARNs), errors by its names in `__type`, answered `400` as it answers
//! them.
//!
//! A state machine is a workflow: one the deployment ships (a `NAME.asl.json`, or one
//! of the project's language), or one created through this API; an execution is a
//! task, its name the task's id (under the caller's scope, as on the project's
//! routes); a task token is a callback's token; an activity's task is a visit of a
//! Task on it, which its worker ends with that token.

mod activities;
mod aliases;
mod catalog;
mod definitions;
mod executions;
mod history;
mod listing;
mod machines;
mod repairs;
mod tokens;
mod trial;

pub(crate) use history::shown as shown_event;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use sas_core::app::App;
use sas_domain::time::Timestamp;

use crate::error::{ApiError, ErrorCode};
use crate::scope::Scope;
use crate::{ApiRequest, ApiResponse, Caller};

/// Where an operator's client sends Step Functions' protocol on a deployment whose
/// operator routes are authorized apart (IAM): the endpoint
/// `https://API/operator/stepfunctions`. A caller's is the API's root.
pub const OPERATOR_PATH: &str = "/operator/stepfunctions";

/// What `X-Amz-Target` starts with for Step Functions' operations.
pub(crate) const TARGET_PREFIX: &str = "AWSStepFunctions.";

/// The media type of the protocol's requests and answers.
pub const AMZ_JSON: &str = "application/x-amz-json-1.0";

/// An error as Step Functions names it in `__type`, with its message and status.
#[derive(Debug)]
pub(crate) struct SfnError {
    kind: &'static str,
    message: String,
    status: u16,
}

impl SfnError {
    /// A client's error (`400`), of Step Functions' `kind`.
    pub(crate) fn new(kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            status: 400,
        }
    }

    /// The store's failure: `ServiceUnavailable` (`503`), which a client retries.
    pub(crate) fn unavailable(error: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %error, "a Step Functions request failed in the store");
        Self {
            kind: "ServiceUnavailable",
            message: "the service is unavailable; try again".to_owned(),
            status: 503,
        }
    }

    /// `InvalidToken`: a `nextToken` no listing gave.
    pub(crate) fn invalid_token(token: &str) -> Self {
        Self::new("InvalidToken", format!("Invalid Token: '{token}'"))
    }

    /// `ValidationException` naming `field` and what it must be.
    pub(crate) fn invalid(field: &str, constraint: &str) -> Self {
        Self::new(
            "ValidationException",
            format!(
                "1 validation error detected: Value at '{field}' failed to satisfy constraint: {constraint}"
            ),
        )
    }

    /// The project's `error` as Step Functions names it, `missing` naming what was
    /// not found (a state machine, an execution, a task).
    pub(crate) fn from_api(error: ApiError, missing: &'static str) -> Self {
        let kind = match error.code {
            ErrorCode::NotFound => missing,
            ErrorCode::UnknownWorkflow => "StateMachineDoesNotExist",
            ErrorCode::Conflict => "ExecutionAlreadyExists",
            ErrorCode::InvalidId => "InvalidName",
            ErrorCode::NotWaiting | ErrorCode::NoHeartbeat => "TaskTimedOut",
            ErrorCode::InvalidField | ErrorCode::InvalidBody | ErrorCode::InvalidJson => {
                "InvalidExecutionInput"
            }
            ErrorCode::Unauthenticated => "UnrecognizedClientException",
            ErrorCode::Forbidden => "AccessDeniedException",
            ErrorCode::Unavailable => "ServiceUnavailable",
            ErrorCode::Internal => "InternalFailure",
            _ => "ValidationException",
        };
        let status = match error.code {
            ErrorCode::Unavailable => 503,
            ErrorCode::Internal => 500,
            ErrorCode::Forbidden => 403,
            _ => 400,
        };
        Self {
            kind,
            message: error.message,
            status,
        }
    }
}

impl From<SfnError> for ApiResponse {
    fn from(error: SfnError) -> Self {
        answer(
            error.status,
            &json!({"__type": error.kind, "message": error.message}),
        )
    }
}

/// An answer of the protocol: `body` as `application/x-amz-json-1.0`.
fn answer(status: u16, body: &Value) -> ApiResponse {
    ApiResponse {
        content_type: Some(AMZ_JSON),
        ..ApiResponse::ok(status, body)
    }
}

/// A request's body read as `T`; an empty one as `{}`.
pub(crate) fn body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, SfnError> {
    let bytes = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        bytes
    };
    serde_json::from_slice(bytes).map_err(|e| {
        if e.is_data() {
            SfnError::new("ValidationException", e.to_string())
        } else {
            SfnError::new(
                "SerializationException",
                format!("the body is not JSON: {e}"),
            )
        }
    })
}

/// `field`'s value, which the operation requires.
fn required(value: Option<String>, field: &str) -> Result<String, SfnError> {
    value.ok_or_else(|| SfnError::invalid(field, "Member must not be null"))
}

/// A time as the protocol writes it: seconds since the epoch.
pub(crate) fn seconds(at: Timestamp) -> Value {
    json!(at.0 as f64 / 1000.0)
}

/// An operator's operations, as the operator's routes are: those that change the
/// deployment's definitions and activities, a worker's poll, which takes any caller's
/// task, and `TestState`, which runs any definition given.
const OPERATORS: [&str; 15] = [
    "RepairExecution",
    "CreateStateMachine",
    "UpdateStateMachine",
    "DeleteStateMachine",
    "PublishStateMachineVersion",
    "DeleteStateMachineVersion",
    "CreateStateMachineAlias",
    "UpdateStateMachineAlias",
    "DeleteStateMachineAlias",
    "TagResource",
    "UntagResource",
    "CreateActivity",
    "DeleteActivity",
    "GetActivityTask",
    "TestState",
];

/// The operations a task token is the capability for, answered without
/// authentication as `POST /callbacks/{token}` is.
const TOKENS: [&str; 3] = ["SendTaskSuccess", "SendTaskFailure", "SendTaskHeartbeat"];

/// Serves `target`'s operation for `caller`: a caller's executions under its own
/// scope, the definitions' changes an operator's only.
pub(crate) async fn serve(app: &App, request: &ApiRequest<'_>, target: &str) -> ApiResponse {
    let (caller, bytes, trace) = (request.caller, request.body, request.trace.context());
    let trace = trace.as_ref();
    let operation = target.strip_prefix(TARGET_PREFIX).unwrap_or(target);
    let (scope, operator) = match caller {
        _ if TOKENS.contains(&operation) => (Scope::Own(None), false),
        Caller::Anyone => (Scope::Own(None), true),
        Caller::Open => (Scope::Own(None), false),
        Caller::Known { owner, operator } => (Scope::Own(Some(owner)), *operator),
        Caller::Unauthenticated => {
            let refused = SfnError::new(
                "UnrecognizedClientException",
                "a valid token is required: send 'Authorization: Bearer <token>'",
            );
            return refused.into();
        }
    };
    if OPERATORS.contains(&operation) && !operator {
        let refused = SfnError {
            kind: "AccessDeniedException",
            message: format!("{operation} is an operator's"),
            status: 400,
        };
        return refused.into();
    }
    let served = match operation {
        "ListStateMachines" => machines::list(app, bytes).await,
        "DescribeStateMachine" => machines::describe(app, bytes).await,
        "CreateStateMachine" => definitions::create(app, bytes).await,
        "UpdateStateMachine" => definitions::update(app, bytes).await,
        "DeleteStateMachine" => definitions::delete(app, bytes).await,
        "ValidateStateMachineDefinition" => machines::validate(bytes),
        "PublishStateMachineVersion" => catalog::publish_version(app, bytes).await,
        "ListStateMachineVersions" => catalog::list_versions(app, bytes).await,
        "DeleteStateMachineVersion" => catalog::delete_version(app, bytes).await,
        "CreateStateMachineAlias" => aliases::create(app, bytes).await,
        "DescribeStateMachineAlias" => aliases::describe(app, bytes).await,
        "UpdateStateMachineAlias" => aliases::update(app, bytes).await,
        "ListStateMachineAliases" => aliases::list(app, bytes).await,
        "DeleteStateMachineAlias" => aliases::delete(app, bytes).await,
        "TagResource" | "UntagResource" | "ListTagsForResource" => {
            catalog::tags(app, operation, bytes).await
        }
        "StartExecution" => executions::start(app, scope, bytes, trace).await,
        "StartSyncExecution" => executions::start_sync(app, scope, bytes, trace).await,
        "DescribeStateMachineForExecution" => executions::machine_of(app, scope, bytes).await,
        "DescribeExecution" => executions::describe(app, scope, bytes).await,
        "ListExecutions" => listing::list(app, scope, bytes).await,
        "StopExecution" => executions::stop(app, scope, bytes).await,
        "GetExecutionHistory" => history::get(app, scope, bytes).await,
        "RedriveExecution" => executions::redrive(app, scope, bytes).await,
        "RepairExecution" => repairs::repair(app, scope, bytes).await,
        "TestState" => trial::test_state(app, bytes).await,
        "CreateActivity" => activities::create(app, bytes).await,
        "DescribeActivity" => activities::describe(app, bytes).await,
        "ListActivities" => activities::list(app, bytes).await,
        "DeleteActivity" => activities::delete(app, bytes).await,
        "GetActivityTask" => activities::get_task(app, bytes).await,
        _ if TOKENS.contains(&operation) => tokens::send(app, operation, bytes).await,
        _ => Err(SfnError::new(
            "UnknownOperationException",
            format!("'{target}' is not an operation this endpoint serves"),
        )),
    };
    match served {
        Ok(body) => answer(200, &body),
        Err(error) => error.into(),
    }
}
