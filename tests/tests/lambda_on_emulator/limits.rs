//! Sizes and lifetimes: an answer of 5 MB kept whole, stored apart in S3 and deleted
//! with its task, what SQS or DynamoDB would refuse refused by their adapters before it
//! is sent, and order data that neither outlives nor predeceases its task.

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use sas_core::ports::Payloads;
use sas_core::ports::{Chain, OutgoingMessage, Queues};
use sas_domain::payload::ValueScope;
use sas_lambda::payloads::S3Payloads;
use sas_tests::aws::{PAYLOAD_BUCKET, Remote, Stack};
use serde_json::json;

use super::{PATIENCE, POLICY, quick};

/// `shown` read whole: where a task's view, too large to send (over 4 MiB), names it
/// by its reference, the value from the presigned S3 URL `GET /tasks/{id}/payloads/{sha256}`
/// redirects to.
async fn whole(stack: &Stack, task: &str, shown: &serde_json::Value) -> serde_json::Value {
    let Some(reference) = sas_domain::payload::PayloadRef::in_value(shown) else {
        return shown.clone();
    };
    let path = format!("/tasks/{task}/payloads/{}", reference.sha256);
    let (status, redirected) = stack.http("GET", &path, None).await;
    assert_eq!(status, 303, "{redirected}");
    let url = redirected["url"].as_str().expect("a URL");
    let value = reqwest::get(url).await.expect("S3 answers");
    assert!(value.status().is_success(), "{}", value.status());
    value.json().await.expect("the value's JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_of_5_mb_is_kept_whole_its_record_and_messages_holding_references() {
    const MB: usize = 1024 * 1024;
    let remote = Remote::start(false).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    let answer = serde_json::from_value(json!({"answer_bytes": 5 * MB}));
    remote.mocks.set_faults("drone", answer.expect("faults"));
    // The drone delivery's own budgets (10 s a call): the quick one's 500 ms is less
    // than moving 5 MB takes in a debug build under the whole suite's load.
    let delivery = json!({"workflow": "drone-delivery", "input": sas_tests::delivery_input()});
    stack.http("PUT", "/tasks/large", Some(&delivery)).await;
    let kept = stack
        .run_until("large", PATIENCE, false, |t| t["state"] == "Processed")
        .await;
    let output = whole(&stack, "large", &kept["steps"][3]["output"])
        .await
        .to_string();
    assert_eq!(output.len(), 5 * MB, "kept whole");
    let delivered = kept["steps"][4]["output"]["received_bytes"].as_u64();
    assert!(
        delivered.is_some_and(|bytes| bytes > (5 * MB) as u64),
        "the next call carried the answer: {delivered:?}"
    );
    // In S3: the answer once, among the task's values, where its agent put it and
    // where the step's write and the request that carried it on name it: no message
    // of its own, neither the answer's nor the request's.
    let messages = objects(&stack, "payloads/messages/").await;
    assert!(messages.is_empty(), "no message stored apart: {messages:?}");
    let answers = objects(&stack, "payloads/tasks/large/").await;
    assert_eq!(answers.len(), 1, "the answer stored once: {answers:?}");
    // A retried call stores the same answer under the same key; a write that did not
    // change the output stores nothing.
    let all = objects(&stack, "payloads/").await;
    assert_eq!(all, answers, "nothing else stored");
}

/// A value over what a Lambda function's request takes (6 MB), put by the presigned
/// request `POST /payloads/uploads` answers, then named as a task's input. (A body
/// other than the value's is refused by S3 for its checksum: moto does not check one,
/// MiniStack does, in `deployed::delivery`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_put_by_a_presigned_request_is_named_as_a_tasks_input() {
    const MB: usize = 1024 * 1024;
    let remote = Remote::start(false).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    let mut input = sas_tests::delivery_input();
    input["manifest"] = json!("m".repeat(7 * MB));
    let text = serde_json::to_vec(&input).expect("json");
    let reference = sas_domain::payload::PayloadRef::of(&text);
    let (status, request) = stack
        .http("POST", "/payloads/uploads", Some(&json!(reference)))
        .await;
    assert_eq!(status, 201, "{request}");
    let url = request["url"].as_str().expect("a url");
    assert!(
        url.starts_with(&stack.moto.endpoint) && url.contains("X-Amz-Signature="),
        "presigned at the bucket: {url}"
    );
    let headers = request["headers"].as_object().expect("headers");
    assert!(
        headers.contains_key("x-amz-checksum-sha256"),
        "S3 checks the body against the hash: {headers:?}"
    );
    let mut put = reqwest::Client::new().put(url).body(text);
    for (name, value) in headers {
        put = put.header(name, value.as_str().expect("a header's value"));
    }
    let stored = put.send().await.expect("S3 answers");
    assert!(stored.status().is_success(), "{}", stored.status());

    let named = json!({"$payload": request["$payload"]});
    let submission = json!({"workflow": "drone-delivery", "input": named});
    let (status, body) = stack
        .http("PUT", "/tasks/uploaded", Some(&submission))
        .await;
    assert_eq!(status, 202, "{body}");
    let kept = stack
        .run_until("uploaded", PATIENCE, false, |t| t["state"] == "Processed")
        .await;
    let input = whole(&stack, "uploaded", &kept["input"]).await;
    let manifest = input["manifest"].as_str().map(str::len);
    assert_eq!(manifest, Some(7 * MB), "the input as it was put");
}

