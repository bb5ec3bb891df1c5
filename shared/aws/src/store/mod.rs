//! The state store on DynamoDB, one table:
//!
//! | pk               | sk          | what |
//! |------------------|-------------|------|
//! | `TASK#<id>`      | `TASK`      | the task's record, its version, the index keys below, and its order data when small |
//! | `TASK#<id>`      | `ORDER`     | order data too large to keep in the task's item, written with the task in one transaction |
//! | `WORKFLOW#<name>`| `V#<version>` | a workflow definition, as tasks started with it |
//! | `SECRET#cursor`  | `SECRET`    | the key that seals owners' listing cursors, drawn by the first process that needed it |
//! | `SETTINGS#lease-shards` | `SETTINGS` | the most expiry shards any process has written leases into (`most`) |
//! | `HISTORY#<id>`   | `E#<first event id>` | a state machine's execution's history events of one write (`history`) |
//!
//! Two sparse global secondary indexes, keys only: `expiry` (`lease_shard`,
//! `lease_expires`) holds the tasks with a live lease, spread over shards so that no
//! partition is hot, for the supervisor's sweep, and for listing the tasks in
//! flight (Pending, Processing, Compensating); `listing` (`listed_state`,
//! `listed_key`) holds the tasks in Error, for operators, and the tasks whose visit of
//! a Task on an activity no worker has taken (`ACTIVITY#<name>`), for the workers. A task in flight is
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
//!
//! Here: [`DynamoStore`] and the indexes' names; `requests` (what every item's
//! requests share), `task_item` (a task as its item keeps it), `orders` (order
//! data, in the task's item or apart, and its expiry), `shards` (how many expiry
//! shards hold leases), and a file for each port of the state store: `tasks`,
//! `listing`, `leases`, `gates`, `cursor_key`, `workflows`, `history`.

use std::sync::atomic::AtomicU32;

use aws_sdk_dynamodb::Client;
use aws_types::SdkConfig;
use sas_lambda::config::TableSettings;
use sas_lambda::sdk::{SdkClient, sdk_client};

mod attributes;
mod cursor_key;
mod gates;
mod history;
mod leases;
mod listing;
mod orders;
mod requests;
mod shards;
mod task_item;
mod tasks;
mod workflows;

pub use orders::INLINE_ORDER;
pub use task_item::task_scope;

/// The name of the expiry index.
pub const EXPIRY_INDEX: &str = "expiry";

/// The name of the listing index.
pub const LISTING_INDEX: &str = "listing";

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

impl DynamoStore {
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
}
