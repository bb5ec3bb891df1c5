//! The workflow language on the deployed stack: callbacks used by their tokens and
//! pauses, a service's limit on calls at once, children and maps, and paths from
//! results with a key from Secrets Manager.

use std::time::Duration;

use sas_tests::aws::Remote;
use sas_tests::ministack::Deployment;
use sas_tests::{UNDONE_AFTER_THE_DELIVERY_FAILED, all_children, parcel_order, step_states};
use serde_json::{Value, json};

use super::{
    deploy, operator, put_task, readme_delivery, schedules, status_and_code, verdicts,
    wait_for_task,
};

/// Waits on the deployed stack: a refund's approval used through the deployed API by
/// its token (once), another refused on the owner's route, and a task paused while its
/// timer runs: the timer ends on its deadline message (the supervisor's sweep is a day
/// off), and the task goes on only once resumed. Meanwhile, schedules every minute
/// woken by EventBridge Scheduler alone: each overlap policy, and a downtime caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_is_approved_by_its_token_through_the_deployed_api_and_a_task_paused_over_its_timer_goes_on_when_resumed()
 {
    let remote = Remote::start(true).await;
    // No sweep in the test's time: a timer is ended by its deadline message alone.
    let stack = Deployment::with_services_and(
        &remote,
        &[("AuthMode", "NONE"), ("SupervisorRate", "rate(1 day)")],
    )
    .await;
    let refund = |amount: u32| json!({"workflow": "refund", "input": {"order_id": "o-1", "customer_id": "c-1", "amount": amount}});
    let approve = |t: &Value| t["steps"][1].clone();
    let post = |path: String, body: Value| {
        let stack = &stack;
        async move { stack.call("POST", &path, Some(&body), false).await }
    };

    // Schedules every minute, made first so that their wake-ups come during the rest.
    let group = schedules::wake_ups_start(&stack).await;

    let approvals_and_a_paused_timer = async {
        put_task(&stack, "refund-1", &refund(250)).await;
        put_task(&stack, "refund-2", &refund(400)).await;
        let waiting = |t: &Value| approve(t)["waiting"]["for"] == "callback";
        let task = wait_for_task(
            &stack,
            "refund-1",
            "waiting for its approval",
            Duration::from_secs(60),
            waiting,
        )
        .await;
        let token = approve(&task)["waiting"]["token"]
            .as_str()
            .expect("the approval's token in the task's view")
            .to_owned();
        let approval = json!({"output": {"approved_by": "ana"}});
        let used = post(format!("/callbacks/{token}"), approval.clone()).await;
        assert_eq!(
            (used.status, used.json()),
            (200, json!({"step": "approve", "state": "Processed"})),
            "{}",
            used.body
        );
        let again = post(format!("/callbacks/{token}"), approval).await;
        assert_eq!(
            status_and_code(&again),
            (409, Some("not_waiting".to_owned())),
            "a token is used once: {}",
            again.body
        );
        let task = wait_for_task(
            &stack,
            "refund-1",
            "Processed",
            Duration::from_secs(60),
            |t| t["state"] == "Processed",
        )
        .await;
        assert_eq!(approve(&task)["output"], json!({"approved_by": "ana"}));

        wait_for_task(
            &stack,
            "refund-2",
            "waiting for its approval",
            Duration::from_secs(60),
            waiting,
        )
        .await;
        let refused = post(
            "/tasks/refund-2/steps/approve/complete".to_owned(),
            json!({"error": "not this one"}),
        )
        .await;
        assert_eq!(refused.status, 202, "{}", refused.body);
        let task = wait_for_task(&stack, "refund-2", "Error", Duration::from_secs(60), |t| {
            t["state"] == "Error"
        })
        .await;
        assert_eq!(
            step_states(&task),
            ["Processed", "Error", "Pending", "Pending"],
            "refused: nothing paid"
        );

        // A nap of 5 s (tests/workflows/nap.json), the task paused as it starts.
        let nap = json!({"workflow": "nap", "input": {"customer_id": "c-1"}});
        put_task(&stack, "napping", &nap).await;
        wait_for_task(&stack, "napping", "napping", Duration::from_secs(60), |t| {
            t["steps"][1]["waiting"]["for"] == "timer"
        })
        .await;
        let paused = post("/tasks/napping/pause".to_owned(), json!({})).await;
        assert_eq!(paused.status, 202, "{}", paused.body);
        wait_for_task(
            &stack,
            "napping",
            "past its timer",
            Duration::from_secs(60),
            |t| t["steps"][1]["state"] == "Processed",
        )
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let task = wait_for_task(&stack, "napping", "still paused", Duration::ZERO, |t| {
            t["paused"].is_object()
        })
        .await;
        assert_eq!(
            step_states(&task),
            ["Processed", "Processed", "Pending"],
            "paused: the step after the timer waits: {task}"
        );
        assert_eq!(
            remote.effects("napping").len(),
            1,
            "only the package created"
        );
        assert_eq!(
            verdicts(&stack, "SchedulerFunction", "woke").await,
            1,
            "the timer ended on its deadline message"
        );
        let resumed = post("/tasks/napping/resume".to_owned(), json!({})).await;
        assert_eq!(resumed.status, 202, "{}", resumed.body);
        wait_for_task(
            &stack,
            "napping",
            "Processed",
            Duration::from_secs(60),
            |t| t["state"] == "Processed",
        )
        .await;
        assert_eq!(
            remote.effects("napping").len(),
            2,
            "the delivery created once"
        );
    };
    tokio::join!(
        approvals_and_a_paused_timer,
        schedules::a_buffered_run_starts_once_the_running_one_ends(&stack),
        schedules::runs_missed_while_nothing_woke_the_engine_are_caught_up(&stack, &group),
    );
    schedules::naps_run_then_wake_ups_stop(&stack, &group).await;
}

