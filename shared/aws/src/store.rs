//! The state store on DynamoDB, one table:
//!
//! | pk               | sk          | what |
//! |------------------|-------------|------|
//! | `TASK#<id>`      | `TASK`      | the task's record, its version, the index keys below, and its order data when small |
//! | `TASK#<id>`      | `ORDER`     | order data too large to keep in the task's item, written with the task in one transaction |
//! | `WORKFLOW#<name>`| `V#<version>` | a workflow definition, as tasks started with it |
//! | `SECRET#cursor`  | `SECRET`    | the key that seals owners' listing cursors, drawn by the first process that needed it |
//! | `SETTINGS#lease-shards` | `SETTINGS` | the most expiry shards any process has written leases into (`most`) |
//!
//! Two sparse global secondary indexes, keys only: `expiry` (`lease_shard`,
//! `lease_expires`) holds the tasks with a live lease, spread over shards so that no
//! partition is hot, for the supervisor's sweep, and for listing the tasks in
//! flight (Pending, Processing, Compensating); `listing` (`listed_state`,
//! `listed_key`) holds the tasks in Error, for operators. A task in flight is
//! written to an index only when it enters or leaves it, or its lease moves to
//! another bucket: no index is rewritten at every step, and no index partition
//! takes every task's writes. A finished task gets an `expires_at` for DynamoDB's
//! TTL.
//!
//! Order data of at most [`INLINE_ORDER`] bytes is kept in the task's item: its
//! creation is one conditional PutItem (one write unit), not a transaction of two
//! items (four), and a step's update leaves it in place. Larger order data, and a
//! resubmission's, has an item of its own, so that no step pays for its bytes. Tasks
//! written before this layout (their order always apart) are read and written as
//! they are.
//!
//! Every write is conditional: a creation on the item's absence, an update on the
//! version read. Every attribute name goes through ExpressionAttributeNames.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeysAndAttributes, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
    Update,
};
use aws_types::SdkConfig;
use flate2::Compression;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use sas_lambda::config::{MAX_LEASE_SHARDS, TableSettings};
use sas_lambda::sdk::{SdkClient, sdk_client};
use tracing::error;

use sas_core::ports::{
    Chain, CursorKey, CursorKeyStore, Expired, ExpiredCursor, GateStore, LeaseIndex, LeaseKey,
    ShardProgress, StoreError, TaskListing, TaskPage, TaskStore, Unreadable, WorkflowStore,
};
use sas_domain::flow::{Gate, Waiter};
use sas_domain::ids::{TaskId, stable_hash};
use sas_domain::limits::MAX_ITEM;
use sas_domain::task::{Order, Task, TaskState};
use sas_domain::time::Timestamp;
use sas_domain::workflow::Workflow;

mod gates;

/// The condition of a task's rewrite: the version it was decided from, of the same
/// task. An id used again once its task expired names another task, whose versions
/// repeat the first's: a decision from the first (a response giving back its task
/// sealed) must not write over the second. Items written before `created_at` was
/// kept have none.
const SAME_TASK_AT_VERSION: &str =
    "#version = :expected AND (attribute_not_exists(#created_at) OR #created_at = :created_at)";

/// The name of the expiry index.
pub const EXPIRY_INDEX: &str = "expiry";
/// The name of the listing index.
pub const LISTING_INDEX: &str = "listing";
/// Index entries a listing of tasks in flight reads at most per page.
const IN_FLIGHT_READS: usize = 1000;

type Item = HashMap<String, AttributeValue>;

/// The most order data (its input as JSON) kept in the task's own item. Each of a
/// task's writes is billed by the kilobyte of the whole item, so inline order data
/// costs up to its share of a kilobyte at every step; at this size that is about
/// what the transaction it saves costs once (three write units).
pub const INLINE_ORDER: usize = 512;

/// The attributes of [`DynamoStore::task_item`] that a task may have or not: an
/// update in place removes those it does not set.
const OPTIONAL_ATTRIBUTES: [&str; 7] = [
    "LockedBy",
    "CompleteBy",
    "lease_shard",
    "lease_expires",
    "listed_state",
    "listed_key",
    "expires_at",
];

/// How a conditional rewrite of a task's item ended.
enum Rewrite {
    Written,
    /// A condition failed: the item as it was, when asked for and found.
    Refused(Option<Item>),
}

impl Rewrite {
    /// Written, or the version's race lost.
    fn written(self) -> Result<(), StoreError> {
        match self {
            Self::Written => Ok(()),
            Self::Refused(_) => Err(StoreError::Conflict),
        }
    }
}

/// A new expiry of a task's order data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OrderExpiry {
    /// Kept until a person acts on the task.
    Never,
    /// Deleted by the TTL after this.
    At(Timestamp),
}

/// The state store on a DynamoDB table.
pub struct DynamoStore {
    client: SdkClient<Client>,
    settings: TableSettings,
    /// The expiry shards that may hold leases, as last read; 0 before
    /// ([`DynamoStore::shards`]).
    shards: AtomicU32,
    /// Taken by the first reads of `shards`: the writes that come together at a
    /// process's start (a batch of ten) wait for the first one's read, and its raise
    /// of the count, rather than each read it and put it, a write unit each.
    first_shards_read: tokio::sync::Mutex<()>,
}

fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn unavailable<E, R>(error: SdkError<E, R>) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    StoreError::Unavailable(Box::new(error))
}

