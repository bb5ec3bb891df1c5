//! The state store's workflow definitions, as the tasks started with them.

use async_trait::async_trait;

use sas_domain::workflow::Workflow;

use super::StoreError;

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
}
