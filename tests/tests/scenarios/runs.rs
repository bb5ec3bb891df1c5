//! A drone delivery run end to end: its steps in order, each effect once however often
//! it is submitted; two schedulers racing, one claim; a hung agent and the supervisor's
//! retry; the threshold passed and a permanent error, compensated; what each step is sent.

use std::sync::Arc;
use std::time::Duration;

use sas_core::app::{Handled, Recovery};
use sas_core::ports::{OutgoingMessage, Queues};
use sas_domain::decide::Verdict;
use sas_domain::ids::TaskId;
use sas_domain::messages::SchedulerMessage;
use sas_tests::{
    Harness, UNDONE_AFTER_THE_DELIVERY_FAILED, UNDONE_BEFORE_THE_DELIVERY, delivery_input,
    notified_states, step_states,
};
use serde_json::{Value, json};

use super::quick;

const STEPS: [&str; 5] = [
    "check-account",
    "create-package",
    "check-transport",
    "schedule-drone",
    "create-delivery",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drone_delivery_runs_its_steps_in_order_once_however_often_it_is_submitted() {
    let harness = Harness::start(5).await;
    let body =
        json!({ "workflow": "drone-delivery", "input": delivery_input(), "notify": "my-updates" });
    let (status, first) = harness.put_task("order-1", &body).await;
    // Created claimed by the local process, its own scheduler.
    assert_eq!((status, first["state"].as_str()), (202, Some("Processing")));
    let (status, location, _) = harness
        .call("PUT", "/tasks/order-1", Some(body.to_string().as_bytes()))
        .await;
    assert_eq!(
        (status, location.as_deref()),
        (202, Some("/tasks/order-1")),
        "the same PUT again is accepted"
    );
    let again = json!({ "id": "order-1", "workflow": "drone-delivery", "input": delivery_input(), "notify": "my-updates" });
    let (status, _, _) = harness
        .call("POST", "/tasks", Some(again.to_string().as_bytes()))
        .await;
    assert_eq!(status, 202, "and so is a POST naming the same id");

    let task = harness.settle_in("order-1", "Processed").await;
    assert_eq!(step_states(&task), ["Processed"; 5]);
    let steps = task["steps"].as_array().expect("steps");
    let names: Vec<_> = steps
        .iter()
        .map(|s| s["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, STEPS);
    for pair in steps.windows(2) {
        assert!(
            pair[0]["finished_at"].as_str() <= pair[1]["started_at"].as_str(),
            "steps ran in order: {pair:?}"
        );
    }
    assert!(
        steps
            .iter()
            .all(|s| s["attempt"] == 1 && s["failure_count"] == 0)
    );
    assert_eq!(
        (task["locked_by"].clone(), task["complete_by"].clone()),
        (Value::Null, Value::Null)
    );
    assert_eq!(
        task["workflow"],
        json!({"name": "drone-delivery", "version": 2})
    );

    let effects = harness.effects_of("order-1").await;
    assert_eq!(effects.len(), 5, "one effect per step: {effects:?}");
    assert!(
        effects.iter().all(|(_, _, calls)| *calls == 1),
        "{effects:?}"
    );

    let mut different = body.clone();
    different["input"]["weight_kg"] = json!(9);
    let (status, conflict) = harness.put_task("order-1", &different).await;
    assert_eq!(
        (status, conflict["error"]["code"].as_str()),
        (409, Some("conflict"))
    );

    let updates = harness.notifications("my-updates").await;
    assert_eq!(
        notified_states("order-1", &updates),
        ["Pending", "Processing", "Processed"],
        "each status change, with the task id"
    );
    let (status, _, listing) = harness.call("GET", "/tasks?state=Processed", None).await;
    assert_eq!(
        (status, listing["error"]["field"].as_str()),
        (400, Some("state")),
        "Processed tasks are not indexed"
    );
    let (_, _, pending) = harness.call("GET", "/tasks?state=Pending", None).await;
    assert_eq!(pending["tasks"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_agent_is_silent_and_the_supervisor_retry_applies_the_effect_once() {
    let harness = Harness::start(5).await;
    harness
        .faults("drone", json!({ "hang_ms": 3000, "times": 1 }))
        .await;
    harness.put_task("hang-1", &quick(None)).await;

    // The drone service applies the effect but answers after the step's 500 ms budget.
    let task = harness
        .wait_for("hang-1", "stuck on the drone", |t| {
            t["steps"][3]["state"] == "Processing"
        })
        .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let drone = harness.running.system.queues.agent_requests.clone();
    assert_eq!(
        harness.depth(&drone).await.visible + harness.depth(&drone).await.invisible,
        0,
        "the agent is done"
    );
    let still = harness.task("hang-1").await;
    assert_eq!(
        still["steps"][3]["state"], "Processing",
        "the agent answered nothing, not even an error"
    );
    assert_eq!(still["version"], task["version"]);

    assert!(
        harness.sweep().await.is_empty(),
        "the lease has not expired yet"
    );
    harness.advance(Duration::from_millis(501));
    let report = harness.sweep().await;
    assert_eq!(
        report.get(&Recovery::Decided(Verdict::Retry)),
        Some(&1),
        "{report:?}"
    );
    let task = harness.settle_in("hang-1", "Processed").await;
    assert_eq!(
        (
            task["failure_count"].as_u64(),
            task["steps"][3]["failure_count"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(task["steps"][3]["attempt"], 2);

    let effects = harness.effects_of("hang-1").await;
    let drone_effects: Vec<_> = effects.iter().filter(|(s, _, _)| s == "drone").collect();
    assert_eq!(
        drone_effects,
        [&("drone".into(), "/drones/schedule".into(), 2)],
        "called twice, applied once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_threshold_the_task_is_compensated_in_reverse_and_an_operator_alerted() {
    let harness = Harness::start(5).await;
    harness
        .faults("drone", json!({ "transient_error_rate": 1.0, "times": 3 }))
        .await;
    harness
        .put_task("doomed", &quick(Some("doomed-updates")))
        .await;
    let budget = Duration::from_millis(501);

    for failure in 1..=2u64 {
        let task = harness.settle_in("doomed", "Processing").await;
        assert_eq!(task["steps"][3]["attempt"].as_u64(), Some(failure));
        harness.advance(budget);
        assert_eq!(
            harness
                .sweep()
                .await
                .get(&Recovery::Decided(Verdict::Retry)),
            Some(&1)
        );
    }
    // The second failure reaches the threshold: the retry waits the extended wait.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiting = harness.task("doomed").await;
    assert_eq!(
        (waiting["state"].as_str(), waiting["failure_count"].as_u64()),
        (Some("Pending"), Some(2))
    );
    harness.advance(Duration::from_secs(5));
    harness
        .wait_for("doomed", "on its third attempt", |t| {
            t["steps"][3]["attempt"] == 3
        })
        .await;
    let task = harness.settle_in("doomed", "Processing").await;
    assert_eq!(task["steps"][3]["state"], "Processing");

    harness.advance(budget);
    assert_eq!(
        harness
            .sweep()
            .await
            .get(&Recovery::Decided(Verdict::GaveUp)),
        Some(&1)
    );
    let task = harness.settle_in("doomed", "Error").await;
    assert_eq!(step_states(&task), UNDONE_BEFORE_THE_DELIVERY);
    assert_eq!(
        task["steps"][3]["failure_count"], 3,
        "the threshold of 2, passed by one"
    );
    assert_eq!(task["error"], "step 'schedule-drone' timed out 3 times");

    let effects = harness.effects_of("doomed").await;
    let undone: Vec<_> = effects
        .iter()
        .filter(|(_, op, _)| op.ends_with("/cancel"))
        .map(|(s, _, c)| (s.as_str(), *c))
        .collect();
    assert_eq!(undone, [("drone", 1), ("package", 1)]);
    let (_, _, alerts) = harness.call("GET", "/local/alerts", None).await;
    assert_eq!(alerts["alerts"][0]["task_id"], "doomed");
    assert_eq!(
        alerts["alerts"][0]["reason"],
        "step 'schedule-drone' timed out 3 times"
    );
    let (_, _, in_error) = harness.call("GET", "/tasks?state=Error", None).await;
    assert_eq!(in_error["tasks"][0]["id"], "doomed");
    let updates = harness.notifications("doomed-updates").await;
    assert_eq!(
        notified_states("doomed", &updates),
        [
            "Pending",
            "Processing",
            "Pending",
            "Processing",
            "Pending",
            "Processing",
            "Compensating",
            "Error"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_error_compensates_at_once_and_an_operator_resubmission_completes() {
    let harness = Harness::start(5).await;
    harness
        .faults("delivery", json!({ "permanent_error_rate": 1.0 }))
        .await;
    harness.put_task("refused", &quick(None)).await;
    let task = harness.settle_in("refused", "Error").await;
    assert_eq!(step_states(&task), UNDONE_AFTER_THE_DELIVERY_FAILED);
    assert_eq!(
        harness.calls("delivery").await,
        1,
        "no retry after a non-transient error"
    );
    assert_eq!(
        task["steps"][4]["failure_count"], 0,
        "and no supervisor involved"
    );
    assert!(
        task["error"].as_str().expect("error").contains("422"),
        "{}",
        task["error"]
    );
    let (_, _, alerts) = harness.call("GET", "/local/alerts", None).await;
    assert_eq!(alerts["alerts"].as_array().expect("alerts").len(), 1);

    let (status, _, refused) = harness
        .call("POST", "/tasks/order-nope/resubmit", None)
        .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    harness.clear_faults("delivery").await;
    let (status, location, body) = harness.call("POST", "/tasks/refused/resubmit", None).await;
    assert_eq!(
        (status, location.as_deref(), body["run"].as_u64()),
        (202, Some("/tasks/refused"), Some(2))
    );
    let task = harness.settle_in("refused", "Processed").await;
    assert_eq!(step_states(&task), ["Processed"; 5]);
    let (status, _, again) = harness.call("POST", "/tasks/refused/resubmit", None).await;
    assert_eq!(
        (status, again["error"]["code"].as_str()),
        (409, Some("not_in_error"))
    );

    let effects = harness.effects_of("refused").await;
    let packages: Vec<_> = effects.iter().filter(|(s, _, _)| s == "package").collect();
    assert_eq!(
        packages.len(),
        3,
        "run 1 created and cancelled a package, run 2 created a new one: {packages:?}"
    );
    assert_eq!(
        effects.iter().filter(|(s, _, _)| s == "account").count(),
        1,
        "the account check was not redone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_schedulers_racing_for_one_task_claim_it_once() {
    let harness = Harness::start(5).await;
    // Stop the consumers so that only the two racers handle the task.
    let Harness { running, .. } = &harness;
    let app = Arc::clone(&running.system.app);
    let backend = Arc::clone(&running.system.backend);
    let queues = running.system.queues.clone();
    let ports = sas_core::app::Ports::of(&backend, Arc::clone(&harness.clock) as _);
    let workflows = Arc::new(sas_domain::workflow::Registry::built_in());
    let other = sas_core::app::App::new(ports, workflows, queues.clone(), "other-scheduler".into());
    let submission = sas_domain::submission::Submission::new(
        TaskId::parse("raced").expect("id"),
        delivery_input(),
    );
    // Submit straight to the store, and race before any consumer sees the message.
    let (task, order, _) = sas_domain::decide::submit(
        &app.workflows().latest("drone-delivery").expect("drone"),
        submission,
        sas_core::clock::Clock::now(harness.clock.as_ref()),
    );
    sas_core::ports::TaskStore::create(backend.as_ref(), &task, &order)
        .await
        .expect("created");
    let run = serde_json::to_string(&SchedulerMessage::Run {
        task_id: task.id.clone(),
    })
    .expect("json");
    let (a, b) = tokio::join!(
        app.on_scheduler_message("scheduler", &run),
        other.on_scheduler_message("scheduler", &run)
    );
    let mut verdicts = [a.expect("handled"), b.expect("handled")];
    verdicts.sort_unstable();
    assert_eq!(
        verdicts,
        [
            Handled::Decided(Verdict::NotWaitingForScheduler),
            Handled::Decided(Verdict::Claimed),
        ]
    );
    let claimed = harness.settle_in("raced", "Processed").await;
    assert_eq!(
        claimed["steps"][0]["attempt"], 1,
        "one dispatch of the first step"
    );
    assert_eq!(
        harness
            .effects_of("raced")
            .await
            .iter()
            .map(|e| e.2)
            .sum::<u64>(),
        5
    );

    // A poison message ends in the dead-letter queue after maxReceiveCount receives.
    let poison = OutgoingMessage {
        body: "{\"type\":\"nonsense\"}".into(),
        delay: Duration::ZERO,
        trace: None,
    };
    backend
        .send(&queues.scheduler, &[poison])
        .await
        .expect("sent");
    let dead_letters = sas_domain::ids::QueueName::parse("scheduler-dlq").expect("name");
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        harness.advance(Duration::from_secs(31));
    }
    assert_eq!(
        harness.depth(&dead_letters).await.visible,
        1,
        "the poison message is dead-lettered"
    );
    assert_eq!(harness.depth(&queues.scheduler).await.visible, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_with_fields_is_sent_only_those_and_the_others_everything() {
    let harness = Harness::start(5).await;
    let body = json!({ "workflow": "drone-delivery-mapped", "input": delivery_input() });
    let (status, _) = harness.put_task("mapped-1", &body).await;
    assert_eq!(status, 202);
    let task = harness.settle_in("mapped-1", "Processed").await;
    let received = |step: usize| task["steps"][step]["output"]["received"].clone();
    assert_eq!(
        received(3),
        json!([
            "fields",
            "fields.package",
            "fields.pickup",
            "step",
            "task_id"
        ]),
        "the drone service got the package's id and the pickup, nothing else: {task:#}"
    );
    assert_eq!(
        received(4),
        json!(["input", "results", "step", "task_id"]),
        "a step without fields gets the input and every earlier result"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steps_paths_are_built_from_results_for_its_call_and_its_compensation() {
    let harness = Harness::start(5).await;
    harness
        .faults("delivery", json!({ "permanent_error_rate": 1.0 }))
        .await;
    let body = json!({ "workflow": "drone-delivery-mapped", "input": delivery_input() });
    harness.put_task("paths-1", &body).await;
    let task = harness.settle_in("paths-1", "Error").await;
    let package = task["steps"][1]["output"]["id"]
        .as_str()
        .expect("a package id");
    let drone = task["steps"][3]["output"]["id"]
        .as_str()
        .expect("a drone id");
    let drone_operations: Vec<String> = harness
        .effects_of("paths-1")
        .await
        .into_iter()
        .filter(|(service, _, _)| service == "drone")
        .map(|(_, operation, _)| operation)
        .collect();
    let mut expected = [
        format!("PUT /drones/for/{package}"),
        format!("DELETE /drones/{drone}"),
    ];
    expected.sort();
    assert_eq!(
        drone_operations, expected,
        "scheduled (PUT) for the package created, and that drone cancelled (DELETE): {task:#}"
    );
}