/// Flow control on the deployed stack: the drone service limited to 2 calls at once
/// (in `ServiceUrls`) sees no 3rd from 8 tasks submitted at once, across the
/// scheduler's concurrent invocations, under IAM (a call taken off its gate's line is
/// the only delete the functions may make).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_limited_to_2_calls_at_once_sees_no_3rd_across_the_deployed_functions() {
    let remote = Remote::start(true).await;
    let mut services = json!(sas_tests::aws::service_urls(&remote.url));
    services["drone"] = json!({ "url": format!("{}/drone", remote.url), "max_concurrency": 2 });
    let services = services.to_string();
    let stack =
        Deployment::with_services_and(&remote, &[("AuthMode", "NONE"), ("ServiceUrls", &services)])
            .await;
    remote.mocks.set_faults(
        "drone",
        serde_json::from_value(json!({ "latency_ms": 300 })).expect("faults"),
    );
    let ids: Vec<String> = (0..8).map(|i| format!("limited-{i}")).collect();
    for id in &ids {
        put_task(&stack, id, &readme_delivery()).await;
    }
    for id in &ids {
        let task = wait_for_task(&stack, id, "Processed", Duration::from_secs(120), |t| {
            t["state"] == "Processed"
        })
        .await;
        assert_eq!(task["steps"][3]["failure_count"], 0, "{task}");
    }
    let peak = remote.mocks.concurrency()["drone"].peak;
    assert!(peak <= 2, "the drone service saw {peak} calls at once");
    assert_eq!(remote.mocks.calls()["drone"], 8);

    // The operator sees the limit, its slots all given back, through the deployed API
    // (the submission function reads the gates under its own role).
    let (status, view) = operator(&stack, "GET", "/operator/services", None).await;
    assert_eq!(status, 200, "{view}");
    let limit = &sas_tests::service(&view, "drone")["limits"][0];
    assert_eq!(
        (
            &limit["max_concurrency"],
            &limit["gate"]["in_flight"],
            &limit["gate"]["waiting"]
        ),
        (&json!(2), &json!(0), &json!(0)),
        "{view}"
    );
    // Each call's wait is a SlotWait metric of its service, in milliseconds.
    let waits: Vec<Value> = stack
        .logs("SchedulerFunction")
        .await
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line.get("SlotWait").is_some() && line["Service"] == "drone")
        .collect();
    assert!(waits.len() >= 8, "a wait per call: {waits:#?}");
    assert_eq!(
        waits[0]["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"],
        "Milliseconds"
    );
    assert!(
        waits.iter().any(|w| w["SlotWait"].as_u64() > Some(0)),
        "with 8 calls at a service taking 2 at once, some waited: {waits:#?}"
    );
}

