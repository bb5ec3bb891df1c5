//! DynamoDB, on moto, passes the ports' conformance suite for the state store.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_types::SdkConfig;
use sas_core::ports::{LeaseIndex as _, StoreError, TaskListing as _, TaskStore as _};
use sas_domain::decide::submit;
use sas_domain::ids::TaskId;
use sas_domain::submission::Submission;
use sas_domain::task::{Order, Task, TaskState};
use sas_domain::time::Timestamp;
use sas_domain::workflow::Registry;
use sas_lambda::config::TableSettings;
use sas_lambda::emulator;
use sas_testkit::conformance;
use sas_testkit::moto::Moto;
use serde_json::{Value, json};

use crate::store::DynamoStore;
use crate::table::create_table;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_on_moto_conforms() {
    let (_moto, sdk, _) = moto_with_table("conformance").await;
    conformance::state_store(&store_of(&sdk, "conformance", 4)).await;
}

/// Moto, the configuration of an SDK that calls it, and a DynamoDB client, with the
/// stack's table `table` created.
async fn moto_with_table(table: &str) -> (Moto, SdkConfig, Client) {
    let moto = Moto::start_serial();
    let sdk = emulator::sdk(&moto.endpoint);
    let client = Client::new(&sdk);
    create_table(&client, table).await;
    (moto, sdk, client)
}

/// A drone delivery `id` of `input` submitted at `at` (milliseconds): its task and
/// order data.
fn drone_delivery(id: &str, input: Value, at: i64) -> (Task, Order) {
    let drone = Registry::built_in()
        .latest("drone-delivery")
        .expect("drone");
    let submission = Submission::new(TaskId::parse(id).expect("id"), input);
    let (task, order, _) = submit(&drone, submission, Timestamp(at));
    (task, order)
}

/// A store over `table`: `lease_shards` expiry shards, no lease buckets, a day's
/// retention.
fn store_of(sdk: &SdkConfig, table: &str, lease_shards: u32) -> DynamoStore {
    DynamoStore::new(
        sdk,
        TableSettings {
            table: table.into(),
            lease_shards,
            lease_bucket: Duration::ZERO,
            retention: Duration::from_secs(86_400),
        },
    )
}