/// A conditional PutItem's outcome: a failed condition is the domain's conflict.
fn conditional<T>(
    result: Result<T, SdkError<PutItemError, HttpResponse>>,
) -> Result<(), StoreError> {
    match result {
        Ok(_) => Ok(()),
        Err(error)
            if error
                .as_service_error()
                .is_some_and(PutItemError::is_conditional_check_failed_exception) =>
        {
            Err(StoreError::Conflict)
        }
        Err(error) => Err(unavailable(error)),
    }
}

/// The code of each item's cancellation, in the order of the transaction's items,
/// when a transaction was cancelled.
fn cancellation_reasons(
    error: &SdkError<TransactWriteItemsError, HttpResponse>,
) -> Vec<Option<&str>> {
    match error.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(e)) => e
            .cancellation_reasons()
            .iter()
            .map(aws_sdk_dynamodb::types::CancellationReason::code)
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether an item's cancellation reason says another writer came first: its
/// condition on the version read failed, or another write to it was under way. The
/// writer reads again.
fn lost_the_race(reason: Option<&str>) -> bool {
    matches!(
        reason,
        Some("ConditionalCheckFailed" | "TransactionConflict")
    )
}

fn task_key(id: &TaskId) -> (String, String) {
    (format!("TASK#{id}"), "TASK".to_owned())
}

fn key(pk: String, sk: String) -> Item {
    HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))])
}

/// The key of the item that keeps the most expiry shards written into
/// ([`DynamoStore::shards`]).
const SHARDS: (&str, &str) = ("SETTINGS#lease-shards", "SETTINGS");

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

/// The expiry index entry of a task's lease in a shard: a query's start key.
fn expiry_entry(shard: usize, lease_end: i64, id: &TaskId) -> Item {
    let (pk, sk) = task_key(id);
    let mut entry = key(pk, sk);
    entry.insert("lease_shard".into(), s(format!("LEASE#{shard}")));
    entry.insert("lease_expires".into(), n(lease_end));
    entry
}

/// The expiry index entry a listing cursor names, and its shard.
fn listed_expiry_entry(cursor: &str) -> Result<(u32, Item), StoreError> {
    let invalid = || StoreError::InvalidCursor(cursor.to_owned());
    let mut parts = cursor.splitn(3, '/');
    let (Some(shard), Some(lease_end), Some(id)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid());
    };
    let shard: u32 = shard.parse().map_err(|_| invalid())?;
    let lease_end: i64 = lease_end.parse().map_err(|_| invalid())?;
    let id = TaskId::parse(id).map_err(|_| invalid())?;
    Ok((shard, expiry_entry(shard as usize, lease_end, &id)))
}

/// The lease an expiry index entry (a query's last evaluated key) holds.
fn lease_key_of(entry: &Item) -> Result<LeaseKey, StoreError> {
    let expires = entry
        .get("lease_expires")
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| StoreError::Corrupt("an expiry entry without its lease end".into()))?;
    Ok(LeaseKey {
        expires,
        task: task_id_of(entry)?,
    })
}

fn seconds(at: Timestamp) -> i64 {
    at.0 / 1000
}

impl DynamoStore {
    /// Puts `item`, on condition that no item has its key: [`StoreError::Conflict`]
    /// when one has.
    async fn put_new(&self, item: Item) -> Result<(), StoreError> {
        self.put_over(item, None).await
    }

    /// Puts `item` where no item has its key, or where the one there may be replaced:
    /// its `attribute` compares with `value` by `comparison` (`=`, `<`, ...).
    /// [`StoreError::Conflict`] otherwise.
    async fn put_over(
        &self,
        item: Item,
        replaceable: Option<(&str, &str, AttributeValue)>,
    ) -> Result<(), StoreError> {
        let put = self
            .client
            .put_item()
            .table_name(&self.settings.table)
            .set_item(Some(item))
            .expression_attribute_names("#pk", "pk");
        let put = match replaceable {
            None => put.condition_expression("attribute_not_exists(#pk)"),
            Some((attribute, comparison, value)) => put
                .condition_expression(format!(
                    "attribute_not_exists(#pk) OR #replaceable {comparison} :replaceable"
                ))
                .expression_attribute_names("#replaceable", attribute)
                .expression_attribute_values(":replaceable", value),
        };
        conditional(put.send().await)
    }

    /// A store on the table of `settings`.
    #[must_use]
    pub fn new(sdk: &SdkConfig, settings: TableSettings) -> Self {
        Self {
            client: sdk_client(sdk, Client::new),
            settings,
            shards: AtomicU32::new(0),
            first_shards_read: tokio::sync::Mutex::new(()),
        }
    }

