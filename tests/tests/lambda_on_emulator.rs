//! The four Lambda functions on DynamoDB, SQS and SNS (moto), fed real-shaped
//! API Gateway, SQS and EventBridge events by a loop that plays Lambda's
//! event-source mappings and EventBridge's schedule.

use std::time::Duration;

use sas_core::ports::{Chain, Consumer, OutgoingMessage, Queues};
use sas_tests::aws::{QueuePolicy, Remote, Stack};
use sas_tests::{
    UNDONE_BEFORE_THE_DELIVERY, accepted_submission, delivery_input, notified_states, step_states,
};
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(30);

fn quick() -> Value {
    json!({ "workflow": "drone-delivery-quick", "input": delivery_input() })
}

const POLICY: QueuePolicy = QueuePolicy {
    visibility_seconds: 1,
    max_receive_count: 3,
};

/// On the Lambda path a submission that waits is answered with its task's end: the
/// submission function, a process of its own that no other function wakes, reads the
/// table until then, while the other functions run the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_that_waits_is_answered_with_its_end_on_the_lambda_path() {
    let remote = Remote::start(true).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    let submission = sas_aws::app(&stack.config, &stack.sdk, "submission").expect("the app");
    let body = quick();
    let waited = stack.http_to(&submission, "PUT", "/tasks/called?wait=20s", Some(&body));
    let ran = stack.run_until("called", PATIENCE, false, |t| t["state"] == "Processed");
    let ((status, task), _) = tokio::join!(waited, ran);
    assert_eq!(
        (status, task["state"].as_str()),
        (200, Some("Processed")),
        "{task:#}"
    );
    assert_eq!(step_states(&task), ["Processed"; 5]);
}

