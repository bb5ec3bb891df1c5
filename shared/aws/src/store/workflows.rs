//! The workflow definitions ([`WorkflowStore`]), an item per name and version; the
//! names registered at run time, an item each in one partition (`REGISTRATIONS`).

use std::collections::HashMap;

use async_trait::async_trait;

use aws_sdk_dynamodb::types::AttributeValue;
use sas_core::ports::{Registration, StoreError, WorkflowStore};
use sas_domain::time::Timestamp;
use sas_domain::workflow::Workflow;

use super::DynamoStore;
use super::requests::{Item, attribute, conditional, key, n, s, unavailable};

/// The partition of the registrations.
const REGISTRATIONS: &str = "REGISTRATIONS";

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

    async fn put_registration(
        &self,
        registration: &Registration,
        expected: Option<u32>,
    ) -> Result<(), StoreError> {
        let mut item = key(REGISTRATIONS.to_owned(), registration.name.clone());
        item.extend([
            ("version".to_owned(), n(registration.version)),
            ("created_at".to_owned(), n(registration.created_at.0)),
            ("updated_at".to_owned(), n(registration.updated_at.0)),
            (
                "deleted".to_owned(),
                AttributeValue::Bool(registration.deleted),
            ),
        ]);
        if let Some(details) = &registration.details {
            item.insert("details".to_owned(), s(details.clone()));
        }
        let put = self
            .client
            .put_item()
            .table_name(&self.settings.table)
            .set_item(Some(item));
        let put = match expected {
            None => put
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", "pk"),
            Some(version) => put
                .condition_expression("#version = :version")
                .expression_attribute_names("#version", "version")
                .expression_attribute_values(":version", n(version)),
        };
        conditional(put.send().await)
    }

    async fn registration(&self, name: &str) -> Result<Option<Registration>, StoreError> {
        self.item(REGISTRATIONS, name)
            .await?
            .as_ref()
            .map(registration)
            .transpose()
    }

    async fn registrations(&self) -> Result<Vec<Registration>, StoreError> {
        let mut found = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.settings.table)
                .key_condition_expression("#pk = :pk")
                .expression_attribute_names("#pk", "pk")
                .expression_attribute_values(":pk", s(REGISTRATIONS))
                .set_exclusive_start_key(after)
                .consistent_read(true)
                .send()
                .await
                .map_err(unavailable)?;
            for item in page.items() {
                found.push(registration(item)?);
            }
            after = page.last_evaluated_key().cloned();
            if after.is_none() {
                return Ok(found);
            }
        }
    }
}

/// A registration's item read back.
fn registration(item: &Item) -> Result<Registration, StoreError> {
    let number = |name: &str| {
        item.get(name)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<i64>().ok())
            .ok_or_else(|| StoreError::Corrupt(format!("registration without '{name}'").into()))
    };
    Ok(Registration {
        name: attribute(item, "sk")?.to_owned(),
        version: u32::try_from(number("version")?).map_err(|e| StoreError::Corrupt(e.into()))?,
        created_at: Timestamp(number("created_at")?),
        updated_at: Timestamp(number("updated_at")?),
        deleted: item
            .get("deleted")
            .and_then(|v| v.as_bool().ok())
            .copied()
            .unwrap_or(false),
        details: item.get("details").and_then(|v| v.as_s().ok()).cloned(),
    })
}
