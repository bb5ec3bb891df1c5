//! The listings of tasks by state ([`TaskListing`]): those in Error from the
//! listing index, those in flight from the expiry index.

use std::collections::HashMap;

use async_trait::async_trait;

use sas_core::ports::{StoreError, TaskListing, TaskPage};
use sas_domain::ids::TaskId;
use sas_domain::task::{Task, TaskState};

use super::attributes::attribute_partition;
use super::leases::expiry_entry;
use super::requests::{Item, attribute, s, unavailable};
use super::task_item::{offered_key, task_id_of};
use super::{DynamoStore, EXPIRY_INDEX, LISTING_INDEX};

/// Index entries a listing of tasks in flight reads at most per page.
const IN_FLIGHT_READS: usize = 1000;

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

impl DynamoStore {
    /// A page of up to `limit` tasks from the entries of one partition of `index`
    /// (the table's own keys for `None`): those whose `partition` attribute has its
    /// value, by their `sort` key, a listing cursor (creation, then id), after
    /// `after`. One entry more than a page tells whether there is a next one:
    /// counted on the entries, so that a record left out (unreadable, or gone) does
    /// not end the listing.
    pub(super) async fn keyed_page(
        &self,
        index: Option<&str>,
        partition: (&str, String),
        sort: &str,
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        if let Some(cursor) = after {
            TaskPage::parse_cursor(cursor)?;
        }
        let query = (self.client.query())
            .table_name(&self.settings.table)
            .set_index_name(index.map(str::to_owned))
            .expression_attribute_names("#partition", partition.0)
            .expression_attribute_values(":partition", s(partition.1))
            .limit(i32::try_from(limit + 1).unwrap_or(i32::MAX));
        // A key condition may not compare with an empty string: no cursor, no bound.
        let query = match after {
            Some(cursor) => query
                .key_condition_expression("#partition = :partition AND #sort > :after")
                .expression_attribute_names("#sort", sort)
                .expression_attribute_values(":after", s(cursor)),
            None => query.key_condition_expression("#partition = :partition"),
        };
        let output = query.send().await.map_err(unavailable)?;
        let mut entries = output.items().to_vec();
        let more = entries.len() > limit;
        entries.truncate(limit);
        let cursors = (entries.iter())
            .map(|entry| attribute(entry, sort))
            .collect::<Result<Vec<_>, _>>()?;
        let next = cursors.last().filter(|_| more).map(|c| (*c).to_owned());
        let ids = (cursors.iter())
            .map(|cursor| {
                let (_, id) = TaskPage::parse_cursor(cursor)?;
                TaskId::parse(id).map_err(|e| StoreError::Corrupt(e.into()))
            })
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
            TaskState::Error => {
                let partition = ("listed_state", TaskState::Error.as_str().to_owned());
                (self.keyed_page(Some(LISTING_INDEX), partition, "listed_key", limit, after)).await
            }
            TaskState::Processed => Ok(TaskPage::by_creation(Vec::new(), None)),
            TaskState::Pending | TaskState::Processing | TaskState::Compensating => {
                self.list_in_flight(state, limit, after).await
            }
        }
    }

    async fn index_attributes(
        &self,
        task: &Task,
        changed: &[(String, String)],
    ) -> Result<(), StoreError> {
        self.put_attribute_entries(task, changed).await
    }

    async fn with_attribute(
        &self,
        name: &str,
        value: &str,
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        let partition = ("pk", attribute_partition(name, value));
        self.keyed_page(None, partition, "sk", limit, after).await
    }

    async fn offered(&self, activity: &str, limit: usize) -> Result<Vec<TaskId>, StoreError> {
        let output = self
            .client
            .query()
            .table_name(&self.settings.table)
            .index_name(LISTING_INDEX)
            .key_condition_expression("#state = :state")
            .expression_attribute_names("#state", "listed_state")
            .expression_attribute_values(":state", s(offered_key(activity)))
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(unavailable)?;
        output.items().iter().map(task_id_of).collect()
    }
}
