//! Errors as a caller sees them: a code, the field at fault, and a message naming
//! the problem, never an internal error's text.

use schemars::JsonSchema;
use tracing::error;

use sas_core::app::{ActionError, SubmitError};
use sas_core::ports::{Chain, QueueError, StoreError};
use sas_domain::decide::Refused;

use crate::ApiResponse;

/// What went wrong, by kind; each kind has its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// A task id that is not one.
    InvalidId,
    /// A body over [`MAX_BODY_BYTES`].
    BodyTooLarge,
    /// A body that is not JSON.
    InvalidJson,
    /// A body that is not a JSON object.
    InvalidBody,
    /// A field missing, unknown or invalid.
    InvalidField,
    /// A workflow that does not exist.
    UnknownWorkflow,
    /// A query parameter missing, unknown or invalid.
    InvalidQuery,
    /// No valid credentials: a token missing, forged or expired.
    Unauthenticated,
    /// A caller on a route that needs the operator's rights, or (locally) a request
    /// from another site's page.
    Forbidden,
    /// A task id taken by a different request.
    Conflict,
    /// A resubmission of a task not in Error.
    NotInError,
    /// A cancellation of a task that has ended.
    Ended,
    /// A callback for a step that does not wait for it (any more): used already,
    /// timed out, or its task ended.
    NotWaiting,
    /// A heartbeat for a step whose callback takes none.
    NoHeartbeat,
    /// A pause of a task being undone.
    Undoing,
    /// No such task or route.
    NotFound,
    /// A method the route does not have.
    MethodNotAllowed,
    /// A body not declared `application/json`.
    UnsupportedMediaType,
    /// A `Host` the server does not answer as (locally: a name rebound to it).
    MisdirectedRequest,
    /// The backend failed: the client may retry.
    Unavailable,
    /// The request failed inside the service (a defect, logged and counted; never the
    /// client's mistake).
    Internal,
}

impl ErrorCode {
    /// Its HTTP status.
    #[must_use]
    pub const fn status(self) -> u16 {
        match self {
            Self::InvalidId
            | Self::InvalidJson
            | Self::InvalidBody
            | Self::InvalidField
            | Self::UnknownWorkflow
            | Self::InvalidQuery => 400,
            Self::Unauthenticated => 401,
            Self::Forbidden => 403,
            Self::NotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::Conflict
            | Self::NotInError
            | Self::Ended
            | Self::NotWaiting
            | Self::NoHeartbeat
            | Self::Undoing => 409,
            Self::BodyTooLarge => 413,
            Self::UnsupportedMediaType => 415,
            Self::MisdirectedRequest => 421,
            Self::Internal => 500,
            Self::Unavailable => 503,
        }
    }
}

/// An error answer: `{"error": {"code", "message", "field"?}}`, with the code's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// What went wrong.
    pub code: ErrorCode,
    /// What went wrong, for a person.
    pub message: String,
    /// The field or query parameter at fault, if one is.
    pub field: Option<String>,
}

impl ApiError {
    /// An error of kind `code`, saying `message`.
    #[must_use]
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field: None,
        }
    }

    /// The same error, naming the field at fault.
    #[must_use]
    pub fn on(mut self, field: &str) -> Self {
        self.field = Some(field.to_owned());
        self
    }

    /// The backend failed: the cause goes to the log, not to the caller.
    pub fn unavailable(cause: &(dyn std::error::Error + 'static)) -> Self {
        error!(error = %Chain(cause), "request failed in the backend");
        Self::new(
            ErrorCode::Unavailable,
            "the service is unavailable; retry later",
        )
    }
}

/// An error answer's body.
#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct ErrorView {
    /// What went wrong.
    error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, serde::Serialize, JsonSchema)]
struct ErrorDetail {
    /// The kind of error, for programs.
    code: ErrorCode,
    /// What went wrong, for a person.
    message: String,
    /// The field or query parameter at fault, if one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<String>,
}

impl From<ApiError> for ApiResponse {
    fn from(error: ApiError) -> Self {
        let status = error.code.status();
        let body = ErrorView {
            error: ErrorDetail {
                code: error.code,
                message: error.message,
                field: error.field,
            },
        };
        Self::ok(status, &body)
    }
}

impl From<QueueError> for ApiError {
    fn from(error: QueueError) -> Self {
        Self::unavailable(&error)
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        Self::unavailable(&error)
    }
}

