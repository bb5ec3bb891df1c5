//! A task as its item keeps it: the record deflated, the attributes an operator
//! reads, the sparse index keys and the TTL's expiry; and the record read back.

use std::time::Duration;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use flate2::Compression;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;

use sas_core::ports::{StoreError, TaskPage};
use sas_domain::ids::{TaskId, stable_hash};
use sas_domain::limits::MAX_ITEM;
use sas_domain::machine::activities;
use sas_domain::payload::ValueScope;
use sas_domain::task::{Task, TaskState};
use sas_domain::time::Timestamp;

use super::DynamoStore;
use super::orders::INLINE_ORDER;
use super::requests::{Item, attribute, key, n, s};

/// The attributes of [`DynamoStore::task_item`] that a task may have or not: an
/// update in place removes those it does not set.
pub(super) const OPTIONAL_ATTRIBUTES: [&str; 7] = [
    "LockedBy",
    "CompleteBy",
    "lease_shard",
    "lease_expires",
    "listed_state",
    "listed_key",
    "expires_at",
];

/// The listing index's key of the tasks offering a visit on `activity`, longest
/// offered first ([`activities::offer`]).
pub(super) fn offered_key(activity: &str) -> String {
    format!("ACTIVITY#{activity}")
}

pub(super) fn task_key(id: &TaskId) -> (String, String) {
    (format!("TASK#{id}"), "TASK".to_owned())
}

/// The scope of the values of the task whose item had the keys `pk` and `sk`, created
/// at `created`; `None` for another item.
#[must_use]
pub fn task_scope(pk: &str, sk: &str, created: Option<Timestamp>) -> Option<ValueScope> {
    let id = (pk.strip_prefix("TASK#"))
        .filter(|_| sk == "TASK")
        .and_then(|id| TaskId::parse(id).ok())?;
    Some(ValueScope::Task {
        id,
        created: created?,
    })
}

pub(super) fn task_id_of(item: &Item) -> Result<TaskId, StoreError> {
    let pk = attribute(item, "pk")?;
    pk.strip_prefix("TASK#")
        .and_then(|id| TaskId::parse(id).ok())
        .ok_or_else(|| StoreError::Corrupt(format!("'{pk}' is not a task key").into()))
}

/// The expiry index's partition for a task: a stable hash of its id.
fn lease_shard(id: &TaskId, shards: u32) -> String {
    format!("LEASE#{}", stable_hash(id.as_str()) % shards.max(1))
}

/// The end of the bucket that `at` falls in, buckets of width `bucket` counted from
/// `origin`, the task's creation (`at` itself when the bucket is zero). Counted from
/// the creation, not from the epoch, a task's leases fall in its first bucket while it
/// runs within a bucket of its creation, wherever in the minute it was created: the
/// claim does not move its entry from the pickup lease's bucket, nor a later step from
/// an earlier step's.
fn bucket_end(at: Timestamp, origin: Timestamp, bucket: Duration) -> i64 {
    let width = i64::try_from(bucket.as_millis()).unwrap_or(i64::MAX);
    if width <= 1 {
        return at.0;
    }
    let buckets = -(origin.0 - at.0).div_euclid(width);
    origin.0 + buckets * width
}

pub(super) fn seconds(at: Timestamp) -> i64 {
    at.0 / 1000
}

/// Whether a finished task is kept, with its order data, past any retention: it
/// needs a person, or it is a child task Processed, which its parent may yet have
/// undone (its record and input are what its compensations are made from).
pub(super) fn kept(task: &Task) -> bool {
    task.needs_a_person() || (task.parent.is_some() && task.state == TaskState::Processed)
}

impl DynamoStore {
    /// The task's item: its record, the pattern's fields as attributes an operator
    /// can read in the console, and the sparse index keys.
    pub(super) fn task_item(&self, task: &Task) -> Result<Item, StoreError> {
        let (pk, sk) = task_key(&task.id);
        let mut item = key(pk, sk);
        item.insert("version".into(), n(task.version));
        item.insert(
            "record".into(),
            AttributeValue::B(Blob::new(compress(task)?)),
        );
        item.insert("ProcessState".into(), s(task.state.as_str()));
        item.insert("FailureCount".into(), n(task.failure_count));
        item.insert("created_at".into(), n(task.created_at.0));
        if let Some(locked_by) = &task.locked_by {
            item.insert("LockedBy".into(), s(locked_by.to_string()));
        }
        if let Some(complete_by) = task.complete_by {
            item.insert("CompleteBy".into(), n(complete_by.0));
            item.insert(
                "lease_shard".into(),
                s(lease_shard(&task.id, self.settings.lease_shards)),
            );
            item.insert(
                "lease_expires".into(),
                n(bucket_end(
                    task.sweep_at().unwrap_or(complete_by),
                    task.created_at,
                    self.settings.lease_bucket,
                )),
            );
        }
        if task.state == TaskState::Error {
            item.insert("listed_state".into(), s(task.state.as_str()));
            item.insert("listed_key".into(), s(TaskPage::cursor_after(task)));
        } else if let Some(offer) = activities::offer(task) {
            item.insert("listed_state".into(), s(offered_key(offer.activity)));
            item.insert(
                "listed_key".into(),
                s(format!("{:015}.{}", offer.since.0, task.id)),
            );
        }
        if let Some(expiry) = self.task_expiry(task) {
            item.insert("expires_at".into(), n(seconds(expiry)));
        }
        within_item_limit(&task.id, item, INLINE_ORDER)
    }

