//! The supervisor: a sweep of the tasks whose lease has expired.

use std::collections::BTreeMap;

use tracing::{error, info};

use crate::ports::{Chain, ExpiredCursor, StoreError};
use sas_domain::decide::{self, Verdict};
use sas_domain::ids::TaskId;

use super::{App, TaskError};

/// What the supervisor did with one expired task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Recovery {
    /// A decision about the task was made.
    Decided(Verdict),
    /// The task was gone by the time it was read.
    Vanished,
    /// Its record cannot be decoded: taken off the leases and kept for a person.
    Quarantined,
    /// The store failed; the next pass tries again.
    Failed,
}

impl Recovery {
    /// Its name in logs and in the sweep's report.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Decided(verdict) => verdict.as_str(),
            Self::Vanished => "vanished",
            Self::Quarantined => "quarantined",
            Self::Failed => "failed",
        }
    }
}

impl serde::Serialize for Recovery {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// What a supervisor sweep did: how many expired tasks came to each end.
pub type SweepReport = BTreeMap<Recovery, usize>;

impl App {
    /// Supervisor: one pass over the tasks whose lease has expired, `batch` at a
    /// time, each read once: each page goes on where the one before stopped. A task
    /// that cannot be recovered now is counted as "failed" and left for the next pass,
    /// so tasks that keep failing neither hold it up nor hide the ones behind them. A
    /// record this version cannot read (garbled, or of a newer version's shape) is
    /// quarantined (taken off the leases, kept for a person) and counted.
    ///
    /// # Errors
    /// [`StoreError`] when the expired leases cannot be read.
    pub async fn sweep(&self, batch: usize) -> Result<SweepReport, StoreError> {
        let mut report = SweepReport::new();
        // The leases expired when the pass began: those expiring meanwhile are the
        // next pass's, so a pass ends under any load.
        let now = self.clock.now();
        let mut cursor = ExpiredCursor::default();
        loop {
            let expired = self.store.expired(now, batch, &cursor).await?;
            for record in expired.unreadable {
                let id = &record.id;
                error!(task_id = %id, "supervisor: this version cannot read the task's record; quarantined for a person");
                self.metrics
                    .count("QuarantinedTasks", ("Store", "tasks"), 1);
                let verdict = match self.store.quarantine(&record).await {
                    Ok(()) => Recovery::Quarantined,
                    Err(error) => {
                        error!(task_id = %id, error = %Chain(&error), "supervisor could not quarantine the task");
                        Recovery::Failed
                    }
                };
                *report.entry(verdict).or_default() += 1;
            }
            for task in expired.tasks {
                let verdict = self.recover(&task.id).await;
                info!(task_id = %task.id, verdict = verdict.as_str(), "supervisor");
                *report.entry(verdict).or_default() += 1;
            }
            match expired.next {
                Some(next) => cursor = next,
                None => return Ok(report),
            }
        }
    }

    /// Supervisor: decides on one task whose lease has expired.
    async fn recover(&self, id: &TaskId) -> Recovery {
        let recovered = self
            .transition(id, |task, workflow, order, now| {
                Ok::<_, TaskError>(decide::on_expired(task, workflow, order, now))
            })
            .await;
        match recovered {
            Ok(Some((verdict, _))) => Recovery::Decided(verdict),
            Ok(None) => Recovery::Vanished,
            Err(error) => {
                error!(task_id = %id, error = %Chain(&error), "supervisor could not recover the task");
                Recovery::Failed
            }
        }
    }
}