    /// An item by its key, read consistently.
    async fn item(&self, pk: &str, sk: &str) -> Result<Option<Item>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.settings.table)
            .set_key(Some(key(pk.to_owned(), sk.to_owned())))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        Ok(output.item)
    }

    /// The expiry shards that may hold leases: the most that any process of this
    /// deployment has written leases into, kept in the table, raised to this
    /// process's `LEASE_SHARDS` before it writes a lease. A `LeaseShards` lowered on
    /// a running stack would otherwise leave the leases in the shards above its new
    /// count where no sweep reads them: tasks nobody would recover. Read once a
    /// process, as the count only grows; [`DynamoStore::shards_now`] reads it again.
    async fn shards(&self) -> Result<u32, StoreError> {
        let known = || match self.shards.load(Ordering::Relaxed) {
            0 => None,
            known => Some(known),
        };
        if let Some(known) = known() {
            return Ok(known);
        }
        let _first = self.first_shards_read.lock().await;
        match known() {
            Some(known) => Ok(known),
            None => self.shards_now().await,
        }
    }

    /// [`DynamoStore::shards`], read from the table now: a sweep's pass starts from
    /// it, so that a process that read it before a deployment with more shards
    /// reads their leases too.
    async fn shards_now(&self) -> Result<u32, StoreError> {
        let ours = self.settings.lease_shards.max(1);
        let kept = self.kept_shards().await?;
        let widest = if kept >= ours {
            kept
        } else {
            let mut item = key(SHARDS.0.to_owned(), SHARDS.1.to_owned());
            item.insert("most".to_owned(), n(ours));
            match self.put_over(item, Some(("most", "<", n(ours)))).await {
                Ok(()) => ours,
                // Raised meanwhile, by a process with more.
                Err(StoreError::Conflict) => self.kept_shards().await?.max(ours),
                Err(error) => return Err(error),
            }
        };
        self.shards.fetch_max(widest, Ordering::Relaxed);
        Ok(widest)
    }

    /// The expiry shards a listing reads: [`DynamoStore::shards`]'s, without raising
    /// the table's count to this process's. Only a process that writes a lease
    /// needs to, and a listing writes nothing (the API's read function may not):
    /// shards above the count the table keeps hold no lease yet.
    async fn shards_to_list(&self) -> Result<u32, StoreError> {
        if let known @ 1.. = self.shards.load(Ordering::Relaxed) {
            return Ok(known);
        }
        let (kept, ours) = (self.kept_shards().await?, self.settings.lease_shards.max(1));
        // Known now only if it covers this process's: a write's raise is still due.
        if kept >= ours {
            self.shards.fetch_max(kept, Ordering::Relaxed);
        }
        Ok(kept.max(ours))
    }

    /// The most expiry shards the table keeps as written into (0 before any lease).
    async fn kept_shards(&self) -> Result<u32, StoreError> {
        let Some(item) = self.item(SHARDS.0, SHARDS.1).await? else {
            return Ok(0);
        };
        item.get("most")
            .and_then(|v| v.as_n().ok())
            .and_then(|most| most.parse().ok())
            .filter(|most| (1..=MAX_LEASE_SHARDS).contains(most))
            .ok_or_else(|| {
                StoreError::Corrupt(
                    format!(
                        "{}'s `most` is not a count of expiry shards, 1 to {MAX_LEASE_SHARDS}: \
                         set it to the most LeaseShards ever deployed",
                        SHARDS.0
                    )
                    .into(),
                )
            })
    }

    /// The task's item: its record, the pattern's fields as attributes an operator
    /// can read in the console, and the sparse index keys.
    fn task_item(&self, task: &Task) -> Result<Item, StoreError> {
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
            item.insert("LockedBy".into(), s(locked_by.clone()));
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
        }
        if let Some(expiry) = self.task_expiry(task) {
            item.insert("expires_at".into(), n(seconds(expiry)));
        }
        within_item_limit(&task.id, item, INLINE_ORDER)
    }

    /// A rewrite of a task's item in place, on condition of its version: every
    /// attribute of [`Self::task_item`] set, the optional ones it leaves out removed,
    /// and order data kept in the item left as it is.
    fn update_in_place(&self, task: &Task) -> Result<Update, StoreError> {
        let mut item = self.task_item(task)?;
        let (pk, sk) = task_key(&task.id);
        item.remove("pk");
        item.remove("sk");
        let mut update = Update::builder()
            .table_name(&self.settings.table)
            .set_key(Some(key(pk, sk)))
            .condition_expression(SAME_TASK_AT_VERSION)
            .expression_attribute_names("#version", "version")
            .expression_attribute_names("#created_at", "created_at")
            .expression_attribute_values(":expected", n(task.version.saturating_sub(1)))
            .expression_attribute_values(":created_at", n(task.created_at.0));
        let mut removed = Vec::new();
        for (i, name) in OPTIONAL_ATTRIBUTES.iter().enumerate() {
            if !item.contains_key(*name) {
                update = update.expression_attribute_names(format!("#r{i}"), *name);
                removed.push(format!("#r{i}"));
            }
        }
        // Sorted, so that the same task makes the same request.
        let mut set: Vec<(String, AttributeValue)> = item.into_iter().collect();
        set.sort_by(|a, b| a.0.cmp(&b.0));
        let mut assignments = Vec::new();
        for (i, (name, value)) in set.into_iter().enumerate() {
            update = update
                .expression_attribute_names(format!("#s{i}"), name)
                .expression_attribute_values(format!(":s{i}"), value);
            assignments.push(format!("#s{i} = :s{i}"));
        }
        let mut expression = format!("SET {}", assignments.join(", "));
        if !removed.is_empty() {
            expression.push_str(&format!(" REMOVE {}", removed.join(", ")));
        }
        update
            .update_expression(expression)
            .build()
            .map_err(|e| StoreError::Unavailable(e.into()))
    }

    /// When DynamoDB's TTL may delete a task: a retention after it finished. Never
    /// while it runs, while its alert is unpublished (it keeps a lease), while it
    /// needs a person, nor while it is kept ([`kept`]).
    fn task_expiry(&self, task: &Task) -> Option<Timestamp> {
        (task.state.is_final() && task.complete_by.is_none() && !kept(task))
            .then(|| task.updated_at.plus(self.settings.retention))
    }

    /// When the order data written at a task's creation expires: twice the
    /// retention from then, which outlives a task that finishes within a retention.
    fn default_order_expiry(&self, task: &Task) -> Timestamp {
        task.created_at.plus(self.settings.retention * 2)
    }

    /// How a write of `task` must move its order data's expiry, so that the order
    /// never expires before its task: kept with a task that needs a person, and
    /// outliving a task that finishes late (a resubmitted one, or one that ran
    /// longer than a retention). `None`: the expiry given at creation holds.
    fn order_expiry_change(&self, task: &Task) -> Option<OrderExpiry> {
        if kept(task) {
            return Some(OrderExpiry::Never);
        }
        let expiry = self.task_expiry(task)?;
        (task.run > 1 || expiry > self.default_order_expiry(task))
            .then(|| OrderExpiry::At(expiry.plus(self.settings.retention)))
    }

    /// Replaces a task whose order data has an item of its own, on condition of its
    /// version, and moves the order's expiry in the same transaction. `Ok(false)`:
    /// the order has no item of its own, nothing written.
    async fn update_with_order_expiry(
        &self,
        task: &Task,
        expiry: OrderExpiry,
    ) -> Result<bool, StoreError> {
        let (pk, _) = task_key(&task.id);
        let update = Update::builder()
            .table_name(&self.settings.table)
            .set_key(Some(key(pk, "ORDER".into())))
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#expires", "expires_at");
        let update = match expiry {
            OrderExpiry::Never => update.update_expression("REMOVE #expires"),
            OrderExpiry::At(at) => update
                .update_expression("SET #expires = :at")
                .expression_attribute_values(":at", n(seconds(at))),
        };
        let update = update
            .build()
            .map_err(|e| StoreError::Unavailable(e.into()))?;
        let result = self
            .client
            .transact_write_items()
            .transact_items(
                TransactWriteItem::builder()
                    .update(self.update_in_place(task)?)
                    .build(),
            )
            .transact_items(TransactWriteItem::builder().update(update).build())
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(error) => match cancellation_reasons(&error).as_slice() {
                [task, ..] if lost_the_race(*task) => Err(StoreError::Conflict),
                [_, Some("ConditionalCheckFailed")] => Ok(false),
                _ => Err(unavailable(error)),
            },
        }
    }

    /// Rewrites a task's item in place ([`Self::update_in_place`]), on condition of
    /// its version and, with `order_inline`, of its order data being in the item.
    async fn rewrite(&self, task: &Task, order_inline: bool) -> Result<Rewrite, StoreError> {
        let update = self.update_in_place(task)?;
        let request = self
            .client
            .update_item()
            .table_name(update.table_name)
            .set_key(Some(update.key))
            .update_expression(update.update_expression)
            .set_expression_attribute_names(update.expression_attribute_names)
            .set_expression_attribute_values(update.expression_attribute_values);
        let request = match update.condition_expression {
            Some(condition) if order_inline => request
                .condition_expression(format!("{condition} AND attribute_exists(#input)"))
                .expression_attribute_names("#input", "input")
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                ),
            condition => request.set_condition_expression(condition),
        };
        match request.send().await {
            Ok(_) => Ok(Rewrite::Written),
            Err(error) => match error.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                    Ok(Rewrite::Refused(failed.item.clone()))
                }
                _ => Err(unavailable(error)),
            },
        }
    }

    /// The task's item put in a transaction, on condition of the version read.
    fn versioned_put(&self, task: &Task, item: Item) -> Result<TransactWriteItem, StoreError> {
        let put = Put::builder()
            .table_name(&self.settings.table)
            .set_item(Some(item))
            .condition_expression(SAME_TASK_AT_VERSION)
            .expression_attribute_names("#version", "version")
            .expression_attribute_names("#created_at", "created_at")
            .expression_attribute_values(":expected", n(task.version.saturating_sub(1)))
            .expression_attribute_values(":created_at", n(task.created_at.0))
            .build()
            .map_err(|e| StoreError::Unavailable(e.into()))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// The order data's own item: its input, the inputs it replaced, its expiry.
    fn order_item(
        &self,
        task: &Task,
        order: &Order,
        expiry: OrderExpiry,
    ) -> Result<Item, StoreError> {
        let (pk, _) = task_key(&task.id);
        let mut item = key(pk, "ORDER".into());
        item.insert("created_at".into(), n(task.created_at.0));
        item.insert("input".into(), s(encode_json(&order.input)?));
        if !order.earlier.is_empty() {
            item.insert("earlier".into(), s(encode_json(&order.earlier)?));
        }
        if let OrderExpiry::At(at) = expiry {
            item.insert("expires_at".into(), n(seconds(at)));
        }
        within_item_limit(&task.id, item, 0)
    }

    /// Tasks in Error, oldest first, from the listing index.
    async fn list_in_error(
        &self,
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        let query = self
            .client
            .query()
            .table_name(&self.settings.table)
            .index_name(LISTING_INDEX)
            .expression_attribute_names("#state", "listed_state")
            .expression_attribute_values(":state", s(TaskState::Error.as_str()))
            .limit(i32::try_from(limit + 1).unwrap_or(i32::MAX));
        if let Some(cursor) = after {
            TaskPage::parse_cursor(cursor)?;
        }
        // A key condition may not compare with an empty string: no cursor, no bound.
        let query = match after {
            Some(cursor) => query
                .key_condition_expression("#state = :state AND #key > :after")
                .expression_attribute_names("#key", "listed_key")
                .expression_attribute_values(":after", s(cursor)),
            None => query.key_condition_expression("#state = :state"),
        };
        let output = query.send().await.map_err(unavailable)?;
        let mut entries = output.items().to_vec();
        // One more than a page tells whether there is a next one: counted on the index
        // entries, so that a record left out (unreadable) does not end the listing.
        let more = entries.len() > limit;
        entries.truncate(limit);
        let next = match entries.last().filter(|_| more) {
            Some(last) => Some(attribute(last, "listed_key")?.to_owned()),
            None => None,
        };
        let ids = entries
            .iter()
            .map(task_id_of)
            .collect::<Result<Vec<_>, _>>()?;
        let tasks = self.tasks(ids).await?;
        Ok(TaskPage::by_creation(tasks, next))
    }

    /// Tasks in flight in `state`, from the expiry index, shard after shard, each in
    /// lease order. The cursor, `<shard>/<lease end>/<task id>`, is the index entry
    /// of the last task given, or of the last one read when `IN_FLIGHT_READS` entries
    /// were read without filling the page (a page may then be short, or empty, with a
    /// next one); a task whose lease moves while an operator pages may be given twice
    /// or not at all.
    async fn list_in_flight(
        &self,
        state: TaskState,
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        let (mut shard, mut start) = match after {
            Some(cursor) => {
                let (shard, entry) = listed_expiry_entry(cursor)?;
                (shard, Some(entry))
            }
            None => (0, None),
        };
        // Each task found, with the cursor naming its index entry; one more than a page
        // tells whether there is a next page.
        let mut found: Vec<(Task, String)> = Vec::new();
        let (mut read, mut last_read) = (0, None);
        let shards = self.shards_to_list().await?;
        while shard < shards && found.len() <= limit {
            if read >= IN_FLIGHT_READS {
                let (tasks, after) = found.into_iter().unzip();
                return Ok(TaskPage {
                    tasks,
                    next: last_read,
                    after,
                });
            }
            let output = self
                .client
                .query()
                .table_name(&self.settings.table)
                .index_name(EXPIRY_INDEX)
                .key_condition_expression("#shard = :shard")
                .expression_attribute_names("#shard", "lease_shard")
                .expression_attribute_values(":shard", s(format!("LEASE#{shard}")))
                .limit(i32::try_from(limit + 1).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(unavailable)?;
            let mut cursors: HashMap<String, String> = HashMap::new();
            let mut ids = Vec::new();
            for item in output.items() {
                let id = task_id_of(item)?;
                let lease_end = item
                    .get("lease_expires")
                    .and_then(|v| v.as_n().ok())
                    .ok_or_else(|| {
                        StoreError::Corrupt("an expiry entry without its lease end".into())
                    })?;
                let cursor = format!("{shard}/{lease_end}/{id}");
                last_read = Some(cursor.clone());
                cursors.insert(id.to_string(), cursor);
                ids.push(id);
            }
            read += ids.len();
            for task in self.tasks(ids).await? {
                if task.state == state && found.len() <= limit {
                    let cursor = cursors.remove(task.id.as_str()).unwrap_or_default();
                    found.push((task, cursor));
                }
            }
            match output.last_evaluated_key() {
                Some(last) => start = Some(last.clone()),
                None => shard += 1,
            }
        }
        let next = (found.len() > limit).then(|| {
            found.truncate(limit);
            found
                .last()
                .map(|(_, cursor)| cursor.clone())
                .unwrap_or_default()
        });
        let (tasks, after) = found.into_iter().unzip();
        Ok(TaskPage { tasks, next, after })
    }

    /// Reads tasks by id, consistently, in the order given; a record this version
    /// cannot read is left out (the supervisor quarantines those with a lease).
    async fn tasks(&self, ids: Vec<TaskId>) -> Result<Vec<Task>, StoreError> {
        Ok(self.read_tasks(ids).await?.0)
    }

    /// Reads tasks by id, consistently, in the order given, and names those whose
    /// records this version cannot read (each logged with why).
    async fn read_tasks(
        &self,
        ids: Vec<TaskId>,
    ) -> Result<(Vec<Task>, Vec<Unreadable>), StoreError> {
        let mut found: HashMap<String, Task> = HashMap::new();
        let mut unreadable = Vec::new();
        for chunk in ids.chunks(100) {
            let mut pending: Vec<Item> = chunk
                .iter()
                .map(|id| {
                    let (pk, sk) = task_key(id);
                    key(pk, sk)
                })
                .collect();
            while !pending.is_empty() {
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut pending)))
                    .consistent_read(true)
                    .projection_expression("#pk, #record, #version")
                    .expression_attribute_names("#pk", "pk")
                    .expression_attribute_names("#record", "record")
                    .expression_attribute_names("#version", "version")
                    .build()
                    .map_err(|e| StoreError::Unavailable(e.into()))?;
                let output = self
                    .client
                    .batch_get_item()
                    .request_items(&self.settings.table, request)
                    .send()
                    .await
                    .map_err(unavailable)?;
                for item in output
                    .responses()
                    .and_then(|r| r.get(&self.settings.table))
                    .into_iter()
                    .flatten()
                {
                    match decode_task(item) {
                        Ok(task) => {
                            found.insert(task.id.to_string(), task);
                        }
                        Err(error) => {
                            let id = task_id_of(item)?;
                            error!(task_id = %id, error = %Chain(&error), "a task record this version cannot read");
                            let version = item
                                .get("version")
                                .and_then(|v| v.as_n().ok())
                                .and_then(|v| v.parse().ok());
                            unreadable.push(Unreadable { id, version });
                        }
                    }
                }
                if let Some(retry) = output
                    .unprocessed_keys()
                    .and_then(|u| u.get(&self.settings.table))
                {
                    pending = retry.keys().to_vec();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        let tasks = ids
            .iter()
            .filter_map(|id| found.remove(id.as_str()))
            .collect();
        Ok((tasks, unreadable))
    }

    /// A task with its order data, in one query of the task's partition: a
    /// consistent read, or an eventually consistent one at half the read units.
    async fn read_task_with_order(
        &self,
        id: &TaskId,
        consistent: bool,
    ) -> Result<Option<(Task, Order)>, StoreError> {
        let (pk, _) = task_key(id);
        let output = self
            .client
            .query()
            .table_name(&self.settings.table)
            .key_condition_expression("#pk = :pk")
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_values(":pk", s(pk))
            .consistent_read(consistent)
            .send()
            .await
            .map_err(unavailable)?;
        let (mut task, mut inline, mut apart, mut apart_created_at) = (None, None, None, None);
        let order_of = |item: &Item| -> Result<Order, StoreError> {
            let earlier = match item.get("earlier") {
                Some(_) => decode_json(attribute(item, "earlier")?)?,
                None => Vec::new(),
            };
            Ok(Order {
                task_id: id.clone(),
                input: decode_json(attribute(item, "input")?)?,
                earlier,
            })
        };
        for item in output.items() {
            match attribute(item, "sk")? {
                "TASK" => {
                    task = Some(decode_task(item)?);
                    if item.contains_key("input") {
                        inline = Some(order_of(item)?);
                    }
                }
                "ORDER" => {
                    apart = Some(order_of(item)?);
                    apart_created_at = item.get("created_at").and_then(|v| v.as_n().ok());
                }
                _ => {}
            }
        }
        if let (Some(task), None, Some(created_at)) = (&task, &inline, apart_created_at)
            && *created_at != task.created_at.0.to_string()
        {
            // Written for a task of the same id that expired before its order: the
            // task's creation replaced it, in a transaction a read that is not
            // consistent (or one that raced it) may see half of.
            return match consistent {
                false => Ok(None),
                true => Err(StoreError::Unavailable(
                    format!("{id}'s order data is another task's: read while replaced").into(),
                )),
            };
        }
        // Order data in the task's item is the task's own: an item of its own beside
        // it is one a task of the same id left, expired before its order.
        Ok(task.zip(inline.or(apart)))
    }
}

fn attribute<'a>(item: &'a Item, name: &str) -> Result<&'a str, StoreError> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
        .ok_or_else(|| {
            StoreError::Corrupt(format!("item without the text attribute '{name}'").into())
        })
}

