//! The workflow definitions ([`WorkflowStore`]), a row per name and version.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

use sas_core::ports::{StoreError, WorkflowStore};
use sas_domain::workflow::Workflow;

use crate::Embedded;
use crate::schema::unavailable;
use crate::writer::{execute, query_row};

#[async_trait]
impl WorkflowStore for Embedded {
    async fn save_workflow(&self, workflow: &Workflow) -> Result<(), StoreError> {
        let (name, version, digest, source) = (
            workflow.name.clone(),
            workflow.version,
            workflow.digest(),
            workflow.source.clone(),
        );
        self.write(move |c| {
            execute(
                c,
                "INSERT INTO workflows (name, version, digest, source) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name, version) DO NOTHING",
                params![name, version, digest, source],
            )
            .map_err(unavailable)?;
            let stored: String = query_row(
                c,
                "SELECT digest FROM workflows WHERE name = ?1 AND version = ?2",
                params![name, version],
                |row| row.get(0),
            )
            .map_err(unavailable)?;
            if stored == digest {
                Ok(())
            } else {
                Err(StoreError::Conflict)
            }
        })
        .await
    }

    async fn load_workflow(&self, name: &str, version: u32) -> Result<Option<String>, StoreError> {
        let name = name.to_owned();
        self.read(move |c| {
            query_row(
                c,
                "SELECT source FROM workflows WHERE name = ?1 AND version = ?2",
                params![name, version],
                |row| row.get(0),
            )
            .optional()
            .map_err(unavailable)
        })
        .await
    }
}
