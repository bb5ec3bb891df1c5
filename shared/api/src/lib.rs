//! The HTTP API, independent of its transport: the local server and the API
//! Gateway Lambda both translate their requests into [`ApiRequest`] and back.
//!
//! [`ROUTES`] lists every route: a caller's own (`/tasks`, `/workflows`, `/me`)
//! and an operator's (`/operator/...`, over every caller's tasks by their full
//! ids), and `GET /openapi.json`, the document generated from them ([`openapi`]).
//! When the transport authenticates callers ([`Caller`]), each sees only its own
//! tasks, by its own ids.
//!
//! A task is shown as a [`TaskView`]; every error as an [`ApiError`].

mod openapi;
mod view;

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::error;

use sas_core::app::{ActionError, App, BulkAction, BulkPage, Filter, SubmitError, Submitted};
use sas_core::ports::{Chain, DeadLetters, QueueError, StoreError};
use sas_domain::decide::{Refused, Resubmit};
use sas_domain::ids::{Owner, QueueName, TaskId};
use sas_domain::limits;
use sas_domain::messages::Buffered;
use sas_domain::submission::Submission;
use sas_domain::task::{Actor, Request, Task, TaskState};
use sas_domain::time::Timestamp;

pub use openapi::document;
pub use view::{
    AcceptedView, BatchResultView, BatchView, BulkView, DeadLetterQueueView, DeadLetterQueuesView,
    DeadLetterView, DeadLettersView, MeView, PageView, RedriveView, StepView, TaskView, View,
    WorkflowView, WorkflowsView,
};

/// The largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Submissions in one `POST /tasks/batch` at most.
pub const MAX_BATCH: usize = 25;

/// The largest body any route takes: a batch's.
pub const MAX_REQUEST_BYTES: usize = MAX_BATCH * MAX_BODY_BYTES;

/// The most tasks a listing returns at once.
pub const MAX_PAGE: usize = 100;

/// Who is asking, as the transport's authentication found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The API authenticates no one (the local default, or a deployment with `NONE`):
    /// every caller may do everything, and ids are not scoped to owners.
    Anyone,
    /// An authenticated caller: its own tasks, and everyone's on the operator routes
    /// when `operator`.
    Known {
        /// Who it is; its tasks are scoped to it.
        owner: Owner,
        /// Whether it may use the operator routes.
        operator: bool,
    },
    /// Authentication is on and the request did not pass it.
    Unauthenticated,
}

/// A request, as any transport sees it.
#[derive(Debug, Clone, Copy)]
pub struct ApiRequest<'a> {
    /// Who sent it.
    pub caller: &'a Caller,
    /// GET, POST, PUT...
    pub method: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    /// The raw query string, without '?'.
    pub query: Option<&'a str>,
    /// The body.
    pub body: &'a [u8],
}

/// A response: status, an optional Location, a JSON body (or a page).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiResponse {
    /// The HTTP status.
    pub status: u16,
    /// The Location header, for an accepted task.
    pub location: Option<String>,
    /// The JSON body, as text.
    pub body: String,
    /// An HTML page to send instead of the JSON body: the console.
    pub page: Option<&'static str>,
}

/// The operator console: one page, its script and style inline, over this API.
pub const CONSOLE: &str = include_str!("console.html");

impl ApiResponse {
    fn ok(status: u16, body: &impl serde::Serialize) -> Self {
        Self {
            status,
            location: None,
            body: sas_domain::to_json(body),
            page: None,
        }
    }

    /// 202 Accepted, with the task and where `view` reads it.
    fn accepted(task: &Task, view: View) -> Self {
        Self::at(&task.id, view, &TaskView::of(task, view))
    }

