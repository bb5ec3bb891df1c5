//! The gates of flow control ([`sas_domain::flow`]) in the table: a gate's state an
//! item of its own, versioned, and its line the items beside it, sorted by position.
//!
//! | pk            | sk                              | holds                 |
//! |---------------|---------------------------------|-----------------------|
//! | `GATE#<name>` | `GATE`                          | its state, `version`  |
//! | `GATE#<name>` | `W#<position, 20 digits>#<call>` | a call in its line    |

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem};

use sas_core::ports::{GateStore, StoreError};
use sas_domain::flow::{Gate, Waiter};

use super::DynamoStore;
use super::requests::{
    attribute, cancellation_reasons, conditional, decode_json, encode_json, key, n, s, unavailable,
};

fn invalid(error: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Unavailable(error.into())
}

/// The partition of a gate and its line.
fn gate_pk(name: &str) -> String {
    format!("GATE#{name}")
}

/// Where a call stands in its gate's line.
fn line_sk(waiter: &Waiter) -> String {
    format!(
        "W#{:020}#{}",
        waiter.admission.position.0.max(0),
        waiter.admission.call.id()
    )
}

/// A gate's state, from its item.
fn gate_state(item: &HashMap<String, AttributeValue>) -> Result<Gate, StoreError> {
    Ok(Gate {
        version: item
            .get("version")
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or_default(),
        ..decode_json(attribute(item, "state")?)?
    })
}

#[async_trait]
impl GateStore for DynamoStore {
    /// One consistent read, the state alone or with the line's first (a query of the
    /// gate's items: its state's sort key, `GATE`, comes before its line's, `W#...`).
    async fn gate(&self, name: &str, first: usize) -> Result<(Gate, Vec<Waiter>), StoreError> {
        let table = &self.settings.table;
        if first == 0 {
            let state = self
                .client
                .get_item()
                .table_name(table)
                .set_key(Some(key(gate_pk(name), "GATE".to_owned())))
                .consistent_read(true)
                .send()
                .await
                .map_err(unavailable)?;
            let state = state.item().map(gate_state).transpose()?;
            return Ok((state.unwrap_or_default(), Vec::new()));
        }
        let items = self
            .client
            .query()
            .table_name(table)
            .key_condition_expression("#pk = :pk")
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_values(":pk", s(gate_pk(name)))
            .limit(i32::try_from(first + 1).unwrap_or(i32::MAX))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        let mut state = Gate::default();
        let mut line = Vec::new();
        for item in items.items() {
            if item
                .get("sk")
                .and_then(|sk| sk.as_s().ok())
                .map(String::as_str)
                == Some("GATE")
            {
                state = gate_state(item)?;
            } else if line.len() < first {
                line.push(decode_json(attribute(item, "waiter")?)?);
            }
        }
        Ok((state, line))
    }

    /// The same item again for the same call.
    async fn enqueue(&self, waiter: &Waiter) -> Result<(), StoreError> {
        let Some(gate) = waiter.gate() else {
            return Ok(());
        };
        let mut item = key(gate_pk(&gate.name), line_sk(waiter));
        item.insert("waiter".into(), s(encode_json(waiter)?));
        self.client
            .put_item()
            .table_name(&self.settings.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// One transaction, the state's put on condition of the version read, and the
    /// line's calls taken deleted.
    async fn update_gate(
        &self,
        name: &str,
        gate: &Gate,
        taken: &[Waiter],
    ) -> Result<(), StoreError> {
        let table = &self.settings.table;
        let mut item = key(gate_pk(name), "GATE".to_owned());
        item.insert("version".into(), n(gate.version + 1));
        item.insert(
            "state".into(),
            s(encode_json(&Gate {
                version: 0,
                ..gate.clone()
            })?),
        );
        let put = Put::builder()
            .table_name(table)
            .set_item(Some(item))
            .expression_attribute_names("#version", "version");
        let put = if gate.version == 0 {
            put.condition_expression("attribute_not_exists(#version)")
        } else {
            put.condition_expression("#version = :read")
                .expression_attribute_values(":read", n(gate.version))
        };
        let put = put.build().map_err(invalid)?;
        if taken.is_empty() {
            // Nothing leaves the line: a conditional put alone, at half a transaction's price.
            return conditional(
                self.client
                    .put_item()
                    .table_name(table)
                    .set_item(Some(put.item().clone()))
                    .set_condition_expression(put.condition_expression().map(str::to_owned))
                    .set_expression_attribute_names(put.expression_attribute_names().cloned())
                    .set_expression_attribute_values(put.expression_attribute_values().cloned())
                    .send()
                    .await,
            );
        }
        let mut transaction = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(put).build());
        for waiter in taken {
            let delete = Delete::builder()
                .table_name(table)
                .set_key(Some(key(gate_pk(name), line_sk(waiter))))
                .build()
                .map_err(invalid)?;
            transaction =
                transaction.transact_items(TransactWriteItem::builder().delete(delete).build());
        }
        match transaction.send().await {
            Ok(_) => Ok(()),
            Err(error) => Err(match cancellation_reasons(&error).as_slice() {
                [Some("ConditionalCheckFailed" | "TransactionConflict"), ..] => {
                    StoreError::Conflict
                }
                _ => unavailable(error),
            }),
        }
    }
}
