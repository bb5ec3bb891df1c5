//! The state store's workflow definitions, as the tasks started with them, and the
//! names of those registered at run time (a state machine created through the API).

use async_trait::async_trait;

use sas_domain::time::Timestamp;
use sas_domain::workflow::Workflow;

use super::StoreError;

/// A definition registered at run time under its name: the version its new tasks
/// start on (each update a new one, kept with [`WorkflowStore::save_workflow`]). An
/// activity's name is registered the same way, as `activity:NAME`, with no
/// definition behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The name.
    pub name: String,
    /// The version new tasks start on.
    pub version: u32,
    /// When the name was first registered.
    pub created_at: Timestamp,
    /// When its current version was.
    pub updated_at: Timestamp,
    /// Deleted: no task starts on it; those running finish on their version, and the
    /// name may be registered again, its versions going on from this one.
    pub deleted: bool,
    /// What the record keeps beside its version, as JSON text, where its kind keeps
    /// something: a state machine's published versions, aliases and tags (its
    /// catalog, whose `version` counts its changes).
    pub details: Option<String>,
}

/// The workflow definitions tasks started with, by name and version.
#[async_trait]
pub trait WorkflowStore: Send + Sync {
    /// Keeps a workflow definition for the tasks that start with it.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when that name and version is stored with other content.
    async fn save_workflow(&self, workflow: &Workflow) -> Result<(), StoreError>;

    /// A stored definition's source text.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn load_workflow(&self, name: &str, version: u32) -> Result<Option<String>, StoreError>;

    /// Writes `registration`, if the name's record is as `expected` says: at that
    /// version, or (`None`) not there.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when it is not.
    async fn put_registration(
        &self,
        registration: &Registration,
        expected: Option<u32>,
    ) -> Result<(), StoreError>;

    /// The registration of `name`, if it has one (deleted or not).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn registration(&self, name: &str) -> Result<Option<Registration>, StoreError>;

    /// Every registration, deleted ones included, by name.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn registrations(&self) -> Result<Vec<Registration>, StoreError>;
}