    /// 202 Accepted, with `body`, and the Location where `view` reads task `id`.
    fn at(id: &TaskId, view: View, body: &impl serde::Serialize) -> Self {
        let location = match view {
            View::Owner => format!("/tasks/{}", id.local()),
            View::Operator => format!("/operator/tasks/{id}"),
        };
        Self {
            status: 202,
            location: Some(location),
            body: sas_domain::to_json(body),
            page: None,
        }
    }
}

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
            Self::Conflict | Self::NotInError | Self::Ended => 409,
            Self::BodyTooLarge => 413,
            Self::UnsupportedMediaType => 415,
            Self::MisdirectedRequest => 421,
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
                    Refused::NotInError(_) => Self::new(ErrorCode::NotInError, message),
                    Refused::Ended(_) => Self::new(ErrorCode::Ended, message),
                    Refused::TakenByBatch(_) => Self::new(ErrorCode::Conflict, message),
                    Refused::Input(e) => Self::new(ErrorCode::InvalidField, message).on(&e.field),
                    Refused::InputsTooLarge(_) | Refused::InputTooLarge(_) => {
                        Self::new(ErrorCode::InvalidField, message).on("input")
                    }
                    Refused::EffectsInPlace(_) => {
                        Self::new(ErrorCode::Conflict, message).on("input")
                    }
                }
            }
            ActionError::Task(e) => Self::unavailable(&e),
        }
    }
}

/// No task by the id the caller named (another owner's task is not found either).
fn not_found(id: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("no task '{id}'"))
}

fn unknown_parameter(key: &str) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidQuery,
        format!("unknown parameter '{key}'"),
    )
    .on(key)
}

/// What a route does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Submit,
    SubmitBatch,
    List,
    Get,
    Resubmit,
    Cancel,
    Bulk(BulkAction),
    Workflows,
    Me,
    DeadLetterQueues,
    DeadLetters,
    Redrive,
    OpenApi,
    Console,
}

/// One route: a method, a path (`{id}` stands for a task's id), what it does.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// GET, POST or PUT.
    pub method: &'static str,
    /// The path, as OpenAPI writes it.
    pub path: &'static str,
    /// What it does, in a line.
    pub summary: &'static str,
    action: Action,
}

impl Route {
    const fn new(
        method: &'static str,
        path: &'static str,
        action: Action,
        summary: &'static str,
    ) -> Self {
        Self {
            method,
            path,
            summary,
            action,
        }
    }

    /// On the operator's routes: every caller's tasks, by their full ids.
    #[must_use]
    pub fn is_operators(&self) -> bool {
        self.path.starts_with("/operator/")
    }

    /// Whether it is answered without authentication: what it answers holds no
    /// data (the console's page asks the API for its data as its caller).
    #[must_use]
    pub fn is_public(&self) -> bool {
        matches!(self.action, Action::OpenApi | Action::Console)
    }

    /// The value of the route's parameter (a task's id, a queue's role) in `path`,
    /// if the route's path matches it (`Some(None)` for a path without one).
    fn capture<'p>(&self, path: &'p str) -> Option<Option<&'p str>> {
        let mut id = None;
        let mut given = path.trim_matches('/').split('/');
        for part in self.path.trim_matches('/').split('/') {
            let segment = given.next()?;
            match part {
                _ if part.starts_with('{') && !segment.is_empty() => id = Some(segment),
                _ if part == segment => {}
                _ => return None,
            }
        }
        given.next().is_none().then_some(id)
    }
}

/// Every route the handler answers; `GET /openapi.json` documents exactly these.
#[rustfmt::skip]
pub const ROUTES: &[Route] = &[
    Route::new("POST", "/tasks", Action::Submit, "Submit a task under a generated id"),
    Route::new("POST", "/tasks/batch", Action::SubmitBatch, "Submit up to 25 tasks in one request, each answered as its own submission would be"),
    Route::new("PUT", "/tasks/{id}", Action::Submit, "Submit a task under the caller's id: the same request again is the same task"),
    Route::new("GET", "/tasks", Action::List, "List the caller's tasks in a state"),
    Route::new("GET", "/tasks/{id}", Action::Get, "Read a task, or wait for its end"),
    Route::new("POST", "/tasks/{id}/resubmit", Action::Resubmit, "Run a task in Error again, with a new input if given"),
    Route::new("POST", "/tasks/{id}/cancel", Action::Cancel, "Stop a task after its running step and undo its done steps"),
    Route::new("GET", "/workflows", Action::Workflows, "The workflows a caller may submit"),
    Route::new("GET", "/me", Action::Me, "Who the API takes the caller for"),
    Route::new("GET", "/operator/tasks", Action::List, "List every caller's tasks in a state"),
    Route::new("GET", "/operator/tasks/{id}", Action::Get, "Read any task, by its full id"),
    Route::new("POST", "/operator/tasks/{id}/resubmit", Action::Resubmit, "Run any task in Error again, with a new input if given"),
    Route::new("POST", "/operator/tasks/{id}/cancel", Action::Cancel, "Stop any task after its running step and undo its done steps"),
    Route::new("POST", "/operator/bulk/resubmit", Action::Bulk(BulkAction::Resubmit), "Resubmit the tasks in Error a filter matches, a page per call"),
    Route::new("POST", "/operator/bulk/cancel", Action::Bulk(BulkAction::Cancel), "Cancel the running tasks a filter matches, a page per call"),
    Route::new("GET", "/operator/dead-letters", Action::DeadLetterQueues, "The dead-letter queues, and how many messages each holds"),
    Route::new("GET", "/operator/dead-letters/{queue}", Action::DeadLetters, "Messages of a dead-letter queue, left where they are"),
    Route::new("POST", "/operator/dead-letters/{queue}/redrive", Action::Redrive, "Send messages of a dead-letter queue back to their queue"),
    Route::new("GET", "/openapi.json", Action::OpenApi, "This API's OpenAPI 3.1 document"),
    Route::new("GET", "/", Action::Console, "The operator console, a web page over the operator's routes"),
];

