//! The route table and the dispatch of a request to its handler, with the caller's
//! scope (its own tasks, or an operator's); the public routes.

use serde_json::Value;

use sas_core::app::{App, BulkAction};
use sas_domain::decide::{CallbackOutcome, Resubmit};
use sas_domain::task::{Caller as WaitEndedBy, Request};

use crate::bodies::{CallbackBody, EmptyBody, ResubmitBody, parse_json};
use crate::error::{ApiError, ErrorCode, query_pairs, unknown_parameter};
use crate::execution::execution;
use crate::operator::{
    BulkKind, bulk, dead_letter_queues, dead_letters, move_task, redrive, repair, services,
};
use crate::payloads::{stored_value, upload, upload_request};
use crate::schedules::{ScheduleAction, schedules};
use crate::scope::Scope;
use crate::search::search;
use crate::stepfunctions::{self, OPERATOR_PATH, TARGET_PREFIX};
use crate::tasks::{children, get, list, parse_wait, submit, submit_batch};
use crate::view::{CallbackView, MeView, WorkflowView, WorkflowsView};
use crate::{ApiRequest, ApiResponse, CONSOLE, Caller};

/// What a route does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Submit,
    SubmitBatch,
    List,
    Get,
    Children,
    Execution,
    Resubmit,
    Repair,
    Move,
    Cancel,
    Pause,
    Resume,
    Complete,
    Callback,
    Heartbeat,
    Bulk(BulkKind),
    Workflows,
    Me,
    Services,
    DeadLetterQueues,
    DeadLetters,
    Redrive,
    Schedules(ScheduleAction),
    Search,
    Upload,
    UploadRequest,
    StoredValue,
    OpenApi,
    Console,
    /// Step Functions' protocol, its operation in `X-Amz-Target`.
    StepFunctions,
}

/// One route: a method, a path (`{id}` stands for a task's id), what it does.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// GET, POST, PUT or DELETE.
    pub method: &'static str,
    /// The path, as OpenAPI writes it.
    pub path: &'static str,
    /// What it does, in a line.
    pub summary: &'static str,
    pub(crate) action: Action,
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
    /// data (the console's page asks the API for its data as its caller), or the
    /// request carries its own capability (a callback's token).
    #[must_use]
    pub fn is_public(&self) -> bool {
        matches!(
            self.action,
            Action::OpenApi | Action::Console | Action::Callback | Action::Heartbeat
        )
    }

    /// Whether it only reads: the store (and the key of the listings' cursors, drawn
    /// once) and nothing else. On AWS these go to a function of their own, whose role
    /// only reads, so that waits for a task's end, each holding an invocation, cannot
    /// take the concurrency reserved for submissions. The dead letters' look is not
    /// one: it receives the messages.
    #[must_use]
    pub fn only_reads(&self) -> bool {
        matches!(
            self.action,
            Action::List
                | Action::Get
                | Action::Children
                | Action::Execution
                | Action::Workflows
                | Action::Me
                | Action::Services
                | Action::Schedules(ScheduleAction::List | ScheduleAction::Get)
                | Action::Search
                | Action::StoredValue
                | Action::OpenApi
                | Action::Console
        )
    }

    /// Whether it takes query parameters. Any on another route is refused, naming
    /// it, as these refuse one they do not know: `POST /tasks/batch?wait=10s` would
    /// otherwise be answered as if it had not asked to wait.
    fn takes_query(&self) -> bool {
        matches!(
            self.action,
            Action::Submit
                | Action::List
                | Action::Get
                | Action::Children
                | Action::Services
                | Action::Search
        )
    }

    /// The values of the route's parameters (a task's id, a step's name, a queue's
    /// role, a token) in `path`, in order, if the route's path matches it.
    fn capture<'p>(&self, path: &'p str) -> Option<Vec<&'p str>> {
        let mut captured = Vec::new();
        let mut given = path.trim_matches('/').split('/');
        for part in self.path.trim_matches('/').split('/') {
            let segment = given.next()?;
            match part {
                _ if part.starts_with('{') && !segment.is_empty() => captured.push(segment),
                _ if part == segment => {}
                _ => return None,
            }
        }
        given.next().is_none().then_some(captured)
    }
}

