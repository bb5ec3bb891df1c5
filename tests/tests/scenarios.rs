//! The pattern end to end on the embedded backend, through the HTTP API, with a
//! manual clock and the supervisor swept by the test.

use std::sync::Arc;
use std::time::Duration;

use sas_core::app::{App, Handled, Ports, QueueNames, Recovery};
use sas_core::ports::{OutgoingMessage, Queues, TaskStore};
use sas_domain::decide::{Resubmit, Verdict};
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::messages::{
    AgentRequest, AgentResponse, Buffered, Operation, Outcome as MessageOutcome, SchedulerMessage,
};
use sas_domain::submission::Submission;
use sas_domain::task::{Actor, Order, Request, StepState, Task, TaskState, WorkflowRef};
use sas_domain::time::Timestamp;
use sas_domain::workflow::Registry;
use sas_testkit::ManualClock;
use sas_testkit::memory::Memory;
use sas_tests::{
    Harness, UNDONE_AFTER_THE_DELIVERY_FAILED, UNDONE_BEFORE_THE_DELIVERY, delivery_input,
    notified_states, step_states,
};
use serde_json::{Value, json};

const STEPS: [&str; 5] = [
    "check-account",
    "create-package",
    "check-transport",
    "schedule-drone",
    "create-delivery",
];

fn quick(notify: Option<&str>) -> Value {
    json!({ "workflow": "drone-delivery-quick", "input": delivery_input(), "notify": notify })
}

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

/// `message` handled by `app`'s scheduler, from the queue it comes by.
async fn handled_by(app: &App, message: SchedulerMessage) -> Handled {
    let body = serde_json::to_string(&message).expect("json");
    let queue = match message {
        SchedulerMessage::Response(_) => "agent-responses",
        _ => "scheduler",
    };
    app.on_scheduler_message(queue, &body)
        .await
        .expect("handled")
}

/// The task as stored, with its order, for a test's own checks.
async fn stored(memory: &Memory, id: &TaskId) -> (Task, Order) {
    memory
        .task_with_order(id)
        .await
        .expect("read")
        .expect("task")
}

#[tokio::test]
async fn a_stale_read_is_read_again_consistently_before_a_message_is_dropped_or_an_action_refused()
{
    let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
    let (memory, names) = sas_tests::in_memory(&clock, None);
    let store = &memory;
    let app = App::new(
        Ports::of(&memory, Arc::clone(&clock) as _),
        Arc::new(Registry::built_in()),
        names,
        "scheduler-1".into(),
    );
    let id = TaskId::parse("lagged").expect("id");
    let submission = Submission::new(id.clone(), delivery_input());
    app.submit("drone-delivery", submission)
        .await
        .expect("submitted");
    let created = stored(store, &id).await;
    let handle = |message| handled_by(&app, message);
    let response = |task: &Task| {
        SchedulerMessage::Response(AgentResponse {
            task_id: id.clone(),
            run: task.run,
            step: task.running_steps().next().expect("a step runs"),
            attempt: 1,
            operation: Operation::Call,
            outcome: MessageOutcome::Succeeded { output: json!({}) },
            sealed_task: None,
            task_created_at: None,
        })
    };

    // A replica without the task yet: the Run is not dropped as for an unknown task.
    store.lag(None);
    let before = store.reads();
    let claimed = handle(SchedulerMessage::Run {
        task_id: id.clone(),
    })
    .await;
    assert_eq!(claimed, Handled::Decided(Verdict::Claimed));
    assert_eq!(
        store.reads(),
        [before[0] + 1, before[1] + 1],
        "read again, consistently"
    );

    // A replica from before the claim: the first step's answer is not taken for a
    // stale one.
    let (task, _) = stored(store, &id).await;
    store.lag(Some(created));
    let before = store.reads();
    assert_eq!(
        handle(response(&task)).await,
        Handled::Decided(Verdict::Recorded)
    );
    assert_eq!(store.reads(), [before[0] + 1, before[1] + 1]);

    // An up-to-date replica: one read, eventually consistent, for the next answer.
    let (task, _) = stored(store, &id).await;
    let before = store.reads();
    assert_eq!(
        handle(response(&task)).await,
        Handled::Decided(Verdict::Recorded)
    );
    assert_eq!(
        store.reads(),
        [before[0], before[1] + 1],
        "no consistent read"
    );
    let (task, _) = stored(store, &id).await;
    assert_eq!(
        task.steps
            .iter()
            .filter(|s| s.state == StepState::Processed)
            .count(),
        2
    );

    // The same answer again: dropped as stale, on a consistent read.
    let again = response(&task);
    let before = store.reads();
    let SchedulerMessage::Response(mut duplicate) = again else {
        unreachable!()
    };
    duplicate.step -= 1;
    assert_eq!(
        handle(SchedulerMessage::Response(duplicate)).await,
        Handled::Decided(Verdict::StaleResponse)
    );
    assert_eq!(store.reads(), [before[0] + 1, before[1] + 1]);

    // A step failing for good ends the task in Error; an operator's resubmission on a
    // replica from before that is not refused as of a task still running.
    let (running, order) = stored(store, &id).await;
    let SchedulerMessage::Response(mut failed) = response(&running) else {
        unreachable!()
    };
    failed.outcome = MessageOutcome::Failed {
        error: "no such customer".into(),
    };
    handle(SchedulerMessage::Response(failed)).await;
    // The package it created is undone.
    let (compensating, _) = stored(store, &id).await;
    let undone = SchedulerMessage::Response(AgentResponse {
        task_id: id.clone(),
        run: compensating.run,
        step: 1,
        attempt: compensating.steps[1].attempt,
        operation: Operation::Compensate,
        outcome: MessageOutcome::Succeeded { output: json!({}) },
        sealed_task: None,
        task_created_at: None,
    });
    handle(undone).await;
    let (ended, _) = stored(store, &id).await;
    assert_eq!(ended.state, TaskState::Error, "{ended:?}");
    store.lag(Some((running, order)));
    let resubmit = Resubmit {
        request: Request {
            by: Actor::Operator,
            at: Timestamp(1_800_000_001_000),
            batch: None,
        },
        input: None,
    };
    let resubmitted = app.resubmit(&id, resubmit).await.expect("not refused");
    assert_eq!(resubmitted.run, ended.run + 1);
}

