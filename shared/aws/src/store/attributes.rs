//! Tasks by their search attributes: an item an attribute's value a task had
//! (`ATTR#<name>#<value>`, sorted by the task's creation then id), put before the
//! write that gives the value to its record; read a page at a time as a listing is
//! ([`DynamoStore::keyed_page`]), and each task checked by the search. An entry whose value the task no longer has is
//! passed over, and expires with the retention.

use std::time::Duration;

use sas_core::ports::{StoreError, TaskPage};
use sas_domain::task::Task;

use super::DynamoStore;
use super::requests::{key, n, unavailable};
use super::task_item::seconds;

/// How long past its task's retention an entry is kept at most: the longest a task
/// runs, and more.
const OUTLIVES_RETENTION: Duration = Duration::from_secs(400 * 86_400);

/// The partition of the entries of the tasks whose attribute `name` had `value`.
pub(super) fn attribute_partition(name: &str, value: &str) -> String {
    format!("ATTR#{name}#{value}")
}

impl DynamoStore {
    /// Puts `task`'s entries for its attributes `changed`, one item each.
    pub(super) async fn put_attribute_entries(
        &self,
        task: &Task,
        changed: &[(String, String)],
    ) -> Result<(), StoreError> {
        let expires = task
            .created_at
            .plus(self.settings.retention + OUTLIVES_RETENTION);
        for (name, value) in changed {
            let mut item = key(
                attribute_partition(name, value),
                TaskPage::cursor_after(task),
            );
            item.insert("expires_at".into(), n(seconds(expires)));
            (self.client.put_item())
                .table_name(&self.settings.table)
                .set_item(Some(item))
                .send()
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }
}
