//! The HTTP API, independent of its transport: the local server and the API
//! Gateway Lambda both translate their requests into [`ApiRequest`] and back.
//!
//! Routes: `POST /tasks`, `PUT /tasks/{id}`, `GET /tasks/{id}` (with `?wait=10s`, until it is final),
//! `GET /tasks?state=Error&limit=50&after=<cursor>`, `POST /tasks/{id}/resubmit`,
//! `GET /workflows`.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tracing::error;

use crate::app::{App, ResubmitError, SubmitError, Submitted};
use crate::domain::decide::Submission;
use crate::domain::ids::{QueueName, TaskId};
use crate::domain::task::{Task, TaskState};
use crate::ports::StoreError;
use crate::time::Timestamp;

/// The largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The most tasks a listing returns at once.
pub const MAX_PAGE: usize = 100;

/// A request, as any transport sees it.
#[derive(Debug, Clone, Copy)]
pub struct ApiRequest<'a> {
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

    fn error(status: u16, code: &str, message: impl Into<String>, field: Option<&str>) -> Self {
        let mut error = json!({ "code": code, "message": message.into() });
        if let Some(field) = field {
            error["field"] = json!(field);
        }
        Self::ok(status, json!({ "error": error }))
    }

    fn unavailable(what: &dyn std::fmt::Display) -> Self {
        error!(error = %what, "request failed in the backend");
        Self::error(
            503,
            "unavailable",
            "the service is unavailable; retry later",
            None,
        )
    }
}

/// Serves one request.
pub async fn handle(app: &App, request: ApiRequest<'_>) -> ApiResponse {
    let segments: Vec<&str> = request.path.trim_matches('/').split('/').collect();
    match (request.method, segments.as_slice()) {
        ("POST", ["tasks"]) => submit(app, None, request.body).await,
        ("GET", ["tasks"]) => list(app, request.query).await,
        ("PUT", ["tasks", id]) => match parse_id(id) {
            Ok(id) => submit(app, Some(id), request.body).await,
            Err(response) => response,
        },
        ("GET", ["tasks", id]) => match (parse_id(id), parse_wait(request.query)) {
            (Ok(id), Ok(wait)) => get(app, &id, wait).await,
            (Err(response), _) | (_, Err(response)) => response,
        },
        ("POST", ["tasks", id, "resubmit"]) => match parse_id(id) {
            Ok(id) => resubmit(app, &id).await,
            Err(response) => response,
        },
        ("GET", ["workflows"]) => workflows(app),
        (_, ["tasks"] | ["tasks", _] | ["tasks", _, "resubmit"] | ["workflows"]) => {
            ApiResponse::error(
                405,
                "method_not_allowed",
                format!("{} is not allowed on {}", request.method, request.path),
                None,
            )
        }
        _ => ApiResponse::error(
            404,
            "not_found",
            format!("no route for {}", request.path),
            None,
        ),
    }
}

fn parse_id(text: &str) -> Result<TaskId, ApiResponse> {
    TaskId::parse(text).map_err(|e| {
        ApiResponse::error(
            400,
            "invalid_id",
            format!("task id '{text}' {e}"),
            Some("id"),
        )
    })
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

fn parse_body(body: &[u8]) -> Result<SubmitBody, ApiResponse> {
    if body.len() > MAX_BODY_BYTES {
        return Err(ApiResponse::error(
            413,
            "body_too_large",
            format!(
                "the body is {} bytes; the limit is {MAX_BODY_BYTES}",
                body.len()
            ),
            None,
        ));
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiResponse::error(
            400,
            "invalid_json",
            format!("the body is not valid JSON: {e}"),
            None,
        )
    })?;
    if !value.is_object() {
        return Err(ApiResponse::error(
            400,
            "invalid_body",
            "the body must be a JSON object",
            None,
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
        ApiResponse::error(
            400,
            "invalid_field",
            format!("{field}: {message}"),
            Some(&field),
        )
    })
}

async fn submit(app: &App, path_id: Option<TaskId>, body: &[u8]) -> ApiResponse {
    let body = match parse_body(body) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let id = match (path_id, body.id) {
        (Some(path), Some(named)) if path != named => {
            return ApiResponse::error(
                400,
                "invalid_field",
                "id: differs from the id in the path",
                Some("id"),
            );
        }
        (Some(id), _) | (None, Some(id)) => id,
        (None, None) => TaskId::generate(),
    };
    let submission = Submission {
        id,
        input: body.input,
        notify: body.notify,
    };
    match app.submit(&body.workflow, submission).await {
        Ok(Submitted::Created(task) | Submitted::Replayed(task)) => ApiResponse {
            status: 202,
            location: Some(format!("/tasks/{}", task.id)),
            body: view(&task),
        },
        Err(SubmitError::UnknownWorkflow(name)) => ApiResponse::error(
            400,
            "unknown_workflow",
            format!("no workflow named '{name}'"),
            Some("workflow"),
        ),
        Err(SubmitError::Input(e)) => {
            ApiResponse::error(400, "invalid_field", e.to_string(), Some(&e.field))
        }
        Err(error @ SubmitError::ReservedQueue(_)) => {
            ApiResponse::error(400, "invalid_field", error.to_string(), Some("notify"))
        }
        Err(SubmitError::Conflict(id)) => ApiResponse::error(
            409,
            "conflict",
            format!("task '{id}' exists with a different request; choose another id"),
            Some("id"),
        ),
        Err(SubmitError::Backend(e)) => ApiResponse::unavailable(&e),
    }
}

/// The longest a `GET /tasks/{id}?wait=` may wait (API Gateway answers within 30 s).
pub const MAX_WAIT: Duration = Duration::from_secs(20);

/// `wait=<duration>`: how long to wait for the task to be final.
fn parse_wait(query: Option<&str>) -> Result<Duration, ApiResponse> {
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
                        ApiResponse::error(
                            400,
                            "invalid_query",
                            "wait: must be a duration up to 20s, e.g. wait=10s",
                            Some("wait"),
                        )
                    })?;
            }
            (key, _) => {
                return Err(ApiResponse::error(
                    400,
                    "invalid_query",
                    format!("unknown parameter '{key}'"),
                    Some(key),
                ));
            }
        }
    }
    Ok(wait)
}