/// A store, its queues, and a scheduler whose agents' requests carry their tasks
/// sealed, as on DynamoDB.
fn carrying_tasks() -> (Arc<Memory>, QueueNames, App, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
    let (memory, names) = sas_tests::in_memory(&clock, None);
    let app = scheduler(&memory, &names, &clock, "scheduler-1").with_sealed_tasks(true);
    (memory, names, app, clock)
}

/// A scheduler `instance` over `store`, its queues `names`, reading `clock`.
fn scheduler(
    store: &Arc<Memory>,
    names: &QueueNames,
    clock: &Arc<ManualClock>,
    instance: &str,
) -> App {
    App::new(
        Ports::of(store, Arc::clone(clock) as _),
        Arc::new(Registry::built_in()),
        names.clone(),
        instance.into(),
    )
}

/// The agents' requests sent, in order.
fn requests(store: &Memory, names: &QueueNames) -> Vec<AgentRequest> {
    store
        .messages(&names.agent_requests)
        .iter()
        .map(|sent| serde_json::from_str(&sent.body).expect("a request"))
        .collect()
}

/// Submits task `id` of `workflow` to `app` and runs it: the requests that sent.
async fn started(
    (app, store, names): (&App, &Memory, &QueueNames),
    id: &str,
    workflow: &str,
    input: Value,
) -> Vec<AgentRequest> {
    let id = TaskId::parse(id).expect("id");
    let sent = requests(store, names).len();
    app.submit(workflow, Submission::new(id.clone(), input))
        .await
        .expect("submitted");
    handled_by(app, SchedulerMessage::Run { task_id: id }).await;
    requests(store, names).split_off(sent)
}

/// The last agent's request sent.
fn last_request(store: &Memory, names: &QueueNames) -> AgentRequest {
    requests(store, names).pop().expect("a request")
}

/// A success answering `request`, giving back `sealed_task`.
fn answer(request: &AgentRequest, sealed_task: Option<String>) -> SchedulerMessage {
    answer_with(
        request,
        MessageOutcome::Succeeded { output: json!({}) },
        sealed_task,
    )
}

/// `outcome` answering `request`, giving back `sealed_task`.
fn answer_with(
    request: &AgentRequest,
    outcome: MessageOutcome,
    sealed_task: Option<String>,
) -> SchedulerMessage {
    SchedulerMessage::Response(AgentResponse {
        sealed_task,
        ..AgentResponse::answering(request.clone(), outcome)
    })
}