/// Serves one request.
pub async fn handle(app: &App, request: ApiRequest<'_>) -> ApiResponse {
    route(app, request).await.unwrap_or_else(ApiResponse::from)
}

/// Whose tasks a request may touch, and how it names them.
#[derive(Debug, Clone, Copy)]
enum Scope<'a> {
    /// A caller's own: its ids are scoped to `owner` (`None` when no one is
    /// authenticated, and ids are what the caller wrote).
    Own(Option<&'a Owner>),
    /// Every caller's, by their full ids: the operator's.
    All,
}

impl<'a> Scope<'a> {
    /// The stored id of the task the caller names `text`.
    fn id(self, text: &str) -> Result<TaskId, ApiError> {
        let invalid = |e: &dyn std::fmt::Display| {
            ApiError::new(ErrorCode::InvalidId, format!("task id '{text}' {e}")).on("id")
        };
        let id = TaskId::parse(text).map_err(|e| invalid(&e))?;
        match self {
            Self::All => Ok(id),
            Self::Own(_) if id.is_scoped() => Err(invalid(&"must not contain '.'")),
            Self::Own(None) => Ok(id),
            Self::Own(Some(owner)) => Ok(TaskId::scoped(owner, &id)),
        }
    }

    fn owner(self) -> Option<&'a Owner> {
        match self {
            Self::Own(owner) => owner,
            Self::All => None,
        }
    }

    fn view(self) -> View {
        match self {
            Self::Own(_) => View::Owner,
            Self::All => View::Operator,
        }
    }

    /// Who acts, in this scope.
    fn actor(self) -> Actor {
        match self {
            Self::Own(_) => Actor::Owner,
            Self::All => Actor::Operator,
        }
    }
}

