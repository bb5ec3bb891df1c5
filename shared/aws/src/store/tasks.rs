//! The tasks and their order data ([`TaskStore`]): created, read one at a time or
//! in batches, and rewritten on condition of the version read.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeysAndAttributes, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
    Update,
};
use tracing::error;

use sas_core::ports::{Chain, StoreError, TaskStore, Unreadable};
use sas_domain::ids::TaskId;
use sas_domain::task::{Order, Task};

use super::DynamoStore;
use super::orders::{INLINE_ORDER, OrderExpiry};
use super::requests::{
    Item, attribute, cancellation_reasons, decode_json, encode_json, key, lost_the_race, n, s,
    unavailable,
};
use super::task_item::{OPTIONAL_ATTRIBUTES, decode_task, task_id_of, task_key};

/// The condition of a task's rewrite: the version it was decided from, of the same
/// task. An id used again once its task expired names another task, whose versions
/// repeat the first's: a decision from the first (a response giving back its task
/// sealed) must not write over the second. Items written before `created_at` was
/// kept have none.
const SAME_TASK_AT_VERSION: &str =
    "#version = :expected AND (attribute_not_exists(#created_at) OR #created_at = :created_at)";

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

impl DynamoStore {
    /// A rewrite of a task's item in place, on condition of its version: every
    /// attribute of [`Self::task_item`] set, the optional ones it leaves out removed,
    /// and order data kept in the item left as it is.
    pub(super) fn update_in_place(&self, task: &Task) -> Result<Update, StoreError> {
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

    /// Rewrites a task's item in place ([`Self::update_in_place`]), on condition of
    /// its version and, with `order_inline`, of its order data being in the item.
    async fn rewrite(&self, task: &Task, order_inline: bool) -> Result<Rewrite, StoreError> {
        let pages = self.event_pages(task)?;
        if !pages.is_empty() {
            return self.rewrite_with_events(task, order_inline, pages).await;
        }
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

    /// [`Self::rewrite`] of a write that made history events: the task's update and
    /// their items in one transaction.
    async fn rewrite_with_events(
        &self,
        task: &Task,
        order_inline: bool,
        pages: Vec<TransactWriteItem>,
    ) -> Result<Rewrite, StoreError> {
        let mut update = self.update_in_place(task)?;
        if order_inline {
            update.condition_expression = (update.condition_expression)
                .map(|condition| format!("{condition} AND attribute_exists(#input)"));
            (update.expression_attribute_names.get_or_insert_default())
                .insert("#input".to_owned(), "input".to_owned());
            update.return_values_on_condition_check_failure =
                Some(ReturnValuesOnConditionCheckFailure::AllOld);
        }
        let mut items = vec![TransactWriteItem::builder().update(update).build()];
        items.extend(pages);
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        let Err(error) = result else {
            return Ok(Rewrite::Written);
        };
        let refused = match error.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => {
                cancelled.cancellation_reasons().first().cloned()
            }
            _ => None,
        };
        match refused {
            Some(reason) if lost_the_race(reason.code()) => {
                Ok(Rewrite::Refused(reason.item().cloned()))
            }
            _ => Err(unavailable(error)),
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

    /// Reads tasks by id, consistently, in the order given; a record this version
    /// cannot read is left out (the supervisor quarantines those with a lease).
    pub(super) async fn tasks(&self, ids: Vec<TaskId>) -> Result<Vec<Task>, StoreError> {
        Ok(self.read_tasks(ids).await?.0)
    }

    /// Reads tasks by id, consistently, in the order given, and names those whose
    /// records this version cannot read (each logged with why).
    pub(super) async fn read_tasks(
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

#[async_trait]
impl TaskStore for DynamoStore {
    async fn create(&self, task: &Task, order: &Order) -> Result<(), StoreError> {
        // Each write that may give a task a lease counts this process's shards first.
        self.shards().await?;
        let input = encode_json(&order.input)?;
        let pages = self.event_pages(task)?;
        let inline = input.len() <= INLINE_ORDER && order.earlier.is_empty();
        let mut item = self.task_item(task)?;
        if inline {
            item.insert("input".into(), s(input));
            if pages.is_empty() {
                return self.put_new(item).await;
            }
        }
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
        let mut items = vec![put(item, true)?];
        if !inline {
            let expiry = OrderExpiry::At(self.default_order_expiry(task));
            items.push(put(self.order_item(task, order, expiry)?, false)?);
        }
        items.extend(pages);
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
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
        let mut items = vec![self.versioned_put(task, self.task_item(task)?)?, order_item];
        items.extend(self.event_pages(task)?);
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
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