/// Whether a finished task is kept, with its order data, past any retention: it
/// needs a person, or it is a child task Processed, which its parent may yet have
/// undone (its record and input are what its compensations are made from).
fn kept(task: &Task) -> bool {
    task.needs_a_person() || (task.parent.is_some() && task.state == TaskState::Processed)
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
enum DecodeError {
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
fn decode_task(item: &Item) -> Result<Task, DecodeError> {
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
fn within_item_limit(id: &TaskId, item: Item, reserved: usize) -> Result<Item, StoreError> {
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

fn encode_json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.into()))
}

fn decode_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(e.into()))
}

fn task_id_of(item: &Item) -> Result<TaskId, StoreError> {
    let pk = attribute(item, "pk")?;
    pk.strip_prefix("TASK#")
        .and_then(|id| TaskId::parse(id).ok())
        .ok_or_else(|| StoreError::Corrupt(format!("'{pk}' is not a task key").into()))
}

#[async_trait]
impl TaskStore for DynamoStore {
    async fn create(&self, task: &Task, order: &Order) -> Result<(), StoreError> {
        // Each write that may give a task a lease counts this process's shards first.
        self.shards().await?;
        let input = encode_json(&order.input)?;
        if input.len() <= INLINE_ORDER && order.earlier.is_empty() {
            let mut item = self.task_item(task)?;
            item.insert("input".into(), s(input));
            return self.put_new(item).await;
        }
        let order_item = self.order_item(
            task,
            order,
            OrderExpiry::At(self.default_order_expiry(task)),
        )?;
        let put = |item: Item, absent: bool| {
            let put = Put::builder()
                .table_name(&self.settings.table)
                .set_item(Some(item));
            let put = if absent {
                put.condition_expression("attribute_not_exists(#pk)")
                    .expression_attribute_names("#pk", "pk")
            } else {
                put
            };
            put.build()
                .map(|put| TransactWriteItem::builder().put(put).build())
                .map_err(|e| StoreError::Unavailable(e.into()))
        };
        // The task's absence decides; order data left by a task that expired first
        // is replaced (with the condition on it, that id answered 503 until it went).
        let result = self
            .client
            .transact_write_items()
            .transact_items(put(self.task_item(task)?, true)?)
            .transact_items(put(order_item, false)?)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(error) => {
                if cancellation_reasons(&error).contains(&Some("ConditionalCheckFailed")) {
                    Err(StoreError::Conflict)
                } else {
                    Err(unavailable(error))
                }
            }
        }
    }

    async fn task(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        let (pk, sk) = task_key(id);
        let output = self
            .client
            .get_item()
            .table_name(&self.settings.table)
            .set_key(Some(key(pk, sk)))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        Ok(output.item().map(decode_task).transpose()?)
    }

    async fn task_with_order(&self, id: &TaskId) -> Result<Option<(Task, Order)>, StoreError> {
        self.read_task_with_order(id, true).await
    }

    async fn task_with_order_eventually_consistent(
        &self,
        id: &TaskId,
    ) -> Result<Option<(Task, Order)>, StoreError> {
        self.read_task_with_order(id, false).await
    }

    async fn update(&self, task: &Task) -> Result<(), StoreError> {
        self.shards().await?;
        let Some(order_expiry) = self.order_expiry_change(task) else {
            return self.rewrite(task, false).await?.written();
        };
        // Rare (a task that needs a person, a child Processed, one finishing late):
        // its order data must not expire before it. Kept in its item, it does not;
        // in an item of its own (the failed condition tells), its expiry is moved in
        // the same transaction as the task.
        match self.rewrite(task, true).await? {
            Rewrite::Written => return Ok(()),
            Rewrite::Refused(Some(old)) if !old.contains_key("input") => {}
            Rewrite::Refused(_) => return Err(StoreError::Conflict),
        }
        if self.update_with_order_expiry(task, order_expiry).await? {
            return Ok(());
        }
        // Its order data in neither (gone before this version kept it): the task alone.
        self.rewrite(task, false).await?.written()
    }

    /// A resubmission's new order data goes to an item of its own, with the inputs
    /// it replaced: the task's item is put without order data in it.
    async fn update_with_order(&self, task: &Task, order: &Order) -> Result<(), StoreError> {
        self.shards().await?;
        let expiry = self
            .order_expiry_change(task)
            .unwrap_or_else(|| OrderExpiry::At(self.default_order_expiry(task)));
        let order_item = TransactWriteItem::builder()
            .put(
                Put::builder()
                    .table_name(&self.settings.table)
                    .set_item(Some(self.order_item(task, order, expiry)?))
                    .build()
                    .map_err(|e| StoreError::Unavailable(e.into()))?,
            )
            .build();
        let result = self
            .client
            .transact_write_items()
            .transact_items(self.versioned_put(task, self.task_item(task)?)?)
            .transact_items(order_item)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(error) => match cancellation_reasons(&error).as_slice() {
                [task, ..] if lost_the_race(*task) => Err(StoreError::Conflict),
                _ => Err(unavailable(error)),
            },
        }
    }
}