/// A task created claimed from a buffered submission carries itself in its first
/// request, as a step's write does: the first answer is recorded without a read.
#[tokio::test]
async fn a_task_created_claimed_carries_itself_in_its_first_request() {
    let (store, names, app, _) = carrying_tasks();
    let app = app.with_ingestion(QueueName::parse("ingest").expect("a queue"));
    app.register_workflows().await.expect("registered");
    let drone = Registry::built_in()
        .latest("drone-delivery")
        .expect("drone-delivery");
    let submit = SchedulerMessage::Submit(Buffered {
        workflow: WorkflowRef {
            name: drone.name.clone(),
            version: drone.version,
        },
        submission: Submission::new(TaskId::parse("buffered").expect("id"), delivery_input()),
        accepted_at: Timestamp(0),
    });
    let body = serde_json::to_string(&submit).expect("json");
    assert_eq!(
        app.on_scheduler_message("ingest", &body)
            .await
            .expect("handled"),
        Handled::Created
    );
    let first = last_request(&store, &names);
    assert_eq!(first.step, 0);
    let sealed = first
        .sealed_task
        .clone()
        .expect("the task sealed in its creation's request");

    let before = store.reads();
    assert_eq!(
        handled_by(&app, answer(&first, Some(sealed))).await,
        Handled::Decided(Verdict::Recorded)
    );
    assert_eq!(store.reads(), before, "recorded without a read");
    assert_eq!(
        last_request(&store, &names).step,
        1,
        "the next step requested"
    );
}

/// Where reads are billed, an agent's request carries its task as written, sealed,
/// and its response gives it back: the scheduler records the answer without reading
/// the task. The same answer again, its sealed task now behind the store, loses its
/// write and is dropped on a consistent read; a sealed task that does not open is
/// ignored, and the task read.
#[tokio::test]
async fn a_response_giving_back_its_sealed_task_is_recorded_without_reading_the_task() {
    let (store, names, app, _) = carrying_tasks();
    let store = &store;
    let id = TaskId::parse("sealed").expect("id");
    let handle = |message| handled_by(&app, message);
    let last_request = || last_request(store, &names);
    started(
        (&app, store, &names),
        "sealed",
        "drone-delivery",
        delivery_input(),
    )
    .await;
    let first = last_request();
    let sealed = first
        .sealed_task
        .clone()
        .expect("the task sealed in its request");
    assert!(!sealed.contains("Sydney"), "opaque to the agent: {sealed}");

    let before = store.reads();
    assert_eq!(
        handle(answer(&first, Some(sealed.clone()))).await,
        Handled::Decided(Verdict::Recorded)
    );
    assert_eq!(store.reads(), before, "recorded without a read");
    let second = last_request();
    assert_eq!(second.step, 1, "the next step requested");

    // The same answer again: its task is a write behind.
    let requests = store.messages(&names.agent_requests).len();
    assert_eq!(
        handle(answer(&first, Some(sealed))).await,
        Handled::Decided(Verdict::StaleResponse)
    );
    assert_eq!(
        store.reads()[0],
        before[0] + 2,
        "read consistently: whether its write had landed, then to decide again"
    );
    assert_eq!(
        store.messages(&names.agent_requests).len(),
        requests,
        "nothing requested again"
    );

    // A sealed task that does not open: the task is read.
    let mut forged = second.sealed_task.clone().expect("sealed").into_bytes();
    forged[20] = if forged[20] == b'A' { b'B' } else { b'A' };
    let before = store.reads();
    assert_eq!(
        handle(answer(
            &second,
            Some(String::from_utf8(forged).expect("text"))
        ))
        .await,
        Handled::Decided(Verdict::Recorded)
    );
    assert_eq!(
        store.reads(),
        [before[0], before[1] + 1],
        "read as without one"
    );
    let (task, _) = stored(store, &id).await;
    assert_eq!(
        step_states(&serde_json::to_value(&task).expect("json"))[..3],
        ["Processed", "Processed", "Processing"]
    );
}

/// A request carries its task only when it is the task's only call out, and the
/// task fits: parallel branches' requests carry none (all but the first response
/// would decide from a task moved on), nor does a task too large to seal; and a
/// process that does not carry tasks (the embedded store's) opens none it is given.
#[tokio::test]
async fn a_task_is_carried_only_by_its_only_call_out_when_it_fits_and_where_tasks_are_carried() {
    let (store, names, app, clock) = carrying_tasks();
    let start = |id, workflow, input| started((&app, &store, &names), id, workflow, input);
    let carried = |requests: &[AgentRequest]| -> Vec<bool> {
        requests.iter().map(|r| r.sealed_task.is_some()).collect()
    };

    assert_eq!(
        carried(&start("alone", "drone-delivery", delivery_input()).await),
        [true]
    );
    let mut large = delivery_input();
    large["note"] = json!(
        (0..6_000)
            .map(|_| fastrand::alphanumeric())
            .collect::<String>()
    );
    assert_eq!(
        carried(&start("large", "drone-delivery", large).await),
        [false]
    );
    // The parallel delivery's first step is two checks, sent together.
    let branches = start("branches", "drone-delivery-parallel", delivery_input()).await;
    assert_eq!(carried(&branches), [false, false]);

    let alone = last_request_of(&store, &names, "alone");
    let not_carrying = scheduler(&store, &names, &clock, "scheduler-2");
    let before = store.reads();
    handled_by(&not_carrying, answer(&alone, alone.sealed_task.clone())).await;
    assert_eq!(store.reads()[1], before[1] + 1, "read, not opened");
}

