//! The operator's schedules (`/operator/schedules`): created or replaced by name,
//! read with their next runs, paused, resumed and deleted.

use schemars::JsonSchema;
use serde::Serialize;

use sas_core::app::{App, ScheduleFailure};
use sas_domain::schedule::{NEXT_RUNS_SHOWN, Schedule, ScheduleSpec};
use sas_domain::time::Timestamp;

use crate::ApiResponse;
use crate::bodies::{EmptyBody, parse_json};
use crate::error::{ApiError, ErrorCode};

/// A schedule as the API shows it: what it runs and when, and where it stands.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ScheduleView {
    /// Its name.
    name: String,
    /// What the operator wrote (its fields as written).
    #[serde(flatten)]
    spec: ScheduleSpec,
    /// Paused: no run starts until it is resumed.
    paused: bool,
    /// When it was created (or its cadence last changed): `every` counts from here.
    anchor: String,
    /// Its next runs, while it is not paused.
    next_runs: Vec<String>,
    /// Its last run started: the task and its instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_run: Option<RunView>,
    /// A run kept for when the running one ends (`buffer_one`): its instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    buffered: Option<String>,
    /// Runs started.
    started: u64,
    /// Runs not run because the last was running.
    skipped: u64,
    /// Runs passed over, older than the catch-up window when the engine came to them.
    missed: u64,
}

/// A schedule's run.
#[derive(Debug, Serialize, JsonSchema)]
struct RunView {
    /// The task's id (operator's routes).
    task_id: String,
    /// Its instant.
    at: String,
}

impl ScheduleView {
    fn of(schedule: Schedule, now: Timestamp) -> Self {
        // A buffered run is the next, once the running one ends.
        let buffered = schedule.state.buffered.filter(|_| !schedule.state.paused);
        let next_runs = (buffered.into_iter())
            .chain(schedule.next_runs(now, NEXT_RUNS_SHOWN))
            .take(NEXT_RUNS_SHOWN)
            .map(Timestamp::to_rfc3339)
            .collect();
        let state = schedule.state;
        Self {
            name: schedule.name,
            spec: schedule.spec,
            paused: state.paused,
            anchor: state.anchor.to_rfc3339(),
            next_runs,
            last_run: state.last_run.map(|run| RunView {
                task_id: run.id.to_string(),
                at: run.at.to_rfc3339(),
            }),
            buffered: state.buffered.map(Timestamp::to_rfc3339),
            started: state.started,
            skipped: state.skipped,
            missed: state.missed,
        }
    }
}

/// `GET /operator/schedules`: every schedule.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SchedulesView {
    /// The schedules, by name.
    schedules: Vec<ScheduleView>,
}

/// `DELETE /operator/schedules/{name}`'s answer.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DeletedView {
    /// The schedule deleted.
    name: String,
    /// Always true: its runs go on.
    deleted: bool,
}

impl From<ScheduleFailure> for ApiError {
    fn from(failure: ScheduleFailure) -> Self {
        match failure {
            ScheduleFailure::Missing(name) => {
                Self::new(ErrorCode::NotFound, format!("no schedule '{name}'"))
            }
            ScheduleFailure::Refused(refused) => {
                Self::new(ErrorCode::InvalidField, refused.to_string()).on(refused.field())
            }
            ScheduleFailure::Workflow(refused) => refused.into(),
            ScheduleFailure::Store(error) => Self::unavailable(&error),
            ScheduleFailure::Wakeups(error) => Self::unavailable(&error),
        }
    }
}

/// What a schedule route does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScheduleAction {
    List,
    Get,
    Put,
    Pause,
    Resume,
    Delete,
}

/// Serves `action` on the schedule `name` (none for the list).
pub(crate) async fn schedules(
    app: &App,
    action: ScheduleAction,
    name: &str,
    body: &[u8],
) -> Result<ApiResponse, ApiError> {
    let view = |schedule| ScheduleView::of(schedule, app.now());
    match action {
        ScheduleAction::List => {
            let schedules = app.schedules().await?.into_iter().map(view).collect();
            Ok(ApiResponse::ok(200, &SchedulesView { schedules }))
        }
        ScheduleAction::Get => match app.find_schedule(name).await? {
            Some(schedule) => Ok(ApiResponse::ok(200, &view(schedule))),
            None => Err(ScheduleFailure::Missing(name.to_owned()).into()),
        },
        ScheduleAction::Put => {
            let spec: ScheduleSpec = parse_json(body, false)?;
            let (schedule, created) = app.put_schedule(name, spec).await?;
            Ok(ApiResponse::ok(
                if created { 201 } else { 200 },
                &view(schedule),
            ))
        }
        ScheduleAction::Pause | ScheduleAction::Resume => {
            let _: EmptyBody = parse_json(body, true)?;
            let paused = action == ScheduleAction::Pause;
            Ok(ApiResponse::ok(
                200,
                &view(app.pause_schedule(name, paused).await?),
            ))
        }
        ScheduleAction::Delete => {
            app.delete_schedule(name).await?;
            let deleted = DeletedView {
                name: name.to_owned(),
                deleted: true,
            };
            Ok(ApiResponse::ok(200, &deleted))
        }
    }
}