async fn route(app: &App, request: ApiRequest<'_>) -> Result<ApiResponse, ApiError> {
    let matching: Vec<(&Route, Option<&str>)> = ROUTES
        .iter()
        .filter_map(|route| Some((route, route.capture(request.path)?)))
        .collect();
    let found = matching.iter().find(|(r, _)| r.method == request.method);
    if let Some((route, _)) = found.filter(|(r, _)| r.is_public()) {
        return Ok(public(route.action));
    }
    let (own, operator) = match request.caller {
        Caller::Anyone => (Scope::Own(None), true),
        Caller::Known { owner, operator } => (Scope::Own(Some(owner)), *operator),
        Caller::Unauthenticated => {
            return Err(ApiError::new(
                ErrorCode::Unauthenticated,
                "a valid token is required: send 'Authorization: Bearer <token>'",
            ));
        }
    };
    let operators = request.path.trim_start_matches('/').split('/').next() == Some("operator");
    if operators && !operator {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "the operator routes need the operator's rights",
        ));
    }
    let Some(&(route, id)) = found else {
        return Err(if matching.is_empty() {
            ApiError::new(
                ErrorCode::NotFound,
                format!("no route for {}", request.path),
            )
        } else {
            ApiError::new(
                ErrorCode::MethodNotAllowed,
                format!("{} is not allowed on {}", request.method, request.path),
            )
        });
    };
    let scope = if route.is_operators() {
        Scope::All
    } else {
        own
    };
    let named = id.unwrap_or_default();
    let now = || Request {
        by: scope.actor(),
        at: app.now(),
        batch: None,
    };
    match route.action {
        Action::Submit => submit(app, scope, id, request.body).await,
        Action::SubmitBatch => submit_batch(app, scope, request.body).await,
        Action::List => list(app, scope, request.query).await,
        Action::Get => get(app, scope, named, parse_wait(request.query)?).await,
        Action::Resubmit => {
            let body: ResubmitBody = parse_json(request.body, true)?;
            let resubmit = Resubmit {
                request: now(),
                input: body.input,
            };
            let task = app.resubmit(&scope.id(named)?, resubmit).await?;
            Ok(ApiResponse::accepted(&task, scope.view()))
        }
        Action::Cancel => {
            let _: CancelBody = parse_json(request.body, true)?;
            let task = app.cancel(&scope.id(named)?, now()).await?;
            Ok(ApiResponse::accepted(&task, scope.view()))
        }
        Action::Bulk(action) => bulk(app, action, now(), request.body).await,
        Action::Workflows => Ok(workflows(app)),
        Action::Me => Ok(ApiResponse::ok(200, &me(request.caller))),
        Action::DeadLetterQueues => dead_letter_queues(app).await,
        Action::DeadLetters => dead_letters(app, named).await,
        Action::Redrive => redrive(app, named, request.body).await,
        Action::OpenApi | Action::Console => Ok(public(route.action)),
    }
}

/// The answers of the public routes: the console's page, or the API's description.
fn public(action: Action) -> ApiResponse {
    if action == Action::Console {
        ApiResponse {
            page: Some(CONSOLE),
            ..ApiResponse::ok(200, &Value::Null)
        }
    } else {
        ApiResponse::ok(200, &document())
    }
}

/// `GET /me`: who the API takes the caller for, and how to name its notification queues.
fn me(caller: &Caller) -> MeView {
    match caller {
        Caller::Known { owner, operator } => MeView {
            owner: Some(owner.clone()),
            operator: *operator,
            notify_queue_suffix: Some(format!("-{}", owner.tag())),
        },
        Caller::Anyone | Caller::Unauthenticated => MeView {
            owner: None,
            operator: true,
            notify_queue_suffix: None,
        },
    }
}

/// A submission.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitBody {
    /// The workflow to run, by name (its latest version).
    workflow: String,
    /// The input, as the workflow defines it.
    input: Value,
    /// A queue of the caller's for the task's status changes.
    #[serde(default)]
    notify: Option<QueueName>,
    /// The task's id: for `POST /tasks`, instead of a generated one; for `PUT`,
    /// the id in the path again.
    #[serde(default)]
    id: Option<TaskId>,
}

/// Up to [`MAX_BATCH`] submissions in one request.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchBody {
    /// The submissions, each the body of a `POST /tasks` (with its `id`, or one
    /// generated).
    #[schemars(with = "Vec<SubmitBody>", length(min = 1, max = MAX_BATCH))]
    tasks: Vec<Value>,
}

/// A resubmission: an empty body, or a new input.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResubmitBody {
    /// The input the new run takes, checked against the task's workflow version;
    /// the one it replaces is kept.
    #[serde(default)]
    input: Option<Value>,
}

/// A cancellation: an empty body (or `{}`).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {}

/// A bulk action's call: which tasks, and which page of them.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkBody {
    /// Names the action: called again with the same batch (after an interruption,
    /// from any page or from the start), it takes no task twice. Letters, digits,
    /// '-', '_' and '.', up to 64.
    batch: String,
    /// The tasks' state: Error to resubmit (the default); Pending, Processing or
    /// Compensating to cancel (Processing by default).
    #[serde(default)]
    state: Option<TaskState>,
    /// Only the tasks of this workflow.
    #[serde(default)]
    workflow: Option<String>,
    /// Only the tasks submitted at or after this (RFC 3339).
    #[serde(default)]
    created_after: Option<String>,
    /// Only the tasks submitted before this (RFC 3339).
    #[serde(default)]
    created_before: Option<String>,
    /// Only the tasks whose error has this text.
    #[serde(default)]
    error_contains: Option<String>,
    /// Where to go on from: the `next` of the call before.
    #[serde(default)]
    after: Option<String>,
    /// How many tasks this call lists, 1 to 100 (default 100).
    #[serde(default)]
    limit: Option<usize>,
    /// How many tasks it takes a second, 1 to 1000 (default 10), so as not to flood
    /// the remote services; one call lasts at most 15 s of pauses.
    #[serde(default)]
    per_second: Option<u32>,
}