/// Every route the handler answers; `GET /openapi.json` documents exactly these.
#[rustfmt::skip]
pub const ROUTES: &[Route] = &[
    Route::new("POST", "/tasks", Action::Submit, "Submit a task under a generated id, or submit it and wait for its end"),
    Route::new("POST", "/tasks/batch", Action::SubmitBatch, "Submit up to 25 tasks in one request, each answered as its own submission would be"),
    Route::new("PUT", "/tasks/{id}", Action::Submit, "Submit a task under the caller's id: the same request again is the same task; or submit it and wait for its end"),
    Route::new("GET", "/tasks", Action::List, "List the caller's tasks in a state"),
    Route::new("GET", "/tasks/{id}", Action::Get, "Read a task, or wait for its end"),
    Route::new("GET", "/tasks/{id}/children", Action::Children, "List the child tasks a step of a task started, by item"),
    Route::new("GET", "/tasks/{id}/payloads/{sha256}", Action::StoredValue, "Read a value of a task kept apart, as its view names it where the task is too large to show whole (on AWS, by a redirection to S3)"),
    Route::new("GET", "/tasks/{id}/execution", Action::Execution, "A state machine's task as its state graph: each state's visits, last input and output, and the path taken"),
    Route::new("POST", "/tasks/{id}/resubmit", Action::Resubmit, "Run a task in Error again, with a new input if given"),
    Route::new("POST", "/tasks/{id}/cancel", Action::Cancel, "Stop a task after its running step and undo its done steps"),
    Route::new("POST", "/tasks/{id}/pause", Action::Pause, "Start no new step of a task until it is resumed; its running step finishes"),
    Route::new("POST", "/tasks/{id}/resume", Action::Resume, "Go on with a paused task where it stopped"),
    Route::new("POST", "/tasks/{id}/steps/{step}/complete", Action::Complete, "End a step's wait for its callback, with its output or an error, without the token"),
    Route::new("POST", "/callbacks/{token}", Action::Callback, "End a step's wait with its callback token: its output, or an error"),
    Route::new("POST", "/callbacks/{token}/heartbeat", Action::Heartbeat, "Push a waiting step's complete-by on by one heartbeat"),
    Route::new("POST", "/payloads", Action::Upload, "Upload a value of any size (up to 128 MiB of JSON), to name by reference as a task's input"),
    Route::new("POST", "/payloads/uploads", Action::UploadRequest, "A request by which to put a value too large for this API's body straight into the value store (on AWS, a presigned S3 URL)"),
    Route::new("PUT", "/payloads/{sha256}", Action::Upload, "Upload a value named by its JSON's SHA-256, refused unless it has it"),
    Route::new("GET", "/workflows", Action::Workflows, "The workflows a caller may submit"),
    Route::new("GET", "/me", Action::Me, "Who the API takes the caller for"),
    Route::new("GET", "/operator/tasks", Action::List, "List every caller's tasks in a state"),
    Route::new("GET", "/operator/tasks/{id}", Action::Get, "Read any task, by its full id"),
    Route::new("GET", "/operator/tasks/{id}/children", Action::Children, "List the child tasks a step of any task started, by item"),
    Route::new("GET", "/operator/tasks/{id}/payloads/{sha256}", Action::StoredValue, "Read a value of any task kept apart, as its view names it"),
    Route::new("GET", "/operator/tasks/{id}/execution", Action::Execution, "Any state machine's task as its state graph"),
    Route::new("POST", "/operator/tasks/{id}/resubmit", Action::Resubmit, "Run any task in Error again, with a new input if given"),
    Route::new("POST", "/operator/tasks/{id}/repair", Action::Repair, "Patch a task's input or its steps' outputs, or name a step to run again from, and go on in a new run; or see what would run again"),
    Route::new("POST", "/operator/tasks/{id}/move", Action::Move, "Move a task onto another version of its workflow, each step carried to the step it maps to; or see what would become of each"),
    Route::new("POST", "/operator/tasks/{id}/cancel", Action::Cancel, "Stop any task after its running step and undo its done steps"),
    Route::new("POST", "/operator/tasks/{id}/pause", Action::Pause, "Start no new step of any task until it is resumed"),
    Route::new("POST", "/operator/tasks/{id}/resume", Action::Resume, "Go on with any paused task where it stopped"),
    Route::new("POST", "/operator/tasks/{id}/steps/{step}/complete", Action::Complete, "End any task's step's wait for its callback, without the token"),
    Route::new("POST", "/operator/bulk/resubmit", Action::Bulk(BulkKind::Act(BulkAction::Resubmit)), "Resubmit the tasks in Error a filter matches, a page per call"),
    Route::new("POST", "/operator/bulk/cancel", Action::Bulk(BulkKind::Act(BulkAction::Cancel)), "Cancel the running tasks a filter matches, a page per call"),
    Route::new("POST", "/operator/bulk/pause", Action::Bulk(BulkKind::Act(BulkAction::Pause)), "Pause the running tasks a filter matches, a page per call"),
    Route::new("POST", "/operator/bulk/resume", Action::Bulk(BulkKind::Act(BulkAction::Resume)), "Resume the paused tasks a filter matches, a page per call"),
    Route::new("POST", "/operator/bulk/repair", Action::Bulk(BulkKind::Repair), "Repair the tasks in Error (or Processed) a filter matches, each as the patches say, a page per call"),
    Route::new("POST", "/operator/bulk/move", Action::Bulk(BulkKind::Move), "Move the tasks a filter matches onto another version of their workflow, a page per call"),
    Route::new("GET", "/operator/search", Action::Search, "Find tasks by their search attributes, workflow and version, state, creation time and error text, a page at a time"),
    Route::new("GET", "/operator/services", Action::Services, "The services the workflows call, what limits their calls, and each limit's calls in flight and waiting now"),
    Route::new("GET", "/operator/dead-letters", Action::DeadLetterQueues, "The dead-letter queues, and how many messages each holds"),
    Route::new("GET", "/operator/dead-letters/{queue}", Action::DeadLetters, "Messages of a dead-letter queue, left where they are"),
    Route::new("POST", "/operator/dead-letters/{queue}/redrive", Action::Redrive, "Send messages of a dead-letter queue back to their queue"),
    Route::new("GET", "/operator/schedules", Action::Schedules(ScheduleAction::List), "The schedules, each with its next runs and its last"),
    Route::new("GET", "/operator/schedules/{name}", Action::Schedules(ScheduleAction::Get), "A schedule, with its next runs and its last"),
    Route::new("PUT", "/operator/schedules/{name}", Action::Schedules(ScheduleAction::Put), "Create a schedule that starts a workflow on a cron expression or a period, or replace one's definition"),
    Route::new("DELETE", "/operator/schedules/{name}", Action::Schedules(ScheduleAction::Delete), "Delete a schedule; its runs go on"),
    Route::new("POST", "/operator/schedules/{name}/pause", Action::Schedules(ScheduleAction::Pause), "Start no run of a schedule until it is resumed"),
    Route::new("POST", "/operator/schedules/{name}/resume", Action::Schedules(ScheduleAction::Resume), "Go on with a paused schedule from its next instant; none of the pause's runs"),
    Route::new("GET", "/openapi.json", Action::OpenApi, "This API's OpenAPI 3.1 document"),
    Route::new("GET", "/", Action::Console, "The operator console, a web page over the operator's routes"),
    Route::new("POST", "/", Action::StepFunctions, "Step Functions' API (AWS JSON 1.0, the operation in X-Amz-Target): a caller's operations"),
    Route::new("POST", OPERATOR_PATH, Action::StepFunctions, "Step Functions' API for an operator: every operation, the definitions' changes among them"),
];