/// Parcels in the deployed order that ships: three pages of children, fifteen turns of
/// the map's twenty at a time.
const PARCELS: usize = 300;

/// Parcels in the deployed order that is refused, each undone: five turns.
const REFUSED_PARCELS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parcel_order_ships_each_parcel_as_a_child_task_a_child_workflow_ships_one_and_a_refused_order_has_every_parcel_undone()
 {
    let remote = Remote::start(true).await;
    let stack = deploy(&remote).await;
    // The children's ends, told to their order at once, race for its record; one that
    // loses every try is sent again a second later, not left to the queue's visibility
    // timeout (three minutes as deployed).
    let children = async |id: &str| {
        all_children(id, "deliver-each", 100, async |path| {
            let answer = stack.call("GET", &path, None, false).await;
            (answer.status, answer.json())
        })
        .await
    };
    let ids = |listed: &[Value]| -> Vec<String> {
        listed
            .iter()
            .map(|c| c["id"].as_str().expect("an id").to_owned())
            .collect()
    };
    let expected = |order: &str, parcels: usize| -> Vec<String> {
        (0..parcels)
            .map(|n| format!("{order}~deliver-each~{n}"))
            .collect()
    };

    // Each parcel shipped by a child task of its own, created by the scheduler, which
    // tells the order of each end on its own queue; the order joins them.
    put_task(&stack, "order-1", &parcel_order("order-1", PARCELS)).await;
    let task = wait_for_task(
        &stack,
        "order-1",
        "Processed",
        Duration::from_secs(120),
        |t| t["state"] == "Processed",
    )
    .await;
    assert_eq!(step_states(&task), ["Processed"; 3], "{task:#}");
    assert_eq!(task["steps"][1]["output"]["succeeded"], PARCELS, "{task:#}");
    let listed = children("order-1").await;
    assert_eq!(ids(&listed), expected("order-1", PARCELS));
    for child in &listed {
        assert_eq!(step_states(child), ["Processed"; 2], "{child:#}");
        let id = child["id"].as_str().expect("an id");
        assert_eq!(remote.effects(id).len(), 2, "{id} run once");
    }

    // A child workflow step (tests/workflows/ship-one.json, packaged with the
    // deployment): one child, named in its step's result.
    let one = json!({
        "workflow": "ship-one",
        "input": {"order_id": "o-1", "parcel_id": "p-1", "dropoff": "Bondi", "weight_kg": 1.0},
    });
    put_task(&stack, "one-1", &one).await;
    let task = wait_for_task(&stack, "one-1", "Processed", Duration::from_secs(60), |t| {
        t["state"] == "Processed"
    })
    .await;
    assert_eq!(
        task["steps"][0]["output"]["task_id"], "one-1~ship~0",
        "{task:#}"
    );
    let child = stack
        .call("GET", "/tasks/one-1~ship~0", None, false)
        .await
        .json();
    assert_eq!(step_states(&child), ["Processed"; 2], "{child:#}");
    assert_eq!(child["parent"]["task_id"], "one-1", "{child:#}");

    // A Step Functions state machine packaged with the deployment
    // (tests/workflows/greet.asl.json): run by the deployed functions, read back in
    // Step Functions' words.
    let greet = json!({"workflow": "greet", "input": {"name": "Ada"}});
    put_task(&stack, "greet-1", &greet).await;
    let task = wait_for_task(
        &stack,
        "greet-1",
        "Processed",
        Duration::from_secs(60),
        |t| t["state"] == "Processed",
    )
    .await;
    assert_eq!(task["status"], "SUCCEEDED", "{task:#}");
    assert_eq!(
        task["output"],
        json!({"greeting": "HELLO, ADA!"}),
        "{task:#}"
    );

    // The confirmation refused for good: every parcel's child undone by its own
    // compensations, each effect applied once and undone once.
    remote.mocks.set_faults(
        "delivery",
        serde_json::from_value(json!({"permanent_error_rate": 1.0})).expect("faults"),
    );
    put_task(&stack, "order-2", &parcel_order("order-2", REFUSED_PARCELS)).await;
    let task = wait_for_task(
        &stack,
        "order-2",
        "in Error",
        Duration::from_secs(120),
        |t| t["state"] == "Error",
    )
    .await;
    assert_eq!(
        step_states(&task),
        ["Processed", "Compensated", "Error"],
        "{task:#}"
    );
    let listed = children("order-2").await;
    assert_eq!(ids(&listed), expected("order-2", REFUSED_PARCELS));
    for child in &listed {
        assert_eq!(step_states(child), ["Compensated"; 2], "{child:#}");
        assert_eq!(child["cancelled"]["by"], "parent", "{child:#}");
        let id = child["id"].as_str().expect("an id");
        assert_eq!(
            remote.effects(id),
            [
                ("drone".into(), "/drones/cancel".into(), 1),
                ("drone".into(), "/drones/schedule".into(), 1),
                ("package".into(), "/packages".into(), 1),
                ("package".into(), "/packages/cancel".into(), 1),
            ],
            "{id}"
        );
    }
}