/// The longest one call of a bulk action pauses between tasks, in all.
const MAX_BULK_PAUSES: Duration = Duration::from_secs(15);

/// A JSON object body of type `T`; an empty body is `{}` when `empty_ok`.
fn parse_json<T: DeserializeOwned>(body: &[u8], empty_ok: bool) -> Result<T, ApiError> {
    let body = if empty_ok && body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    typed(json_object(body, MAX_BODY_BYTES)?)
}

/// The body as a JSON object, if it is one of at most `limit` bytes.
fn json_object(body: &[u8], limit: usize) -> Result<Value, ApiError> {
    if body.len() > limit {
        return Err(ApiError::new(
            ErrorCode::BodyTooLarge,
            format!("the body is {} bytes; the limit is {limit}", body.len()),
        ));
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidJson,
            format!("the body is not valid JSON: {e}"),
        )
    })?;
    if !value.is_object() {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            "the body must be a JSON object",
        ));
    }
    Ok(value)
}

/// A JSON value as `T`, or an error naming the field that does not fit.
fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(&value).map_err(|e| {
        let message = e.inner().to_string();
        let path = e.path().to_string();
        let field = if path == "." {
            message.split('`').nth(1).unwrap_or("body").to_owned()
        } else {
            path
        };
        ApiError::new(ErrorCode::InvalidField, format!("{field}: {message}")).on(&field)
    })
}

async fn submit(
    app: &App,
    scope: Scope<'_>,
    path_id: Option<&str>,
    body: &[u8],
) -> Result<ApiResponse, ApiError> {
    let (workflow, submission) = submission(scope, path_id, parse_json(body, false)?)?;
    answer(app, scope, &workflow, submission).await
}

/// A checked submission's answer: its task created (or found), or in buffered
/// ingestion its request queued.
async fn answer(
    app: &App,
    scope: Scope<'_>,
    workflow: &str,
    submission: Submission,
) -> Result<ApiResponse, ApiError> {
    if app.buffers_submissions() {
        let buffered = app.accept(workflow, submission).await?;
        return Ok(accepted(scope, &buffered));
    }
    let (Submitted::Created(task) | Submitted::Replayed(task)) =
        app.submit(workflow, submission).await?;
    Ok(ApiResponse::accepted(&task, scope.view()))
}

/// The workflow a submission names, and the submission, under the caller's scope.
fn submission(
    scope: Scope<'_>,
    path_id: Option<&str>,
    body: SubmitBody,
) -> Result<(String, Submission), ApiError> {
    let named = body.id.as_ref().map(TaskId::as_str);
    let id = match (path_id, named) {
        (Some(path), Some(named)) if path != named => {
            return Err(ApiError::new(
                ErrorCode::InvalidField,
                "id: differs from the id in the path",
            )
            .on("id"));
        }
        (Some(id), _) | (None, Some(id)) => scope.id(id)?,
        (None, None) => scope.id(TaskId::generate().as_str())?,
    };
    let submission = Submission {
        id,
        input: body.input,
        notify: body.notify,
        owner: scope.owner().cloned(),
    };
    Ok((body.workflow, submission))
}

/// 202 for a submission buffered ingestion queued: where its task will be.
fn accepted(scope: Scope<'_>, buffered: &Buffered) -> ApiResponse {
    let id = &buffered.submission.id;
    let view = AcceptedView {
        id: match scope.view() {
            View::Owner => id.local(),
            View::Operator => id.as_str(),
        },
        workflow: &buffered.workflow,
        status: "accepted",
        accepted_at: buffered.accepted_at.to_rfc3339(),
    };
    ApiResponse::at(id, scope.view(), &view)
}

