//! The conformance suite of the ports: what every adapter of the state store and of
//! the queues must do, as the actors expect AWS to. Each adapter crate runs it on
//! itself: [`state_store`] on a store, [`queues()`] on a queue and its dead-letter
//! queue.
//!
//! A file for each port: `tasks`, `listing` (and `activities`, the index of the
//! visits offered to workers), `leases`, `workflows`, `cursor_key`, `gates`, `history`
//! for the state store's, `queues` for the queues and the consumer.

use std::sync::Arc;

use sas_core::ports::{Consumer, Queues, StateStore};
use sas_domain::decide::submit;
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::submission::Submission;
use sas_domain::task::{Order, Task};
use sas_domain::time::Timestamp;
use sas_domain::workflow::{Registry, Workflow};

use crate::delivery_input;

mod activities;
mod cursor_key;
mod gates;
mod history;
mod leases;
mod listing;
mod queues;
mod tasks;
mod workflows;

pub use queues::WorkQueue;

/// The state store's conformance: conditional writes and transactions, the sweep's
/// reads, listings, workflow versions, the cursor key and gates.
///
/// # Panics
/// Where the store does not conform.
pub async fn state_store(store: &dyn StateStore) {
    // In this order: the listings page through the tasks the tests before them left.
    tasks::conditional_writes_and_transactions(store).await;
    leases::the_sweep_reads_expired_leases_only(store).await;
    listing::the_pages_cover_a_state_each_task_once(store).await;
    leases::a_pass_reads_each_expired_lease_once(store).await;
    workflows::workflow_versions_are_kept(store).await;
    workflows::registrations_are_written_on_condition(store).await;
    cursor_key::the_first_cursor_key_is_kept(store).await;
    gates::gates_are_versioned_and_their_lines_ordered(store).await;
    gates::a_gate_keyed_by_a_long_value_is_kept(store).await;
    activities::offered_visits_are_listed_until_taken(store).await;
    history::histories_are_kept_with_their_writes_and_paged(store).await;
    listing::tasks_are_found_by_their_attributes(store).await;
}

/// Both suites, on a backend that is its own store, sender and consumer.
///
/// # Panics
/// Where the backend does not conform.
pub async fn backend<B>(backend: Arc<B>, work: QueueName, dead_letters: QueueName)
where
    B: StateStore + Queues + Consumer + 'static,
{
    state_store(backend.as_ref()).await;
    queues(&WorkQueue {
        queues: Arc::clone(&backend) as _,
        consumer: backend,
        work,
        dead_letters,
    })
    .await;
}

/// The queues' conformance: batches, concurrent senders, delays, visibility timeouts,
/// receive counts and dead-lettering, as SQS has them, and each message's trace.
///
/// # Panics
/// Where the queues do not conform.
pub async fn queues(queue: &WorkQueue) {
    queues::queues_behave_like_sqs(queue).await;
    queues::messages_carry_their_trace(queue).await;
}

fn drone() -> Arc<Workflow> {
    Registry::built_in()
        .latest("drone-delivery")
        .expect("drone")
}

fn new_task(id: &str, now: Timestamp) -> (Task, Order) {
    let submission = Submission::new(TaskId::parse(id).expect("id"), delivery_input());
    let (task, order, _) = submit(&drone(), submission, now);
    (task, order)
}

/// `task` changed as a decision would: its version bumped.
fn changed(task: &Task, change: impl FnOnce(&mut Task)) -> Task {
    let mut next = task.clone();
    next.version += 1;
    change(&mut next);
    next
}
