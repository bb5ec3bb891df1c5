//! The queues' conformance ([`Queues`], [`Consumer`]): as SQS behaves.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use sas_core::ports::{Consumer, Delivery, OutgoingMessage, Queues};
use sas_domain::ids::QueueName;
use sas_domain::trace::TraceContext;

/// A work queue under test, with a visibility timeout of 1 s and dead-lettered to
/// `dead_letters` after 2 receives, and the adapters that send to it and receive
/// from it.
pub struct WorkQueue {
    /// Sends to the queue.
    pub queues: Arc<dyn Queues>,
    /// Receives from the queue.
    pub consumer: Arc<dyn Consumer>,
    /// The work queue.
    pub work: QueueName,
    /// Its dead-letter queue.
    pub dead_letters: QueueName,
}

/// What the work queue hands out at once, without waiting.
async fn receive_now(under_test: &WorkQueue) -> Vec<Delivery> {
    under_test
        .consumer
        .receive(&under_test.work, 10, Duration::ZERO)
        .await
        .expect("receive")
}

async fn receive_all(under_test: &WorkQueue, queue: &QueueName, expected: usize) -> Vec<Delivery> {
    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while received.len() < expected && tokio::time::Instant::now() < deadline {
        received.extend(
            under_test
                .consumer
                .receive(queue, 10, Duration::from_millis(200))
                .await
                .expect("receive"),
        );
    }
    received
}

async fn delete_all(under_test: &WorkQueue, deliveries: &[Delivery]) {
    for delivery in deliveries {
        under_test
            .consumer
            .delete(&under_test.work, &delivery.receipt)
            .await
            .expect("delete");
    }
}

pub(super) async fn queues_behave_like_sqs(under_test: &WorkQueue) {
    let message = |body: String, delay| OutgoingMessage {
        body,
        delay,
        trace: None,
    };
    let batch: Vec<_> = (0..15)
        .map(|i| message(format!("m{i}"), Duration::ZERO))
        .collect();
    under_test
        .queues
        .send(&under_test.work, &batch)
        .await
        .expect("a batch of 15");
    let received = receive_all(under_test, &under_test.work, 15).await;
    let bodies: BTreeSet<_> = received.iter().map(|m| m.body.clone()).collect();
    assert_eq!(bodies.len(), 15, "every message of the batch, once");
    delete_all(under_test, &received).await;

    // Concurrent senders (on SQS, they share requests): each is answered, and every
    // message arrives once.
    let senders = (0..25).map(|i| {
        let (queues, work) = (Arc::clone(&under_test.queues), under_test.work.clone());
        tokio::spawn(async move {
            let messages = [message(format!("c{i}"), Duration::ZERO)];
            queues.send(&work, &messages).await
        })
    });
    for sender in senders.collect::<Vec<_>>() {
        sender.await.expect("sender").expect("a concurrent send");
    }
    let received = receive_all(under_test, &under_test.work, 25).await;
    let bodies: BTreeSet<_> = received.iter().map(|m| m.body.clone()).collect();
    assert_eq!(
        (received.len(), bodies.len()),
        (25, 25),
        "every concurrent message, once"
    );
    delete_all(under_test, &received).await;

    under_test
        .queues
        .send(
            &under_test.work,
            &[message("delayed".into(), Duration::from_secs(2))],
        )
        .await
        .expect("sent");
    assert!(receive_now(under_test).await.is_empty(), "delayed");
    let delayed = receive_all(under_test, &under_test.work, 1).await;
    assert_eq!(delayed[0].body, "delayed", "visible after its delay");
    under_test
        .consumer
        .delete(&under_test.work, &delayed[0].receipt)
        .await
        .expect("delete");

    under_test
        .queues
        .send(
            &under_test.work,
            &[message("poison".into(), Duration::ZERO)],
        )
        .await
        .expect("sent");
    let first = receive_all(under_test, &under_test.work, 1).await;
    assert_eq!(
        (first[0].body.as_str(), first[0].receive_count),
        ("poison", 1)
    );
    assert!(receive_now(under_test).await.is_empty(), "in flight");
    let second = receive_all(under_test, &under_test.work, 1).await;
    assert_eq!(
        second[0].receive_count, 2,
        "delivered again after the visibility timeout"
    );
    // As in SQS, the message moves when a receive finds it past maxReceiveCount.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let third = receive_now(under_test).await;
    assert!(
        third.is_empty(),
        "a third receive dead-letters it: {third:?}"
    );
    let dead = receive_all(under_test, &under_test.dead_letters, 1).await;
    assert_eq!(
        dead[0].body, "poison",
        "after maxReceiveCount receives, in the dead-letter queue"
    );
}

/// A message keeps the trace it was sent in (`traceparent` and `tracestate`), and one
/// sent in none comes in none.
pub(super) async fn messages_carry_their_trace(under_test: &WorkQueue) {
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let trace = TraceContext::of_headers(Some(traceparent), Some("vendor=value"));
    let traced = OutgoingMessage::text("traced".into(), Duration::ZERO)
        .traced(trace.clone().expect("a valid traceparent"));
    let untraced = OutgoingMessage::text("untraced".into(), Duration::ZERO);
    under_test
        .queues
        .send(&under_test.work, &[traced, untraced])
        .await
        .expect("sent");
    let received = receive_all(under_test, &under_test.work, 2).await;
    let trace_of = |body: &str| {
        let found = received.iter().find(|m| m.body == body);
        found.expect("received").trace.clone()
    };
    assert_eq!(trace_of("traced"), trace, "the trace it was sent in");
    assert_eq!(trace_of("untraced"), None);
    delete_all(under_test, &received).await;
}