impl From<SubmitError> for ApiError {
    fn from(error: SubmitError) -> Self {
        match error {
            SubmitError::UnknownWorkflow(name) => Self::new(
                ErrorCode::UnknownWorkflow,
                format!("no workflow named '{name}'"),
            )
            .on("workflow"),
            SubmitError::Input(e) => Self::new(ErrorCode::InvalidField, e.to_string()).on(&e.field),
            SubmitError::ReservedQueue(_)
            | SubmitError::ForeignQueue { .. }
            | SubmitError::UnreachableQueue { .. } => {
                Self::new(ErrorCode::InvalidField, error.to_string()).on("notify")
            }
            SubmitError::Conflict(id) => Self::new(
                ErrorCode::Conflict,
                format!(
                    "task '{}' exists with a different request; choose another id",
                    id.local()
                ),
            )
            .on("id"),
            SubmitError::UnknownValue(_) => {
                Self::new(ErrorCode::InvalidField, error.to_string()).on("input")
            }
            SubmitError::Store(e) => Self::unavailable(&e),
            SubmitError::Queue(e) => Self::unavailable(&e),
        }
    }
}

impl From<ActionError> for ApiError {
    fn from(error: ActionError) -> Self {
        match error {
            ActionError::NotFound(id) => not_found(id.local()),
            ActionError::Refused(refused) => {
                let message = refused.to_string();
                match refused {
                    Refused::NotInError(_) | Refused::NotRedrivable => {
                        Self::new(ErrorCode::NotInError, message)
                    }
                    Refused::Ended(..) => Self::new(ErrorCode::Ended, message),
                    Refused::TakenByBatch(_) | Refused::RunByItsParent(_) => {
                        Self::new(ErrorCode::Conflict, message)
                    }
                    Refused::Input(e) => Self::new(ErrorCode::InvalidField, message).on(&e.field),
                    Refused::InputsTooLarge(_) | Refused::InputTooLarge(_) => {
                        Self::new(ErrorCode::InvalidField, message).on("input")
                    }
                    Refused::EffectsInPlace(_) => {
                        Self::new(ErrorCode::Conflict, message).on("input")
                    }
                    Refused::UnknownCallback => Self::new(ErrorCode::NotFound, message),
                    Refused::NoSuchStep(_) => Self::new(ErrorCode::NotFound, message).on("step"),
                    Refused::NotWaiting(_) => Self::new(ErrorCode::NotWaiting, message),
                    Refused::NoHeartbeat(_) => Self::new(ErrorCode::NoHeartbeat, message),
                    Refused::Undoing => Self::new(ErrorCode::Undoing, message),
                    Refused::NotRepairable(_)
                    | Refused::StillRunning(_)
                    | Refused::ChangedInPlace(_)
                    | Refused::NothingToRunAgain
                    | Refused::CannotMove(_) => Self::new(ErrorCode::Conflict, message),
                    Refused::RunsAgain(step) => {
                        Self::new(ErrorCode::Conflict, message).on(&format!("outputs.{step}"))
                    }
                    Refused::Patch(field, _) => {
                        Self::new(ErrorCode::InvalidField, message).on(&field)
                    }
                    Refused::PatchTooLarge(_) => Self::new(ErrorCode::InvalidField, message),
                }
            }
            ActionError::Task(e) => Self::unavailable(&e),
        }
    }
}

/// No task by the id the caller named (another owner's task is not found either).
pub(crate) fn not_found(id: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("no task '{id}'"))
}

/// A query's parameters, as (name, value) pairs in their order; a name alone has an
/// empty value.
pub(crate) fn query_pairs(query: Option<&str>) -> impl Iterator<Item = (&str, &str)> {
    query
        .unwrap_or_default()
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
}

/// A query parameter's value percent-decoded, as a browser's `URLSearchParams` and
/// most clients encode it.
pub(crate) fn decoded<'a>(
    key: &str,
    value: &'a str,
) -> Result<std::borrow::Cow<'a, str>, ApiError> {
    percent_encoding::percent_decode_str(value)
        .decode_utf8()
        .map_err(|_| {
            ApiError::new(
                ErrorCode::InvalidQuery,
                format!("{key}: must be UTF-8, percent-encoded"),
            )
            .on(key)
        })
}

pub(crate) fn unknown_parameter(key: &str) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidQuery,
        format!("unknown parameter '{key}'"),
    )
    .on(key)
}