/// `POST /tasks/batch`: each submission answered as `POST /tasks` would answer it
/// alone, in one 200, a failure included: in buffered ingestion a submission the
/// queue refuses is a 503 of its own beside the others' 202s, so that the caller
/// sends again only what was not queued (an id-less submission sent again is a new
/// task). Its sends go at once, and the SQS adapter puts concurrent sends in shared
/// requests, ten a request.
async fn submit_batch(app: &App, scope: Scope<'_>, body: &[u8]) -> Result<ApiResponse, ApiError> {
    let batch: BatchBody = typed(json_object(body, MAX_REQUEST_BYTES)?)?;
    if !(1..=MAX_BATCH).contains(&batch.tasks.len()) {
        return Err(ApiError::new(
            ErrorCode::InvalidField,
            format!(
                "tasks: {} submissions; a batch holds 1 to {MAX_BATCH}",
                batch.tasks.len()
            ),
        )
        .on("tasks"));
    }
    // Each submission within the limit of its own request: a batch is no way round it.
    let checked: Vec<_> = batch
        .tasks
        .into_iter()
        .map(|item| {
            let size = limits::json_size(&item);
            if size > MAX_BODY_BYTES {
                return Err(ApiError::new(
                    ErrorCode::BodyTooLarge,
                    format!("the submission is {size} bytes; the limit is {MAX_BODY_BYTES}"),
                ));
            }
            submission(scope, None, typed(item)?)
        })
        .collect();
    let answers: Vec<ApiResponse> =
        futures_util::future::join_all(checked.into_iter().map(async |item| {
            let (workflow, submission) = item?;
            answer(app, scope, &workflow, submission).await
        }))
        .await
        .into_iter()
        .map(|answer| answer.unwrap_or_else(ApiResponse::from))
        .collect();
    Ok(ApiResponse::ok(200, &BatchView::of(answers)))
}

/// The longest a `GET /tasks/{id}?wait=` may wait (API Gateway answers within 30 s).
pub const MAX_WAIT: Duration = Duration::from_secs(20);

/// `wait=<duration>`: how long to wait for the task to be final.
fn parse_wait(query: Option<&str>) -> Result<Duration, ApiError> {
    let mut wait = Duration::ZERO;
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=').unwrap_or((pair, "")) {
            ("wait", value) => {
                wait = humantime::parse_duration(value)
                    .ok()
                    .filter(|w| *w <= MAX_WAIT)
                    .ok_or_else(|| {
                        ApiError::new(
                            ErrorCode::InvalidQuery,
                            "wait: must be a duration up to 20s, e.g. wait=10s",
                        )
                        .on("wait")
                    })?;
            }
            (key, _) => return Err(unknown_parameter(key)),
        }
    }
    Ok(wait)
}

async fn get(
    app: &App,
    scope: Scope<'_>,
    text: &str,
    wait: Duration,
) -> Result<ApiResponse, ApiError> {
    let id = scope.id(text)?;
    if !wait.is_zero() {
        app.wait_final(&id, wait).await?;
    }
    let (task, order) = app
        .task_with_order(&id)
        .await?
        .ok_or_else(|| not_found(text))?;
    Ok(ApiResponse::ok(
        200,
        &TaskView::with_order(&task, &order, scope.view()),
    ))
}

/// The state named in a query or a body, with the states it may be.
fn parse_state(
    value: &str,
    field: &str,
    allowed: &[TaskState],
    why: &str,
) -> Result<TaskState, ApiError> {
    match TaskState::parse(value) {
        Some(state) if allowed.contains(&state) => Ok(state),
        _ => {
            let names: Vec<_> = allowed.iter().map(|s| s.as_str()).collect();
            Err(ApiError::new(
                ErrorCode::InvalidQuery,
                format!("{field}: '{value}' is not one of {}{why}", names.join(", ")),
            )
            .on(field))
        }
    }
}

/// The states a listing shows: Processed tasks are many, and expire.
const LISTED: [TaskState; 4] = [
    TaskState::Pending,
    TaskState::Processing,
    TaskState::Compensating,
    TaskState::Error,
];