#[async_trait]
impl TaskListing for DynamoStore {
    async fn list(
        &self,
        state: TaskState,
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        match state {
            TaskState::Error => self.list_in_error(limit, after).await,
            TaskState::Processed => Ok(TaskPage::by_creation(Vec::new(), None)),
            TaskState::Pending | TaskState::Processing | TaskState::Compensating => {
                self.list_in_flight(state, limit, after).await
            }
        }
    }
}

#[async_trait]
impl LeaseIndex for DynamoStore {
    async fn expired(
        &self,
        now: Timestamp,
        limit: usize,
        from: &ExpiredCursor,
    ) -> Result<Expired, StoreError> {
        // A pass starts from the count as the table has it now.
        let shards = if *from == ExpiredCursor::default() {
            self.shards_now().await?
        } else {
            self.shards().await?
        };
        let open: Vec<usize> = (0..shards as usize)
            .filter(|shard| *from.progress(*shard) != ShardProgress::Done)
            .collect();
        let mut next = from.clone();
        let mut ids = Vec::new();
        // The page's reads shared among the shards not read to their end, each going
        // on from where the pass left it: each expired lease read once a pass.
        for (nth, &shard) in open.iter().enumerate() {
            let share = limit / open.len() + usize::from(nth < limit % open.len());
            if share == 0 {
                continue;
            }
            let start = match from.progress(shard) {
                ShardProgress::After(key) => Some(expiry_entry(shard, key.expires, &key.task)),
                ShardProgress::Unread | ShardProgress::Done => None,
            };
            let output = self
                .client
                .query()
                .table_name(&self.settings.table)
                .index_name(EXPIRY_INDEX)
                .key_condition_expression("#shard = :shard AND #expires <= :now")
                .expression_attribute_names("#shard", "lease_shard")
                .expression_attribute_names("#expires", "lease_expires")
                .expression_attribute_values(":shard", s(format!("LEASE#{shard}")))
                .expression_attribute_values(":now", n(now.0))
                .limit(i32::try_from(share).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(unavailable)?;
            for item in output.items() {
                ids.push(task_id_of(item)?);
            }
            let progress = match output.last_evaluated_key() {
                Some(last) => ShardProgress::After(lease_key_of(last)?),
                None => ShardProgress::Done,
            };
            next.advance(shard, progress);
        }
        // The index is eventually consistent: read the tasks themselves, and keep
        // only those still expired.
        let (tasks, unreadable) = self.read_tasks(ids).await?;
        let mut tasks: Vec<Task> = tasks
            .into_iter()
            .filter(|t| t.sweep_at().is_some_and(|at| at <= now))
            .collect();
        tasks.sort_by_key(Task::sweep_at);
        let finished = open
            .iter()
            .all(|shard| *next.progress(*shard) == ShardProgress::Done);
        Ok(Expired {
            tasks,
            unreadable,
            next: (!finished).then_some(next),
        })
    }

    async fn quarantine(&self, record: &Unreadable) -> Result<(), StoreError> {
        let (pk, sk) = task_key(&record.id);
        let update = self
            .client
            .update_item()
            .table_name(&self.settings.table)
            .set_key(Some(key(pk, sk)))
            .update_expression("REMOVE #shard, #expires SET #quarantined = :yes")
            .expression_attribute_names("#shard", "lease_shard")
            .expression_attribute_names("#expires", "lease_expires")
            .expression_attribute_names("#quarantined", "quarantined")
            .expression_attribute_names("#version", "version")
            .expression_attribute_values(":yes", AttributeValue::Bool(true));
        let update = match record.version {
            Some(version) => update
                .condition_expression("attribute_exists(#shard) AND #version = :version")
                .expression_attribute_values(":version", n(version)),
            None => update.condition_expression(
                "attribute_exists(#shard) AND attribute_not_exists(#version)",
            ),
        };
        match update.send().await {
            Ok(_) => Ok(()),
            // Off the index already (quarantined by another sweep), or written since
            // it was read, by a process that can read it.
            Err(error)
                if error
                    .as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(error) => Err(unavailable(error)),
        }
    }
}

#[async_trait]
impl GateStore for DynamoStore {
    async fn gate(&self, gate: &str, first: usize) -> Result<(Gate, Vec<Waiter>), StoreError> {
        self.read_gate(gate, first).await
    }

