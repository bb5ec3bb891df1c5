//! The HTTP API, independent of its transport: the local server and the API
//! Gateway Lambda both translate their requests into [`ApiRequest`] and back.
//!
//! A caller's routes: `POST /tasks`, `PUT /tasks/{id}`, `GET /tasks/{id}` (with `?wait=10s`,
//! until it is final), `GET /tasks?state=Error&limit=50&after=<cursor>`,
//! `POST /tasks/{id}/resubmit`, `GET /workflows`, `GET /me`. When the transport
//! authenticates callers ([`Caller`]), each sees only its own tasks, by its own ids.
//!
//! An operator's routes, over every caller's tasks by their full ids:
//! `GET /operator/tasks?state=...`, `GET /operator/tasks/{id}`,
//! `POST /operator/tasks/{id}/resubmit`.
//!
//! A task is shown as a [`TaskView`]; every error as an [`ApiError`].

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tracing::error;

use crate::app::{App, ResubmitError, SubmitError, Submitted};
use crate::domain::decide::Submission;
use crate::domain::ids::{Owner, QueueName, TaskId};
use crate::domain::task::{StepState, Task, TaskState, WorkflowRef};
use crate::ports::{Chain, StoreError};
use crate::time::Timestamp;

/// The largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

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

/// A response: status, an optional Location, a JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiResponse {
    /// The HTTP status.
    pub status: u16,
    /// The Location header, for an accepted task.
    pub location: Option<String>,
    /// The JSON body.
    pub body: Value,
}

impl ApiResponse {
    fn ok(status: u16, body: Value) -> Self {
        Self {
            status,
            location: None,
            body,
        }
    }

    /// 202 Accepted, with the task and where `view` reads it.
    fn accepted(task: &Task, view: View) -> Self {
        let location = match view {
            View::Owner => format!("/tasks/{}", task.id.local()),
            View::Operator => format!("/operator/tasks/{}", task.id),
        };
        Self {
            status: 202,
            location: Some(location),
            body: json!(TaskView::of(task, view)),
        }
    }
}

/// What went wrong, by kind; each kind has its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// A caller on a route that needs the operator's rights.
    Forbidden,
    /// A task id taken by a different request.
    Conflict,
    /// A resubmission of a task not in Error.
    NotInError,
    /// No such task or route.
    NotFound,
    /// A method the route does not have.
    MethodNotAllowed,
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
            Self::Conflict | Self::NotInError => 409,
            Self::BodyTooLarge => 413,
            Self::Unavailable => 503,
        }
    }

    /// Its name in the answer's `error.code`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidId => "invalid_id",
            Self::BodyTooLarge => "body_too_large",
            Self::InvalidJson => "invalid_json",
            Self::InvalidBody => "invalid_body",
            Self::InvalidField => "invalid_field",
            Self::UnknownWorkflow => "unknown_workflow",
            Self::InvalidQuery => "invalid_query",
            Self::Unauthenticated => "unauthenticated",
            Self::Forbidden => "forbidden",
            Self::Conflict => "conflict",
            Self::NotInError => "not_in_error",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::Unavailable => "unavailable",
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
    fn on(mut self, field: &str) -> Self {
        self.field = Some(field.to_owned());
        self
    }

    /// The backend failed: the cause goes to the log, not to the caller.
    fn unavailable(cause: &(dyn std::error::Error + 'static)) -> Self {
        error!(error = %Chain(cause), "request failed in the backend");
        Self::new(
            ErrorCode::Unavailable,
            "the service is unavailable; retry later",
        )
    }
}

