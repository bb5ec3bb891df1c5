//! The workflow definitions ([`WorkflowStore`]), a row per name and version.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

use sas_core::ports::{Registration, StoreError, WorkflowStore};
use sas_domain::time::Timestamp;
use sas_domain::workflow::Workflow;

use crate::Embedded;
use crate::schema::{execute, query_row, unavailable};

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

    async fn put_registration(
        &self,
        registration: &Registration,
        expected: Option<u32>,
    ) -> Result<(), StoreError> {
        let r = registration.clone();
        self.write(move |c| {
            let now: Option<u32> = query_row(
                c,
                "SELECT version FROM registrations WHERE name = ?1",
                params![r.name],
                |row| row.get(0),
            )
            .optional()
            .map_err(unavailable)?;
            if now != expected {
                return Err(StoreError::Conflict);
            }
            execute(
                c,
                "INSERT INTO registrations (name, version, created_at, updated_at, deleted, details)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (name) DO UPDATE SET version = ?2, created_at = ?3,
                     updated_at = ?4, deleted = ?5, details = ?6",
                params![r.name, r.version, r.created_at.0, r.updated_at.0, r.deleted, r.details],
            )
            .map_err(unavailable)?;
            Ok(())
        })
        .await
    }

    async fn registration(&self, name: &str) -> Result<Option<Registration>, StoreError> {
        let name = name.to_owned();
        self.read(move |c| {
            query_row(
                c,
                &format!("{REGISTRATION} WHERE name = ?1"),
                params![name],
                registration,
            )
            .optional()
            .map_err(unavailable)
        })
        .await
    }

    async fn registrations(&self) -> Result<Vec<Registration>, StoreError> {
        self.read(|c| {
            let mut statement = c
                .prepare_cached(&format!("{REGISTRATION} ORDER BY name"))
                .map_err(unavailable)?;
            let rows = statement.query_map([], registration).map_err(unavailable)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(unavailable)
        })
        .await
    }
}

/// The columns [`registration`] reads.
const REGISTRATION: &str =
    "SELECT name, version, created_at, updated_at, deleted, details FROM registrations";

fn registration(row: &rusqlite::Row<'_>) -> rusqlite::Result<Registration> {
    Ok(Registration {
        name: row.get(0)?,
        version: row.get(1)?,
        created_at: Timestamp(row.get(2)?),
        updated_at: Timestamp(row.get(3)?),
        deleted: row.get(4)?,
        details: row.get(5)?,
    })
}

/// Gives the registrations of a database written before they kept details their
/// column.
pub(crate) fn add_registration_details(c: &rusqlite::Connection) -> Result<(), StoreError> {
    let added: bool = query_row(
        c,
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info('registrations') WHERE name = 'details')",
        [],
        |row| row.get(0),
    )
    .map_err(unavailable)?;
    if !added {
        execute(c, "ALTER TABLE registrations ADD COLUMN details TEXT", []).map_err(unavailable)?;
    }
    Ok(())
}
