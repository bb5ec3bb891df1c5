//! Tasks run by the functions: a submission that waits answered with its end, one left
//! in an ingest queue created and run, a delivery once though every message arrives
//! twice, a hung step retried by the supervisor or its deadline message, the threshold
//! passed and compensated.

use std::time::Duration;

use sas_core::ports::Consumer;
use sas_tests::aws::{Remote, Stack};
use sas_tests::{
    UNDONE_BEFORE_THE_DELIVERY, accepted_submission, delivery_input, notified_states, step_states,
};
use serde_json::{Value, json};

use super::{PATIENCE, POLICY, quick};

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
    let (alert, attributes) = &alerts[0];
    assert_eq!(alert["task_id"], "doomed");
    // The task's trace, in the alert and as the attribute a subscriber continues.
    let trace = alert["trace"]["trace_id"].as_str().expect("its trace");
    let traceparent = attributes["traceparent"]["Value"].as_str();
    assert!(
        traceparent.is_some_and(|t| t.starts_with(&format!("00-{trace}-"))),
        "{attributes:#}"
    );
    let (_, in_error) = stack.http("GET", "/tasks?state=Error", None).await;
    assert_eq!(in_error["tasks"][0]["id"], "doomed");
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