/// A stack in direct ingestion still drains its ingest queue, as after an update from
/// buffered ingestion that left accepted submissions in it: the scheduler creates
/// each one's task and runs it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_stack_creates_and_runs_a_submission_left_in_its_ingest_queue() {
    let remote = Remote::start(true).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    let (status, task) = stack.http("PUT", "/tasks/direct-1", Some(&quick())).await;
    assert_eq!(status, 202, "{task}");
    let ingest = stack
        .config
        .ingest_queue_url
        .clone()
        .expect("an ingest queue in direct ingestion");
    aws_sdk_sqs::Client::new(&stack.sdk)
        .send_message()
        .queue_url(ingest)
        .message_body(accepted_submission(
            "accepted-before",
            &json!({ "workflow": task["workflow"], "input": delivery_input() }),
        ))
        .send()
        .await
        .expect("queued");
    let task = stack
        .run_until("accepted-before", PATIENCE, false, |t| {
            t["state"] == "Processed"
        })
        .await;
    assert_eq!(step_states(&task), ["Processed"; 5]);
    let effects = remote.effects("accepted-before");
    assert_eq!(effects.len(), 5, "one effect per step: {effects:?}");
    assert!(
        effects.iter().all(|(_, _, calls)| *calls == 1),
        "{effects:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_functions_run_a_drone_delivery_once_even_when_every_message_arrives_twice() {
    let remote = Remote::start(true).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let updates_url = sqs
        .create_queue()
        .queue_name("caller-updates")
        .send()
        .await
        .expect("queue");
    let updates_url = updates_url.queue_url().expect("url").to_owned();
    let body = json!({ "workflow": "drone-delivery", "input": delivery_input(), "notify": "caller-updates" });
    let (status, task) = stack.http("PUT", "/tasks/aws-1", Some(&body)).await;
    assert_eq!((status, task["state"].as_str()), (202, Some("Pending")));
    assert_eq!(
        stack.http("PUT", "/tasks/aws-1", Some(&body)).await.0,
        202,
        "the same PUT again"
    );
    let mut other = body.clone();
    other["input"]["weight_kg"] = json!(7);
    assert_eq!(stack.http("PUT", "/tasks/aws-1", Some(&other)).await.0, 409);
    let (_, pending) = stack.http("GET", "/tasks?state=Pending", None).await;
    assert_eq!(
        pending["tasks"][0]["id"], "aws-1",
        "listed through the sparse listing index: {pending}"
    );

    let task = stack
        .run_until("aws-1", PATIENCE, true, |t| t["state"] == "Processed")
        .await;
    assert_eq!(step_states(&task), ["Processed"; 5]);
    assert!(
        task["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .all(|s| s["attempt"] == 1),
        "{task:#}"
    );
    let effects = remote.effects("aws-1");
    assert_eq!(effects.len(), 5, "one effect per step: {effects:?}");
    assert!(effects.iter().all(|(_, _, calls)| *calls >= 1));
    let (_, pending) = stack.http("GET", "/tasks?state=Pending", None).await;
    assert_eq!(
        pending["tasks"],
        json!([]),
        "a task leaves the listing as it moves on"
    );
    let updates: Vec<Value> = stack
        .sqs
        .receive(&Stack::queue(&updates_url), 10, Duration::from_secs(1))
        .await
        .expect("updates")
        .iter()
        .map(|delivery| serde_json::from_str(&delivery.body).expect("json"))
        .collect();
    assert_eq!(
        notified_states("aws-1", &updates),
        ["Pending", "Processing", "Processed"],
        "each status change in the caller's queue, by the task's versions"
    );

    let (status, error) = stack
        .http(
            "POST",
            "/tasks",
            Some(&json!({"workflow": "drone-delivery", "input": {}})),
        )
        .await;
    assert_eq!(
        (status, error["error"]["field"].as_str()),
        (400, Some("input.customer_id"))
    );
    let (status, _) = stack.http("PUT", "/tasks/a.b", Some(&body)).await;
    assert_eq!(status, 400);
    assert!(
        stack
            .supervise()
            .await
            .as_object()
            .expect("report")
            .is_empty(),
        "nothing expired"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_supervisor_function_retries_a_hung_step_and_compensates_past_the_threshold() {
    let remote = Remote::start(true).await;
    let stack = Stack::start(&remote.url, POLICY).await;

    // A hang: the drone service applies the effect and answers too late, once.
    remote.mocks.set_faults(
        "drone",
        serde_json::from_value(json!({"hang_ms": 2000, "times": 1})).expect("faults"),
    );
    stack.http("PUT", "/tasks/hung", Some(&quick())).await;
    stack
        .run_until("hung", PATIENCE, false, |t| {
            t["steps"][3]["state"] == "Processing"
        })
        .await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let task = loop {
        let report = stack.supervise().await;
        let (_, task) = stack.http("GET", "/tasks/hung", None).await;
        if report["retry"] == 1 {
            break task;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never retried: {task:#}"
        );
        stack.pump(false).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (task["state"].as_str(), task["failure_count"].as_u64()),
        (Some("Pending"), Some(1))
    );
    let task = stack
        .run_until("hung", PATIENCE, false, |t| t["state"] == "Processed")
        .await;
    assert_eq!(task["steps"][3]["attempt"], 2);
    let drone: Vec<_> = remote
        .effects("hung")
        .into_iter()
        .filter(|e| e.0 == "drone")
        .collect();
    assert_eq!(
        drone,
        [("drone".to_owned(), "/drones/schedule".to_owned(), 2)],
        "called twice, applied once"
    );

    // Past the threshold: the drone service fails three times running.
    remote.mocks.set_faults(
        "drone",
        serde_json::from_value(json!({"transient_error_rate": 1.0, "times": 3})).expect("faults"),
    );
    stack.http("PUT", "/tasks/doomed", Some(&quick())).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let task = loop {
        stack.pump(false).await;
        stack.supervise().await;
        let (_, task) = stack.http("GET", "/tasks/doomed", None).await;
        if task["state"] == "Error" {
            break task;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never gave up: {task:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(step_states(&task), UNDONE_BEFORE_THE_DELIVERY);
    assert_eq!(task["steps"][3]["failure_count"], 3);
    let undone: Vec<_> = remote
        .effects("doomed")
        .into_iter()
        .filter(|e| e.1.ends_with("/cancel"))
        .collect();
    assert_eq!(
        undone.len(),
        2,
        "the drone and the package cancelled: {undone:?}"
    );
    let alerts = stack.alerts().await;
    assert_eq!(alerts.len(), 1, "one alert on SNS: {alerts:?}");
    assert_eq!(alerts[0]["task_id"], "doomed");
    let (_, in_error) = stack.http("GET", "/tasks?state=Error", None).await;
    assert_eq!(in_error["tasks"][0]["id"], "doomed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_ends_in_the_dead_letter_queue_and_the_batch_goes_on() {
    let remote = Remote::start(true).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    let scheduler = Stack::queue(&stack.config.scheduler_queue_url);
    let poison = OutgoingMessage {
        body: "not json".into(),
        delay: Duration::ZERO,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_a_steps_limit_is_undone_and_one_within_it_is_kept() {
    use sas_domain::limits::MAX_STEP_OUTPUT;
    let remote = Remote::start(false).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    let answer = |bytes: usize| {
        serde_json::from_value(json!({"answer_bytes": bytes, "times": 1})).expect("faults")
    };

    remote.mocks.set_faults("drone", answer(MAX_STEP_OUTPUT));
    stack.http("PUT", "/tasks/at-limit", Some(&quick())).await;
    let kept = stack
        .run_until("at-limit", PATIENCE, false, |t| t["state"] == "Processed")
        .await;
    let output = kept["steps"][3]["output"].to_string();
    assert_eq!(output.len(), MAX_STEP_OUTPUT, "kept whole");

    remote
        .mocks
        .set_faults("drone", answer(MAX_STEP_OUTPUT + 1));
    stack.http("PUT", "/tasks/over", Some(&quick())).await;
    let refused = stack
        .run_until("over", PATIENCE, false, |t| t["state"] == "Error")
        .await;
    assert_eq!(
        step_states(&refused),
        UNDONE_BEFORE_THE_DELIVERY,
        "{refused:#}"
    );
    assert!(
        refused["steps"][3]["error"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("over the {MAX_STEP_OUTPUT} bytes"))),
        "{refused:#}"
    );
    let undone: Vec<_> = remote
        .effects("over")
        .into_iter()
        .filter(|e| e.1.ends_with("/cancel"))
        .map(|e| e.0)
        .collect();
    assert_eq!(
        undone,
        ["drone", "package"],
        "the drone and the package undone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_sqs_or_dynamodb_would_refuse_is_refused_before_it_is_sent() {
    use sas_aws::store::DynamoStore;
    use sas_core::ports::{StoreError, TaskStore};
    use sas_domain::limits::{MAX_ITEM, MAX_MESSAGE_BODY};
    let remote = Remote::start(false).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    let queue = Stack::queue(&stack.config.scheduler_queue_url);
    let message = |bytes: usize| OutgoingMessage {
        body: "x".repeat(bytes),
        delay: Duration::ZERO,
    };
    stack
        .sqs
        .send(&queue, &[message(MAX_MESSAGE_BODY)])
        .await
        .expect("at the limit");
    let error = stack
        .sqs
        .send(&queue, &[message(MAX_MESSAGE_BODY + 1)])
        .await
        .expect_err("over it");
    let error = Chain(&error).to_string();
    assert!(error.contains("261121 bytes"), "{error}");

    stack.http("PUT", "/tasks/large", Some(&quick())).await;
    let store = DynamoStore::new(&stack.sdk, stack.config.table.clone());
    let id = sas_domain::ids::TaskId::parse("large").expect("id");
    let mut task = store.task(&id).await.expect("read").expect("stored");
    // Noise that deflate shrinks to no less than three quarters.
    let noise: String = (0..2 * MAX_ITEM)
        .map(|_| fastrand::alphanumeric())
        .collect();
    task.steps[0].output = Some(json!(noise).into());
    task.version += 1;
    assert!(
        matches!(store.update(&task).await, Err(StoreError::TooLarge(e)) if e.contains("over the 409600")),
        "refused before it is sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_data_never_outlives_nor_predeceases_its_task() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use sas_aws::store::INLINE_ORDER;
    let remote = Remote::start(false).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&stack.sdk);
    let table = stack.config.table.table.clone();
    let item = |id: &str, sk: &str| {
        let (dynamodb, table) = (dynamodb.clone(), table.clone());
        let pk = format!("TASK#{id}");
        let sk = sk.to_owned();
        async move {
            dynamodb
                .get_item()
                .table_name(table)
                .key("pk", AttributeValue::S(pk))
                .key("sk", AttributeValue::S(sk))
                .send()
                .await
                .expect("read")
                .item
        }
    };
    let expiry = |item: &Option<std::collections::HashMap<String, AttributeValue>>| {
        item.as_ref()
            .and_then(|i| i.get("expires_at"))
            .and_then(|v| v.as_n().ok())
            .map(|n| n.parse::<i64>().expect("seconds"))
    };

    // Small order data lives in the task's item and goes with it.
    stack.http("PUT", "/tasks/reused", Some(&quick())).await;
    stack
        .run_until("reused", PATIENCE, false, |t| t["state"] == "Processed")
        .await;
    let task_item = item("reused", "TASK").await.expect("stored");
    assert!(task_item.contains_key("input"), "{task_item:?}");
    assert_eq!(item("reused", "ORDER").await, None);
    dynamodb
        .delete_item()
        .table_name(&table)
        .key("pk", AttributeValue::S("TASK#reused".into()))
        .key("sk", AttributeValue::S("TASK".into()))
        .send()
        .await
        .expect("deleted as the TTL would");
    let (status, body) = stack.http("PUT", "/tasks/reused", Some(&quick())).await;
    assert_eq!(status, 202, "{body}");
    stack
        .run_until("reused", PATIENCE, false, |t| t["state"] == "Processed")
        .await;

    // Order data too large for the task's item has one of its own, and a
    // resubmitted task's is kept a retention past the task.
    remote.mocks.set_faults(
        "delivery",
        serde_json::from_value(json!({"permanent_error_rate": 1.0, "times": 1})).expect("faults"),
    );
    let mut large = quick();
    large["input"]["dropoff"] = json!("Bondi ".repeat(INLINE_ORDER / 4));
    stack.http("PUT", "/tasks/again", Some(&large)).await;
    stack
        .run_until("again", PATIENCE, false, |t| t["state"] == "Error")
        .await;
    stack
        .run_until("again", PATIENCE, false, |t| t["complete_by"].is_null())
        .await;
    let (status, body) = stack.http("POST", "/tasks/again/resubmit", None).await;
    assert_eq!(status, 202, "{body}");
    stack
        .run_until("again", PATIENCE, false, |t| t["state"] == "Processed")
        .await;
    let task_item = item("again", "TASK").await;
    assert!(
        task_item.as_ref().is_some_and(|i| !i.contains_key("input")),
        "{task_item:?}"
    );
    let task_expiry = expiry(&task_item).expect("the task expires");
    let retention = i64::try_from(stack.config.table.retention.as_secs()).expect("seconds");
    assert_eq!(
        expiry(&item("again", "ORDER").await),
        Some(task_expiry + retention)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_step_is_recovered_by_its_deadline_message_without_the_supervisor() {
    let remote = Remote::start(false).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    remote.mocks.set_faults(
        "drone",
        serde_json::from_value(json!({"hang_ms": 3000, "times": 1})).expect("faults"),
    );
    stack.http("PUT", "/tasks/deadline", Some(&quick())).await;
    let hung = stack
        .run_until("deadline", PATIENCE, false, |t| {
            t["steps"][3]["state"] == "Processing"
        })
        .await;
    let complete_by = hung["steps"][3]["complete_by"].clone();
    // Only the queues are played: no supervisor runs in this test.
    let task = stack
        .run_until("deadline", PATIENCE, false, |t| t["state"] == "Processed")
        .await;
    assert_eq!(
        (
            task["steps"][3]["failure_count"].as_u64(),
            task["steps"][3]["attempt"].as_u64()
        ),
        (Some(1), Some(2)),
        "timed out at {complete_by}, sent again, done: {task:#}"
    );
    assert_eq!(stack.invocations().get("supervisor"), None);
}