impl From<ApiError> for ApiResponse {
    fn from(error: ApiError) -> Self {
        let mut body = json!({ "code": error.code.as_str(), "message": error.message });
        if let Some(field) = error.field {
            body["field"] = json!(field);
        }
        Self::ok(error.code.status(), json!({ "error": body }))
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
            SubmitError::ReservedQueue(_) | SubmitError::ForeignQueue { .. } => {
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

impl From<ResubmitError> for ApiError {
    fn from(error: ResubmitError) -> Self {
        match error {
            ResubmitError::NotFound(id) => not_found(id.local()),
            ResubmitError::NotInError(e) => Self::new(ErrorCode::NotInError, e.to_string()),
            ResubmitError::Task(e) => Self::unavailable(&e),
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
}

async fn route(app: &App, request: ApiRequest<'_>) -> Result<ApiResponse, ApiError> {
    let segments: Vec<&str> = request.path.trim_matches('/').split('/').collect();
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
    let (scope, rest) = match segments.as_slice() {
        ["operator", rest @ ..] if operator => (Scope::All, rest),
        ["operator", ..] => {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                "the operator routes need the operator's rights",
            ));
        }
        all => (own, all),
    };
    // Submissions, the workflows and `me` are the callers' routes only.
    let callers = matches!(scope, Scope::Own(_));
    match (request.method, rest) {
        ("POST", ["tasks"]) if callers => submit(app, scope, None, request.body).await,
        ("PUT", ["tasks", id]) if callers => submit(app, scope, Some(id), request.body).await,
        ("GET", ["tasks"]) => list(app, scope, request.query).await,
        ("GET", ["tasks", id]) => get(app, scope, id, parse_wait(request.query)?).await,
        ("POST", ["tasks", id, "resubmit"]) => {
            let task = app.resubmit(&scope.id(id)?).await?;
            Ok(ApiResponse::accepted(&task, scope.view()))
        }
        ("GET", ["workflows"]) if callers => Ok(workflows(app)),
        ("GET", ["me"]) if callers => Ok(me(request.caller)),
        (_, ["tasks"] | ["tasks", _] | ["tasks", _, "resubmit"] | ["workflows"] | ["me"]) => {
            Err(ApiError::new(
                ErrorCode::MethodNotAllowed,
                format!("{} is not allowed on {}", request.method, request.path),
            ))
        }
        _ => Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no route for {}", request.path),
        )),
    }
}

/// `GET /me`: who the API takes the caller for, and how to name its notification queues.
fn me(caller: &Caller) -> ApiResponse {
    let body = match caller {
        Caller::Known { owner, operator } => json!({
            "owner": owner,
            "operator": operator,
            "notify_queue_suffix": format!("-{}", owner.tag()),
        }),
        Caller::Anyone | Caller::Unauthenticated => {
            json!({ "owner": null, "operator": true, "notify_queue_suffix": null })
        }
    };
    ApiResponse::ok(200, body)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitBody {
    workflow: String,
    input: Value,
    #[serde(default)]
    notify: Option<QueueName>,
    #[serde(default)]
    id: Option<TaskId>,
}

fn parse_body(body: &[u8]) -> Result<SubmitBody, ApiError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(ApiError::new(
            ErrorCode::BodyTooLarge,
            format!(
                "the body is {} bytes; the limit is {MAX_BODY_BYTES}",
                body.len()
            ),
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
    let body = parse_body(body)?;
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
    let (Submitted::Created(task) | Submitted::Replayed(task)) =
        app.submit(&body.workflow, submission).await?;
    Ok(ApiResponse::accepted(&task, scope.view()))
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
    let task = if wait.is_zero() {
        app.task(&id).await?
    } else {
        app.wait_final(&id, wait).await?
    };
    let task = task.ok_or_else(|| not_found(text))?;
    Ok(ApiResponse::ok(
        200,
        json!(TaskView::of(&task, scope.view())),
    ))
}

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
        let invalid = |message: String| ApiError::new(ErrorCode::InvalidQuery, message).on(key);
        match key {
            "state" => match TaskState::parse(value) {
                Some(TaskState::Processed) => {
                    return Err(invalid(
                        "state: Processed tasks are not listed (they are many, and expire); read one with GET /tasks/{id}".into(),
                    ));
                }
                Some(s) => state = Some(s),
                None => {
                    let states: Vec<_> = TaskState::ALL.iter().map(|s| s.as_str()).collect();
                    return Err(invalid(format!(
                        "state: '{value}' is not one of {}",
                        states.join(", ")
                    )));
                }
            },
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=MAX_PAGE).contains(&n) => limit = n,
                _ => return Err(invalid(format!("limit: must be 1 to {MAX_PAGE}"))),
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
    let page = app
        .list(state, limit, after, scope.owner())
        .await
        .map_err(|e| match e {
            StoreError::InvalidCursor(_) => {
                ApiError::new(ErrorCode::InvalidQuery, format!("after: {e}")).on("after")
            }
            _ => ApiError::from(e),
        })?;
    let tasks: Vec<_> = page
        .tasks
        .iter()
        .map(|task| TaskView::of(task, scope.view()))
        .collect();
    Ok(ApiResponse::ok(
        200,
        json!({ "tasks": tasks, "next": page.next }),
    ))
}

fn workflows(app: &App) -> ApiResponse {
    let mut all = app.workflows().all();
    all.sort_by(|a, b| (&a.name, a.version).cmp(&(&b.name, b.version)));
    let list: Vec<Value> = all
        .iter()
        .map(|w| {
            json!({
                "name": w.name,
                "version": w.version,
                "description": w.description,
                "input": w.input,
                "steps": w.steps.iter().map(|s| json!({
                    "name": s.name,
                    "agent": s.agent,
                    "call": s.call.to_string(),
                    "compensation": s.compensation.as_ref().map(ToString::to_string),
                    "complete_by": humantime::format_duration(s.complete_by).to_string(),
                    "retry": s.retry,
                    "supervisor": s.supervision,
                    "fields": s.fields.as_ref().map(|fields| fields
                        .iter()
                        .map(|(name, source)| (name.clone(), json!(source.to_string())))
                        .collect::<serde_json::Map<String, Value>>()),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    ApiResponse::ok(200, json!({ "workflows": list }))
}

fn time(at: Option<Timestamp>) -> Option<String> {
    at.map(Timestamp::to_rfc3339)
}

/// Who a [`TaskView`] is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// The task's owner: its id as the owner named it.
    Owner,
    /// An operator: its full id, and its owner.
    Operator,
}

/// A task as the API shows it: its state and steps, times in RFC 3339.
#[derive(Debug, Serialize)]
pub struct TaskView<'a> {
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<&'a Owner>,
    version: u64,
    workflow: &'a WorkflowRef,
    state: TaskState,
    locked_by: Option<&'a str>,
    complete_by: Option<String>,
    failure_count: u32,
    run: u32,
    error: Option<&'a str>,
    notify: Option<&'a QueueName>,
    created_at: Option<String>,
    updated_at: Option<String>,
    steps: Vec<StepView<'a>>,
}

/// A step as the API shows it.
#[derive(Debug, Serialize)]
pub struct StepView<'a> {
    name: &'a str,
    state: StepState,
    attempt: u32,
    failure_count: u32,
    compensation_failure_count: u32,
    complete_by: Option<String>,
    started_at: Option<String>,
    finished_at: Option<String>,
    output: Option<&'a Value>,
    error: Option<&'a str>,
}

impl<'a> TaskView<'a> {
    /// The view of `task`, for `view`.
    #[must_use]
    pub fn of(task: &'a Task, view: View) -> Self {
        let (id, owner) = match view {
            View::Owner => (task.id.local(), None),
            View::Operator => (task.id.as_str(), task.owner.as_ref()),
        };
        Self {
            id,
            owner,
            version: task.version,
            workflow: &task.workflow,
            state: task.state,
            locked_by: task.locked_by.as_deref(),
            complete_by: time(task.complete_by),
            failure_count: task.failure_count,
            run: task.run,
            error: task.error.as_deref(),
            notify: task.notify.as_ref(),
            created_at: time(Some(task.created_at)),
            updated_at: time(Some(task.updated_at)),
            steps: task
                .steps
                .iter()
                .map(|s| StepView {
                    name: &s.name,
                    state: s.state,
                    attempt: s.attempt,
                    failure_count: s.failure_count,
                    compensation_failure_count: s.compensation_failure_count,
                    complete_by: time(s.complete_by),
                    started_at: time(s.started_at),
                    finished_at: time(s.finished_at),
                    output: s.output.as_ref(),
                    error: s.error.as_deref(),
                })
                .collect(),
        }
    }
}