/// Order data small enough is kept in the task's item, a larger one and a
/// resubmission's in an item of their own; an update keeps either where it is, and an
/// item of its own left by an earlier task of the same id is never read for a task
/// whose order is in its item.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_data_is_kept_in_the_tasks_item_when_small_and_apart_when_not() {
    use sas_domain::task::EarlierInput;

    let (_moto, sdk, client) = moto_with_table("orders").await;
    let store = store_of(&sdk, "orders", 4);
    let new_task = |id: &str, input: Value| drone_delivery(id, input, 1_000);
    let changed = |task: &Task, change: &dyn Fn(&mut Task)| {
        let mut next = task.clone();
        next.version += 1;
        change(&mut next);
        next
    };
    // The task's items: each sort key, and whether the item holds an input.
    let items = async |id: &str| -> Vec<(String, bool)> {
        let output = client
            .query()
            .table_name("orders")
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(format!("TASK#{id}")))
            .send()
            .await
            .expect("query");
        output
            .items()
            .iter()
            .map(|item| {
                let sk = item["sk"].as_s().expect("sk").clone();
                (sk, item.contains_key("input"))
            })
            .collect()
    };
    let with_order = async |id: &TaskId| store.task_with_order(id).await.expect("read");
    // The task's order data item, if it has one.
    let order_item = async |id: &str| {
        let output = client
            .get_item()
            .table_name("orders")
            .key("pk", AttributeValue::S(format!("TASK#{id}")))
            .key("sk", AttributeValue::S("ORDER".into()))
            .send()
            .await
            .expect("get");
        output.item().cloned()
    };

    // An earlier task of the same id left its order data, expired after it.
    client
        .put_item()
        .table_name("orders")
        .item("pk", AttributeValue::S("TASK#small".into()))
        .item("sk", AttributeValue::S("ORDER".into()))
        .item("input", AttributeValue::S(r#"{"stale":true}"#.into()))
        .send()
        .await
        .expect("stale order");
    let (task, order) = new_task("small", json!({"customer_id": "c-1", "weight_kg": 1.2}));
    store.create(&task, &order).await.expect("created");
    assert_eq!(
        items("small").await,
        [("ORDER".into(), true), ("TASK".into(), true)],
        "the input in the task's item, the stale item left as it was"
    );
    assert_eq!(
        with_order(&task.id).await,
        Some((task.clone(), order.clone()))
    );
    let claimed = changed(&task, &|t| t.locked_by = Some("s1".into()));
    store.update(&claimed).await.expect("updated");
    assert_eq!(
        with_order(&task.id).await,
        Some((claimed.clone(), order.clone())),
        "an update in place keeps the order data"
    );
    // Finished late (its second run): its order's expiry would move. Kept in the
    // task's item, it moves with it, in one write: the stale item is not written (a
    // transaction with it cost four write units more).
    let late = changed(&claimed, &|t| {
        t.run = 2;
        t.state = TaskState::Processed;
        t.complete_by = None;
        t.locked_by = None;
    });
    store.update(&late).await.expect("updated");
    assert_eq!(
        with_order(&task.id).await,
        Some((late.clone(), order.clone()))
    );
    assert!(
        matches!(store.update(&late).await, Err(StoreError::Conflict)),
        "a write of the version written since loses the race"
    );
    assert_eq!(
        order_item("small")
            .await
            .map(|item| item.contains_key("expires_at")),
        Some(false),
        "the stale item left as it was"
    );

    let edited = Order {
        task_id: task.id.clone(),
        input: std::sync::Arc::new(json!({"customer_id": "c-2"})),
        earlier: vec![EarlierInput {
            until_run: 2,
            input: serde_json::Value::clone(&order.input),
        }],
    };
    let resubmitted = changed(&late, &|t| t.run = 3);
    store
        .update_with_order(&resubmitted, &edited)
        .await
        .expect("resubmitted");
    assert_eq!(
        items("small").await,
        [("ORDER".into(), true), ("TASK".into(), false)],
        "a resubmission's order data in an item of its own"
    );
    assert_eq!(with_order(&task.id).await, Some((resubmitted, edited)));

    let (large, large_order) = new_task("large", json!({"note": "x".repeat(600)}));
    store.create(&large, &large_order).await.expect("created");
    assert_eq!(
        items("large").await,
        [("ORDER".into(), true), ("TASK".into(), false)],
        "order data over 512 bytes in an item of its own"
    );
    let claimed = changed(&large, &|t| t.locked_by = Some("s1".into()));
    store.update(&claimed).await.expect("updated");
    assert_eq!(
        with_order(&large.id).await,
        Some((claimed.clone(), large_order.clone()))
    );
    // Finished ten days on: its own item's expiry moves, in the task's transaction.
    let late = changed(&claimed, &|t| {
        t.state = TaskState::Processed;
        t.complete_by = None;
        t.locked_by = None;
        t.updated_at = Timestamp(1_000 + 10 * 86_400_000);
    });
    store.update(&late).await.expect("updated");
    assert_eq!(
        with_order(&large.id).await,
        Some((late.clone(), large_order))
    );
    assert_eq!(
        order_item("large")
            .await
            .and_then(|item| item.get("expires_at").cloned()),
        Some(AttributeValue::N((1 + 12 * 86_400).to_string())),
        "a retention after the task's own expiry"
    );
    assert!(matches!(
        store.update(&late).await,
        Err(StoreError::Conflict)
    ));
}

/// `LeaseShards` lowered on a running stack: the leases its processes wrote into the
/// shards above the new count are still swept and listed, none left where no sweep
/// reads it, even by a process that swept before they were written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_written_into_more_shards_are_swept_after_the_shards_are_lowered() {
    use std::collections::BTreeSet;

    use sas_core::ports::ExpiredCursor;

    let (_moto, sdk, _) = moto_with_table("shards").await;
    let store = |lease_shards| store_of(&sdk, "shards", lease_shards);
    let (wide, narrow) = (store(16), store(2));
    // The narrow process sweeps before the wide one has written any lease: its next
    // pass reads the shards the wide one has written into since.
    let early = narrow
        .expired(Timestamp(i64::MAX / 2), 10, &ExpiredCursor::default())
        .await
        .expect("a sweep");
    assert!(early.tasks.is_empty(), "nothing to sweep yet");
    let mut created = BTreeSet::new();
    for n in 0..40 {
        let (task, order) = drone_delivery(&format!("t-{n:02}"), json!({}), 1_000);
        wide.create(&task, &order).await.expect("created");
        created.insert(task.id.to_string());
    }

    let (mut swept, mut from) = (BTreeSet::new(), ExpiredCursor::default());
    loop {
        let page = narrow
            .expired(Timestamp(i64::MAX / 2), 10, &from)
            .await
            .expect("a sweep's page");
        swept.extend(page.tasks.iter().map(|t| t.id.to_string()));
        match page.next {
            Some(next) => from = next,
            None => break,
        }
    }
    assert_eq!(swept, created, "every expired lease swept");

    let (mut listed, mut after) = (BTreeSet::new(), None);
    loop {
        let page = narrow
            .list(TaskState::Pending, 100, after.as_deref())
            .await
            .expect("a listing's page");
        listed.extend(page.tasks.iter().map(|t| t.id.to_string()));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(listed, created, "every task in flight listed");
}

/// A listing of tasks in flight writes nothing, not even the count of expiry shards
/// the table keeps (the API's read function may only read): a process whose
/// `LeaseShards` is above that count lists the shards it would write into, and only a
/// process writing a lease raises the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_of_tasks_in_flight_writes_nothing() {
    let (_moto, sdk, client) = moto_with_table("listing").await;
    let store = |lease_shards| store_of(&sdk, "listing", lease_shards);
    let kept_count = async || {
        let item = client
            .get_item()
            .table_name("listing")
            .key("pk", AttributeValue::S("SETTINGS#lease-shards".into()))
            .key("sk", AttributeValue::S("SETTINGS".into()))
            .consistent_read(true)
            .send()
            .await
            .expect("read")
            .item;
        item.map(|item| item["most"].as_n().expect("a number").clone())
    };
    let list = async |store: &DynamoStore| {
        let page = store
            .list(TaskState::Pending, 100, None)
            .await
            .expect("a listing");
        assert!(page.next.is_none(), "one page");
        page.tasks.len()
    };

    let (reader, writer) = (store(8), store(2));
    assert_eq!(list(&reader).await, 0);
    assert_eq!(
        kept_count().await,
        None,
        "the listing wrote the shard count"
    );
    for n in 0..6 {
        let (task, order) = drone_delivery(&format!("t-{n}"), json!({}), 1_000);
        writer.create(&task, &order).await.expect("created");
    }
    assert_eq!(
        kept_count().await.as_deref(),
        Some("2"),
        "raised by the writer"
    );
    assert_eq!(list(&reader).await, 6, "every task in flight listed");
    assert_eq!(list(&store(1)).await, 6, "from the shards the table keeps");
    assert_eq!(
        kept_count().await.as_deref(),
        Some("2"),
        "not raised by a listing"
    );
}