pub(crate) async fn route(app: &App, request: ApiRequest<'_>) -> Result<ApiResponse, ApiError> {
    // Step Functions' protocol: its operation in a header, on the root.
    if let Some(target) = request.target.filter(|t| {
        request.method == "POST"
            && matches!(request.path, "/" | OPERATOR_PATH)
            && t.starts_with(TARGET_PREFIX)
    }) {
        return Ok(stepfunctions::serve(app, &request, target).await);
    }
    // The first route of the request's method whose path matches; the others' paths
    // are matched only to tell a path no route has from a method one does not take.
    let found = ROUTES
        .iter()
        .filter(|route| route.method == request.method)
        .find_map(|route| Some((route, route.capture(request.path)?)));
    if let Some((route, captured)) = found.as_ref().filter(|(r, _)| r.is_public()) {
        return public(app, route.action, captured.first().copied(), request.body).await;
    }
    let (own, operator) = match request.caller {
        Caller::Anyone => (Scope::Own(None), true),
        Caller::Open => (Scope::Own(None), false),
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
    let Some((route, captured)) = found else {
        let matched = ROUTES.iter().any(|r| r.capture(request.path).is_some());
        return Err(if !matched {
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
    if !route.takes_query()
        && let Some((key, _)) = query_pairs(request.query).next()
    {
        return Err(unknown_parameter(key));
    }
    let named = captured.first().copied().unwrap_or_default();
    let now = || Request {
        by: scope.actor(),
        at: app.now(),
        batch: None,
    };
    match route.action {
        Action::Submit => {
            let id = captured.first().copied();
            submit(app, scope, id, &request).await
        }
        Action::SubmitBatch => submit_batch(app, scope, &request).await,
        Action::List => list(app, scope, request.query).await,
        Action::Get => get(app, scope, named, parse_wait(request.query)?).await,
        Action::Children => children(app, scope, named, request.query).await,
        Action::Execution => execution(app, scope, named).await,
        Action::Resubmit => {
            let body: ResubmitBody = parse_json(request.body, true)?;
            let resubmit = Resubmit {
                request: now(),
                input: body.input,
            };
            let task = app.resubmit(&scope.id(named)?, resubmit).await?;
            Ok(ApiResponse::accepted(&task, scope.view()))
        }
        Action::Repair => repair(app, &scope.id(named)?, now(), request.body).await,
        Action::Move => move_task(app, &scope.id(named)?, now(), request.body).await,
        Action::Cancel | Action::Pause | Action::Resume => {
            let _: EmptyBody = parse_json(request.body, true)?;
            let id = scope.id(named)?;
            let task = match route.action {
                Action::Pause => app.pause(&id, now()).await?,
                Action::Resume => app.resume(&id, now()).await?,
                _ => app.cancel(&id, now()).await?,
            };
            Ok(ApiResponse::accepted(&task, scope.view()))
        }
        Action::Complete => {
            let outcome = callback_outcome(request.body)?;
            let step = captured.get(1).copied().unwrap_or_default();
            let by = match scope {
                Scope::Own(_) => WaitEndedBy::Owner,
                Scope::All => WaitEndedBy::Operator,
            };
            let task = app
                .complete_step(&scope.id(named)?, step, by, outcome)
                .await?;
            Ok(ApiResponse::accepted(&task, scope.view()))
        }
        Action::Bulk(kind) => bulk(app, kind, now(), request.body).await,
        Action::Workflows => Ok(workflows(app)),
        Action::Me => Ok(ApiResponse::ok(200, &me(request.caller))),
        Action::Services => services(app, request.query).await,
        Action::DeadLetterQueues => dead_letter_queues(app).await,
        Action::DeadLetters => dead_letters(app, named).await,
        Action::Redrive => redrive(app, named, request.body).await,
        Action::Schedules(action) => schedules(app, action, named, request.body).await,
        Action::Search => search(app, request.query).await,
        Action::Upload => upload(app, captured.first().copied(), request.body).await,
        Action::UploadRequest => upload_request(app, request.body).await,
        Action::StoredValue => {
            let sha256 = captured.get(1).copied().unwrap_or_default();
            stored_value(app, &scope.id(named)?, sha256).await
        }
        // With its operation, the protocol took it before any route.
        Action::StepFunctions => Err(ApiError::new(
            ErrorCode::InvalidField,
            "this route serves Step Functions' protocol: name the operation in the \
             header X-Amz-Target (AWSStepFunctions.<Operation>)",
        )),
        Action::OpenApi | Action::Console | Action::Callback | Action::Heartbeat => {
            public(app, route.action, Some(named), request.body).await
        }
    }
}

/// The answers of the public routes: the console's page, the API's description,
/// and a callback's use by its token, which is its own capability.
async fn public(
    app: &App,
    action: Action,
    token: Option<&str>,
    body: &[u8],
) -> Result<ApiResponse, ApiError> {
    let token = token.unwrap_or_default();
    match action {
        Action::Console => Ok(ApiResponse {
            page: Some(CONSOLE),
            ..ApiResponse::ok(200, &Value::Null)
        }),
        Action::Callback => {
            let task = app.use_callback(token, callback_outcome(body)?).await?;
            Ok(ApiResponse::ok(200, &CallbackView::of(&task, token)))
        }
        Action::Heartbeat => {
            let _: EmptyBody = parse_json(body, true)?;
            let task = app.heartbeat(token).await?;
            Ok(ApiResponse::ok(200, &CallbackView::of(&task, token)))
        }
        _ => Ok(ApiResponse::ok(200, &crate::document())),
    }
}

/// A callback's body: its output (a JSON object), or its error; one of them.
fn callback_outcome(body: &[u8]) -> Result<CallbackOutcome, ApiError> {
    let body: CallbackBody = parse_json(body, false)?;
    match (body.output, body.error) {
        (Some(output), None) => Ok(CallbackOutcome::Output(Value::Object(output))),
        (None, Some(error)) if !error.trim().is_empty() => Ok(CallbackOutcome::Error(error)),
        (None, Some(_)) => Err(ApiError::new(
            ErrorCode::InvalidField,
            "error: must say what went wrong",
        )
        .on("error")),
        _ => Err(ApiError::new(
            ErrorCode::InvalidBody,
            "the body must have either output (the step's result, an object) or error (a refusal)",
        )),
    }
}

/// `GET /me`: who the API takes the caller for, and how to name its notification queues.
pub(crate) fn me(caller: &Caller) -> MeView {
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
        Caller::Open => MeView {
            owner: None,
            operator: false,
            notify_queue_suffix: None,
        },
    }
}

pub(crate) fn workflows(app: &App) -> ApiResponse {
    let mut all = app.workflows().all();
    all.sort_by(|a, b| (&a.name, a.version).cmp(&(&b.name, b.version)));
    let view = WorkflowsView {
        workflows: all.iter().map(|w| WorkflowView::of(w)).collect(),
    };
    ApiResponse::ok(200, &view)
}