/// The drone operations a task's keys were applied with, sorted.
fn drone_operations(remote: &Remote, id: &str) -> Vec<String> {
    remote
        .effects(id)
        .into_iter()
        .filter(|(service, _, _)| service == "drone")
        .map(|(_, operation, _)| operation)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_of_the_deployment_calls_paths_from_results_with_a_key_from_secrets_manager_rotated()
 {
    let remote = Remote::start(true).await;
    let mut services = json!(sas_tests::aws::service_urls(&remote.url));
    services["drone"] = json!({
        "url": format!("{}/drone", remote.url),
        "credential": { "secret": "secretsmanager:sas-drone-key", "header": "X-Api-Key" },
    });
    let services = services.to_string();
    let stack = Deployment::with_services_and(
        &remote,
        &[
            ("AuthMode", "NONE"),
            ("ServiceUrls", &services),
            // The agent may read this secret, and no other.
            (
                "ServiceSecretArns",
                "arn:aws:secretsmanager:us-east-1:*:secret:sas-drone-key-??????",
            ),
        ],
    )
    .await;
    let secrets = aws_sdk_secretsmanager::Client::new(&stack.sdk);
    secrets
        .create_secret()
        .name("sas-drone-key")
        .secret_string("drone-key-1")
        .send()
        .await
        .expect("the secret created");
    let faults = |service: &str, faults: Value| {
        remote
            .mocks
            .set_faults(service, serde_json::from_value(faults).expect("faults"));
    };
    faults("drone", json!({ "api_key": "drone-key-1" }));
    // A workflow packaged with the deployment (tests/workflows/drone-delivery-paths.json):
    // the drone scheduled with a PUT at a path of the package's id.
    let paths = json!({ "workflow": "drone-delivery-paths", "input": readme_delivery()["input"] });
    put_task(&stack, "keyed-1", &paths).await;
    let task = wait_for_task(
        &stack,
        "keyed-1",
        "Processed",
        Duration::from_secs(60),
        |t| t["state"] == "Processed",
    )
    .await;
    let package = task["steps"][1]["output"]["id"]
        .as_str()
        .expect("a package id");
    assert_eq!(
        drone_operations(&remote, "keyed-1"),
        [format!("PUT /drones/for/{package}")]
    );

    // Rotated: the service takes only the new key; an agent holding the old one is
    // refused, reads the secret again, and calls again with the new one. The delivery
    // then fails for good: the drone is cancelled at the path of its own id.
    secrets
        .put_secret_value()
        .secret_id("sas-drone-key")
        .secret_string("drone-key-2")
        .send()
        .await
        .expect("the secret rotated");
    faults("drone", json!({ "api_key": "drone-key-2" }));
    faults("delivery", json!({ "permanent_error_rate": 1.0 }));
    put_task(&stack, "keyed-2", &paths).await;
    let task = wait_for_task(
        &stack,
        "keyed-2",
        "in Error",
        Duration::from_secs(60),
        |t| t["state"] == "Error",
    )
    .await;
    assert_eq!(
        step_states(&task),
        UNDONE_AFTER_THE_DELIVERY_FAILED,
        "{task:#}"
    );
    let package = task["steps"][1]["output"]["id"]
        .as_str()
        .expect("a package id");
    let drone = task["steps"][3]["output"]["id"]
        .as_str()
        .expect("a drone id");
    let mut expected = [
        format!("PUT /drones/for/{package}"),
        format!("DELETE /drones/{drone}"),
    ];
    expected.sort();
    assert_eq!(drone_operations(&remote, "keyed-2"), expected);
    // What the drone service saw, whichever execution environment served each call (a
    // warm one holds the old key until it is refused; a fresh one reads the new key
    // first): the first task's calls all with the first key; the second's each with the
    // new key, or with the old one refused as stale and then made again with the new.
    let seen: Value = reqwest::get(format!("{}/credentials", remote.url))
        .await
        .expect("the mock services' credentials")
        .json()
        .await
        .expect("their JSON");
    let drone = &seen["credentials"]["drone"];
    assert_eq!(drone["refused_unknown"], 0, "{drone:#}");
    let checks = |task: &str| -> Vec<(String, u64, String)> {
        drone["checks"]
            .as_array()
            .expect("the drone's checks")
            .iter()
            .filter(|c| {
                c["idempotency_key"]
                    .as_str()
                    .is_some_and(|k| k.starts_with(&format!("{task}/")))
            })
            .map(|c| {
                (
                    c["idempotency_key"].as_str().unwrap_or_default().to_owned(),
                    c["presented"].as_u64().unwrap_or(0),
                    c["verdict"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let before = checks("keyed-1");
    assert!(
        !before.is_empty()
            && before
                .iter()
                .all(|(_, key, v)| *key == 1 && v == "accepted"),
        "before the rotation, the first key taken: {drone:#}"
    );
    let after = checks("keyed-2");
    assert!(
        after.iter().any(|(_, key, v)| *key == 2 && v == "accepted"),
        "the rotated key used: {drone:#}"
    );
    for (i, (call, key, verdict)) in after.iter().enumerate() {
        match (key, verdict.as_str()) {
            (2, "accepted") => {}
            (1, "refused_stale") => assert!(
                after[i + 1..]
                    .iter()
                    .any(|(again, key, v)| again == call && *key == 2 && v == "accepted"),
                "{call}, refused with the old key, made again with the new: {drone:#}"
            ),
            _ => panic!("{call}: the key of {key} {verdict} after the rotation: {drone:#}"),
        }
    }
    let logs = stack.logs("AgentFunction").await;
    assert!(
        logs.iter().all(|line| !line.contains("drone-key-")),
        "no log line holds a key:\n{}",
        logs.join("\n")
    );
}
