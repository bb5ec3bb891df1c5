//! The histories of state machines' executions ([`ExecutionHistory`]): the events a
//! task's write made, in items of their own partition (`HISTORY#<id>`, apart from the
//! task's, which its reads query whole), put in the transaction that writes the task.
//! A write's events are one item (more where they pass [`PAGE_BYTES`]), keyed by its
//! first event's id (`E#<20 digits>`): a write is one item more, not one per event.
//!
//! A history item expires, through the table's TTL, an execution's longest run (a
//! year) and the tasks' retention after it was written.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem};

use sas_core::ports::{ExecutionHistory, HistoryPage, StoreError};
use sas_domain::ids::TaskId;
use sas_domain::machine::history::{HistoryEvent, WrittenEvent};
use sas_domain::task::Task;

use super::DynamoStore;
use super::requests::{Item, attribute, decode_json, encode_json, n, s, unavailable};
use super::task_item::seconds;

/// The most bytes of events an item holds (an item holds 400 KB).
const PAGE_BYTES: usize = 300 * 1024;

/// The longest an execution runs, which its history outlives.
const LONGEST_RUN: Duration = Duration::from_secs(365 * 86_400);

/// The key of the history item whose first event is `first`.
fn page_key(task: &TaskId, first: u64) -> (String, String) {
    (format!("HISTORY#{task}"), format!("E#{first:020}"))
}

impl DynamoStore {
    /// The puts of the history events `task`'s write made: none for a write that made
    /// none.
    pub(super) fn event_pages(&self, task: &Task) -> Result<Vec<TransactWriteItem>, StoreError> {
        let events = task
            .machine
            .as_deref()
            .map_or(&[][..], |run| &run.new_events);
        let mut pages: Vec<Vec<&WrittenEvent>> = Vec::new();
        let mut bytes = 0;
        for event in events {
            match pages.last_mut() {
                Some(page) if bytes + event.size() <= PAGE_BYTES => page.push(event),
                _ => {
                    pages.push(vec![event]);
                    bytes = 0;
                }
            }
            bytes += event.size();
        }
        let expires = task.updated_at.plus(LONGEST_RUN + self.settings.retention);
        pages
            .into_iter()
            .map(|page| {
                let (pk, sk) = page_key(&task.id, page[0].id);
                let item: Item = [
                    ("pk".to_owned(), s(pk)),
                    ("sk".to_owned(), s(sk)),
                    ("events".to_owned(), s(encode_json(&page)?)),
                    ("expires_at".to_owned(), n(seconds(expires))),
                ]
                .into();
                let put = Put::builder()
                    .table_name(&self.settings.table)
                    .set_item(Some(item))
                    .build()
                    .map_err(|e| StoreError::Unavailable(e.into()))?;
                Ok(TransactWriteItem::builder().put(put).build())
            })
            .collect()
    }

    /// Up to `limit` history items of `task` from the key `from` (inclusive), in the
    /// order of their keys, or the reverse.
    async fn history_items(
        &self,
        task: &TaskId,
        from: u64,
        forward: bool,
        limit: Option<i32>,
        start: Option<Item>,
    ) -> Result<(Vec<Item>, Option<Item>), StoreError> {
        let (pk, sk) = page_key(task, from);
        let comparison = if forward { ">=" } else { "<=" };
        let output = self
            .client
            .query()
            .table_name(&self.settings.table)
            .key_condition_expression(format!("#pk = :pk AND #sk {comparison} :sk"))
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#sk", "sk")
            .expression_attribute_values(":pk", s(pk))
            .expression_attribute_values(":sk", s(sk))
            .scan_index_forward(forward)
            .consistent_read(true)
            .set_limit(limit)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(unavailable)?;
        Ok((
            output.items().to_vec(),
            output.last_evaluated_key().cloned(),
        ))
    }
}

/// The events an item holds.
fn events_of(item: &Item) -> Result<Vec<HistoryEvent>, StoreError> {
    decode_json(attribute(item, "events")?)
}

#[async_trait]
impl ExecutionHistory for DynamoStore {
    async fn history(
        &self,
        task: &TaskId,
        page: HistoryPage,
    ) -> Result<Vec<HistoryEvent>, StoreError> {
        // The item that holds the first event wanted: the last whose first is at or
        // before it (in the reverse order, the items from the first wanted down).
        let (forward, wanted) = match (page.reverse, page.after) {
            (false, after) => (true, after.map_or(0, |a| a + 1)),
            (true, after) => (false, after.map_or(u64::MAX, |a| a.saturating_sub(1))),
        };
        let from = if forward {
            let (holding, _) = self
                .history_items(task, wanted, false, Some(1), None)
                .await?;
            match holding.first() {
                Some(item) => events_of(item)?.first().map_or(wanted, |e| e.id),
                None => 0,
            }
        } else {
            wanted
        };
        let mut found = Vec::new();
        let mut start = None;
        loop {
            let (items, next) = self.history_items(task, from, forward, None, start).await?;
            for item in &items {
                let mut events = events_of(item)?;
                if !forward {
                    events.reverse();
                }
                let wanted = |event: &HistoryEvent| {
                    if forward {
                        event.id >= wanted
                    } else {
                        event.id <= wanted
                    }
                };
                found.extend(events.into_iter().filter(wanted));
                if found.len() >= page.limit {
                    found.truncate(page.limit);
                    return Ok(found);
                }
            }
            match next {
                Some(key) => start = Some(key),
                None => return Ok(found),
            }
        }
    }
}
