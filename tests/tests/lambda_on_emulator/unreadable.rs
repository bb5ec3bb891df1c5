//! What the functions cannot read: a poison message dead-lettered while its batch goes
//! on, task records undecodable or of a newer shape quarantined while the sweep goes on.

use std::time::Duration;

use sas_core::ports::{Consumer, OutgoingMessage, Queues};
use sas_tests::aws::{Remote, Stack};
use sas_tests::{delivery_input, step_states};
use serde_json::json;

use super::{PATIENCE, POLICY, quick};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_ends_in_the_dead_letter_queue_and_the_batch_goes_on() {
    let remote = Remote::start(true).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    let scheduler = Stack::queue(&stack.config.scheduler_queue_url);
    let poison = OutgoingMessage {
        body: "not json".into(),
        delay: Duration::ZERO,
        trace: None,
    };
    stack.sqs.send(&scheduler, &[poison]).await.expect("sent");
    stack
        .http("PUT", "/tasks/beside-poison", Some(&quick()))
        .await;

    let task = stack
        .run_until("beside-poison", PATIENCE, false, |t| {
            t["state"] == "Processed"
        })
        .await;
    assert_eq!(
        step_states(&task),
        ["Processed"; 5],
        "the good message in the batch went through"
    );
    let dead_letters = &stack.dead_letters["sas-scheduler"];
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let dead = loop {
        stack.pump(false).await;
        let dead = stack
            .sqs
            .receive(dead_letters, 10, Duration::ZERO)
            .await
            .expect("dlq");
        if !dead.is_empty() {
            break dead;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the poison message never reached the DLQ"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(dead[0].body, "not json");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_task_record_is_quarantined_and_the_sweep_goes_on() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let remote = Remote::start(false).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&stack.sdk);
    let text = |v: &str| AttributeValue::S(v.into());
    dynamodb
        .put_item()
        .table_name(&stack.config.table.table)
        .item("pk", text("TASK#garbled"))
        .item("sk", text("TASK"))
        .item("record", text("{ not a task"))
        .item("lease_shard", text("LEASE#0"))
        .item("lease_expires", AttributeValue::N("0".into()))
        .item("listed_state", text("Error"))
        .item("listed_key", text("000000000000000.garbled"))
        .send()
        .await
        .expect("a garbled item written");

    let report = stack.supervise().await;
    assert_eq!(report, json!({ "quarantined": 1 }));
    let item = dynamodb
        .get_item()
        .table_name(&stack.config.table.table)
        .key("pk", text("TASK#garbled"))
        .key("sk", text("TASK"))
        .send()
        .await
        .expect("read")
        .item
        .expect("kept for a person");
    assert_eq!(item.get("quarantined"), Some(&AttributeValue::Bool(true)));
    assert!(
        !item.contains_key("lease_shard"),
        "off the expiry index: {item:?}"
    );
    assert_eq!(
        stack.supervise().await,
        json!({}),
        "the next sweep reads it no more"
    );

    // Listed in Error before a task that is: a page without it, and the next page.
    remote.mocks.set_faults(
        "account",
        serde_json::from_value(json!({"permanent_error_rate": 1.0, "times": 1})).expect("faults"),
    );
    stack.http("PUT", "/tasks/refused", Some(&quick())).await;
    stack
        .run_until("refused", PATIENCE, false, |t| t["state"] == "Error")
        .await;
    let (status, first) = stack.http("GET", "/tasks?state=Error&limit=1", None).await;
    assert_eq!(
        (status, first["tasks"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{first}"
    );
    let next = first["next"].as_str().expect("a next page");
    let (_, second) = stack
        .http(
            "GET",
            &format!("/tasks?state=Error&limit=1&after={next}"),
            None,
        )
        .await;
    assert_eq!(second["tasks"][0]["id"], "refused", "{second}");
}

/// Records of a shape this version does not know (a newer version's, left by a
/// rollback), more than a page of them at the head of a shard: one sweep quarantines
/// them and recovers the expired task behind them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_a_newer_shape_are_quarantined_and_the_task_behind_them_recovered() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use sas_core::clock::{Clock, WallClock};
    use sas_core::ports::TaskStore;
    use sas_domain::decide::submit;
    use sas_domain::ids::TaskId;
    use sas_domain::submission::Submission;
    use sas_domain::time::Timestamp;
    use sas_domain::workflow::Registry;

    let remote = Remote::start(false).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    let table = &stack.config.table.table;
    let dynamodb = aws_sdk_dynamodb::Client::new(&stack.sdk);
    let text = |v: &str| AttributeValue::S(v.into());
    let drone = Registry::built_in()
        .latest("drone-delivery")
        .expect("drone");
    let submission = Submission::new(TaskId::parse("behind").expect("id"), delivery_input());
    // Submitted an hour ago, never picked up: its pickup lease long expired.
    let an_hour_ago = Timestamp(WallClock.now().0 - 3_600_000);
    let (task, order, _) = submit(&drone, submission, an_hour_ago);
    sas_aws::store::DynamoStore::new(&stack.sdk, stack.config.table.clone())
        .create(&task, &order)
        .await
        .expect("created");
    let key = |id: &str| {
        [("pk", text(&format!("TASK#{id}"))), ("sk", text("TASK"))]
            .map(|(name, value)| (name.to_owned(), value))
            .into()
    };
    let item = dynamodb
        .get_item()
        .table_name(table)
        .set_key(Some(key("behind")))
        .send()
        .await
        .expect("read")
        .item
        .expect("the task");
    let shard = item["lease_shard"].clone();
    let newer = stack.config.supervisor_batch + 5;
    for n in 0..newer {
        dynamodb
            .put_item()
            .table_name(table)
            .item("pk", text(&format!("TASK#newer-{n}")))
            .item("sk", text("TASK"))
            .item(
                "record",
                text(r#"{"id": "newer", "state": "Teleported", "hops": 3}"#),
            )
            .item("lease_shard", shard.clone())
            .item("lease_expires", AttributeValue::N(n.to_string()))
            .send()
            .await
            .expect("a record of a newer shape written");
    }

    let report = stack.supervise().await;
    assert_eq!(report, json!({ "quarantined": newer, "sent again": 1 }));
    let quarantined = dynamodb
        .get_item()
        .table_name(table)
        .set_key(Some(key("newer-0")))
        .send()
        .await
        .expect("read")
        .item
        .expect("kept for a person");
    assert_eq!(
        (
            quarantined.get("quarantined"),
            quarantined.contains_key("lease_shard")
        ),
        (Some(&AttributeValue::Bool(true)), false),
        "off the expiry index, marked: {quarantined:?}"
    );
    assert_eq!(
        stack.supervise().await,
        json!({}),
        "the next sweep reads them no more"
    );
}