    async fn enqueue(&self, waiter: &Waiter) -> Result<(), StoreError> {
        self.put_in_line(waiter).await
    }

    async fn update_gate(
        &self,
        name: &str,
        gate: &Gate,
        taken: &[Waiter],
    ) -> Result<(), StoreError> {
        self.write_gate(name, gate, taken).await
    }
}

#[async_trait]
impl CursorKeyStore for DynamoStore {
    async fn cursor_key(&self, drawn: CursorKey) -> Result<CursorKey, StoreError> {
        let kept = async || -> Result<Option<CursorKey>, StoreError> {
            let Some(item) = self.item("SECRET#cursor", "SECRET").await? else {
                return Ok(None);
            };
            item.get("secret")
                .and_then(|v| v.as_b().ok())
                .and_then(|secret| CursorKey::try_from(secret.as_ref()).ok())
                .map(Some)
                .ok_or_else(|| StoreError::Corrupt("a cursor key that is not 32 bytes".into()))
        };
        if let Some(key) = kept().await? {
            return Ok(key);
        }
        let mut item = key("SECRET#cursor".to_owned(), "SECRET".to_owned());
        item.insert("secret".to_owned(), AttributeValue::B(Blob::new(drawn)));
        match self.put_new(item).await {
            Ok(()) => Ok(drawn),
            Err(StoreError::Conflict) => kept().await?.ok_or_else(|| {
                StoreError::Corrupt("the cursor key, there a moment ago, is gone".into())
            }),
            Err(error) => Err(error),
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn order_data_expires_after_its_task_and_neither_while_a_person_is_needed_nor_a_processed_child()
     {
        use sas_domain::task::StepState;
        let sdk = sas_lambda::sdk::sdk_config(|name| match name {
            "AWS_REGION" => Some("eu-west-1".into()),
            "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY" => Some("test".into()),
            _ => None,
        })
        .expect("an SDK configuration");
        let day = Duration::from_secs(86_400);
        let store = DynamoStore::new(
            &sdk,
            TableSettings {
                table: "t".into(),
                lease_shards: 1,
                lease_bucket: Duration::ZERO,
                retention: day * 30,
            },
        );
        let workflow = sas_domain::workflow::Registry::built_in()
            .latest("drone-delivery")
            .expect("drone delivery");
        let submission = sas_domain::submission::Submission::new(
            TaskId::parse("t").expect("id"),
            serde_json::json!({}),
        );
        let created = Timestamp(1_800_000_000_000);
        let (task, _, _) = sas_domain::decide::submit(&workflow, submission, created);
        let finished = |at: Timestamp, f: &dyn Fn(&mut Task)| {
            let mut done = task.clone();
            done.state = TaskState::Processed;
            done.complete_by = None;
            done.updated_at = at;
            f(&mut done);
            done
        };

        let on_time = finished(created.plus(day), &|_| {});
        assert_eq!(store.task_expiry(&on_time), Some(created.plus(day * 31)));
        assert_eq!(
            store.order_expiry_change(&on_time),
            None,
            "the order's own expiry holds"
        );

        let late = finished(created.plus(day * 31), &|_| {});
        assert_eq!(
            store.order_expiry_change(&late),
            Some(OrderExpiry::At(created.plus(day * 91))),
            "moved past its task's"
        );
        let resubmitted = finished(created.plus(day), &|t| t.run = 2);
        assert_eq!(
            store.order_expiry_change(&resubmitted),
            Some(OrderExpiry::At(created.plus(day * 61)))
        );

        let needs_a_person = finished(created.plus(day), &|t| {
            t.state = TaskState::Error;
            t.steps[1].state = StepState::CompensationFailed;
        });
        assert_eq!(store.task_expiry(&needs_a_person), None);
        assert_eq!(
            store.order_expiry_change(&needs_a_person),
            Some(OrderExpiry::Never)
        );

        let alert_pending = finished(created.plus(day), &|t| {
            t.state = TaskState::Error;
            t.complete_by = Some(created.plus(day * 2));
        });
        assert_eq!(
            store.task_expiry(&alert_pending),
            None,
            "kept while its alert is due"
        );
        assert_eq!(store.order_expiry_change(&alert_pending), None);

        let link = sas_domain::task::ParentLink {
            task: TaskId::parse("p").expect("id"),
            step: 1,
            item: 0,
            run: 1,
        };
        let child_done = finished(created.plus(day), &|t| t.parent = Some(link.clone()));
        assert_eq!(
            (
                store.task_expiry(&child_done),
                store.order_expiry_change(&child_done)
            ),
            (None, Some(OrderExpiry::Never)),
            "a Processed child is kept: its parent may yet have it undone"
        );
        let child_undone = finished(created.plus(day), &|t| {
            t.parent = Some(link.clone());
            t.state = TaskState::Error;
        });
        assert_eq!(
            store.task_expiry(&child_undone),
            Some(created.plus(day * 31))
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
