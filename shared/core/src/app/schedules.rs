//! Schedules ([`sas_domain::schedule`]): each kept as a registration of its own
//! (`schedule:NAME`) whose details are the schedule and whose version counts its
//! changes, every change written over the version read. A firing starts its runs
//! (each a submission under an id derived from the schedule and the instant, so a run
//! fired twice is one task) before it writes the schedule: a firing lost between the
//! two is made again, and starts the same tasks.

use std::sync::Arc;

use tracing::{info, warn};

use sas_domain::schedule::{Schedule, ScheduleError, ScheduleSpec};
use sas_domain::submission::Submission;
use sas_domain::task::WorkflowRef;
use sas_domain::workflow::Workflow;

use super::{App, SubmitError, TaskError};
use crate::ports::{Chain, Registration, StoreError, WakeupError};

/// Before a schedule's name in its registration's.
const PREFIX: &str = "schedule:";

/// How often a change is made again on a schedule another change wrote first.
const CHANGES_TRIED: usize = 8;

/// Why a schedule was not changed or fired.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleFailure {
    /// No schedule of that name.
    #[error("no schedule '{0}'")]
    Missing(String),
    /// The schedule was refused, naming the field.
    #[error(transparent)]
    Refused(#[from] ScheduleError),
    /// Its workflow, its version or its input was refused.
    #[error(transparent)]
    Workflow(#[from] SubmitError),
    /// The store failed, or other changes kept coming first.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Its wake-ups could not be set: it is kept, and the supervisor's sweep fires it.
    #[error(transparent)]
    Wakeups(#[from] WakeupError),
}

/// What a sweep of the schedules did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FiringReport {
    /// Schedules fired.
    pub fired: usize,
    /// Runs started (or found started: a run fired twice).
    pub runs: usize,
    /// Schedules that could not be fired now; the next sweep tries again.
    pub failed: usize,
}

/// A registration holds a schedule.
fn is_schedule(registration: &Registration) -> bool {
    registration.name.starts_with(PREFIX) && !registration.deleted
}

fn decoded(registration: &Registration) -> Result<Schedule, StoreError> {
    let text = registration.details.as_deref().unwrap_or_default();
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(e.into()))
}

impl App {
    /// The schedule `name` and its record, where it has one (deleted: `None`, with
    /// the record, whose version a new schedule of the name goes on from).
    async fn read_schedule(
        &self,
        name: &str,
    ) -> Result<(Option<Schedule>, Option<Registration>), StoreError> {
        let record = self.store.registration(&format!("{PREFIX}{name}")).await?;
        let schedule = match &record {
            Some(live) if !live.deleted => Some(decoded(live)?),
            _ => None,
        };
        Ok((schedule, record))
    }

    /// Writes `schedule` (or, `None`, its deletion) over `record`, as read.
    async fn write_schedule(
        &self,
        name: &str,
        schedule: Option<&Schedule>,
        record: Option<&Registration>,
    ) -> Result<(), StoreError> {
        let details = match schedule {
            Some(schedule) => Some(sas_domain::to_json(schedule)),
            None => record.and_then(|r| r.details.clone()),
        };
        self.write_details(
            &format!("{PREFIX}{name}"),
            details,
            schedule.is_none(),
            record,
        )
        .await
    }

