//! A caller's task routes: submit (one or a batch), read (and wait), list.

use std::sync::Arc;
use std::time::Duration;

use sas_core::app::{App, Submitted};
use sas_core::ports::StoreError;
use sas_domain::flow::{DEFAULT_PRIORITY, PRIORITIES};
use sas_domain::ids::TaskId;
use sas_domain::limits;
use sas_domain::messages::Buffered;
use sas_domain::payload;
use sas_domain::submission::Submission;
use sas_domain::task::{Order, Task, TaskState};
use sas_domain::time::Timestamp;

use crate::bodies::{BatchBody, SubmitBody, json_object, parse_json, typed};
use crate::error::{ApiError, ErrorCode, decoded, not_found, query_pairs, unknown_parameter};
use crate::scope::Scope;
use crate::view::{AcceptedView, BatchView, ChildrenView, PageView, TaskView, View};
use crate::{
    ApiRequest, ApiResponse, MAX_ANSWER_BYTES, MAX_BATCH, MAX_BODY_BYTES, MAX_PAGE,
    MAX_REQUEST_BYTES,
};

/// `PUT /tasks/{id}` and `POST /tasks`; with `?wait=`, the task is waited for as by
/// `GET /tasks/{id}?wait=`: `200` with the task as that shows it if it ended in time,
/// else the submission's answer as without the wait. A read that fails in the wait
/// gives that answer too, not an error: the task is submitted, and a caller told to
/// send a `POST` again would make a second one. Only the task of this request is
/// shown: in buffered ingestion a task another request made under the id (whose
/// creation will refuse this one) is not answered as this one's.
pub(crate) async fn submit(
    app: &App,
    scope: Scope<'_>,
    path_id: Option<&str>,
    request: &ApiRequest<'_>,
) -> Result<ApiResponse, ApiError> {
    let wait = parse_wait(request.query)?;
    let (workflow, mut submission) = submission(scope, path_id, parse_json(request.body, false)?)?;
    submission.trace = request.trace.context();
    let id = submission.id.clone();
    // Only a submission that waits compares its task's request with its own.
    let (submitted, fingerprint) =
        answer_and_digest(app, scope, &workflow, submission, !wait.is_zero()).await?;
    let Some(fingerprint) = fingerprint else {
        return Ok(submitted);
    };
    let ended = app.wait_final(&id, wait).await.is_ok_and(|task| {
        task.is_some_and(|task| task.state.is_final() && *task.fingerprint == *fingerprint)
    });
    if !ended {
        return Ok(submitted);
    }
    Ok(shown(app, scope, &id)
        .await
        .ok()
        .flatten()
        .unwrap_or(submitted))
}

/// A checked submission's answer: its task created (or found), or in buffered
/// ingestion its request queued.
pub(crate) async fn answer(
    app: &App,
    scope: Scope<'_>,
    workflow: &str,
    submission: Submission,
) -> Result<ApiResponse, ApiError> {
    let (answer, _) = answer_and_digest(app, scope, workflow, submission, false).await?;
    Ok(answer)
}

/// [`answer`], and, where `digest` asks, the digest of the request
/// ([`Submission::fingerprint`]): taken from the task where one was created or found
/// (a task found is one the same request created), rather than worked out again.
async fn answer_and_digest(
    app: &App,
    scope: Scope<'_>,
    workflow: &str,
    submission: Submission,
    digest: bool,
) -> Result<(ApiResponse, Option<Arc<str>>), ApiError> {
    if app.buffers_submissions() {
        let fingerprint = digest.then(|| submission.fingerprint(workflow).into());
        let buffered = app.accept(workflow, submission).await?;
        return Ok((accepted(scope, &buffered), fingerprint));
    }
    let (Submitted::Created(task) | Submitted::Replayed(task)) =
        app.submit(workflow, submission).await?;
    let fingerprint = digest.then(|| task.fingerprint.clone());
    Ok((ApiResponse::accepted(&task, scope.view()), fingerprint))
}

