//! A task's order data: in the task's item when small, else in an item of its own
//! whose expiry follows its task's.

use aws_sdk_dynamodb::types::{TransactWriteItem, Update};

use sas_core::ports::StoreError;
use sas_domain::task::{Order, Task};
use sas_domain::time::Timestamp;

use super::DynamoStore;
use super::requests::{
    Item, cancellation_reasons, encode_json, key, lost_the_race, n, s, unavailable,
};
use super::task_item::{kept, seconds, task_key, within_item_limit};

/// The most order data (its input as JSON) kept in the task's own item. Each of a
/// task's writes is billed by the kilobyte of the whole item, so inline order data
/// costs up to its share of a kilobyte at every step; at this size that is about
/// what the transaction it saves costs once (three write units).
pub const INLINE_ORDER: usize = 512;

/// A new expiry of a task's order data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OrderExpiry {
    /// Kept until a person acts on the task.
    Never,
    /// Deleted by the TTL after this.
    At(Timestamp),
}

impl DynamoStore {
    /// When the order data written at a task's creation expires: twice the
    /// retention from then, which outlives a task that finishes within a retention.
    pub(super) fn default_order_expiry(&self, task: &Task) -> Timestamp {
        task.created_at.plus(self.settings.retention * 2)
    }

    /// How a write of `task` must move its order data's expiry, so that the order
    /// never expires before its task: kept with a task that needs a person, and
    /// outliving a task that finishes late (a resubmitted one, or one that ran
    /// longer than a retention). `None`: the expiry given at creation holds.
    pub(super) fn order_expiry_change(&self, task: &Task) -> Option<OrderExpiry> {
        if kept(task) {
            return Some(OrderExpiry::Never);
        }
        let expiry = self.task_expiry(task)?;
        (task.run > 1 || expiry > self.default_order_expiry(task))
            .then(|| OrderExpiry::At(expiry.plus(self.settings.retention)))
    }

    /// The order data's own item: its input, the inputs it replaced, its expiry.
    pub(super) fn order_item(
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

    /// Replaces a task whose order data has an item of its own, on condition of its
    /// version, and moves the order's expiry in the same transaction. `Ok(false)`:
    /// the order has no item of its own, nothing written.
    pub(super) async fn update_with_order_expiry(
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
        let mut items = vec![
            TransactWriteItem::builder()
                .update(self.update_in_place(task)?)
                .build(),
            TransactWriteItem::builder().update(update).build(),
        ];
        items.extend(self.event_pages(task)?);
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
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
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sas_domain::ids::TaskId;
    use sas_domain::task::{Task, TaskState};
    use sas_domain::time::Timestamp;
    use sas_lambda::config::TableSettings;

    use super::OrderExpiry;
    use crate::store::DynamoStore;

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
            scope: None,
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
}
