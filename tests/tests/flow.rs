//! Flow control through the API: a submission's priority, kept by its task and its
//! children.

use std::time::Duration;

use sas_tests::{Harness, delivery_input, service};
use serde_json::{Value, json};

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
    submit_many(&harness, "limited", 500, &body).await;
    for i in 0..500 {
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
    assert_eq!(harness.calls("drone").await, 500);
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
async fn a_rate_of_20_a_second_lets_20_calls_start_each_second() {
    let harness =
        Harness::start_with_services(r#"{"drone": {"rate": {"per_second": 20, "burst": 20}}}"#)
            .await;
    let body = json!({ "workflow": "drone-delivery", "input": delivery_input() });
    submit_many(&harness, "rated", 80, &body).await;
    // Each task at its drone step (called, or waiting for the rate's next token)
    // before the clock moves.
    for i in 0..80 {
        harness
            .wait_for(&format!("rated-{i}"), "at its drone step", |t| {
                t["steps"][3]["state"] != "Pending"
            })
            .await;
    }
    let mut seen = Vec::new();
    for second in 1..=4_u64 {
        let calls = settled_calls(&harness, "drone").await;
        seen.push(calls);
        assert_eq!(calls, 20 * second, "by second {second}: {seen:?}");
        harness.advance(Duration::from_secs(1));
    }
    for i in 0..80 {
        harness.settle_in(&format!("rated-{i}"), "Processed").await;
    }
    assert_eq!(harness.calls("drone").await, 80);
}

/// The calls `service` has had, once they stop changing for a while.
async fn settled_calls(harness: &Harness, service: &str) -> u64 {
    let mut last = harness.calls(service).await;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = harness.calls(service).await;
        if now == last {
            return now;
        }
        last = now;
    }
}

/// The gate of service `name`'s first limit, in the operator's view.
fn first_gate<'v>(view: &'v Value, name: &str) -> &'v Value {
    &service(view, name)["limits"][0]["gate"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_sees_per_service_what_is_limited_and_the_calls_in_flight_and_waiting() {
    let harness = Harness::start_with_services(
        r#"{"drone": {"max_concurrency": 2, "rate": {"per_second": 50, "burst": 10}}}"#,
    )
    .await;
    harness.faults("drone", json!({ "latency_ms": 4000 })).await;
    let body = json!({ "workflow": "drone-delivery", "input": delivery_input() });
    submit_many(&harness, "seen", 6, &body).await;
    let view = harness
        .services_when(None, |v| {
            let gate = first_gate(v, "drone");
            gate["in_flight"] == 2 && gate["waiting"] == 4
        })
        .await;
    let drone = &service(&view, "drone")["limits"][0];
    assert_eq!(
        (
            &drone["of"],
            &drone["max_concurrency"],
            &drone["per_second"],
            &drone["burst"]
        ),
        (&json!("service:drone"), &json!(2), &json!(50.0), &json!(10)),
        "{view:#}"
    );
    assert_eq!(drone["gate"]["name"], "service:drone");
    assert!(drone["gate"]["tokens"].as_f64().is_some(), "{view:#}");
    assert_eq!(
        service(&view, "account")["limits"],
        json!([]),
        "a service without a limit shows none"
    );
    // A step's limit kept per customer shows no gate until a key is named.
    let per_customer = &service(&view, "delivery")["limits"][0];
    assert_eq!(
        (
            &per_customer["of"],
            &per_customer["key"],
            &per_customer["gate"]
        ),
        (
            &json!("step:one-delivery-per-customer/create-delivery"),
            &json!("input.customer_id"),
            &Value::Null
        ),
        "{view:#}"
    );

    // The waiting calls' wait grows with the clock.
    harness.advance(Duration::from_secs(5));
    let view = harness
        .services_when(None, |v| {
            first_gate(v, "drone")["longest_wait_ms"]
                .as_u64()
                .is_some_and(|ms| ms >= 5000)
        })
        .await;
    assert!(first_gate(&view, "drone")["waiting"].as_u64() > Some(0));
    for i in 0..6 {
        harness.settle_in(&format!("seen-{i}"), "Processed").await;
    }
    let view = harness
        .services_when(None, |v| first_gate(v, "drone")["in_flight"] == 0)
        .await;
    assert_eq!(first_gate(&view, "drone")["waiting"], 0);

    // Named, a key's gate shows its own calls.
    harness
        .faults("delivery", json!({ "latency_ms": 4000 }))
        .await;
    let one = |customer: &str| json!({ "workflow": "one-delivery-per-customer", "input": { "customer_id": customer } });
    submit_many(&harness, "c-1", 3, &one("c 1")).await;
    let view = harness
        .services_when(Some("c%201"), |v| {
            let gate = &service(v, "delivery")["limits"][0]["gate"];
            gate["in_flight"] == 1 && gate["waiting"] == 2
        })
        .await;
    assert_eq!(view["key"], "c 1");
    assert_eq!(
        service(&view, "delivery")["limits"][0]["gate"]["name"],
        "step:one-delivery-per-customer/create-delivery/c 1"
    );
    let (status, _, refused) = harness
        .call("GET", "/operator/services?customer=c-1", None)
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["field"], "customer", "{refused}");
    for i in 0..3 {
        harness.settle_in(&format!("c-1-{i}"), "Processed").await;
    }
}

