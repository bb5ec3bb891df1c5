//! `GET /tasks/{id}/execution`: a state machine's task as its state graph, from its
//! definition and its execution's history ([`sas_domain::machine::graph`]): what the
//! console draws and `sas tasks execution` prints.

use schemars::JsonSchema;
use serde::Serialize;

use sas_core::app::App;
use sas_core::ports::HistoryPage;
use sas_domain::machine::graph::{ExecutionGraph, graph};
use sas_domain::machine::{Status, machine_of};

use crate::ApiResponse;
use crate::error::{ApiError, ErrorCode, not_found};
use crate::scope::Scope;
use crate::stepfunctions::shown_event;

/// The latest events of a history the graph is drawn from: a longer history's
/// earlier visits are not counted (`whole` is false).
const EVENTS_DRAWN: usize = 5000;

/// The latest events the view lists, as `GetExecutionHistory` gives them.
const EVENTS_LISTED: usize = 100;

/// A state machine's task as its state graph.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ExecutionView {
    /// The task's id, as its caller names it.
    pub id: String,
    /// The machine.
    pub workflow: String,
    /// Its version the task runs.
    pub version: u32,
    /// The execution's status, in Step Functions' words.
    pub status: Status,
    /// Its states and the path taken.
    #[serde(flatten)]
    pub graph: ExecutionGraph,
    /// Its latest events, the latest first, as Step Functions' `GetExecutionHistory`
    /// gives them (`id`, `previousEventId`, `timestamp` in epoch seconds, `type` and
    /// its details).
    pub events: Vec<serde_json::Value>,
}

/// The graph of the task `text` names; `404` for a task that runs no state machine.
pub(crate) async fn execution(
    app: &App,
    scope: Scope<'_>,
    text: &str,
) -> Result<ApiResponse, ApiError> {
    let id = scope.id(text)?;
    let task = app.task(&id).await?.ok_or_else(|| not_found(text))?;
    let no_machine = || {
        ApiError::new(
            ErrorCode::NotFound,
            format!("task '{text}' runs no state machine: it has no execution to draw"),
        )
    };
    let run = task.machine.as_deref().ok_or_else(no_machine)?;
    let workflow = app.workflow(&task.workflow).await.map_err(|e| {
        tracing::error!(task = %id, error = %e, "an execution's machine was not read");
        ApiError::new(
            ErrorCode::Unavailable,
            "the task's machine could not be read",
        )
    })?;
    let machine = machine_of(&task, &workflow).ok_or_else(no_machine)?;
    let latest = HistoryPage {
        after: None,
        limit: EVENTS_DRAWN,
        reverse: true,
    };
    let mut events = app.execution_history(&id, latest).await?;
    events.reverse();
    let listed = (events.iter().enumerate().rev().take(EVENTS_LISTED))
        .map(|(index, event)| {
            let previous = index.checked_sub(1).map_or(0, |before| events[before].id);
            shown_event(event, previous, true)
        })
        .collect();
    let view = ExecutionView {
        id: text.to_owned(),
        workflow: task.workflow.name.to_string(),
        version: task.workflow.version,
        status: run.status,
        graph: graph(machine, &events),
        events: listed,
    };
    Ok(ApiResponse::ok(200, &view))
}
