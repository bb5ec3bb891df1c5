//! The workflow definitions ([`WorkflowStore`]), an item per name and version.

use std::collections::HashMap;

use async_trait::async_trait;

use sas_core::ports::{StoreError, WorkflowStore};
use sas_domain::workflow::Workflow;

use super::DynamoStore;
use super::requests::{attribute, key, s, unavailable};

#[async_trait]
impl WorkflowStore for DynamoStore {
    async fn save_workflow(&self, workflow: &Workflow) -> Result<(), StoreError> {
        let digest = workflow.digest();
        let item = HashMap::from([
            ("pk".to_owned(), s(format!("WORKFLOW#{}", workflow.name))),
            ("sk".to_owned(), s(format!("V#{:010}", workflow.version))),
            ("digest".to_owned(), s(digest.clone())),
            ("source".to_owned(), s(workflow.source.clone())),
        ]);
        self.put_over(item, Some(("digest", "=", s(digest)))).await
    }

    async fn load_workflow(&self, name: &str, version: u32) -> Result<Option<String>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.settings.table)
            .set_key(Some(key(
                format!("WORKFLOW#{name}"),
                format!("V#{version:010}"),
            )))
            .send()
            .await
            .map_err(unavailable)?;
        output
            .item()
            .map(|item| attribute(item, "source").map(str::to_owned))
            .transpose()
    }
}
