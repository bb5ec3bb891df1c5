//! The expiry index ([`LeaseIndex`]): the supervisor's pass over the expired
//! leases, shard by shard, and the quarantine of records this version cannot read.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;

use sas_core::ports::{
    Expired, ExpiredCursor, LeaseIndex, LeaseKey, ShardProgress, StoreError, Unreadable,
};
use sas_domain::ids::TaskId;
use sas_domain::task::Task;
use sas_domain::time::Timestamp;

use super::requests::{Item, key, n, s, unavailable};
use super::task_item::{task_id_of, task_key};
use super::{DynamoStore, EXPIRY_INDEX};

/// The expiry index entry of a task's lease in a shard: a query's start key.
pub(super) fn expiry_entry(shard: usize, lease_end: i64, id: &TaskId) -> Item {
    let (pk, sk) = task_key(id);
    let mut entry = key(pk, sk);
    entry.insert("lease_shard".into(), s(format!("LEASE#{shard}")));
    entry.insert("lease_expires".into(), n(lease_end));
    entry
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
