//! Catalogs ([`Catalog`]): a state machine's published versions, aliases and tags,
//! and an activity's tags, each kept as a registration of its own (`catalog:NAME`)
//! whose version counts its changes: a change is read, made and written over the
//! version read, and made again on what another wrote first.

use std::sync::Arc;

use sas_domain::machine::catalog::{Catalog, CatalogError, PublishedVersion, Qualifier};
use sas_domain::task::WorkflowRef;
use sas_domain::time::Timestamp;
use sas_domain::workflow::Workflow;

use super::{App, TaskError, activities};
use crate::ports::{Registration, StoreError};

/// Before the name of what a catalog belongs to, in its registration's.
const PREFIX: &str = "catalog:";

/// How often a change is made again on a catalog another change wrote first.
const CHANGES_TRIED: usize = 8;

/// What a catalog belongs to.
#[derive(Debug, Clone, Copy)]
pub enum Catalogued<'a> {
    /// A state machine (or workflow), shipped or registered.
    Machine(&'a str),
    /// An activity.
    Activity(&'a str),
}

/// Why a catalog was not read or changed.
#[derive(Debug, thiserror::Error)]
pub enum CatalogFailure {
    /// The machine or activity is not there.
    #[error("no such state machine or activity")]
    Missing,
    /// The catalog refused the change.
    #[error(transparent)]
    Refused(#[from] CatalogError),
    /// The store failed, or other changes kept coming first.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a change is given beside the catalog: the definition's current revision
/// (0 for an activity), and the time.
#[derive(Debug, Clone, Copy)]
pub struct Current {
    /// The revision new executions start on.
    pub revision: u32,
    /// Now.
    pub at: Timestamp,
}

impl Catalogued<'_> {
    /// Its catalog's registration name.
    fn key(self) -> String {
        match self {
            Self::Machine(name) => format!("{PREFIX}{name}"),
            Self::Activity(name) => format!("{PREFIX}{}", activities::key(name)),
        }
    }
}

impl App {
    /// When `subject` was created (a shipped machine: the epoch) and its current
    /// revision; `None` where it is not there.
    async fn catalogued(
        &self,
        subject: Catalogued<'_>,
    ) -> Result<Option<(Timestamp, u32)>, StoreError> {
        Ok(match subject {
            Catalogued::Machine(name) => match self.store.registration(name).await? {
                Some(registration) if !registration.deleted => {
                    Some((registration.created_at, registration.version))
                }
                Some(_) => None,
                None => (self.workflows.latest(name)).map(|w| (Timestamp::default(), w.version)),
            },
            Catalogued::Activity(name) => (self.activity(name).await?).map(|r| (r.created_at, 0)),
        })
    }

    /// `subject`'s catalog, with its record (where one was written) and what a
    /// change is given.
    async fn read_catalog(
        &self,
        subject: Catalogued<'_>,
    ) -> Result<(Catalog, Option<Registration>, Current), CatalogFailure> {
        let (of, revision) = (self.catalogued(subject).await?).ok_or(CatalogFailure::Missing)?;
        let record = self.store.registration(&subject.key()).await?;
        let kept = match record.as_ref().and_then(|r| r.details.as_deref()) {
            Some(text) => {
                Some(serde_json::from_str(text).map_err(|e| StoreError::Corrupt(e.into()))?)
            }
            None => None,
        };
        let current = Current {
            revision,
            at: self.now(),
        };
        Ok((Catalog::of(of, kept), record, current))
    }

    /// `subject`'s catalog.
    ///
    /// # Errors
    /// [`CatalogFailure::Missing`] where it is not there, or the store's failure.
    pub async fn catalog(&self, subject: Catalogued<'_>) -> Result<Catalog, CatalogFailure> {
        Ok(self.read_catalog(subject).await?.0)
    }

    /// Makes `change` on `subject`'s catalog and writes it, unless it changed
    /// nothing; made again on the catalog another change wrote first.
    ///
    /// # Errors
    /// What `change` refuses, [`CatalogFailure::Missing`], or the store's failure.
    pub async fn change_catalog<T>(
        &self,
        subject: Catalogued<'_>,
        mut change: impl FnMut(&mut Catalog, Current) -> Result<T, CatalogError>,
    ) -> Result<T, CatalogFailure> {
        for _ in 0..CHANGES_TRIED {
            let (mut catalog, record, current) = self.read_catalog(subject).await?;
            let before = catalog.clone();
            let made = change(&mut catalog, current)?;
            if catalog == before {
                return Ok(made);
            }
            let details =
                serde_json::to_string(&catalog).map_err(|e| StoreError::Corrupt(e.into()))?;
            match (self.write_details(&subject.key(), Some(details), false, record.as_ref())).await
            {
                Ok(()) => return Ok(made),
                Err(StoreError::Conflict) => {}
                Err(error) => return Err(error.into()),
            }
        }
        Err(StoreError::Conflict.into())
    }

    /// The definition the machine `name`'s `qualifier` names, for the execution
    /// `execution`: a published version's number, or an alias (whose routes' weights
    /// are drawn from the execution's name); with the version. `None` where neither
    /// is there.
    ///
    /// # Errors
    /// The store's failure.
    pub async fn qualified_definition(
        &self,
        name: &str,
        qualifier: &str,
        execution: &str,
    ) -> Result<Option<(Arc<Workflow>, PublishedVersion)>, StoreError> {
        let catalog = match self.catalog(Catalogued::Machine(name)).await {
            Ok(catalog) => catalog,
            Err(CatalogFailure::Missing) => return Ok(None),
            Err(CatalogFailure::Store(error)) => return Err(error),
            Err(CatalogFailure::Refused(refused)) => {
                return Err(StoreError::Corrupt(refused.to_string().into()));
            }
        };
        let version = match Qualifier::of(qualifier) {
            Qualifier::Version(number) => catalog.version(number),
            Qualifier::Alias(alias) => catalog.route(alias, execution),
        };
        let Some(version) = version.cloned() else {
            return Ok(None);
        };
        let reference = WorkflowRef {
            name: name.into(),
            version: version.revision,
        };
        match self.workflow(&reference).await {
            Ok(workflow) => Ok(Some((workflow, version))),
            Err(TaskError::Store(error)) => Err(error),
            Err(error) => Err(StoreError::Corrupt(error.to_string().into())),
        }
    }
}