async fn list(app: &App, scope: Scope<'_>, query: Option<&str>) -> Result<ApiResponse, ApiError> {
    let mut state = None;
    let mut limit = 50;
    let mut after = None;
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "state" => {
                state = Some(parse_state(
                    value,
                    "state",
                    &LISTED,
                    " (Processed tasks are not listed: they are many, and expire; read one with GET /tasks/{id})",
                )?);
            }
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=MAX_PAGE).contains(&n) => limit = n,
                _ => {
                    return Err(ApiError::new(
                        ErrorCode::InvalidQuery,
                        format!("limit: must be 1 to {MAX_PAGE}"),
                    )
                    .on(key));
                }
            },
            "after" => after = Some(value),
            _ => return Err(unknown_parameter(key)),
        }
    }
    let state = state.ok_or_else(|| {
        ApiError::new(
            ErrorCode::InvalidQuery,
            "state: is required, e.g. ?state=Error",
        )
        .on("state")
    })?;
    // A page of large tasks (their outputs) is listed again shorter, until its answer
    // fits what API Gateway may send back.
    loop {
        let page = app
            .list(state, limit, after, scope.owner())
            .await
            .map_err(invalid_cursor)?;
        let view = PageView {
            tasks: page
                .tasks
                .iter()
                .map(|task| TaskView::of(task, scope.view()))
                .collect(),
            next: page.next,
        };
        let answer = ApiResponse::ok(200, &view);
        if answer.body.len() <= MAX_ANSWER_BYTES || limit == 1 {
            return Ok(answer);
        }
        limit /= 2;
    }
}

/// A listing's error: a cursor not from an earlier page is the caller's.
fn invalid_cursor(error: StoreError) -> ApiError {
    match error {
        StoreError::InvalidCursor(_) => {
            ApiError::new(ErrorCode::InvalidQuery, format!("after: {error}")).on("after")
        }
        _ => ApiError::from(error),
    }
}

async fn bulk(
    app: &App,
    action: BulkAction,
    mut request: Request,
    body: &[u8],
) -> Result<ApiResponse, ApiError> {
    let body: BulkBody = parse_json(body, false)?;
    let invalid = |field: &str, message: String| {
        ApiError::new(ErrorCode::InvalidField, format!("{field}: {message}")).on(field)
    };
    let batch_ok = (1..=64).contains(&body.batch.len())
        && body
            .batch
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !batch_ok {
        return Err(invalid(
            "batch",
            "must be 1 to 64 letters, digits, '-', '_' or '.'".into(),
        ));
    }
    let (default, allowed): (_, &[TaskState]) = match action {
        BulkAction::Resubmit => (TaskState::Error, &[TaskState::Error]),
        BulkAction::Cancel => (TaskState::Processing, &LISTED[..3]),
    };
    let state = match body.state {
        Some(state) => parse_state(state.as_str(), "state", allowed, "").map_err(|e| ApiError {
            code: ErrorCode::InvalidField,
            ..e
        })?,
        None => default,
    };
    let time = |field: &str, text: &Option<String>| {
        text.as_deref()
            .map(|text| {
                Timestamp::parse_rfc3339(text)
                    .ok_or_else(|| invalid(field, format!("'{text}' is not an RFC 3339 time")))
            })
            .transpose()
    };
    let filter = Filter {
        state,
        workflow: body.workflow,
        created_after: time("created_after", &body.created_after)?,
        created_before: time("created_before", &body.created_before)?,
        error_contains: body.error_contains,
    };
    let limit = body.limit.unwrap_or(MAX_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(invalid("limit", format!("must be 1 to {MAX_PAGE}")));
    }
    let per_second = body.per_second.unwrap_or(10);
    if !(1..=1000).contains(&per_second) {
        return Err(invalid("per_second", "must be 1 to 1000".into()));
    }
    let pace = Duration::from_secs(1) / per_second;
    let page = BulkPage {
        after: body.after,
        // A call pauses at most MAX_BULK_PAUSES in all: a slow pace lists fewer.
        limit: limit.min(
            usize::try_from(MAX_BULK_PAUSES.as_millis() / pace.as_millis().max(1))
                .unwrap_or(limit)
                .max(1),
        ),
        pace,
    };
    request.batch = Some(body.batch.clone());
    let report = app
        .bulk(action, &filter, &page, &request)
        .await
        .map_err(invalid_cursor)?;
    let view = BulkView {
        batch: body.batch,
        report,
    };
    Ok(ApiResponse::ok(200, &view))
}

