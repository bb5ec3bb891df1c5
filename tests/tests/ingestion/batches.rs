//! Batches of submissions: accepted together, each task created and run, and a
//! buffered batch answering alone a submission its queue refused.

use std::sync::Arc;
use std::time::Duration;

use sas_api::{self as api, ApiRequest, Caller};
use sas_core::app::Ports;
use sas_core::ports::{OutgoingMessage, QueueError, Queues};
use sas_domain::ids::QueueName;
use sas_domain::workflow::Registry;
use sas_testkit::memory::Memory;
use sas_tests::{Buffering, Harness, delivery_input};
use serde_json::{Value, json};

use super::ingest_queue;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_accepted_together_and_each_of_its_tasks_created_and_run() {
    let harness = Harness::start_buffered(5).await;
    let named = |id: &str, input: Value| json!({"id": id, "workflow": "drone-delivery-quick", "input": input});
    let batch = json!({"tasks": [
        named("batched-1", delivery_input()),
        named("batched-bad", json!({})),
        named("batched-2", delivery_input()),
        named("batched-1", delivery_input()),
    ]});
    let (status, _, answer) = harness
        .call("POST", "/tasks/batch", Some(batch.to_string().as_bytes()))
        .await;
    assert_eq!(status, 200, "{answer:#}");
    let results = answer["results"].as_array().expect("results");
    let statuses: Vec<_> = results
        .iter()
        .map(|r| (r["status"].as_u64(), r["body"]["status"].as_str()))
        .collect();
    assert_eq!(
        statuses,
        [
            (Some(202), Some("accepted")),
            (Some(400), None),
            (Some(202), Some("accepted")),
            (Some(202), Some("accepted")),
        ],
        "{answer:#}"
    );
    assert_eq!(results[2]["location"], "/tasks/batched-2");
    assert_eq!(results[1]["body"]["error"]["field"], "input.customer_id");
    for id in ["batched-1", "batched-2"] {
        harness.settle_in(id, "Processed").await;
    }
    assert_eq!(
        harness.effects_of("batched-1").await.len(),
        5,
        "the repeat in the batch is the same task"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        harness.depth(&ingest_queue(&harness)).await,
        Default::default(),
        "nothing left, nothing queued for the refused one"
    );
}

/// Queues that refuse, of the messages of a send, those holding [`REFUSED`], and send
/// the others: a SendMessageBatch some of whose entries fail, which the SQS adapter
/// reports as the whole send failing.
struct RefusingSome(Arc<Memory>);

const REFUSED: &str = "refused-by-the-queue";

#[async_trait::async_trait]
impl Queues for RefusingSome {
    async fn send(
        &self,
        queue: &QueueName,
        messages: &[OutgoingMessage],
    ) -> Result<(), QueueError> {
        let (refused, sent): (Vec<_>, Vec<_>) = messages
            .iter()
            .cloned()
            .partition(|message| message.body.contains(REFUSED));
        self.0.send(queue, &sent).await?;
        if refused.is_empty() {
            Ok(())
        } else {
            Err(QueueError::new(queue, "throttled"))
        }
    }
}

/// In a buffered batch, a submission the queue refuses is answered as refused,
/// alone: the others are answered accepted, and exactly they are queued, so that
/// sending the refused one again (without an id, under a new one) makes no second
/// task of any other.
#[tokio::test]
async fn a_buffered_batch_answers_a_submission_the_queue_refused_alone() {
    let buffering = Buffering::new();
    let ports = Ports {
        queues: Arc::new(RefusingSome(Arc::clone(&buffering.memory))),
        ..buffering.ports()
    };
    let app = buffering.app_over(ports, Registry::built_in(), "submission");
    let unnamed = |customer: &str| {
        let mut input = delivery_input();
        input["customer_id"] = json!(customer);
        json!({"workflow": "drone-delivery", "input": input})
    };
    let batch = json!({"tasks": [unnamed("c-1"), unnamed(REFUSED), unnamed("c-3")]});
    let response = api::handle(
        &app,
        ApiRequest {
            caller: &Caller::Anyone,
            method: "POST",
            path: "/tasks/batch",
            query: None,
            body: batch.to_string().as_bytes(),
            target: None,
            trace: api::TraceHeaders::default(),
        },
    )
    .await;
    assert_eq!(response.status, 200, "{}", response.body);
    let answer: Value = serde_json::from_str(&response.body).expect("JSON");
    let results = answer["results"].as_array().expect("results");
    let statuses: Vec<_> = results.iter().map(|r| r["status"].as_u64()).collect();
    assert_eq!(statuses, [Some(202), Some(503), Some(202)], "{answer:#}");
    let accepted: Vec<String> = results
        .iter()
        .filter_map(|r| r["location"].as_str())
        .map(|location| location.trim_start_matches("/tasks/").to_owned())
        .collect();
    let queued = buffering.memory.messages(&buffering.ingest);
    assert_eq!(queued.len(), 2, "the refused one is not queued");
    for id in &accepted {
        assert!(
            queued.iter().any(|m| m.body.contains(id.as_str())),
            "{id} was answered accepted and is queued"
        );
    }
}
