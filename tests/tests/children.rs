//! Child workflows and maps end to end on the embedded backend, through the HTTP
//! API: an order whose parcels are each shipped by a child task, joined, listed,
//! failed and undone by the children's own compensations, and cancelled.

use sas_tests::{Harness, all_children, parcel_order, step_states};
use serde_json::{Value, json};

/// A step of `task` by name.
fn step<'a>(task: &'a Value, name: &str) -> &'a Value {
    task["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no step {name} in {task}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_parcel_ships_as_a_child_task_and_the_order_joins_them() {
    let harness = Harness::start(5).await;
    let (status, _) = harness
        .put_task("order-1", &parcel_order("order-1", 5))
        .await;
    assert_eq!(status, 202);
    let task = harness.settle_in("order-1", "Processed").await;
    assert_eq!(step_states(&task), ["Processed"; 3]);
    let map = step(&task, "deliver-each");
    assert_eq!(
        map["output"],
        json!({
            "total": 5, "succeeded": 5, "failed": 0,
            "children": "/tasks/order-1/children?step=deliver-each",
        })
    );
    assert_eq!(map["children"]["total"], 5);
    let listed = all_children("order-1", "deliver-each", 2, async |path| {
        let (status, _, page) = harness.call("GET", &path, None).await;
        (status, page)
    })
    .await;
    let ids: Vec<&str> = listed.iter().filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(
        ids,
        (0..5)
            .map(|n| format!("order-1~deliver-each~{n}"))
            .collect::<Vec<_>>()
    );
    for child in &listed {
        assert_eq!(child["state"], "Processed", "{child}");
        assert_eq!(child["workflow"]["name"], "ship-parcel");
        assert_eq!(child["parent"]["task_id"], "order-1");
        assert_eq!(child["parent"]["step"], "deliver-each");
    }
    let child = harness.task("order-1~deliver-each~3").await;
    assert_eq!(
        child["input"],
        json!({ "order_id": "order-1", "parcel_id": "p3", "dropoff": "door 3", "weight_kg": 1.5 })
    );
    let confirm = step(&task, "confirm-order")["started_at"]
        .as_str()
        .map(str::to_owned);
    for child in &listed {
        assert!(
            child["updated_at"].as_str().map(str::to_owned) <= confirm,
            "the order is confirmed once every parcel has shipped: {child}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_confirmation_undoes_every_parcel_by_its_own_compensations() {
    let harness = Harness::start(5).await;
    harness
        .faults("delivery", json!({ "permanent_error_rate": 1.0 }))
        .await;
    harness
        .put_task("order-2", &parcel_order("order-2", 3))
        .await;
    let task = harness.settle_in("order-2", "Error").await;
    assert_eq!(
        step_states(&task),
        ["Processed", "Compensated", "Error"],
        "{task:#}"
    );
    for n in 0..3 {
        let id = format!("order-2~deliver-each~{n}");
        let child = harness.settle_in(&id, "Error").await;
        assert_eq!(
            step_states(&child),
            ["Compensated", "Compensated"],
            "{child:#}"
        );
        assert_eq!(child["cancelled"]["by"], "parent", "{child:#}");
        let effects = harness.effects_of(&id).await;
        assert_eq!(
            effects,
            [
                ("drone".into(), "/drones/cancel".into(), 1),
                ("drone".into(), "/drones/schedule".into(), 1),
                ("package".into(), "/packages".into(), 1),
                ("package".into(), "/packages/cancel".into(), 1),
            ],
            "each parcel's effects applied once, and undone once"
        );
    }
}
