//! Definitions registered at run time: a state machine (or a workflow of the
//! project's language) created, updated and deleted through the API rather than
//! shipped as a file. Each change is a new version, stored before the name's record
//! points at it ([`Registration`]), so every process finds the current one by name,
//! and a task keeps the version it started on, as a shipped one does.

use std::sync::{Arc, PoisonError};

use sas_domain::workflow::{DefinitionError, Workflow};

use super::{App, activities};
use crate::ports::{Registration, StoreError};

/// How many versions past the last registered one a change tries, where an earlier
/// change stored its version and stopped before its record did.
const VERSIONS_TRIED: u32 = 8;

/// Why a definition was not registered, changed or deleted.
#[derive(Debug, thiserror::Error)]
pub enum DefineError {
    /// Not a definition this engine runs.
    #[error(transparent)]
    Invalid(#[from] DefinitionError),
    /// The name is taken: by a definition shipped with the deployment, or by one
    /// registered with other content.
    #[error("a definition named '{0}' exists")]
    Exists(String),
    /// No registered definition has the name (a shipped one changes with its file).
    #[error("no definition registered as '{0}'")]
    NotFound(String),
    /// The store failed, or another change of the name came first (read it again).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl App {
    /// Whether this process has found `name` registered at run time (not shipped).
    #[must_use]
    pub fn is_registered(&self, name: &str) -> bool {
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(name)
    }

    /// The definition new tasks named `name` start on: a shipped one, or the current
    /// version of one registered at run time (read from the store: another process
    /// may have changed it). A shipped name costs no read.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails, or holds a definition it cannot read.
    pub async fn definition(&self, name: &str) -> Result<Option<Arc<Workflow>>, StoreError> {
        let shipped = self.workflows.latest(name);
        if shipped.is_some() && !self.is_registered(name) {
            return Ok(shipped);
        }
        match self.store.registration(name).await? {
            Some(registration) if !registration.deleted => {
                Ok(Some(self.registered_version(&registration).await?))
            }
            Some(_) => Ok(None),
            None => Ok(shipped),
        }
    }

    /// Every definition registered at run time and not deleted, at its current
    /// version, with its record.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn registered_definitions(
        &self,
    ) -> Result<Vec<(Registration, Arc<Workflow>)>, StoreError> {
        let mut found = Vec::new();
        for registration in self.store.registrations().await? {
            if !registration.deleted && activities::is_definition(&registration) {
                let workflow = self.registered_version(&registration).await?;
                found.push((registration, workflow));
            }
        }
        Ok(found)
    }

    /// The registration of `name`, if it has a live one.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn registration(&self, name: &str) -> Result<Option<Registration>, StoreError> {
        let found = self.store.registration(name).await?;
        Ok(found.filter(|registration| !registration.deleted))
    }

    /// Writes the registration `key` with `details` (or, `deleted`, its deletion)
    /// over `record`, as read: its next version, created where there was none. What
    /// keeps a record of its own beside the definitions (a catalog, a schedule)
    /// changes through this.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when another change wrote `key` after `record` was read.
    pub(super) async fn write_details(
        &self,
        key: &str,
        details: Option<String>,
        deleted: bool,
        record: Option<&Registration>,
    ) -> Result<(), StoreError> {
        let now = self.now();
        let written = Registration {
            name: key.to_owned(),
            version: record.map_or(1, |r| r.version + 1),
            created_at: record.filter(|r| !r.deleted).map_or(now, |r| r.created_at),
            updated_at: now,
            deleted,
            details,
        };
        (self.store)
            .put_registration(&written, record.map(|r| r.version))
            .await
    }

    /// The version `registration` points at, read from the store once per process.
    async fn registered_version(
        &self,
        registration: &Registration,
    ) -> Result<Arc<Workflow>, StoreError> {
        let (name, version) = (&registration.name, registration.version);
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.clone());
        if let Some(known) = self.workflows.version(name, version) {
            return Ok(known);
        }
        let corrupt = |what: String| StoreError::Corrupt(what.into());
        let text = (self.store.load_workflow(name, version).await?).ok_or_else(|| {
            corrupt(format!(
                "{name} version {version} is registered, not stored"
            ))
        })?;
        let mut workflow =
            Workflow::parse_stored(name, &format!("registered {name}@{version}"), &text)
                .map_err(|e| corrupt(e.to_string()))?;
        workflow.version = version;
        self.workflows
            .add(workflow)
            .map_err(|e| corrupt(e.to_string()))
    }

    /// Registers `text` as the definition `name`, as a new name or (`update`) as the
    /// next version of a registered one. The same content as the current version
    /// changes nothing; a name shipped with the deployment, or registered with other
    /// content when not updating, is [`DefineError::Exists`].
    ///
    /// # Errors
    /// [`DefineError`].
    pub async fn register_definition(
        &self,
        name: &str,
        text: &str,
        update: bool,
    ) -> Result<(Registration, Arc<Workflow>), DefineError> {
        let mut workflow = Workflow::parse_stored(name, name, text)?;
        if workflow.name != name {
            // A workflow of the project's language names itself.
            return Err(DefineError::Invalid(DefinitionError {
                file: name.to_owned(),
                step: None,
                field: "name".to_owned(),
                message: format!("the definition is named '{}', not '{name}'", workflow.name),
            }));
        }
        let current = self.store.registration(name).await?;
        let live = current.clone().filter(|r| !r.deleted);
        if live.is_none() && self.workflows.latest(name).is_some() && !self.is_registered(name) {
            return Err(DefineError::Exists(name.to_owned()));
        }
        match &live {
            None if update => return Err(DefineError::NotFound(name.to_owned())),
            Some(registration) => {
                let now = self.registered_version(registration).await?;
                if now.source == workflow.source {
                    return Ok((registration.clone(), now));
                }
                if !update {
                    return Err(DefineError::Exists(name.to_owned()));
                }
            }
            None => {}
        }
        let last = current.as_ref().map_or(0, |r| r.version);
        let mut saved = Err(StoreError::Conflict);
        for version in last + 1..=last + VERSIONS_TRIED {
            workflow.version = version;
            saved = self.store.save_workflow(&workflow).await;
            if !matches!(saved, Err(StoreError::Conflict)) {
                break;
            }
        }
        saved?;
        let now = self.now();
        let registration = Registration {
            name: name.to_owned(),
            version: workflow.version,
            created_at: live.as_ref().map_or(now, |r| r.created_at),
            updated_at: now,
            deleted: false,
            details: None,
        };
        let expected = current.as_ref().map(|r| r.version);
        self.store.put_registration(&registration, expected).await?;
        let workflow = self.registered_version(&registration).await?;
        Ok((registration, workflow))
    }

    /// Deletes the registered definition `name`: no task starts on it any more; those
    /// running finish on their version.
    ///
    /// # Errors
    /// [`DefineError::NotFound`] for a name not registered (or a shipped one), or the
    /// store's failure.
    pub async fn delete_definition(&self, name: &str) -> Result<(), DefineError> {
        let Some(current) = self.registration(name).await? else {
            return Err(DefineError::NotFound(name.to_owned()));
        };
        let deleted = Registration {
            deleted: true,
            updated_at: self.now(),
            ..current.clone()
        };
        self.store
            .put_registration(&deleted, Some(current.version))
            .await?;
        Ok(())
    }
}