/// An update is of the task it was decided from: once a task's item is gone (its
/// TTL) and its id names another task, whose versions repeat the first's, a write
/// decided from the first (a response giving back its task, sealed) is refused, in
/// place and in a transaction with the order data alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_decided_from_a_task_whose_id_names_another_now_is_refused() {
    let (_moto, sdk, _) = moto_with_table("reused").await;
    let store = store_of(&sdk, "reused", 1);
    let (before, _) = drone_delivery("reused", json!({"n": 1}), 1_000);
    let (now, order) = drone_delivery("reused", json!({"n": 2}), 2_000);
    store.create(&now, &order).await.expect("created");
    let next = |task: &Task| {
        let mut next = task.clone();
        next.version += 1;
        next
    };

    assert!(matches!(
        store.update(&next(&before)).await,
        Err(StoreError::Conflict)
    ));
    assert!(matches!(
        store.update_with_order(&next(&before), &order).await,
        Err(StoreError::Conflict)
    ));
    assert_eq!(
        store.task(&now.id).await.expect("read"),
        Some(now.clone()),
        "the task using the id now, as it was"
    );
    store.update(&next(&now)).await.expect("its own update");
}

/// Order data kept apart names the task it was written for: an item another task of
/// the same id left (the task expired before its order), read beside the new task's
/// item while the creation that replaces it lands, is never taken for the new task's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_data_another_task_of_the_id_left_is_not_read_as_the_tasks() {
    let (_moto, sdk, client) = moto_with_table("left").await;
    let store = store_of(&sdk, "left", 1);
    let large = json!({"customer_id": "c-1", "note": "x".repeat(2_000)});
    let (task, order) = drone_delivery("left", large, 2_000);
    store.create(&task, &order).await.expect("created");
    assert_eq!(
        store
            .task_with_order_eventually_consistent(&task.id)
            .await
            .expect("read"),
        Some((task.clone(), order.clone())),
        "its own order data, apart"
    );

    // As the item the task before left, until the creation's transaction lands.
    client
        .update_item()
        .table_name("left")
        .key("pk", AttributeValue::S("TASK#left".into()))
        .key("sk", AttributeValue::S("ORDER".into()))
        .update_expression("SET created_at = :before")
        .expression_attribute_values(":before", AttributeValue::N("1000".into()))
        .send()
        .await
        .expect("the item before");
    assert_eq!(
        store
            .task_with_order_eventually_consistent(&task.id)
            .await
            .expect("read"),
        None,
        "not yet there: read again, consistently"
    );
    assert!(matches!(
        store.task_with_order(&task.id).await,
        Err(StoreError::Unavailable(_))
    ));
}

