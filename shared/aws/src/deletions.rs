//! The tasks DynamoDB deleted (its TTL, a retention after they finished), as the
//! table's stream tells them, and their values deleted with them. A task created again
//! under the same id has values of its own: the scope names the deleted one's
//! creation ([`ValueScope`]).

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Value, json};
use tracing::{info, warn};

use sas_core::ports::PayloadError;
use sas_domain::payload::ValueScope;
use sas_domain::time::Timestamp;
use sas_lambda::payloads::S3Payloads;

use crate::store::task_scope;

/// A DynamoDB stream's batch, as Lambda hands it: of each record, what tells a task's
/// deletion.
#[derive(Deserialize)]
struct StreamBatch {
    #[serde(rename = "Records")]
    records: Vec<StreamRecord>,
}

#[derive(Deserialize)]
struct StreamRecord {
    #[serde(rename = "eventSource")]
    source: String,
    #[serde(rename = "eventName")]
    name: String,
    dynamodb: Change,
}

#[derive(Deserialize)]
struct Change {
    #[serde(rename = "Keys")]
    keys: HashMap<String, Attribute>,
    #[serde(rename = "OldImage", default)]
    old_image: HashMap<String, Attribute>,
}

/// An attribute in DynamoDB's JSON: its string or its number, the others left.
#[derive(Deserialize)]
struct Attribute {
    #[serde(rename = "S")]
    string: Option<String>,
    #[serde(rename = "N")]
    number: Option<String>,
}

/// The batch in `payload`, if it is a DynamoDB stream's.
fn stream_batch(payload: &Value) -> Option<StreamBatch> {
    let batch: StreamBatch = serde_json::from_value(payload.clone()).ok()?;
    let first = batch.records.first()?;
    (first.source == "aws:dynamodb").then_some(batch)
}

/// The scopes of the tasks the batch's records delete.
fn deleted(batch: &StreamBatch) -> Vec<ValueScope> {
    let text =
        |map: &HashMap<String, Attribute>, name: &str| map.get(name).and_then(|a| a.string.clone());
    let mut scopes = Vec::new();
    for record in batch.records.iter().filter(|r| r.name == "REMOVE") {
        let (Some(pk), Some(sk)) = (
            text(&record.dynamodb.keys, "pk"),
            text(&record.dynamodb.keys, "sk"),
        ) else {
            continue;
        };
        let created = (record.dynamodb.old_image.get("created_at"))
            .and_then(|a| a.number.as_deref()?.parse().ok())
            .map(Timestamp);
        match (task_scope(&pk, &sk, created), created) {
            (Some(scope), _) => scopes.push(scope),
            (None, None) if sk == "TASK" => {
                warn!(
                    key = pk,
                    "a task's deletion without its creation: its values are left to the bucket's lifecycle"
                );
            }
            (None, _) => {}
        }
    }
    scopes
}

/// Deletes the values of the tasks a DynamoDB stream's batch in `payload` deletes;
/// `None` when `payload` is not such a batch. The count deleted, as the answer.
///
/// # Errors
/// [`PayloadError`] when a value cannot be deleted: the batch is retried.
pub async fn forget_deleted(
    payloads: &S3Payloads,
    payload: &Value,
) -> Option<Result<Value, PayloadError>> {
    let batch = stream_batch(payload)?;
    Some(
        async {
            let mut values = 0;
            let tasks = deleted(&batch);
            for scope in &tasks {
                values += payloads.forget(scope).await?;
            }
            info!(tasks = tasks.len(), values, "deleted tasks' values deleted");
            Ok(json!({ "tasks": tasks.len(), "values": values }))
        }
        .await,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tasks_removal_names_its_scope_and_nothing_else_does() {
        let record = |name: &str, pk: &str, sk: &str, created: Option<&str>| {
            let mut record = json!({
                "eventSource": "aws:dynamodb", "eventName": name,
                "dynamodb": { "Keys": { "pk": {"S": pk}, "sk": {"S": sk} } },
            });
            if let Some(created) = created {
                record["dynamodb"]["OldImage"] =
                    json!({ "created_at": {"N": created}, "record": {"B": "eJw="} });
            }
            record
        };
        let payload = json!({ "Records": [
            record("REMOVE", "TASK#order-1", "TASK", Some("1700000000123")),
            record("MODIFY", "TASK#order-2", "TASK", Some("1700000000000")),
            record("REMOVE", "ORDER#order-3", "ORDER", Some("1700000000000")),
            record("REMOVE", "TASK#order-4", "TASK", None),
            record("REMOVE", "TASK#not an id", "TASK", Some("1")),
        ]});
        let batch = stream_batch(&payload).expect("a stream's batch");
        let scopes: Vec<String> = deleted(&batch).iter().map(ValueScope::prefix).collect();
        assert_eq!(scopes, ["tasks/order-1/1700000000123/"]);
        assert!(stream_batch(&json!({"source": "aws.events"})).is_none());
        assert!(stream_batch(&json!({"schedule": "nightly"})).is_none());
    }
}
