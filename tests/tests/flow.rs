//! Flow control through the API: a submission's priority, kept by its task and its
//! children.

use sas_tests::{Harness, delivery_input};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_carries_a_priority_from_1_to_5_its_task_shows_it_and_3_is_the_default() {
    let harness = Harness::start(5).await;
    let urgent = json!({ "workflow": "drone-delivery", "input": delivery_input(), "priority": 1 });
    let (status, task) = harness.put_task("urgent", &urgent).await;
    assert_eq!(status, 202, "{task}");
    assert_eq!(task["priority"], 1);
    let plain = json!({ "workflow": "drone-delivery", "input": delivery_input() });
    let (_, task) = harness.put_task("plain", &plain).await;
    assert_eq!(task["priority"], 3, "the default");

    for priority in [json!(0), json!(6), json!(-1), json!("high")] {
        let body = json!({ "workflow": "drone-delivery", "input": delivery_input(), "priority": priority });
        let (status, answer) = harness.put_task("refused", &body).await;
        assert_eq!(status, 400, "{priority}: {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("priority"),
            "{priority}: the error names the field: {answer}"
        );
    }
    // A repeat with another priority is another request.
    let (status, answer) = harness
        .put_task(
            "urgent",
            &json!({ "workflow": "drone-delivery", "input": delivery_input(), "priority": 2 }),
        )
        .await;
    assert_eq!(status, 409, "{answer}");
    harness.settle_in("urgent", "Processed").await;
}

/// Tasks of `workflow` submitted at once, `n` of them, named `<prefix>-<i>`.
async fn submit_many(harness: &Harness, prefix: &str, n: usize, body: &serde_json::Value) {
    let submissions = (0..n).map(|i| {
        let id = format!("{prefix}-{i}");
        async move { harness.put_task(&id, body).await }
    });
    for (status, answer) in futures_util::future::join_all(submissions).await {
        assert_eq!(status, 202, "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_limited_to_3_calls_at_once_never_sees_a_4th_and_no_step_times_out_waiting() {
    let harness = Harness::start_with_services(r#"{"drone": {"max_concurrency": 3}}"#).await;
    harness.faults("drone", json!({ "latency_ms": 20 })).await;
    harness.faults("account", json!({ "latency_ms": 20 })).await;
    let body = json!({ "workflow": "drone-delivery", "input": delivery_input() });
    submit_many(&harness, "limited", 200, &body).await;
    for i in 0..200 {
        let task = harness
            .settle_in(&format!("limited-{i}"), "Processed")
            .await;
        let drone = &task["steps"][3];
        assert_eq!(drone["name"], "schedule-drone");
        assert_eq!(
            drone["failure_count"], 0,
            "no timeout while it waited: {drone}"
        );
        assert!(drone["waited_ms"].is_u64(), "its wait is shown: {drone}");
    }
    assert_eq!(harness.calls("drone").await, 200);
    let peak = harness.peak_concurrency("drone").await;
    assert!(peak <= 3, "the drone service saw {peak} calls at once");
    assert!(
        harness.peak_concurrency("account").await > 3,
        "the others are not limited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_per_customer_serialises_that_customers_calls_while_others_go_on() {
    let harness = Harness::start_with_services(
        r#"{"drone": {"max_concurrency": 1, "key": "input.customer_id"}}"#,
    )
    .await;
    harness.faults("drone", json!({ "latency_ms": 30 })).await;
    let customer = |id: &str| {
        let mut input = delivery_input();
        input["customer_id"] = json!(id);
        json!({ "workflow": "drone-delivery", "input": input })
    };
    submit_many(&harness, "busy", 8, &customer("busy")).await;
    let others = (0..8).map(|i| customer(&format!("other-{i}")));
    for (i, body) in others.enumerate() {
        harness.put_task(&format!("other-{i}"), &body).await;
    }
    for i in 0..8 {
        harness.settle_in(&format!("busy-{i}"), "Processed").await;
        harness.settle_in(&format!("other-{i}"), "Processed").await;
    }
    assert_eq!(
        harness.peak_concurrency("drone/busy").await,
        1,
        "one at a time for one customer"
    );
    assert!(
        harness.peak_concurrency("drone").await > 1,
        "other customers' calls went on beside"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_backlog_urgent_tasks_calls_go_before_those_that_came_just_before() {
    let harness = Harness::start_with_services(r#"{"drone": {"max_concurrency": 1}}"#).await;
    harness.faults("drone", json!({ "latency_ms": 10 })).await;
    let plain = json!({ "workflow": "drone-delivery", "input": delivery_input() });
    submit_many(&harness, "backlog", 30, &plain).await;
    let urgent = json!({ "workflow": "drone-delivery", "input": delivery_input(), "priority": 1 });
    submit_many(&harness, "urgent", 5, &urgent).await;
    for (prefix, n) in [("backlog", 30), ("urgent", 5)] {
        for i in 0..n {
            harness
                .settle_in(&format!("{prefix}-{i}"), "Processed")
                .await;
        }
    }
    // The drone's calls in the order the service took them: the urgent ones among
    // the first, ahead of most of the backlog that came before them.
    let order: Vec<String> = harness
        .effects()
        .await
        .into_iter()
        .filter(|e| e["service"] == "drone")
        .filter_map(|e| e["idempotency_key"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(order.len(), 35);
    let last_urgent = order
        .iter()
        .rposition(|key| key.starts_with("urgent-"))
        .expect("urgent calls");
    assert!(
        last_urgent < 20,
        "the urgent calls all went before the 20th of 35: {order:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_of_5_a_second_lets_5_calls_start_each_second() {
    let harness =
        Harness::start_with_services(r#"{"drone": {"rate": {"per_second": 5, "burst": 5}}}"#).await;
    let body = json!({ "workflow": "drone-delivery", "input": delivery_input() });
    submit_many(&harness, "rated", 20, &body).await;
    let mut seen = Vec::new();
    for second in 1..=4_u64 {
        let calls = settled_calls(&harness, "drone").await;
        seen.push(calls);
        assert_eq!(calls, 5 * second, "by second {second}: {seen:?}");
        harness.advance(std::time::Duration::from_secs(1));
    }
    for i in 0..20 {
        harness.settle_in(&format!("rated-{i}"), "Processed").await;
    }
    assert_eq!(harness.calls("drone").await, 20);
}

/// The calls `service` has had, once they stop changing for a while.
async fn settled_calls(harness: &Harness, service: &str) -> u64 {
    let mut last = harness.calls(service).await;
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let now = harness.calls(service).await;
        if now == last {
            return now;
        }
        last = now;
    }
}