    /// When DynamoDB's TTL may delete a task: a retention after it finished. Never
    /// while it runs, while its alert is unpublished (it keeps a lease), while it
    /// needs a person, nor while it is kept ([`kept`]).
    pub(super) fn task_expiry(&self, task: &Task) -> Option<Timestamp> {
        (task.state.is_final() && task.complete_by.is_none() && !kept(task))
            .then(|| task.updated_at.plus(self.settings.retention))
    }
}

/// The task's record as stored: its JSON, deflated. A task's item is billed by the
/// kilobyte at every write; the record, most of the item, shrinks to about a third,
/// and a five-step task stays within one write unit.
fn compress(task: &Task) -> Result<Vec<u8>, StoreError> {
    let corrupt = |e: std::io::Error| StoreError::Corrupt(e.into());
    let mut encoder = DeflateEncoder::new(Vec::new(), Compression::default());
    serde_json::to_writer(&mut encoder, task).map_err(|e| StoreError::Corrupt(e.into()))?;
    encoder.finish().map_err(corrupt)
}

/// Why a task's item could not be read: told apart in the log, for the person who
/// looks at a quarantined record.
#[derive(Debug, thiserror::Error)]
pub(super) enum DecodeError {
    /// Not a record at all: not deflated JSON, or none.
    #[error("garbled task record: {0}")]
    Garbled(String),
    /// Well-formed JSON that is not a task as this version knows one: a newer
    /// version's, left by a rollback.
    #[error("task record of an unknown shape")]
    Unknown(#[source] serde_json::Error),
}

impl From<DecodeError> for StoreError {
    fn from(error: DecodeError) -> Self {
        Self::Corrupt(Box::new(error))
    }
}

/// The task of an item: its record deflated, or (as first written) plain JSON.
pub(super) fn decode_task(item: &Item) -> Result<Task, DecodeError> {
    let classify = |e: serde_json::Error| match e.classify() {
        serde_json::error::Category::Data => DecodeError::Unknown(e),
        _ => DecodeError::Garbled(e.to_string()),
    };
    match item.get("record") {
        Some(AttributeValue::B(deflated)) => {
            serde_json::from_reader(DeflateDecoder::new(deflated.as_ref())).map_err(classify)
        }
        Some(AttributeValue::S(json)) => serde_json::from_str(json).map_err(classify),
        _ => Err(DecodeError::Garbled("item without its record".into())),
    }
}

/// The item, if DynamoDB takes it: at most [`MAX_ITEM`] bytes of names and values
/// (an over-estimate: numbers are counted as their text).
/// `reserved` bytes are left for what may join the item later (order data).
pub(super) fn within_item_limit(
    id: &TaskId,
    item: Item,
    reserved: usize,
) -> Result<Item, StoreError> {
    let size: usize = item
        .iter()
        .map(|(name, value)| {
            name.len()
                + match value {
                    AttributeValue::S(text) | AttributeValue::N(text) => text.len(),
                    AttributeValue::B(bytes) => bytes.as_ref().len(),
                    _ => 1,
                }
        })
        .sum();
    if size + reserved > MAX_ITEM {
        return Err(StoreError::TooLarge(format!(
            "task {id}: an item of {size} bytes is over the {MAX_ITEM} DynamoDB takes"
        )));
    }
    Ok(item)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use aws_sdk_dynamodb::primitives::Blob;
    use aws_sdk_dynamodb::types::AttributeValue;
    use sas_domain::ids::TaskId;
    use sas_domain::time::Timestamp;

    use super::{DecodeError, bucket_end, compress, decode_task};

    #[test]
    fn a_lease_ends_at_the_end_of_its_tasks_bucket() {
        let bucket = Duration::from_secs(10);
        let created = Timestamp(23_000);
        let end = |at| bucket_end(Timestamp(at), created, bucket);
        assert_eq!(end(23_000), 23_000);
        assert_eq!(end(23_001), 33_000);
        assert_eq!(
            (end(26_000), end(32_999), end(33_000)),
            (33_000, 33_000, 33_000),
            "one bucket from the creation, whatever the epoch's buckets"
        );
        assert_eq!(end(33_001), 43_000);
        assert_eq!(
            end(21_000),
            23_000,
            "an end before the creation: a clock skew"
        );
        assert_eq!(
            bucket_end(Timestamp(29_999), created, Duration::ZERO),
            29_999,
            "no bucket: the exact end"
        );
    }

    #[test]
    fn a_record_is_read_deflated_or_as_first_written() {
        let workflow = sas_domain::workflow::Registry::built_in()
            .latest("drone-delivery")
            .expect("drone delivery");
        let submission = sas_domain::submission::Submission::new(
            TaskId::parse("kept").expect("id"),
            serde_json::json!({}),
        );
        let (task, _, _) = sas_domain::decide::submit(&workflow, submission, Timestamp(0));
        let deflated = compress(&task).expect("deflated");
        let json = serde_json::to_string(&task).expect("json");
        assert!(
            deflated.len() * 2 < json.len(),
            "deflate halves it at least"
        );
        let item = |record| HashMap::from([("record".to_owned(), record)]);
        assert_eq!(
            decode_task(&item(AttributeValue::B(Blob::new(deflated)))).expect("deflated"),
            task
        );
        assert_eq!(
            decode_task(&item(AttributeValue::S(json))).expect("plain"),
            task
        );
        assert!(matches!(
            decode_task(&item(AttributeValue::N("1".into()))),
            Err(DecodeError::Garbled(_))
        ));
        assert!(
            matches!(
                decode_task(&item(AttributeValue::S(
                    r#"{"id": "t", "state": "Teleported"}"#.into()
                ))),
                Err(DecodeError::Unknown(_))
            ),
            "well formed, of another version's shape: told apart from garbage in the log"
        );
    }
}
