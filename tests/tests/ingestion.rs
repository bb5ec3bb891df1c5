//! Ingestion on the local system. Direct: the process, its own scheduler, creates a
//! submission's task claimed, its creation its claim; a repeat whose first messages
//! were lost sends them again. Buffered: a submission is checked and queued, then
//! created by the scheduler. A repeat is the same task; a different request for the
//! same id, too late for a 409, is refused on the task and told; a message delivered
//! twice creates one task; a creation whose messages were lost sends them when its
//! message comes again. Submissions that come together store their workflow's
//! definition once. (A kill -9 between acceptance and creation, and in the middle of
//! a batch: `functions/local/tests/kill_restart.rs`.)
//!
//! The tests, by theme, each a module of `ingestion/`: [`direct`], [`buffered`],
//! [`batches`] and [`waits`]; this file holds the helpers they share.

#[path = "ingestion/batches.rs"]
mod batches;
#[path = "ingestion/buffered.rs"]
mod buffered;
#[path = "ingestion/direct.rs"]
mod direct;
#[path = "ingestion/waits.rs"]
mod waits;

use std::time::Duration;

use sas_core::ports::TaskStore;
use sas_domain::ids::QueueName;
use sas_domain::task::TaskState;
use sas_tests::{Buffering, Harness, delivery_input};
use serde_json::{Value, json};

fn quick(notify: Option<&str>) -> Value {
    json!({ "workflow": "drone-delivery-quick", "input": delivery_input(), "notify": notify })
}

/// The queue of buffered submissions of a harness.
fn ingest_queue(harness: &Harness) -> QueueName {
    harness.running.system.ingest.clone()
}

/// A task created claimed by `creator` (its request and its lease's deadline message
/// sent), its creator dead before those sends (they are dropped here), and `repeat`,
/// its request again: the first repeat sends them again, the same attempt, and
/// writes nothing; once the task has moved on, a repeat sends nothing.
async fn a_repeat_sends_the_lost_first_messages_again(
    buffering: &Buffering,
    creator: &str,
    mut repeat: impl AsyncFnMut(),
) {
    let (clock, memory, names, _) = buffering.parts();
    let sent = |queue: &QueueName| memory.messages(queue);
    let (request, deadline) = (sent(&names.agent_requests), sent(&names.scheduler));
    assert_eq!((request.len(), deadline.len()), (1, 1));
    memory.drop_message(&names.agent_requests, request[0].id);
    memory.drop_message(&names.scheduler, deadline[0].id);

    clock.advance(Duration::from_secs(1));
    repeat().await;
    let bodies =
        |queue: &QueueName| -> Vec<String> { sent(queue).into_iter().map(|m| m.body).collect() };
    assert_eq!(
        bodies(&names.agent_requests),
        [request[0].body.clone()],
        "the first step's request, the same attempt, sent again"
    );
    assert_eq!(bodies(&names.scheduler), [deadline[0].body.clone()]);
    let task = memory.tasks().pop().expect("the task");
    assert_eq!(
        (task.state, task.version, task.locked_by.as_deref()),
        (TaskState::Processing, 2, Some(creator)),
        "nothing written again: the creation and its claim, one write"
    );

    memory.drop_message(&names.agent_requests, sent(&names.agent_requests)[0].id);
    let mut moved = task.clone();
    moved.version += 1;
    TaskStore::update(memory.as_ref(), &moved)
        .await
        .expect("moved on");
    repeat().await;
    assert!(bodies(&names.agent_requests).is_empty());
}
