//! The operator's routes beyond a caller's own: a task's repair, bulk actions, the
//! services' limits and the dead-letter queues.

use std::time::Duration;

use sas_core::app::{App, BulkAction, BulkPage, Filter};
use sas_core::ports::DeadLetters;
use sas_domain::decide::{Move, Repair};
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::limits::MAX_ERROR_TEXT;
use sas_domain::task::{Request, TaskState};
use sas_domain::time::Timestamp;
use sas_domain::workflow::{attribute_text, is_attribute_name};

use crate::bodies::{BulkBody, MoveBody, Patches, RedriveBody, RepairBody, parse_json};
use crate::error::{ApiError, ErrorCode, decoded, query_pairs, unknown_parameter};
use crate::tasks::{LISTED, invalid_cursor, parse_state};
use crate::view::{
    BulkView, DeadLetterQueueView, DeadLetterQueuesView, DeadLetterView, DeadLettersView,
    RedriveView, ServicesView, View,
};
use crate::{ApiResponse, MAX_ANSWER_BYTES, MAX_PAGE};

/// The longest one call of a bulk action pauses between tasks, in all.
const MAX_BULK_PAUSES: Duration = Duration::from_secs(15);

/// `POST /operator/tasks/{id}/repair`: the task as the repair left it, or, for a
/// dry run, what it would do.
pub(crate) async fn repair(
    app: &App,
    id: &TaskId,
    request: Request,
    body: &[u8],
) -> Result<ApiResponse, ApiError> {
    let body: RepairBody = parse_json(body, false)?;
    let repair = repair_of(request, body.patches)?;
    if body.dry_run {
        let plan = app.plan_repair(id, &repair).await?;
        return Ok(ApiResponse::ok(200, &PlanView { plan }));
    }
    let task = app.repair(id, repair).await?;
    Ok(ApiResponse::accepted(&task, View::Operator))
}

/// The repair `patches` say, asked by `request`.
pub(crate) fn repair_of(request: Request, patches: Patches) -> Result<Repair, ApiError> {
    if patches
        .reason
        .as_ref()
        .is_some_and(|r| r.len() > MAX_ERROR_TEXT)
    {
        return Err(ApiError::new(
            ErrorCode::InvalidField,
            format!("reason: at most {MAX_ERROR_TEXT} bytes"),
        )
        .on("reason"));
    }
    Ok(Repair {
        request,
        input: patches.input,
        outputs: patches.outputs,
        from: patches.from,
        reason: patches.reason,
        entered_with: None,
    })
}

/// What a bulk call does to each task it takes: one of the core's actions, a repair
/// or a move (what they say in the body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BulkKind {
    Act(BulkAction),
    Repair,
    Move,
}

/// `POST /operator/tasks/{id}/move`: the task as the move left it, or, for a dry
/// run, what it would do.
pub(crate) async fn move_task(
    app: &App,
    id: &TaskId,
    request: Request,
    body: &[u8],
) -> Result<ApiResponse, ApiError> {
    let body: MoveBody = parse_json(body, false)?;
    let moving = Move {
        request,
        renamed: body.renamed,
    };
    if body.dry_run {
        let plan = app.plan_move(id, body.version, &moving).await?;
        return Ok(ApiResponse::ok(200, &PlanView { plan }));
    }
    let task = app.move_task(id, body.version, moving).await?;
    Ok(ApiResponse::accepted(&task, View::Operator))
}

/// What a repair or a move would do, step by step: a dry run's answer.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct PlanView<Plan> {
    /// What becomes of each step.
    pub plan: Plan,
}

pub(crate) async fn bulk(
    app: &App,
    kind: BulkKind,
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
    let foreign = body.foreign_field(kind == BulkKind::Repair, kind == BulkKind::Move);
    if let Some(field) = foreign {
        return Err(invalid(
            field,
            "another bulk action's: this one does not take it".into(),
        ));
    }
    let (default, allowed): (_, &[TaskState]) = match kind {
        BulkKind::Act(BulkAction::Resubmit) => (TaskState::Error, &[TaskState::Error]),
        BulkKind::Act(BulkAction::Cancel) => (TaskState::Processing, &LISTED[..3]),
        // A paused task with no step out waits Pending for its resumption.
        BulkKind::Act(BulkAction::Pause) => (TaskState::Processing, &LISTED[..2]),
        BulkKind::Act(BulkAction::Resume) => (TaskState::Pending, &LISTED[..2]),
        BulkKind::Repair => (TaskState::Error, &[TaskState::Error, TaskState::Processed]),
        BulkKind::Move => (
            TaskState::Processing,
            &[TaskState::Pending, TaskState::Processing, TaskState::Error],
        ),
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
        version: body.version,
        created_after: time("created_after", &body.created_after)?,
        created_before: time("created_before", &body.created_before)?,
        error_contains: body.error_contains,
        step: body.step,
        owner: body.owner,
        attributes: (body.attributes.iter())
            .map(|(name, value)| {
                let named = is_attribute_name(name).then(|| (name.clone(), attribute_text(value)));
                named.ok_or_else(|| {
                    invalid("attributes", format!("'{name}': not an attribute's name"))
                })
            })
            .collect::<Result<_, _>>()?,
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
    let report = match kind {
        BulkKind::Act(action) => app.bulk(action, &filter, &page, &request).await,
        BulkKind::Repair => {
            let repair = repair_of(request, body.repair)?;
            app.bulk_repair(&filter, &page, &repair).await
        }
        BulkKind::Move => {
            let to =
                (body.to_version).ok_or_else(|| invalid("to_version", "is required".into()))?;
            let moving = Move {
                request,
                renamed: body.renamed,
            };
            app.bulk_move(&filter, &page, to, &moving).await
        }
    }
    .map_err(invalid_cursor)?;
    let view = BulkView {
        batch: body.batch,
        report,
    };
    Ok(ApiResponse::ok(200, &view))
}

/// `GET /operator/services?key=`: each service, its limits and their gates now; a
/// keyed limit's gate is shown for the key given (percent-encoded).
pub(crate) async fn services(app: &App, query: Option<&str>) -> Result<ApiResponse, ApiError> {
    let mut key = None;
    for (name, value) in query_pairs(query) {
        match name {
            "key" => key = Some(decoded(name, value)?.into_owned()),
            _ => return Err(unknown_parameter(name)),
        }
    }
    let services = app.services(key.as_deref()).await?;
    Ok(ApiResponse::ok(200, &ServicesView { key, services }))
}

/// The most messages one look at a dead-letter queue shows, or one redrive sends back.
const MAX_DEAD_LETTERS: usize = 100;

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

pub(crate) async fn dead_letter_queues(app: &App) -> Result<ApiResponse, ApiError> {
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

pub(crate) async fn dead_letters(app: &App, role: &str) -> Result<ApiResponse, ApiError> {
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

pub(crate) async fn redrive(app: &App, role: &str, body: &[u8]) -> Result<ApiResponse, ApiError> {
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
