//! What the HTTP API answers: listings paged by their cursor, every kind of bad input a
//! 4xx naming the problem, and a batch answered item by item.

use sas_tests::{Harness, delivery_input};
use serde_json::{Value, json};

use super::quick;

/// Every byte of `text` percent-encoded: what a client that encodes a query's values,
/// as the console's `URLSearchParams` does, may send for any of them.
fn percent_encoded(text: &str) -> String {
    text.bytes().map(|b| format!("%{b:02X}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_is_paged_through_with_the_cursor_put_in_the_url_as_it_is_or_percent_encoded() {
    let harness = Harness::start(5).await;
    harness
        .faults("delivery", json!({ "permanent_error_rate": 1.0 }))
        .await;
    let ids = ["refused-1", "refused-2", "refused-3"];
    for id in ids {
        harness.put_task(id, &quick(None)).await;
        harness.settle_in(id, "Error").await;
    }
    for encode in [str::to_owned, percent_encoded] {
        let mut listed = Vec::new();
        let mut path = "/tasks?state=Error&limit=1".to_owned();
        loop {
            let (status, _, page) = harness.call("GET", &path, None).await;
            assert_eq!(status, 200, "{path}: {page}");
            let tasks = page["tasks"].as_array().expect("tasks");
            listed.extend(
                tasks
                    .iter()
                    .map(|t| t["id"].as_str().expect("id").to_owned()),
            );
            let Some(next) = page["next"].as_str() else {
                break;
            };
            assert!(listed.len() <= ids.len(), "the pages never end: {listed:?}");
            path = format!("/tasks?state=Error&limit=1&after={}", encode(next));
        }
        assert_eq!(listed, ids, "each once, oldest first");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_4xx_naming_the_problem_and_creates_nothing() {
    let harness = Harness::start(5).await;
    let valid = json!({ "workflow": "drone-delivery", "input": delivery_input() });
    let with = |f: &dyn Fn(&mut Value)| {
        let mut body = valid.clone();
        f(&mut body);
        body.to_string().into_bytes()
    };
    let oversize =
        json!({ "workflow": "drone-delivery", "input": { "pad": "x".repeat(70_000) } }).to_string();
    // (method, path, body, status, error code, field named)
    type Case<'a> = (&'a str, &'a str, Vec<u8>, u16, &'a str, Option<&'a str>);
    let cases: Vec<Case> = vec![
        (
            "POST",
            "/tasks",
            b"{\"workflow\": ".to_vec(),
            400,
            "invalid_json",
            None,
        ),
        (
            "POST",
            "/tasks",
            b"[1, 2]".to_vec(),
            400,
            "invalid_body",
            None,
        ),
        (
            "POST",
            "/tasks",
            with(&|b| b["workflow"] = json!("teleport")),
            400,
            "unknown_workflow",
            Some("workflow"),
        ),
        (
            "POST",
            "/tasks",
            with(&|b| {
                b.as_object_mut().expect("object").remove("input");
            }),
            400,
            "invalid_field",
            Some("input"),
        ),
        (
            "POST",
            "/tasks",
            with(&|b| b["workflow"] = json!(7)),
            400,
            "invalid_field",
            Some("workflow"),
        ),
        (
            "POST",
            "/tasks",
            with(&|b| b["input"]["weight_kg"] = json!("heavy")),
            400,
            "invalid_field",
            Some("input.weight_kg"),
        ),
        (
            "POST",
            "/tasks",
            with(&|b| {
                b["input"].as_object_mut().expect("input").remove("pickup");
            }),
            400,
            "invalid_field",
            Some("input.pickup"),
        ),
        (
            "POST",
            "/tasks",
            with(&|b| b["colour"] = json!("red")),
            400,
            "invalid_field",
            Some("colour"),
        ),
        (
            "POST",
            "/tasks",
            with(&|b| b["notify"] = json!("no spaces allowed")),
            400,
            "invalid_field",
            Some("notify"),
        ),
        (
            "POST",
            "/tasks",
            with(&|b| b["notify"] = json!("scheduler")),
            400,
            "invalid_field",
            Some("notify"),
        ),
        (
            "POST",
            "/tasks",
            with(&|b| b["notify"] = json!("agent-requests-dlq")),
            400,
            "invalid_field",
            Some("notify"),
        ),
        (
            "POST",
            "/tasks",
            with(&|b| b["id"] = json!("a/b")),
            400,
            "invalid_field",
            Some("id"),
        ),
        (
            "PUT",
            "/tasks/has.dot",
            valid.to_string().into_bytes(),
            400,
            "invalid_id",
            Some("id"),
        ),
        (
            "PUT",
            "/tasks/abc",
            with(&|b| b["id"] = json!("xyz")),
            400,
            "invalid_field",
            Some("id"),
        ),
        (
            "POST",
            "/tasks",
            oversize.into_bytes(),
            413,
            "body_too_large",
            None,
        ),
        (
            "DELETE",
            "/tasks/abc",
            Vec::new(),
            405,
            "method_not_allowed",
            None,
        ),
        ("GET", "/tasks/missing", Vec::new(), 404, "not_found", None),
        (
            "GET",
            "/tasks?state=Lost",
            Vec::new(),
            400,
            "invalid_query",
            Some("state"),
        ),
        (
            "GET",
            "/tasks?state=Error&limit=0",
            Vec::new(),
            400,
            "invalid_query",
            Some("limit"),
        ),
        (
            "GET",
            "/tasks?state=Error&after=not-a-cursor",
            Vec::new(),
            400,
            "invalid_query",
            Some("after"),
        ),
        ("GET", "/nowhere", Vec::new(), 404, "not_found", None),
    ];
    for (method, path, body, status, code, field) in cases {
        let (got, _, response) = harness.call(method, path, Some(&body)).await;
        let error = &response["error"];
        let case = format!(
            "{method} {path} {}",
            String::from_utf8_lossy(&body[..body.len().min(80)])
        );
        assert_eq!(
            (got, error["code"].as_str()),
            (status, Some(code)),
            "{case}: {response}"
        );
        assert_eq!(error["field"].as_str(), field, "{case}: {response}");
        assert!(
            !error["message"].as_str().unwrap_or_default().is_empty(),
            "{case}: a message"
        );
    }
    assert!(
        harness
            .running
            .system
            .backend
            .all_tasks()
            .await
            .expect("tasks")
            .is_empty(),
        "no task was created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answers_each_submission_as_it_would_be_answered_alone() {
    let harness = Harness::start(5).await;
    let (status, _) = harness.put_task("batch-taken", &quick(None)).await;
    assert_eq!(status, 202);
    let named = |id: &str, input: Value| json!({"id": id, "workflow": "drone-delivery-quick", "input": input});
    let mut other = delivery_input();
    other["weight_kg"] = json!(9.5);
    // Within the batch's limit, over a submission's own.
    let mut huge = delivery_input();
    huge["note"] = json!("x".repeat(70 * 1024));
    let batch = json!({"tasks": [
        named("batch-1", delivery_input()),
        {"workflow": "drone-delivery-quick", "input": delivery_input()},
        named("batch-bad", json!({})),
        named("batch-taken", other),
        named("batch-taken", delivery_input()),
        {"workflow": "drone-delivery-quick", "input": delivery_input(), "colour": "red"},
        named("batch-huge", huge),
    ]});
    let (status, _, answer) = harness
        .call("POST", "/tasks/batch", Some(batch.to_string().as_bytes()))
        .await;
    assert_eq!(status, 200, "{answer:#}");
    let results = answer["results"].as_array().expect("results");
    let statuses: Vec<_> = results.iter().map(|r| r["status"].as_u64()).collect();
    assert_eq!(
        statuses,
        [202, 202, 400, 409, 202, 400, 413].map(Some),
        "{answer:#}"
    );
    assert_eq!(results[0]["location"], "/tasks/batch-1");
    assert_eq!(results[0]["body"]["id"], "batch-1");
    let generated = results[1]["body"]["id"].as_str().expect("a generated id");
    assert_eq!(results[1]["location"], format!("/tasks/{generated}"));
    assert_eq!(results[2]["body"]["error"]["field"], "input.customer_id");
    assert!(results[2].get("location").is_none());
    assert_eq!(results[4]["location"], "/tasks/batch-taken");
    assert_eq!(results[5]["body"]["error"]["field"], "colour");
    assert_eq!(results[6]["body"]["error"]["code"], "body_too_large");
    for id in ["batch-1", generated, "batch-taken"] {
        harness.settle_in(id, "Processed").await;
    }
    assert_eq!(harness.effects_of("batch-taken").await.len(), 5, "one task");
    let (status, _, _) = harness.call("GET", "/tasks/batch-bad", None).await;
    assert_eq!(status, 404);

    // What is wrong with the batch itself is its 400.
    let many = json!({"tasks": vec![quick(None); 26]});
    for (body, field) in [
        (json!({"tasks": []}), "tasks"),
        (many, "tasks"),
        (json!({"task": [quick(None)]}), "task"),
        (json!([quick(None)]), ""),
    ] {
        let (status, _, refused) = harness
            .call("POST", "/tasks/batch", Some(body.to_string().as_bytes()))
            .await;
        assert_eq!(status, 400, "{refused:#}");
        assert_eq!(
            refused["error"]["field"].as_str().unwrap_or_default(),
            field,
            "{refused:#}"
        );
    }
}
