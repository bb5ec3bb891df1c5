//! Activities: their names registered at run time, and their workers' polls, each
//! given the longest-offered visit of a Task on the activity that no worker has
//! taken ([`activities`]).
//!
//! An activity's name is kept as a registration named `activity:NAME`, a name no
//! definition can have (a definition's is letters, digits and `-`).

use std::time::Duration;

use sas_domain::machine::activities::{self, ActivityTask};

use super::operator::ActionError;
use super::{App, TaskError};
use crate::ports::{Registration, StoreError};

/// Before an activity's name in its registration.
const PREFIX: &str = "activity:";

/// The offered visits a poll reads at a time: those taken by other workers between
/// the read and the take are passed over.
const OFFERS_READ: usize = 10;

/// How long a poll waits before it looks again, at first; twice as long each time
/// after, up to [`MAX_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(50);

/// The longest a poll waits before it looks again.
const MAX_POLL: Duration = Duration::from_secs(1);

/// An activity's registration, named as the activity is (its prefix off).
fn named_as_activity(registration: Registration) -> Registration {
    let name = (registration.name.strip_prefix(PREFIX))
        .unwrap_or(&registration.name)
        .to_owned();
    Registration {
        name,
        ..registration
    }
}

/// The registration name of the activity `name`.
pub(super) fn key(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// Whether a registration is a definition's: not an activity's, nor a catalog's
/// (their names have a prefix no definition's can).
pub(super) fn is_definition(registration: &Registration) -> bool {
    !registration.name.contains(':')
}

impl App {
    /// Registers the activity `name`, or gives it as it is where it is registered.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails, or another change of the name came first.
    pub async fn create_activity(&self, name: &str) -> Result<Registration, StoreError> {
        let key = key(name);
        let current = self.store.registration(&key).await?;
        if let Some(live) = current.clone().filter(|r| !r.deleted) {
            return Ok(named_as_activity(live));
        }
        let now = self.now();
        let registration = Registration {
            name: key,
            version: current.as_ref().map_or(1, |r| r.version + 1),
            created_at: now,
            updated_at: now,
            deleted: false,
            details: None,
        };
        let expected = current.as_ref().map(|r| r.version);
        self.store.put_registration(&registration, expected).await?;
        Ok(named_as_activity(registration))
    }

    /// The activity `name`, if it is registered.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn activity(&self, name: &str) -> Result<Option<Registration>, StoreError> {
        let found = self.store.registration(&key(name)).await?;
        Ok(found.filter(|r| !r.deleted).map(named_as_activity))
    }

    /// Every registered activity, by name.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn activities(&self) -> Result<Vec<Registration>, StoreError> {
        let all = self.store.registrations().await?;
        Ok(all
            .into_iter()
            .filter(|r| !r.deleted && r.name.starts_with(PREFIX))
            .map(named_as_activity)
            .collect())
    }

    /// Deletes the activity `name`; `false` where it was not registered. Its visits
    /// offered or taken stay as they are, as in Step Functions.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails, or another change of the name came first.
    pub async fn delete_activity(&self, name: &str) -> Result<bool, StoreError> {
        let Some(current) = self
            .store
            .registration(&key(name))
            .await?
            .filter(|r| !r.deleted)
        else {
            return Ok(false);
        };
        let deleted = Registration {
            deleted: true,
            updated_at: self.now(),
            ..current.clone()
        };
        self.store
            .put_registration(&deleted, Some(current.version))
            .await?;
        Ok(true)
    }

    /// A worker's poll on `activity`: the longest-offered visit no worker has taken,
    /// taken for `worker`, as soon as one is offered within `wait`; `None` after it.
    /// Beyond the waits this process holds at once, a poll looks once and answers.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn poll_activity(
        &self,
        activity: &str,
        worker: &str,
        wait: Duration,
    ) -> Result<Option<ActivityTask>, StoreError> {
        let permit = self.waits.try_acquire();
        let deadline = tokio::time::Instant::now() + wait;
        let mut poll = FIRST_POLL;
        loop {
            if let Some(given) = self.take_offered(activity, worker).await? {
                return Ok(Some(given));
            }
            let now = tokio::time::Instant::now();
            if permit.is_err() || now >= deadline {
                return Ok(None);
            }
            tokio::time::sleep((deadline - now).min(poll)).await;
            poll = (poll * 2).min(MAX_POLL);
        }
    }

    /// Takes one of the visits offered on `activity` for `worker`, if one is offered.
    async fn take_offered(
        &self,
        activity: &str,
        worker: &str,
    ) -> Result<Option<ActivityTask>, StoreError> {
        let poll = activities::new_poll();
        for id in self.store.offered(activity, OFFERS_READ).await? {
            let taken = self
                .act(&id, |task, workflow, _, now| {
                    activities::take(task, workflow, activity, (worker, &poll), now)
                })
                .await;
            match taken {
                Ok(task) => {
                    if let Some(given) = activities::given(&task) {
                        return Ok(Some(given));
                    }
                }
                // Taken by another worker, or ended: the next one.
                Err(ActionError::Refused(_) | ActionError::NotFound(_)) => {}
                // The take may have landed, its answer lost: it is this poll's if so.
                Err(ActionError::Task(TaskError::Store(error))) => {
                    return match self.tasks.task(&id).await {
                        Ok(Some(task)) if activities::is_taken_by(&task, &poll) => {
                            Ok(activities::given(&task))
                        }
                        _ => Err(error),
                    };
                }
                // A task that cannot be moved on is the supervisor's: the next one.
                Err(ActionError::Task(error)) => {
                    tracing::warn!(task = %id, error = %error, "an offered visit was not taken");
                }
            }
        }
        Ok(None)
    }
}
