//! Parallel branches end to end on the embedded backend, through the HTTP API: the
//! drone delivery with its two checks at the same time, joined, failed and undone,
//! and a branch's step retried while the other branch goes on.

use std::time::Duration;

use sas_core::app::Recovery;
use sas_domain::decide::Verdict;
use sas_tests::{Harness, delivery_input, step, step_states};
use serde_json::{Value, json};

fn parallel() -> Value {
    json!({ "workflow": "drone-delivery-parallel", "input": delivery_input() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checks_run_at_the_same_time_and_the_package_waits_for_both() {
    let harness = Harness::start(5).await;
    for service in ["account", "transport"] {
        harness
            .faults(service, json!({ "latency_ms": 1000, "times": 1 }))
            .await;
    }
    harness.put_task("both-1", &parallel()).await;
    let out = harness
        .wait_for("both-1", "both checks out at once", |t| {
            step(t, "check-account")["state"] == "Processing"
                && step(t, "check-transport")["state"] == "Processing"
        })
        .await;
    assert_eq!(step(&out, "create-package")["state"], "Pending");
    let task = harness.settle_in("both-1", "Processed").await;
    assert_eq!(step_states(&task), ["Processed"; 5]);
    let (account, transport) = (step(&task, "check-account"), step(&task, "check-transport"));
    let package = step(&task, "create-package");
    for check in [account, transport] {
        assert!(
            check["finished_at"].as_str() <= package["started_at"].as_str(),
            "the package waits for both checks: {check} {package}"
        );
    }
    assert_eq!(
        account["within"],
        json!([{ "parallel": "checks", "branch": 0 }])
    );
    assert_eq!(
        transport["within"],
        json!([{ "parallel": "checks", "branch": 1 }])
    );
    assert!(package.get("within").is_none(), "{package}");
    let (_, _, workflows) = harness.call("GET", "/workflows", None).await;
    let definition = workflows["workflows"]
        .as_array()
        .and_then(|all| all.iter().find(|w| w["name"] == "drone-delivery-parallel"))
        .expect("listed");
    assert_eq!(definition["steps"][2]["after"], json!([0, 1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_delivery_undoes_the_drone_then_the_package_once_each() {
    let harness = Harness::start(5).await;
    harness
        .faults("delivery", json!({ "permanent_error_rate": 1.0 }))
        .await;
    harness.put_task("refused-1", &parallel()).await;
    let task = harness.settle_in("refused-1", "Error").await;
    assert_eq!(
        step_states(&task),
        [
            "Processed",
            "Processed",
            "Compensated",
            "Compensated",
            "Error"
        ]
    );
    let (drone, package) = (step(&task, "schedule-drone"), step(&task, "create-package"));
    assert!(
        drone["finished_at"].as_str() <= package["finished_at"].as_str(),
        "undone in reverse: {drone} {package}"
    );
    let effects = harness.effects_of("refused-1").await;
    let applied: Vec<_> = effects
        .iter()
        .map(|(service, path, calls)| (service.as_str(), path.as_str(), *calls))
        .collect();
    assert_eq!(
        applied,
        [
            ("account", "/accounts/check", 1),
            ("drone", "/drones/cancel", 1),
            ("drone", "/drones/schedule", 1),
            ("package", "/packages", 1),
            ("package", "/packages/cancel", 1),
            ("transport", "/transport/check", 1)
        ],
        "each effect once, the drone's and the package's undone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_check_is_retried_by_the_supervisor_while_the_other_branch_is_done() {
    let harness = Harness::start(5).await;
    harness
        .faults("transport", json!({ "hang_ms": 2000, "times": 1 }))
        .await;
    harness.put_task("hung-1", &parallel()).await;
    let task = harness
        .wait_for("hung-1", "the account checked, transport out", |t| {
            step(t, "check-account")["state"] == "Processed"
                && step(t, "check-transport")["state"] == "Processing"
        })
        .await;
    assert_eq!(step(&task, "create-package")["state"], "Pending");
    harness.advance(Duration::from_secs(11));
    let report = harness.sweep().await;
    assert_eq!(
        report.get(&Recovery::Decided(Verdict::Retry)),
        Some(&1),
        "{report:?}"
    );
    let task = harness.settle_in("hung-1", "Processed").await;
    assert_eq!(step(&task, "check-transport")["attempt"], 2);
    assert_eq!(step(&task, "check-transport")["failure_count"], 1);
    assert_eq!(step(&task, "check-account")["attempt"], 1);
}