/// The keys of the bucket's objects under `prefix`.
async fn objects(stack: &Stack, prefix: &str) -> Vec<String> {
    let url = format!(
        "{}/{PAYLOAD_BUCKET}?list-type=2&prefix={prefix}",
        stack.moto.endpoint
    );
    let listed = reqwest::get(url).await.expect("moto answers");
    let listed = listed.text().await.expect("a listing");
    (listed.split("<Key>").skip(1))
        .filter_map(|part| part.split("</Key>").next())
        .map(str::to_owned)
        .collect()
}

/// A task deleted by DynamoDB's TTL, as its stream tells the supervisor (the item's
/// old image), has its values deleted with it; another task's stay. Moto has no
/// stream: the test deletes the item as the TTL would and hands the supervisor the
/// record DynamoDB would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_tasks_values_are_deleted_with_it_and_no_others() {
    let remote = Remote::start(false).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    let answer = serde_json::from_value(json!({"answer_bytes": 200 * 1024}));
    remote.mocks.set_faults("drone", answer.expect("faults"));
    let delivery = json!({"workflow": "drone-delivery", "input": sas_tests::delivery_input()});
    for id in ["gone", "kept"] {
        stack
            .http("PUT", &format!("/tasks/{id}"), Some(&delivery))
            .await;
        stack
            .run_until(id, PATIENCE, false, |t| t["state"] == "Processed")
            .await;
    }
    let (gone, kept) = (
        objects(&stack, "payloads/tasks/gone/").await,
        objects(&stack, "payloads/tasks/kept/").await,
    );
    assert!(!gone.is_empty() && !kept.is_empty(), "{gone:?} {kept:?}");

    let dynamodb = aws_sdk_dynamodb::Client::new(&stack.sdk);
    let deleted = dynamodb
        .delete_item()
        .table_name(&stack.config.table.table)
        .key("pk", AttributeValue::S("TASK#gone".into()))
        .key("sk", AttributeValue::S("TASK".into()))
        .return_values(ReturnValue::AllOld)
        .send()
        .await
        .expect("the task's item deleted");
    let created = deleted.attributes().and_then(|item| item.get("created_at"));
    let created = created.and_then(|n| n.as_n().ok()).expect("its creation");
    let record = |name: &str| {
        json!({
            "eventSource": "aws:dynamodb", "eventName": name,
            "dynamodb": {
                "Keys": {"pk": {"S": "TASK#gone"}, "sk": {"S": "TASK"}},
                "OldImage": {"created_at": {"N": created}},
            },
        })
    };
    let stream = json!({"Records": [record("MODIFY"), record("REMOVE")]});
    let payloads = S3Payloads::new(&stack.sdk, PAYLOAD_BUCKET.to_owned());
    let forgotten = sas_aws::deletions::forget_deleted(&payloads, &stream).await;
    let forgotten = forgotten.expect("a stream's batch").expect("deleted");
    assert_eq!(forgotten, json!({"tasks": 1, "values": gone.len()}));
    assert_eq!(
        objects(&stack, "payloads/tasks/gone/").await,
        Vec::<String>::new()
    );
    assert_eq!(
        objects(&stack, "payloads/tasks/kept/").await,
        kept,
        "another's stay"
    );
    let again = sas_aws::deletions::forget_deleted(&payloads, &stream).await;
    let again = again.expect("a stream's batch").expect("nothing to delete");
    assert_eq!(
        again,
        json!({"tasks": 1, "values": 0}),
        "a batch delivered twice"
    );
}

/// A value stored before values had scopes, under `payloads/<sha256>`, is still read
/// where a task's record names it: a task running across the upgrade goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_stored_before_scopes_is_read_in_any_scope() {
    let remote = Remote::start(false).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    let text = b"{\"stored\": \"before\"}".to_vec();
    let sha256 = sas_domain::payload::PayloadRef::of(&text).sha256;
    let url = format!("{}/{PAYLOAD_BUCKET}/payloads/{sha256}", stack.moto.endpoint);
    let put = reqwest::Client::new()
        .put(url)
        .body(text.clone())
        .send()
        .await;
    assert!(put.expect("moto answers").status().is_success());
    let payloads = S3Payloads::new(&stack.sdk, PAYLOAD_BUCKET.to_owned());
    let scope = ValueScope::Task {
        id: sas_domain::ids::TaskId::parse("older").expect("an id"),
        created: sas_domain::time::Timestamp(1),
    };
    let read = payloads.get(&scope, &sha256).await.expect("read");
    assert_eq!(read.as_ref(), Some(&text));
    let lasting = Duration::from_secs(60);
    let url = payloads.download_url(&scope, &sha256, lasting).await;
    let url = url.expect("a URL").expect("S3 gives one");
    let fetched = reqwest::get(&url).await.expect("moto answers");
    assert_eq!(
        fetched.bytes().await.expect("the body").as_ref(),
        &text[..],
        "{url}"
    );
    let unknown = payloads.get(&scope, &"0".repeat(64)).await.expect("read");
    assert_eq!(unknown, None);
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
        trace: None,
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