/// Many calls through one gate at once: the writers race for its one record, and every
/// slot must still be given back when its call ends (a slot lost stays held until its
/// hold passes, which the harness's clock never reaches).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_crowd_at_one_gate_every_slot_is_given_back_when_its_call_ends() {
    let harness = Harness::start_with_services(r#"{"drone": {"max_concurrency": 50}}"#).await;
    let body = json!({ "workflow": "drone-delivery", "input": delivery_input() });
    submit_many(&harness, "crowd", 600, &body).await;
    for i in 0..600 {
        harness.settle_in(&format!("crowd-{i}"), "Processed").await;
    }
    let view = harness
        .services_when(None, |v| first_gate(v, "drone")["in_flight"] == 0)
        .await;
    assert_eq!(first_gate(&view, "drone")["waiting"], 0, "{view:#}");
    let peak = harness.peak_concurrency("drone").await;
    assert!(peak <= 50, "the drone service saw {peak} calls at once");
}

/// A state machine's `http:invoke` passes the gate of the service its endpoint is at,
/// the gate a workflow's calls to that service pass: 20 executions at once, and the
/// scanner, limited to 2 calls at once, never sees a 3rd, while the ledger does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_invoke_passes_the_gate_of_the_service_its_endpoint_is_at() {
    let harness =
        Harness::start_with_services(r#"{"scanner": {"max_concurrency": 2}, "ledger": {}}"#).await;
    harness.faults("scanner", json!({ "latency_ms": 30 })).await;
    harness.faults("ledger", json!({ "latency_ms": 300 })).await;
    let mock = &harness.mock;
    let input = json!({
        "drone_at": format!("{mock}/scanner/scan"),
        "delivery_at": format!("{mock}/ledger/entries"),
    })
    .to_string();
    let machine = "arn:aws:states:us-east-1:000000000000:stateMachine:large-values";
    let harness = &harness;
    let starts = (0..20).map(|i| {
        let start =
            json!({"stateMachineArn": machine, "name": format!("gated-{i}"), "input": input});
        async move { harness.step_functions("StartExecution", &start).await }
    });
    for started in futures_util::future::join_all(starts).await {
        let ended = harness.execution_ended(&started["executionArn"]).await;
        assert_eq!(ended["status"], "SUCCEEDED", "{ended}");
    }
    assert_eq!(harness.calls("scanner").await, 20);
    let peak = harness.peak_concurrency("scanner").await;
    assert!(peak <= 2, "the scanner saw {peak} calls at once");
    assert!(
        harness.peak_concurrency("ledger").await > 2,
        "the ledger, unlimited, is not held back"
    );
    let view = harness
        .services_when(None, |v| !service(v, "scanner").is_null())
        .await;
    assert_eq!(
        service(&view, "scanner")["limits"][0]["of"],
        "service:scanner",
        "the operator sees the scanner's gate: {view}"
    );
}