/// Tasks found by two attributes among 1,000 on DynamoDB: the first attribute's
/// entries are read (one Query of its value's partition, the matching entries alone)
/// and the tasks they name (one BatchGetItem); the second is checked on each record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_found_by_an_attribute_reading_its_entries_alone() {
    let (_moto, sdk, client) = moto_with_table("attributes").await;
    let store = store_of(&sdk, "attributes", 4);
    for i in 0..1_000 {
        let (mut task, order) = drone_delivery(&format!("t-{i}"), sas_testkit::delivery_input(), i);
        let (customer, region) = (format!("c-{}", i % 50), ["eu", "us"][i as usize % 2]);
        task.attributes.insert("customer".into(), json!(customer));
        task.attributes.insert("region".into(), json!(region));
        let changed = [
            ("customer".to_owned(), customer),
            ("region".to_owned(), region.to_owned()),
        ];
        store
            .index_attributes(&task, &changed)
            .await
            .expect("indexed");
        store.create(&task, &order).await.expect("created");
    }
    let page = (store.with_attribute("customer", "c-7", 100, None))
        .await
        .expect("a page");
    assert_eq!(page.tasks.len(), 20, "c-7's: t-7, t-57, ...");
    assert_eq!(page.next, None, "one Query read them all");
    let in_the_eu: Vec<&str> = (page.tasks.iter())
        .filter(|t| t.attributes.get("region") == Some(&json!("eu")))
        .map(|t| t.id.as_str())
        .collect();
    assert_eq!(
        in_the_eu.len(),
        0,
        "c-7's are odd, in the us: {in_the_eu:?}"
    );
    // The partition holds c-7's entries alone: what a search's Query reads.
    let entries = (client.query().table_name("attributes"))
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S("ATTR#customer#c-7".into()))
        .send()
        .await
        .expect("the entries");
    assert_eq!(entries.count(), 20);
}
