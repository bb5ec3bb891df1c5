//! The embedded backend's own behaviour, beyond the ports' conformance suite: its
//! state store (`store`), its queues (`queues`), its database file (`database`) and
//! its writer's commits (`writer`); here, what they share.

use std::sync::Arc;
use std::time::Duration;

use sas_core::ports::{Consumer, Delivery, OutgoingMessage, Queues, TaskStore};
use sas_domain::decide::submit;
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::submission::Submission;
use sas_domain::task::{Order, Task};
use sas_domain::time::Timestamp;
use sas_domain::workflow::Registry;
use sas_testkit::ManualClock;

use crate::{Durability, Embedded};

mod database;
mod queues;
mod store;
mod writer;

fn open(dir: &tempfile::TempDir, clock: Arc<ManualClock>) -> Embedded {
    Embedded::open(&dir.path().join("sas.db"), clock, Durability::Full).expect("open")
}

/// A store in a new directory, on a clock stopped at 0; the directory goes with it,
/// as the database is deleted when it is dropped.
fn fresh() -> (tempfile::TempDir, Embedded) {
    let dir = tempfile::tempdir().expect("dir");
    let store = open(&dir, Arc::new(ManualClock::new(Timestamp(0))));
    (dir, store)
}

fn new_task(id: &str, now: Timestamp) -> (Task, Order) {
    let workflow = Registry::built_in()
        .latest("order-processing")
        .expect("order");
    let submission = Submission::new(
        TaskId::parse(id).expect("id"),
        serde_json::json!({"order_id": id}),
    );
    let (task, order, _) = submit(&workflow, submission, now);
    (task, order)
}

/// Creates `count` new tasks, `<prefix><n>`.
async fn create_tasks(store: &Embedded, prefix: &str, count: usize) {
    for n in 0..count {
        let (task, order) = new_task(&format!("{prefix}{n}"), Timestamp(0));
        store.create(&task, &order).await.expect("created");
    }
}

/// Sends one message of `body`, visible at once.
async fn send_now(store: &Embedded, queue: &QueueName, body: &str) {
    let message = OutgoingMessage {
        body: body.into(),
        delay: Duration::ZERO,
        trace: None,
    };
    store.send(queue, &[message]).await.expect("sent");
}

async fn receive_now(store: &Embedded, queue: &QueueName) -> Vec<Delivery> {
    store
        .receive(queue, 10, Duration::ZERO)
        .await
        .expect("receive")
}

/// The committed rows of `sql` (a count), read on a connection of its own, opened as
/// the store opens its own: another process could not open the database while the
/// store has it, and a connection through another VFS would give back the lock the
/// process holds on it.
fn committed_count(dir: &tempfile::TempDir, sql: &str) -> i64 {
    let reader = crate::connect(&dir.path().join("sas.db")).expect("reader");
    reader.query_row(sql, [], |row| row.get(0)).expect("count")
}