fn workflows(app: &App) -> ApiResponse {
    let mut all = app.workflows().all();
    all.sort_by(|a, b| (&a.name, a.version).cmp(&(&b.name, b.version)));
    let view = WorkflowsView {
        workflows: all.iter().map(|w| WorkflowView::of(w)).collect(),
    };
    ApiResponse::ok(200, &view)
}

/// A redrive: the messages to send back.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveBody {
    /// The messages, by their ids in the dead-letter queue; when absent, up to `max`.
    #[serde(default)]
    ids: Option<Vec<String>>,
    /// The most to send back, 1 to 100: by default every one named, or 10 when none is.
    #[serde(default)]
    max: Option<usize>,
}

/// The most messages one look at a dead-letter queue shows, or one redrive sends back.
const MAX_DEAD_LETTERS: usize = 100;

/// The largest answer a listing or a look at a dead-letter queue gives: under the
/// 6 MB a Lambda function may answer API Gateway with, escaped for its JSON.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// The dead-letter queues, or an answer saying they cannot be reached here.
fn dead_letter_port(app: &App) -> Result<&dyn DeadLetters, ApiError> {
    app.dead_letters().ok_or_else(|| {
        ApiError::new(
            ErrorCode::NotFound,
            "the dead-letter queues cannot be reached from here",
        )
    })
}

/// The queue whose role is `role`.
fn queue_of<'a>(app: &'a App, role: &str) -> Result<&'a QueueName, ApiError> {
    let queues = app.queues_by_role();
    queues
        .iter()
        .find(|(name, _)| *name == role)
        .map(|(_, queue)| *queue)
        .ok_or_else(|| {
            let roles: Vec<_> = queues.iter().map(|(name, _)| *name).collect();
            ApiError::new(
                ErrorCode::NotFound,
                format!(
                    "no dead-letter queue '{role}': the queues are {}",
                    roles.join(", ")
                ),
            )
            .on("queue")
        })
}

async fn dead_letter_queues(app: &App) -> Result<ApiResponse, ApiError> {
    let port = dead_letter_port(app)?;
    let mut queues = Vec::new();
    for (role, queue) in app.queues_by_role() {
        queues.push(DeadLetterQueueView {
            queue: role,
            source: queue.to_string(),
            messages: port.count(queue).await.map_err(ApiError::from)?,
        });
    }
    Ok(ApiResponse::ok(200, &DeadLetterQueuesView { queues }))
}

async fn dead_letters(app: &App, role: &str) -> Result<ApiResponse, ApiError> {
    let port = dead_letter_port(app)?;
    let queue = queue_of(app, role)?;
    let held = port.peek(queue, MAX_DEAD_LETTERS).await?;
    let mut bytes = 0;
    let mut messages = Vec::new();
    for message in held {
        let view = DeadLetterView::of(message);
        bytes += sas_domain::to_json(&view).len();
        if bytes > MAX_ANSWER_BYTES && !messages.is_empty() {
            break;
        }
        messages.push(view);
    }
    let view = DeadLettersView {
        queue: role.to_owned(),
        messages,
    };
    Ok(ApiResponse::ok(200, &view))
}

async fn redrive(app: &App, role: &str, body: &[u8]) -> Result<ApiResponse, ApiError> {
    let port = dead_letter_port(app)?;
    let queue = queue_of(app, role)?;
    let body: RedriveBody = parse_json(body, true)?;
    let named = body.ids.as_ref().map(Vec::len);
    let max = body.max.or(named).unwrap_or(10);
    for (field, count) in [("ids", named), ("max", Some(max))] {
        if count.is_some_and(|count| !(1..=MAX_DEAD_LETTERS).contains(&count)) {
            return Err(ApiError::new(
                ErrorCode::InvalidField,
                format!("{field}: 1 to {MAX_DEAD_LETTERS} messages at a time"),
            )
            .on(field));
        }
    }
    let redriven = port.redrive(queue, body.ids.as_deref(), max).await?;
    let view = RedriveView {
        queue: role.to_owned(),
        redriven,
    };
    Ok(ApiResponse::ok(200, &view))
}