/// The workflow a submission names, and the submission, under the caller's scope.
pub(crate) fn submission(
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
    if id.is_child() {
        return Err(ApiError::new(
            ErrorCode::InvalidId,
            "task id: '~' is kept for the ids of child tasks, which their parents start",
        )
        .on("id"));
    }
    let start_at = body
        .start_at
        .as_deref()
        .map(|text| {
            Timestamp::parse_rfc3339(text).ok_or_else(|| {
                ApiError::new(
                    ErrorCode::InvalidField,
                    format!("start_at: '{text}' is not an RFC 3339 time"),
                )
                .on("start_at")
            })
        })
        .transpose()?;
    let priority = match body.priority {
        None => DEFAULT_PRIORITY,
        Some(priority) if PRIORITIES.contains(&priority) => priority,
        Some(priority) => {
            return Err(ApiError::new(
                ErrorCode::InvalidField,
                format!("priority: {priority}: must be 1 (first) to 5"),
            )
            .on("priority"));
        }
    };
    let submission = Submission {
        notify: body.notify,
        owner: scope.owner().cloned(),
        start_at,
        priority,
        ..Submission::new(id, body.input)
    };
    Ok((body.workflow, submission))
}

/// 202 for a submission buffered ingestion queued: where its task will be.
pub(crate) fn accepted(scope: Scope<'_>, buffered: &Buffered) -> ApiResponse {
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
pub(crate) async fn submit_batch(
    app: &App,
    scope: Scope<'_>,
    request: &ApiRequest<'_>,
) -> Result<ApiResponse, ApiError> {
    let batch: BatchBody = typed(json_object(request.body, MAX_REQUEST_BYTES)?)?;
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
            let (workflow, submission) = submission(scope, None, typed(item)?)?;
            let trace = request.trace.context();
            Ok((
                workflow,
                Submission {
                    trace,
                    ..submission
                },
            ))
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

/// The longest a `?wait=` may wait (API Gateway answers within 30 s).
pub const MAX_WAIT: Duration = Duration::from_secs(20);

/// `wait=<duration>`: how long to wait for the task to be final; the only parameter
/// a task's read or submission takes.
pub(crate) fn parse_wait(query: Option<&str>) -> Result<Duration, ApiError> {
    let mut wait = Duration::ZERO;
    for pair in query_pairs(query) {
        match pair {
            ("wait", value) => {
                wait = humantime::parse_duration(&decoded("wait", value)?)
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

pub(crate) async fn get(
    app: &App,
    scope: Scope<'_>,
    text: &str,
    wait: Duration,
) -> Result<ApiResponse, ApiError> {
    let id = scope.id(text)?;
    if !wait.is_zero() {
        app.wait_final(&id, wait).await?;
    }
    shown(app, scope, &id).await?.ok_or_else(|| not_found(text))
}

/// `200` with task `id` as its caller reads it, with its order data and workflow;
/// `None` when there is no such task. A task whose values would make the answer more
/// than one carries (over [`MAX_ANSWER_BYTES`]; a Lambda function answers at most 6 MB)
/// is shown as its store keeps it, each value kept apart as its reference, which
/// `GET /tasks/{id}/payloads/{sha256}` reads: no value is read to be left out.
async fn shown(app: &App, scope: Scope<'_>, id: &TaskId) -> Result<Option<ApiResponse>, ApiError> {
    let Some((mut task, mut order)) = app.task_with_order_as_stored(id).await? else {
        return Ok(None);
    };
    // Without its definition (a store failure), the task is shown all the same.
    let workflow = app.workflow(&task.workflow).await.ok();
    let show = |task: &Task, order: &Order| {
        let view = TaskView::with_order(task, order, workflow.as_deref(), scope.view());
        ApiResponse::ok(200, &view)
    };
    let apart = payload::bytes_apart(payload::task_slots(&mut task))
        + payload::bytes_apart(payload::order_slots(&mut order));
    let as_stored = show(&task, &order);
    if apart == 0 || as_stored.body.len() as u64 + apart > MAX_ANSWER_BYTES as u64 {
        return Ok(Some(as_stored));
    }
    let whole = app.task_with_order(id).await?;
    Ok(whole.map(|(task, order)| show(&task, &order)))
}

/// `GET /tasks/{id}/children?step=&after=&limit=`: the child tasks a step started,
/// by item, each read by its id (`<id>~<step>~<item>`): no index holds a parent's
/// children. `step` may be left out when the task has one step that starts children.
pub(crate) async fn children(
    app: &App,
    scope: Scope<'_>,
    text: &str,
    query: Option<&str>,
) -> Result<ApiResponse, ApiError> {
    let (mut step, mut after, mut limit) = (None, None::<u32>, 50usize);
    for (key, value) in query_pairs(query) {
        let invalid = |message: &str| {
            ApiError::new(ErrorCode::InvalidQuery, format!("{key}: {message}")).on(key)
        };
        match key {
            "step" => step = Some(value),
            "after" => {
                after = Some(
                    value
                        .parse()
                        .map_err(|_| invalid("must be the item a page ended with"))?,
                );
            }
            "limit" => {
                limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| invalid(&format!("must be 1 to {MAX_PAGE}")))?;
            }
            _ => return Err(unknown_parameter(key)),
        }
    }
    let id = scope.id(text)?;
    let parent = app.task(&id).await?.ok_or_else(|| not_found(text))?;
    let with_children: Vec<_> = parent
        .steps
        .iter()
        .filter(|s| s.children.is_some())
        .collect();
    let names = || {
        with_children
            .iter()
            .map(|s| &*s.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let found = match step {
        Some(name) => with_children.iter().find(|s| *s.name == *name),
        None if with_children.len() == 1 => with_children.first(),
        None => None,
    };
    let Some(found) = found else {
        return Err(ApiError::new(
            ErrorCode::InvalidQuery,
            format!(
                "step: name one of the steps of task '{text}' that started children ({})",
                if with_children.is_empty() {
                    "none has yet".to_owned()
                } else {
                    names()
                }
            ),
        )
        .on("step"));
    };
    let counts = found.children.clone().unwrap_or_default();
    let first = after.map_or(0, |item| item.saturating_add(1));
    let end = counts
        .started
        .min(first.saturating_add(u32::try_from(limit).unwrap_or(u32::MAX)));
    let tasks = app
        .tasks(
            (first..end)
                .map(|item| id.child(&found.name, item))
                .collect(),
        )
        .await?;
    let next = (end < counts.started && end > first).then(|| (end - 1).to_string());
    // A page cut short goes on after the item of its last child.
    let cursor = |shown: usize| {
        if shown == tasks.len() {
            return Ok(next.clone());
        }
        let item = shown
            .checked_sub(1)
            .and_then(|last| tasks.get(last)?.parent.as_ref());
        Ok(item.map(|parent| parent.item.to_string()))
    };
    fitted(&tasks, cursor, |tasks, next| {
        ApiResponse::ok(
            200,
            &ChildrenView {
                step: &found.name,
                counts: &counts,
                tasks: tasks
                    .iter()
                    .map(|t| TaskView::of(t, scope.view()))
                    .collect(),
                next,
            },
        )
    })
}

/// The state named in a query or a body, with the states it may be.
pub(crate) fn parse_state(
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
pub(crate) use sas_core::ports::LISTED;

pub(crate) async fn list(
    app: &App,
    scope: Scope<'_>,
    query: Option<&str>,
) -> Result<ApiResponse, ApiError> {
    let mut state = None;
    let mut limit = 50;
    let mut after = None;
    for (key, value) in query_pairs(query) {
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
            "after" => after = Some(decoded(key, value)?),
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
        .list(state, limit, after.as_deref(), scope.owner(), None)
        .await
        .map_err(invalid_cursor)?;
    let cursor = |shown: usize| page.cursor(shown).map_err(ApiError::from);
    fitted(page.tasks(), cursor, |tasks, next| {
        ApiResponse::ok(
            200,
            &PageView {
                tasks: tasks
                    .iter()
                    .map(|t| TaskView::of(t, scope.view()))
                    .collect(),
                next,
            },
        )
    })
}

/// The answer of a page of `tasks`, which goes on from `cursor(k)` when it shows its
/// first `k` (`cursor(tasks.len())`: the next page's start): a page of large tasks
/// (their outputs) is answered shorter, cut where its answer fits what API Gateway may
/// send back, to go on after the last task it shows (if it can), nothing read again.
/// `answer` writes a page and its cursor.
pub(crate) fn fitted<'a>(
    tasks: &'a [Task],
    cursor: impl Fn(usize) -> Result<Option<String>, ApiError>,
    answer: impl Fn(&'a [Task], Option<String>) -> ApiResponse,
) -> Result<ApiResponse, ApiError> {
    let mut shown = tasks.len();
    let mut next = cursor(shown)?;
    loop {
        let page = answer(&tasks[..shown], next);
        let cut = shown / 2;
        if page.body.len() <= MAX_ANSWER_BYTES || cut == 0 {
            return Ok(page);
        }
        match cursor(cut)? {
            Some(after_cut) => (shown, next) = (cut, Some(after_cut)),
            None => return Ok(page),
        }
    }
}

/// A listing's error: a cursor not from an earlier page is the caller's.
pub(crate) fn invalid_cursor(error: StoreError) -> ApiError {
    match error {
        StoreError::InvalidCursor(_) => {
            ApiError::new(ErrorCode::InvalidQuery, format!("after: {error}")).on("after")
        }
        _ => ApiError::from(error),
    }
}
