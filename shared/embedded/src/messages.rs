//! The message index: the queues' messages in memory, beside their rows.

use std::collections::BTreeSet;

use foldhash::HashMap;

use sas_domain::trace::TraceContext;

use crate::QueueSettings;

/// The queues' messages in memory, beside their rows: a receive, which only
/// changes a message's visibility and receive count, is served from memory without
/// a write, but for a message loaded at a restart (see [`Message::recovered`]).
/// Messages are written when sent and deleted (or dead-lettered) on disk too; after a
/// restart they are all visible at once.
#[derive(Default)]
pub(crate) struct Messages {
    pub(crate) settings: HashMap<String, QueueSettings>,
    /// (visible at, id) of each queue's messages, in the order they become visible.
    pub(crate) ready: HashMap<String, BTreeSet<(i64, i64)>>,
    pub(crate) by_id: HashMap<i64, Message>,
}

pub(crate) struct Message {
    pub(crate) queue: String,
    pub(crate) body: String,
    pub(crate) visible_at: i64,
    pub(crate) receive_count: u32,
    /// Loaded at the store's opening, visible by then: it may have been in flight
    /// when the process stopped, perhaps because its handler brought the process
    /// down. Its receive
    /// count is written, and committed, before each of its deliveries, so that a
    /// message that aborts the process at every delivery still reaches its
    /// dead-letter queue across restarts. Other messages' counts stay in memory (a
    /// handler's panic or error is counted without a write).
    pub(crate) recovered: bool,
    /// The span it came from.
    pub(crate) trace: Option<TraceContext>,
}

impl Messages {
    pub(crate) fn insert(&mut self, id: i64, message: Message) {
        self.ready
            .entry(message.queue.clone())
            .or_default()
            .insert((message.visible_at, id));
        self.by_id.insert(id, message);
    }

    pub(crate) fn remove(&mut self, id: i64) -> Option<Message> {
        let message = self.by_id.remove(&id)?;
        if let Some(ready) = self.ready.get_mut(&message.queue) {
            ready.remove(&(message.visible_at, id));
        }
        Some(message)
    }
}
