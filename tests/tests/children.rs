//! Child workflows and maps end to end on the embedded backend, through the HTTP
//! API: an order whose parcels are each shipped by a child task, joined, listed,
//! failed and undone by the children's own compensations, and cancelled. And, in
//! memory, how a map's children are created.

use std::sync::Arc;
use std::time::Duration;

use sas_core::app::{App, Ports, QueueNames};
use sas_core::clock::Clock;
use sas_core::ports::{OutgoingMessage, QueueError, Queues, TaskStore};
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::messages::{AgentResponse, Operation, Outcome, SchedulerMessage};
use sas_domain::submission::Submission;
use sas_domain::task::TaskState;
use sas_testkit::memory::Memory;
use sas_tests::{Buffering, Harness, all_children, parcel_order, step, step_states};
use serde_json::{Value, json};

/// Every child of `id`'s step `step`, page by page of `limit`.
async fn children(harness: &Harness, id: &str, step: &str, limit: usize) -> Vec<Value> {
    all_children(id, step, limit, async |path| {
        let (status, _, page) = harness.call("GET", &path, None).await;
        (status, page)
    })
    .await
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
    let listed = children(&harness, "order-1", "deliver-each", 2).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_workflow_step_ends_with_its_child_and_names_it_in_its_result() {
    let harness = Harness::start(5).await;
    let input =
        json!({ "order_id": "o-9", "parcel_id": "p-9", "dropoff": "door", "weight_kg": 2.0 });
    harness
        .put_task("one-1", &json!({ "workflow": "ship-one", "input": input }))
        .await;
    let task = harness.settle_in("one-1", "Processed").await;
    assert_eq!(
        step(&task, "ship")["output"]["task_id"],
        "one-1~ship~0",
        "{task:#}"
    );
    let child = harness.task("one-1~ship~0").await;
    assert_eq!(child["state"], "Processed");
    assert_eq!(child["input"], input);
    assert_eq!(
        child["parent"],
        json!({ "task_id": "one-1", "step": "ship", "item": 0 })
    );
    let (status, refused) = harness
        .put_task(
            "one-1~ship~1",
            &json!({ "workflow": "ship-parcel", "input": input }),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "invalid_id", "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_fails_past_the_tolerance_fails_the_order_and_the_others_are_undone() {
    let harness = Harness::start(5).await;
    harness.refuse_once("drone").await;
    harness
        .put_task("order-3", &parcel_order("order-3", 4))
        .await;
    let task = harness.settle_in("order-3", "Error").await;
    assert_eq!(
        task["error"],
        "step 'deliver-each': 1 of 4 children failed (0 tolerated)"
    );
    assert_eq!(step_states(&task), ["Processed", "Compensated", "Pending"]);
    let listed = children(&harness, "order-3", "deliver-each", 50).await;
    assert_eq!(listed.len(), 4, "every child had started: four at a time");
    let mut failed = 0;
    for child in &listed {
        let states = step_states(child);
        assert_eq!(child["state"], "Error", "{child:#}");
        if states == ["Compensated", "Error"] {
            failed += 1;
        } else {
            assert_eq!(states, ["Compensated", "Compensated"], "{child:#}");
        }
    }
    assert_eq!(failed, 1, "one drone refused");
    assert_eq!(
        harness.calls("delivery").await,
        0,
        "the order is never confirmed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_order_cancels_its_running_children_and_undoes_those_done() {
    let harness = Harness::start(5).await;
    harness.faults("drone", json!({ "latency_ms": 1500 })).await;
    harness
        .put_task("order-4", &parcel_order("order-4", 3))
        .await;
    harness
        .wait_for("order-4", "shipping", |t| {
            step(t, "deliver-each")["children"]["running"]
                .as_array()
                .is_some_and(|running| running.len() == 3)
        })
        .await;
    // Each child created: one stopped before its creation never starts, and is no
    // running child cancelled.
    for n in 0..3 {
        harness
            .wait_for(&format!("order-4~deliver-each~{n}"), "running", |t| {
                t["state"] == "Processing"
            })
            .await;
    }
    let (status, _, _) = harness
        .call("POST", "/tasks/order-4/cancel", Some(b"{}"))
        .await;
    assert_eq!(status, 202);
    let task = harness.settle_in("order-4", "Error").await;
    assert_eq!(task["cancelled"]["by"], "owner");
    for n in 0..3 {
        let child = harness
            .settle_in(&format!("order-4~deliver-each~{n}"), "Error")
            .await;
        assert_eq!(child["cancelled"]["by"], "parent", "{child:#}");
        let left: Vec<String> = step_states(&child)
            .into_iter()
            .filter(|s| s == "Processed")
            .collect();
        assert!(
            left.is_empty(),
            "nothing of a child is left in place: {child:#}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resubmitted_order_runs_its_undone_children_again_under_the_same_ids() {
    let harness = Harness::start(5).await;
    harness.refuse_once("delivery").await;
    harness
        .put_task("order-5", &parcel_order("order-5", 2))
        .await;
    harness.settle_in("order-5", "Error").await;
    let (status, _, refused) = harness
        .call(
            "POST",
            "/tasks/order-5~deliver-each~0/resubmit",
            Some(b"{}"),
        )
        .await;
    assert_eq!(status, 409, "a child runs again with its parent: {refused}");
    let (status, _, _) = harness
        .call("POST", "/tasks/order-5/resubmit", Some(b"{}"))
        .await;
    assert_eq!(status, 202);
    let task = harness.settle_in("order-5", "Processed").await;
    assert_eq!(task["run"], 2);
    for child in children(&harness, "order-5", "deliver-each", 50).await {
        assert_eq!(child["state"], "Processed", "{child:#}");
        assert_eq!(child["run"], 2, "the child ran again: {child:#}");
        let id = child["id"].as_str().expect("id");
        let effects = harness.effects_of(id).await;
        assert_eq!(
            effects
                .iter()
                .filter(|(_, operation, _)| operation == "/packages")
                .count(),
            2,
            "a package in each run, the first undone: {effects:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_large_children_is_cut_to_fit_and_goes_on_after_its_last_child() {
    let harness = Harness::start(5).await;
    // Each parcel's package answers 60 KB: a hundred children answer 6 MB.
    harness
        .faults("package", json!({ "answer_bytes": 60_000 }))
        .await;
    harness.put_task("big-1", &parcel_order("big-1", 100)).await;
    harness.settle_in("big-1", "Processed").await;
    let (status, _, first) = harness
        .call(
            "GET",
            "/tasks/big-1/children?step=deliver-each&limit=100",
            None,
        )
        .await;
    assert_eq!(status, 200);
    let shown = first["tasks"].as_array().expect("tasks").len();
    assert!((1..100).contains(&shown), "cut to fit: {shown}");
    assert_eq!(first["next"], (shown - 1).to_string());
    let all = children(&harness, "big-1", "deliver-each", 100).await;
    let items: Vec<u64> = all
        .iter()
        .filter_map(|child| child["parent"]["item"].as_u64())
        .collect();
    assert_eq!(
        items,
        (0..100).collect::<Vec<u64>>(),
        "each child once, in order"
    );
}

/// Submits a parcel order `id` of `parcels` parcels, claimed and its account checked
/// by `app`, a scheduler in memory: its map's children are started.
async fn parcels_started(app: &App, names: &QueueNames, id: &TaskId, parcels: usize) {
    let order = parcel_order(id.as_str(), parcels);
    app.submit(
        "parcel-order",
        Submission::new(id.clone(), order["input"].clone()),
    )
    .await
    .expect("submitted");
    let run = serde_json::to_string(&SchedulerMessage::Run {
        task_id: id.clone(),
    })
    .expect("json");
    app.on_scheduler_message(names.scheduler.as_str(), &run)
        .await
        .expect("claimed");
    let checked = SchedulerMessage::Response(AgentResponse {
        task_id: id.clone(),
        run: 1,
        step: 0,
        attempt: 1,
        operation: Operation::Call,
        outcome: Outcome::Succeeded { output: json!({}) },
        sealed_task: None,
        task_created_at: None,
        output_apart: false,
    });
    let checked = serde_json::to_string(&checked).expect("json");
    app.on_scheduler_message(names.agent_responses.as_str(), &checked)
        .await
        .expect("the account checked, the parcels started");
}

/// The tasks the Run messages on `queue` name, in order.
fn runs(memory: &Memory, queue: &QueueName) -> Vec<TaskId> {
    memory
        .messages(queue)
        .into_iter()
        .filter_map(|m| match serde_json::from_str(&m.body) {
            Ok(SchedulerMessage::Run { task_id }) => Some(task_id),
            _ => None,
        })
        .collect()
}

/// The tasks the agent requests on `queue` are for, in order.
fn asked(memory: &Memory, queue: &QueueName) -> Vec<String> {
    memory
        .messages(queue)
        .into_iter()
        .map(|m| serde_json::from_str::<Value>(&m.body).expect("json"))
        .filter_map(|request| Some(request["task_id"].as_str()?.to_owned()))
        .collect()
}

/// A map's children are created claimed by the process running their parent, as a
/// direct submission is by the local one: each creation is its claim and its first
/// step's request, one write, and no Run message is sent for it. In memory, on a
/// manual clock.
#[tokio::test]
async fn a_maps_children_are_created_claimed_with_their_first_steps_asked_for() {
    let buffering = Buffering::new();
    let (_, memory, names, _) = buffering.parts();
    let app = buffering.direct_over(buffering.ports(), "scheduler-1");
    let id = TaskId::parse("order-c").expect("id");
    parcels_started(&app, names, &id, 3).await;

    for n in 0..3 {
        let child = TaskId::parse(format!("order-c~deliver-each~{n}")).expect("id");
        let task = TaskStore::task(memory.as_ref(), &child)
            .await
            .expect("read")
            .expect("the child created");
        assert_eq!(
            (task.state, task.version, task.locked_by.as_deref()),
            (TaskState::Processing, 2, Some("scheduler-1")),
            "created claimed, one write: {task:?}"
        );
    }
    assert_eq!(
        runs(memory, &names.scheduler),
        [id],
        "no Run message for a child"
    );
    let asked: Vec<String> = asked(memory, &names.agent_requests)
        .into_iter()
        .filter(|task| task.starts_with("order-c~"))
        .collect();
    assert_eq!(
        asked.len(),
        3,
        "each child's first step asked for: {asked:?}"
    );
}

/// Queues as the supervisor's IAM role has them: every queue of the pattern's but
/// the agents' requests, which it may not send to.
struct SupervisorsQueues {
    memory: Arc<Memory>,
    agent_requests: QueueName,
}

#[async_trait::async_trait]
impl Queues for SupervisorsQueues {
    async fn send(
        &self,
        queue: &QueueName,
        messages: &[OutgoingMessage],
    ) -> Result<(), QueueError> {
        if *queue == self.agent_requests {
            return Err(QueueError::new(queue, "AccessDenied: not the supervisor's"));
        }
        self.memory.send(queue, messages).await
    }
}

/// A map's child whose start was lost is created again when its parent's watch
/// passes, by the supervisor, which may not send agent requests: Pending, with a Run
/// message, for a scheduler to claim and ask for its first step. In memory, on a
/// manual clock.
#[tokio::test]
async fn a_child_lost_at_its_start_is_created_again_by_the_supervisor_for_a_scheduler() {
    let buffering = Buffering::new();
    let (clock, memory, names, _) = buffering.parts();
    let scheduler = buffering.direct_over(buffering.ports(), "scheduler-1");
    let supervisor = buffering.direct_over(
        Ports {
            queues: Arc::new(SupervisorsQueues {
                memory: Arc::clone(memory),
                agent_requests: names.agent_requests.clone(),
            }),
            ..buffering.ports()
        },
        "supervisor-1",
    );
    let id = TaskId::parse("order-l").expect("id");
    parcels_started(&scheduler, names, &id, 2).await;
    let lost = TaskId::parse("order-l~deliver-each~1").expect("id");
    memory.remove_task(&lost);
    let parent = TaskStore::task(memory.as_ref(), &id)
        .await
        .expect("read")
        .expect("the parent");
    let watch = parent.steps[1].complete_by.expect("the map watched");
    clock.advance(clock.now().until(watch) + Duration::from_millis(1));

    supervisor.sweep(10).await.expect("swept");
    let child = TaskStore::task(memory.as_ref(), &lost)
        .await
        .expect("read")
        .expect("created again");
    assert_eq!(
        (child.state, child.locked_by.as_deref()),
        (TaskState::Pending, None),
        "created for a scheduler to claim"
    );
    assert!(
        runs(memory, &names.scheduler).contains(&lost),
        "its Run message sent"
    );

    let run = serde_json::to_string(&SchedulerMessage::Run {
        task_id: lost.clone(),
    })
    .expect("json");
    scheduler
        .on_scheduler_message(names.scheduler.as_str(), &run)
        .await
        .expect("claimed");
    let asked = asked(memory, &names.agent_requests);
    assert!(
        asked.contains(&lost.to_string()),
        "its first step asked for by the scheduler: {asked:?}"
    );
}
