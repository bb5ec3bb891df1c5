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

mod bodies;
mod error;
mod execution;
mod history;
mod openapi;
mod operator;
mod payloads;
mod routes;
mod schedules;
mod scope;
mod search;
mod stepfunctions;
mod tasks;
mod view;

use sas_core::app::App;
use sas_core::contain;
use sas_domain::ids::{Owner, TaskId};
use sas_domain::task::Task;

use crate::routes::route;

pub use bodies::{
    BatchBody, BulkBody, CallbackBody, EmptyBody, MoveBody, RedriveBody, RepairBody, ResubmitBody,
    SubmitBody,
};
pub use error::{ApiError, ErrorCode, ErrorView};
pub use openapi::document;
pub use payloads::body_limit;
pub use routes::{ROUTES, Route};
pub use stepfunctions::{AMZ_JSON, OPERATOR_PATH};
pub use tasks::MAX_WAIT;
pub use view::{
    AcceptedView, BatchResultView, BatchView, BulkView, CallbackView, DeadLetterQueueView,
    DeadLetterQueuesView, DeadLetterView, DeadLettersView, MeView, PageView, RedriveView, StepView,
    TaskView, View, WaitingView, WorkflowView, WorkflowsView,
};

/// The largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Submissions in one `POST /tasks/batch` at most.
pub const MAX_BATCH: usize = 25;

/// The largest body any route takes: a batch's.
pub const MAX_REQUEST_BYTES: usize = MAX_BATCH * MAX_BODY_BYTES;

/// The most tasks a listing returns at once.
pub const MAX_PAGE: usize = 100;

/// The largest answer a listing or a look at a dead-letter queue gives: under the
/// 6 MB a Lambda function may answer API Gateway with, escaped for its JSON.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

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
    /// The API authenticates no one on this route, where the operator's are
    /// authorized apart (Step Functions' protocol on `POST /` of a deployment with
    /// `NONE`, whose `POST /operator/stepfunctions` IAM authorizes): ids are not
    /// scoped, and the operator's operations are refused.
    Open,
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
    /// `X-Amz-Target`, naming a Step Functions operation on `POST /`.
    pub target: Option<&'a str>,
    /// The caller's `traceparent` and `tracestate` headers.
    pub trace: TraceHeaders<'a>,
}

/// A request's trace headers, as they came: W3C Trace Context's, and X-Ray's.
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceHeaders<'a> {
    /// `traceparent`.
    pub traceparent: Option<&'a str>,
    /// `tracestate`.
    pub tracestate: Option<&'a str>,
    /// `X-Amzn-Trace-Id`, which API Gateway passes with X-Ray tracing on.
    pub xray: Option<&'a str>,
}

impl<'a> TraceHeaders<'a> {
    /// The trace headers of a request, by `header`, which gives a header's value by
    /// its name in lower case.
    pub fn of(header: impl Fn(&str) -> Option<&'a str>) -> Self {
        Self {
            traceparent: header("traceparent"),
            tracestate: header("tracestate"),
            xray: header("x-amzn-trace-id"),
        }
    }

    /// The trace they name, which a submission's task continues: a valid
    /// `traceparent`'s, else a valid X-Ray header's.
    #[must_use]
    pub fn context(self) -> Option<sas_domain::trace::TraceContext> {
        use sas_domain::trace::TraceContext;
        TraceContext::of_headers(self.traceparent, self.tracestate)
            .or_else(|| self.xray.and_then(TraceContext::of_xray))
    }
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
    /// The JSON body's media type where it is not `application/json`: Step
    /// Functions' protocol's ([`AMZ_JSON`]).
    pub content_type: Option<&'static str>,
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
            content_type: None,
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
            content_type: None,
        }
    }
}

/// Serves one request. A panic while serving it (a defect: none is expected) is
/// caught and counted ([`contain`]), and answered as a 500 with a JSON body.
pub async fn handle(app: &App, request: ApiRequest<'_>) -> ApiResponse {
    // Boxed: the routes' futures together are tens of kilobytes, too many for the
    // stack of a caller that awaits this one in place (a test, a block_on).
    let served = contain::caught(app.metrics(), "request", || Box::pin(route(app, request))).await;
    served
        .unwrap_or_else(|_| {
            let message = "the request failed inside the service; it is logged";
            Err(ApiError::new(ErrorCode::Internal, message))
        })
        .unwrap_or_else(ApiResponse::from)
}