/// The last request sent for task `id`.
fn last_request_of(store: &Memory, names: &QueueNames, id: &str) -> AgentRequest {
    requests(store, names)
        .into_iter()
        .rev()
        .find(|request| request.task_id.as_str() == id)
        .expect("a request of the task")
}

/// A task cancelled while its call is out: the answer gives back the task as it was
/// before the cancel, whose write is then refused; the answer is decided from the
/// task as it is, cancelled, and the cancel holds.
#[tokio::test]
async fn an_answer_giving_back_its_task_from_before_a_cancel_does_not_undo_the_cancel() {
    let (store, names, app, _) = carrying_tasks();
    let id = TaskId::parse("cancelled").expect("id");
    let out = started(
        (&app, &store, &names),
        "cancelled",
        "drone-delivery",
        delivery_input(),
    )
    .await
    .pop()
    .expect("a request");
    let request = Request {
        by: Actor::Owner,
        at: Timestamp(1_800_000_000_500),
        batch: None,
    };
    app.cancel(&id, request).await.expect("cancelled");

    handled_by(&app, answer(&out, out.sealed_task.clone())).await;
    let (task, _) = stored(&store, &id).await;
    assert!(task.cancelled.is_some(), "the cancel holds: {task:?}");
    assert_eq!(task.state, TaskState::Error, "nothing done is left to undo");
    assert_eq!(task.steps[0].state, StepState::Processed);
}

/// An id used again once its task was removed (a DynamoDB TTL) names another task,
/// whose versions repeat the first's: a response giving back the first task, sealed,
/// must not write it over the second (its owner, its creation, its history), nor
/// answer the second's request of the same run, step and attempt, sealed or not.
#[tokio::test]
async fn a_sealed_task_of_an_id_used_before_does_not_write_over_the_task_using_it_now() {
    let (store, names, app, clock) = carrying_tasks();
    let id = TaskId::parse("reused").expect("id");
    let start = || {
        started(
            (&app, &store, &names),
            "reused",
            "drone-delivery",
            delivery_input(),
        )
    };
    start().await;
    let old = last_request(&store, &names);
    let old_sealed = old.sealed_task.clone().expect("sealed");
    let first_created = stored(&store, &id).await.0.created_at;

    store.remove_task(&id);
    clock.advance(Duration::from_secs(86_400));
    start().await;
    let now_created = stored(&store, &id).await.0.created_at;
    assert_ne!(now_created, first_created);

    assert_eq!(
        handled_by(&app, answer(&old, Some(old_sealed))).await,
        Handled::Decided(Verdict::StaleResponse),
        "the answer of a request of the task before"
    );
    assert_eq!(
        handled_by(&app, answer(&old, None)).await,
        Handled::Decided(Verdict::StaleResponse),
        "told apart by its task's creation, without the task sealed too"
    );
    let (task, _) = stored(&store, &id).await;
    assert_eq!(
        task.created_at, now_created,
        "the task using the id now is kept, not the one before"
    );
    assert_eq!(
        task.steps[0].state,
        StepState::Processing,
        "its own request still awaited"
    );
}

/// A read that is not consistent may find an edited resubmission's task and the
/// order before it (two items): the step is then sent with the input the
/// resubmission replaced, unless the order is read again.
#[tokio::test]
async fn a_task_read_with_the_order_its_resubmission_replaced_is_read_again() {
    let (store, names, app, _) = carrying_tasks();
    let id = TaskId::parse("edited").expect("id");
    let first = started(
        (&app, &store, &names),
        "edited",
        "drone-delivery",
        delivery_input(),
    )
    .await
    .pop()
    .expect("a request");
    let failed = MessageOutcome::Failed {
        error: "no such account".into(),
    };
    handled_by(&app, answer_with(&first, failed, None)).await;
    let (_, old_order) = stored(&store, &id).await;
    let mut edited = delivery_input();
    edited["customer_id"] = json!("c-edited");
    let resubmit = Resubmit {
        request: Request {
            by: Actor::Operator,
            at: Timestamp(1_800_000_001_000),
            batch: None,
        },
        input: Some(edited),
    };
    app.resubmit(&id, resubmit).await.expect("resubmitted");
    let (task, order) = stored(&store, &id).await;
    assert!(
        old_order.predates(&task) && !order.predates(&task),
        "the order before is behind the task, the order now is not"
    );

    store.lag(Some((task, old_order)));
    handled_by(&app, SchedulerMessage::Run { task_id: id }).await;
    let sent = last_request(&store, &names);
    assert_eq!(sent.run, 2);
    let payload = serde_json::to_string(&sent.payload).expect("json");
    assert!(
        payload.contains("c-edited"),
        "sent with the input of its run: {payload}"
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