    /// The schedule `name`.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn find_schedule(&self, name: &str) -> Result<Option<Schedule>, StoreError> {
        Ok(self.read_schedule(name).await?.0)
    }

    /// Every schedule, by name.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        let registrations = self.store.registrations().await?;
        (registrations.iter().filter(|r| is_schedule(r)))
            .map(decoded)
            .collect()
    }

    /// The definition a schedule's runs start on: its version, or the newest.
    async fn scheduled_definition(
        &self,
        spec: &ScheduleSpec,
    ) -> Result<Arc<Workflow>, SubmitError> {
        let Some(version) = spec.version else {
            return self.named_definition(&spec.workflow).await;
        };
        let reference = WorkflowRef {
            name: spec.workflow.as_str().into(),
            version,
        };
        match self.workflow(&reference).await {
            Ok(definition) => Ok(definition),
            Err(TaskError::Store(error)) => Err(error.into()),
            Err(_) => Err(SubmitError::UnknownWorkflow(format!(
                "{}@{version}",
                spec.workflow
            ))),
        }
    }

    /// Creates the schedule `name`, or gives it `spec` in place of its own; its
    /// workflow and input are checked as a submission's, and its wake-ups set.
    /// Whether it was created comes with it.
    ///
    /// # Errors
    /// [`ScheduleFailure`]: the spec, the workflow or the input refused, or the store
    /// or the wake-ups failed.
    pub async fn put_schedule(
        &self,
        name: &str,
        spec: ScheduleSpec,
    ) -> Result<(Schedule, bool), ScheduleFailure> {
        sas_domain::schedule::check_name(name)?;
        spec.check()?;
        let definition = self.scheduled_definition(&spec).await?;
        let probe = Schedule::new(name, spec.clone(), self.now())?;
        self.check_against(
            &definition,
            &Submission::new(probe.run_id(self.now()), spec.input.clone()),
        )?;
        let (schedule, created) = self
            .change_schedule(name, |current, now| match current {
                Some(current) => Ok((current.respecified(spec.clone(), now)?, false)),
                None => Ok((Schedule::new(name, spec.clone(), now)?, true)),
            })
            .await?;
        self.set_wakeups(&schedule).await?;
        Ok((schedule, created))
    }

    /// Pauses the schedule `name`, or (`paused` false) resumes it.
    ///
    /// # Errors
    /// [`ScheduleFailure::Missing`], or the store's or the wake-ups' failure.
    pub async fn pause_schedule(
        &self,
        name: &str,
        paused: bool,
    ) -> Result<Schedule, ScheduleFailure> {
        let (schedule, ()) = self
            .change_schedule(name, |current, now| match current {
                Some(current) => Ok((current.paused(paused, now), ())),
                None => Err(ScheduleFailure::Missing(name.to_owned())),
            })
            .await?;
        self.set_wakeups(&schedule).await?;
        Ok(schedule)
    }

    /// Deletes the schedule `name` and its wake-ups; its runs go on.
    ///
    /// # Errors
    /// [`ScheduleFailure::Missing`], or the store's or the wake-ups' failure.
    pub async fn delete_schedule(&self, name: &str) -> Result<(), ScheduleFailure> {
        for _ in 0..CHANGES_TRIED {
            let (schedule, record) = self.read_schedule(name).await?;
            if schedule.is_none() {
                return Err(ScheduleFailure::Missing(name.to_owned()));
            }
            match self.write_schedule(name, None, record.as_ref()).await {
                Ok(()) => {
                    if let Some(wakeups) = &self.wakeups {
                        wakeups.remove(name).await?;
                    }
                    return Ok(());
                }
                Err(StoreError::Conflict) => {}
                Err(error) => return Err(error.into()),
            }
        }
        Err(StoreError::Conflict.into())
    }

    /// Makes `change` on the schedule `name` (`None` where there is none) and
    /// writes it; made again on what another change wrote first.
    async fn change_schedule<T>(
        &self,
        name: &str,
        change: impl Fn(
            Option<Schedule>,
            sas_domain::time::Timestamp,
        ) -> Result<(Schedule, T), ScheduleFailure>,
    ) -> Result<(Schedule, T), ScheduleFailure> {
        for _ in 0..CHANGES_TRIED {
            let (current, record) = self.read_schedule(name).await?;
            let (changed, made) = change(current.clone(), self.now())?;
            if current.as_ref() == Some(&changed) {
                return Ok((changed, made));
            }
            match self
                .write_schedule(name, Some(&changed), record.as_ref())
                .await
            {
                Ok(()) => return Ok((changed, made)),
                Err(StoreError::Conflict) => {}
                Err(error) => return Err(error.into()),
            }
        }
        Err(StoreError::Conflict.into())
    }

    async fn set_wakeups(&self, schedule: &Schedule) -> Result<(), WakeupError> {
        match &self.wakeups {
            Some(wakeups) => wakeups.set(schedule).await,
            None => Ok(()),
        }
    }

    /// Fires the schedule `name`: starts the runs whose instants have come, as its
    /// overlap policy and catch-up window allow, and writes where it stands. Gives
    /// the number of runs started.
    ///
    /// # Errors
    /// [`ScheduleFailure`]: the schedule is not there, or a run could not be started
    /// (the schedule is then left as it was, for the next firing to start it).
    pub async fn fire_schedule(&self, name: &str) -> Result<usize, ScheduleFailure> {
        for _ in 0..CHANGES_TRIED {
            let (current, record) = self.read_schedule(name).await?;
            let current = current.ok_or_else(|| ScheduleFailure::Missing(name.to_owned()))?;
            let running = match &current.state.last_run {
                Some(run) => (self.tasks.task(&run.id).await?).is_some_and(|t| !t.state.is_final()),
                None => false,
            };
            let firing = current.fire(self.now(), running)?;
            if firing.schedule == current {
                return Ok(0);
            }
            if !firing.runs.is_empty() {
                let definition = self.scheduled_definition(&current.spec).await?;
                for run in &firing.runs {
                    let submission = Submission::new(run.id.clone(), current.spec.input.clone());
                    match self.submit_on(Arc::clone(&definition), submission).await {
                        Ok(_) => {
                            info!(schedule = name, task_id = %run.id, at = %run.at, "schedule: run started");
                        }
                        // An id a client took first: that run cannot be made.
                        Err(SubmitError::Conflict(id)) => {
                            warn!(schedule = name, task_id = %id, "schedule: a task with the run's id exists from another request; run not started");
                        }
                        Err(error) => return Err(error.into()),
                    }
                }
            }
            match self
                .write_schedule(name, Some(&firing.schedule), record.as_ref())
                .await
            {
                Ok(()) => return Ok(firing.runs.len()),
                Err(StoreError::Conflict) => {}
                Err(error) => return Err(error.into()),
            }
        }
        Err(StoreError::Conflict.into())
    }

    /// Fires every schedule whose next run has come (the supervisor's sweep).
    ///
    /// # Errors
    /// [`StoreError`] when the schedules cannot be read.
    pub async fn fire_schedules(&self) -> Result<FiringReport, StoreError> {
        let now = self.now();
        let mut report = FiringReport::default();
        for schedule in self.schedules().await? {
            if schedule.next_run().is_none_or(|next| next > now) {
                continue;
            }
            match self.fire_schedule(&schedule.name).await {
                Ok(runs) => {
                    report.fired += 1;
                    report.runs += runs;
                }
                Err(ScheduleFailure::Missing(_)) => {}
                Err(error) => {
                    warn!(schedule = %schedule.name, error = %Chain(&error), "schedule: not fired; the next sweep tries again");
                    report.failed += 1;
                }
            }
        }
        Ok(report)
    }
}