async fn get(app: &App, id: &TaskId, wait: Duration) -> ApiResponse {
    let task = if wait.is_zero() {
        app.task(id).await
    } else {
        app.wait_final(id, wait).await
    };
    match task {
        Ok(Some(task)) => ApiResponse::ok(200, view(&task)),
        Ok(None) => ApiResponse::error(404, "not_found", format!("no task '{id}'"), None),
        Err(e) => ApiResponse::unavailable(&e),
    }
}

async fn list(app: &App, query: Option<&str>) -> ApiResponse {
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
            "state" => match TaskState::parse(value) {
                Some(TaskState::Processed) => {
                    return ApiResponse::error(
                        400,
                        "invalid_query",
                        "state: Processed tasks are not listed (they are many, and expire); read one with GET /tasks/{id}",
                        Some("state"),
                    );
                }
                Some(s) => state = Some(s),
                None => {
                    let states: Vec<_> = TaskState::ALL.iter().map(|s| s.as_str()).collect();
                    return ApiResponse::error(
                        400,
                        "invalid_query",
                        format!("state: '{value}' is not one of {}", states.join(", ")),
                        Some("state"),
                    );
                }
            },
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=MAX_PAGE).contains(&n) => limit = n,
                _ => {
                    return ApiResponse::error(
                        400,
                        "invalid_query",
                        format!("limit: must be 1 to {MAX_PAGE}"),
                        Some("limit"),
                    );
                }
            },
            "after" => after = Some(value),
            _ => {
                return ApiResponse::error(
                    400,
                    "invalid_query",
                    format!("unknown parameter '{key}'"),
                    Some(key),
                );
            }
        }
    }
    let Some(state) = state else {
        return ApiResponse::error(
            400,
            "invalid_query",
            "state: is required, e.g. ?state=Error",
            Some("state"),
        );
    };
    match app.list(state, limit, after).await {
        Ok(page) => ApiResponse::ok(
            200,
            json!({ "tasks": page.tasks.iter().map(view).collect::<Vec<_>>(), "next": page.next }),
        ),
        Err(e @ StoreError::InvalidCursor(_)) => {
            ApiResponse::error(400, "invalid_query", format!("after: {e}"), Some("after"))
        }
        Err(e) => ApiResponse::unavailable(&e),
    }
}

async fn resubmit(app: &App, id: &TaskId) -> ApiResponse {
    match app.resubmit(id).await {
        Ok(task) => ApiResponse {
            status: 202,
            location: Some(format!("/tasks/{}", task.id)),
            body: view(&task),
        },
        Err(ResubmitError::NotFound(id)) => {
            ApiResponse::error(404, "not_found", format!("no task '{id}'"), None)
        }
        Err(ResubmitError::NotInError(e)) => {
            ApiResponse::error(409, "not_in_error", e.to_string(), None)
        }
        Err(ResubmitError::Backend(e)) => ApiResponse::unavailable(&e),
    }
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
                    "call": s.call,
                    "compensation": s.compensation,
                    "complete_by": humantime::format_duration(s.complete_by).to_string(),
                    "retry": s.retry,
                    "supervisor": s.supervision,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    ApiResponse::ok(200, json!({ "workflows": list }))
}

fn time(at: Option<Timestamp>) -> Value {
    at.map_or(Value::Null, |t| json!(t.to_rfc3339()))
}

/// A task as the API shows it.
#[must_use]
pub fn view(task: &Task) -> Value {
    let steps: Vec<Value> = task
        .steps
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "state": s.state,
                "attempt": s.attempt,
                "failure_count": s.failure_count,
                "compensation_failure_count": s.compensation_failure_count,
                "complete_by": time(s.complete_by),
                "started_at": time(s.started_at),
                "finished_at": time(s.finished_at),
                "output": s.output,
                "error": s.error,
            })
        })
        .collect();
    json!({
        "id": task.id,
        "version": task.version,
        "workflow": task.workflow,
        "state": task.state,
        "locked_by": task.locked_by,
        "complete_by": time(task.complete_by),
        "failure_count": task.failure_count,
        "run": task.run,
        "error": task.error,
        "notify": task.notify,
        "created_at": time(Some(task.created_at)),
        "updated_at": time(Some(task.updated_at)),
        "steps": steps,
    })
}
