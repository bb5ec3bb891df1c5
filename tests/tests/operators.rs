//! What operators and owners do to tasks, end to end on the local system: cancel
//! during each kind of step, resubmit with an edited input, bulk resubmission taking
//! each task once through an interruption, and the OpenAPI document matching the
//! routes the handler answers.

use std::collections::BTreeSet;
use std::time::Duration;

use sas_core::ports::{OutgoingMessage, Queues};
use sas_domain::ids::QueueName;
use sas_tests::{
    Harness, UNDONE_AFTER_THE_DELIVERY_FAILED, UNDONE_BEFORE_THE_DELIVERY, delivery_input,
    step_states,
};
use serde_json::{Value, json};

fn quick(notify: Option<&str>) -> Value {
    json!({ "workflow": "drone-delivery-quick", "input": delivery_input(), "notify": notify })
}

/// A step's lease.
const BUDGET: Duration = Duration::from_millis(500);

/// The compensations applied for a task, as (service, calls made with its key).
async fn undone(harness: &Harness, task: &str) -> Vec<(String, u64)> {
    harness
        .effects_of(task)
        .await
        .into_iter()
        .filter(|(_, operation, _)| operation.ends_with("/cancel"))
        .map(|(service, _, calls)| (service, calls))
        .collect()
}

/// Ends the running step's lease once `service` has had `calls` calls
/// ([`Harness::end_lease`]).
async fn end_lease(harness: &Harness, service: &str, calls: u64) {
    harness.end_lease(service, calls, BUDGET).await;
}

async fn cancel(harness: &Harness, id: &str) -> Value {
    let (status, location, body) = harness
        .call("POST", &format!("/tasks/{id}/cancel"), None)
        .await;
    assert_eq!(
        (status, location.as_deref()),
        (202, Some(format!("/tasks/{id}").as_str())),
        "{body:#}"
    );
    assert_eq!(body["cancelled"]["by"], "owner", "{body:#}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_call_waits_for_it_then_undoes_the_done_steps_once() {
    let harness = Harness::start(5).await;
    harness
        .faults("drone", json!({ "hang_ms": 3000, "times": 1 }))
        .await;
    harness
        .put_task("during-call", &quick(Some("during-call-updates")))
        .await;
    harness
        .wait_for("during-call", "calling the drone", |t| {
            t["steps"][3]["state"] == "Processing"
        })
        .await;
    let body = cancel(&harness, "during-call").await;
    assert_eq!(
        (body["state"].as_str(), body["error"].as_str()),
        (Some("Compensating"), Some("cancelled by its owner")),
    );
    assert_eq!(
        body["steps"][3]["state"], "Processing",
        "the running call is waited for"
    );
    let again = cancel(&harness, "during-call").await;
    // (Its version may have moved since: its notifications known sent are cleared.)
    assert_eq!(
        (&again["cancelled"], &again["state"], &again["error"]),
        (&body["cancelled"], &body["state"], &body["error"]),
        "asking again changes nothing"
    );

    // The drone applied the schedule and holds its answer past the lease: the
    // supervisor does not retry the call of a cancelled task, it undoes it.
    end_lease(&harness, "drone", 1).await;
    let task = harness.settle_in("during-call", "Error").await;
    assert_eq!(step_states(&task), UNDONE_BEFORE_THE_DELIVERY);
    assert_eq!(task["error"], "cancelled by its owner");
    assert_eq!(
        undone(&harness, "during-call").await,
        [("drone".into(), 1), ("package".into(), 1)]
    );
    assert_eq!(
        harness.calls("delivery").await,
        0,
        "no step after the cancel"
    );
    let updates = harness.notifications("during-call-updates").await;
    let last = updates.last().expect("notified");
    assert_eq!(
        (last["state"].as_str(), last["error"].as_str()),
        (Some("Error"), Some("cancelled by its owner"))
    );
    let (_, _, alerts) = harness.call("GET", "/local/alerts", None).await;
    assert_eq!(alerts["alerts"][0]["reason"], "cancelled by its owner");
    let (status, _, ended) = harness.call("POST", "/tasks/nobody/cancel", None).await;
    assert_eq!(
        (status, ended["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_compensation_lets_it_finish_and_undoes_each_step_once() {
    let harness = Harness::start(5).await;
    harness
        .faults(
            "delivery",
            json!({ "permanent_error_rate": 1.0, "latency_ms": 300 }),
        )
        .await;
    harness.put_task("during-undo", &quick(None)).await;
    harness
        .wait_for("during-undo", "delivering", |t| {
            t["steps"][4]["state"] == "Processing"
        })
        .await;
    // The delivery is refused after 300 ms; the drone's compensation then hangs.
    harness
        .faults("drone", json!({ "hang_ms": 3000, "times": 1 }))
        .await;
    harness
        .wait_for("during-undo", "undoing the drone", |t| {
            t["steps"][3]["state"] == "Compensating"
        })
        .await;
    let body = cancel(&harness, "during-undo").await;
    assert_eq!(body["state"], "Compensating");
    end_lease(&harness, "drone", 2).await;
    let task = harness.settle_in("during-undo", "Error").await;
    assert_eq!(step_states(&task), UNDONE_AFTER_THE_DELIVERY_FAILED);
    assert!(
        task["error"].as_str().is_some_and(|e| e.contains("422")),
        "the first reason stays: {}",
        task["error"]
    );
    assert_eq!(task["cancelled"]["by"], "owner");
    assert_eq!(
        undone(&harness, "during-undo").await,
        [("drone".into(), 2), ("package".into(), 1)],
        "the drone's compensation sent again after its lease, applied once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_supervisor_retry_wait_undoes_the_step_that_may_have_applied() {
    let harness = Harness::start(5).await;
    harness
        .faults("drone", json!({ "transient_error_rate": 1.0, "times": 2 }))
        .await;
    harness.put_task("during-wait", &quick(None)).await;
    for attempt in 1..=2u64 {
        harness
            .wait_for("during-wait", "calling the drone", |t| {
                t["steps"][3]["attempt"] == attempt && t["steps"][3]["state"] == "Processing"
            })
            .await;
        end_lease(&harness, "drone", attempt).await;
    }
    // The second failure reaches the threshold: the retry waits 5 s.
    let waiting = harness
        .wait_for("during-wait", "waiting for its retry", |t| {
            t["state"] == "Pending"
        })
        .await;
    assert_eq!(waiting["failure_count"], 2);
    let body = cancel(&harness, "during-wait").await;
    assert_eq!(body["state"], "Compensating");
    let task = harness
        .wait_for("during-wait", "undone", |t| t["state"] == "Error")
        .await;
    assert_eq!(step_states(&task), UNDONE_BEFORE_THE_DELIVERY);
    assert_eq!(
        undone(&harness, "during-wait").await,
        [("drone".into(), 1), ("package".into(), 1)]
    );
    harness.advance(Duration::from_secs(6));
    harness.sweep().await;
    let later = harness.settle_in("during-wait", "Error").await;
    assert_eq!(
        later["steps"][3]["attempt"], task["steps"][3]["attempt"],
        "the retry's message, when it comes, finds nothing to do"
    );
    let (status, _, refused) = harness
        .call("POST", "/tasks/during-wait/cancel", Some(b"{\"why\": 1}"))
        .await;
    assert_eq!(
        (status, refused["error"]["field"].as_str()),
        (400, Some("why"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_task_cannot_be_cancelled_and_an_edited_resubmission_runs_the_new_input() {
    let harness = Harness::start(5).await;
    harness.put_task("done", &quick(None)).await;
    harness.settle_in("done", "Processed").await;
    let (status, _, refused) = harness.call("POST", "/tasks/done/cancel", None).await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (409, Some("ended"))
    );

    harness.refuse_once("account").await;
    harness.put_task("edit-me", &quick(None)).await;
    harness.settle_in("edit-me", "Error").await;
    let resubmit = |body: Value| {
        let harness = &harness;
        async move {
            harness
                .call(
                    "POST",
                    "/tasks/edit-me/resubmit",
                    Some(body.to_string().as_bytes()),
                )
                .await
        }
    };
    let (status, _, refused) = resubmit(json!({"input": {"customer_id": 7}})).await;
    assert_eq!(
        (status, refused["error"]["field"].as_str()),
        (400, Some("input.customer_id")),
        "checked against the task's workflow: {refused:#}"
    );
    let mut edited = delivery_input();
    edited["customer_id"] = json!("c-2");
    let (status, _, body) = resubmit(json!({ "input": edited })).await;
    assert_eq!((status, body["run"].as_u64()), (202, Some(2)), "{body:#}");
    let task = harness.settle_in("edit-me", "Processed").await;
    assert_eq!(task["input"], edited);
    assert_eq!(
        task["earlier_inputs"],
        json!([{ "until_run": 1, "input": delivery_input() }])
    );
    assert_eq!(task["resubmissions"][0]["by"], "owner");
    assert_eq!(task["resubmissions"][0]["edited"], true);
    let account_calls: Vec<_> = harness
        .effects_of("edit-me")
        .await
        .into_iter()
        .filter(|(service, _, _)| service == "account")
        .collect();
    assert_eq!(account_calls.len(), 1, "run 2 checked the account once");
}

/// Calls a bulk resubmission; returns its answer.
async fn bulk(harness: &Harness, body: &Value) -> Value {
    let (status, _, answer) = harness
        .call(
            "POST",
            "/operator/bulk/resubmit",
            Some(body.to_string().as_bytes()),
        )
        .await;
    assert_eq!(status, 200, "{answer:#}");
    answer
}

/// The tasks' runs and the batches that resubmitted them, as operators see them.
async fn runs(harness: &Harness, ids: &[String]) -> Vec<(u64, Vec<String>)> {
    let mut runs = Vec::new();
    for id in ids {
        let (_, _, task) = harness
            .call("GET", &format!("/operator/tasks/{id}"), None)
            .await;
        let batches = task["resubmissions"]
            .as_array()
            .expect("resubmissions")
            .iter()
            .map(|r| r["batch"].as_str().unwrap_or("-").to_owned())
            .collect();
        runs.push((task["run"].as_u64().expect("run"), batches));
    }
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_resubmission_of_500_takes_each_task_once_through_an_interruption() {
    const TASKS: usize = 500;
    let harness = Harness::start(5).await;
    // Every task fails at once, and fails again when resubmitted: a rerun of the
    // action finds them all in Error again.
    harness
        .faults("account", json!({ "permanent_error_rate": 1.0 }))
        .await;
    let ids: Vec<String> = (0..TASKS).map(|i| format!("bulk-{i:03}")).collect();
    for id in &ids {
        harness.put_task(id, &quick(None)).await;
    }
    for id in &ids {
        harness.settle_in(id, "Error").await;
    }
    let batch = |after: Option<&str>| {
        json!({"batch": "fix-accounts", "limit": 100, "per_second": 1000,
               "error_contains": "422", "after": after})
    };
    let first = bulk(&harness, &batch(None)).await;
    assert_eq!(
        (first["examined"].as_u64(), first["taken"].as_u64()),
        (Some(100), Some(100)),
        "{first:#}"
    );

    // The next call is cut off: the client goes away while the server works.
    let interrupted = {
        let body = batch(first["next"].as_str());
        let url = format!("http://{}/operator/bulk/resubmit", harness.running.api);
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(url)
                .json(&body)
                .send()
                .await
                .map(|r| r.status())
        })
    };
    let taken_before = 100;
    // Cut off once it has taken the page's first task.
    while harness.task(&ids[100]).await["run"] == 1 && !interrupted.is_finished() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    interrupted.abort();
    let cut_at = runs(&harness, &ids)
        .await
        .iter()
        .filter(|(run, _)| *run == 2)
        .count();
    println!(
        "the interrupted call had taken {} tasks",
        cut_at - taken_before
    );

    // Run again from the start, page after page, with the same batch.
    let mut after: Option<String> = None;
    let (mut taken, mut skipped) = (0, 0);
    loop {
        let page = bulk(&harness, &batch(after.as_deref())).await;
        taken += page["taken"].as_u64().expect("taken");
        skipped += page["skipped"].as_u64().expect("skipped");
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    let runs = runs(&harness, &ids).await;
    let twice: Vec<_> = ids
        .iter()
        .zip(&runs)
        .filter(|(_, run)| **run != (2, vec!["fix-accounts".to_owned()]))
        .collect();
    assert!(twice.is_empty(), "each task resubmitted once: {twice:?}");
    let rerun_took = usize::try_from(taken).expect("count");
    assert_eq!(
        rerun_took + cut_at,
        TASKS,
        "the rerun took exactly those the first calls had not"
    );
    assert!(
        skipped >= 100,
        "the first page's tasks were skipped: {skipped}"
    );
    // The cut may have come between a task's write and its Run message: its pickup
    // lease (2 s) ends, and the supervisor sends the message again.
    harness.advance(Duration::from_secs(3));
    harness.sweep().await;
    for id in &ids {
        harness.settle_in(id, "Error").await;
    }
    let errors: BTreeSet<_> = harness
        .effects_of("bulk-000")
        .await
        .into_iter()
        .map(|(service, ..)| service)
        .collect();
    assert!(errors.is_empty(), "no step applied: {errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_lists_exactly_the_routes_the_handler_answers() {
    let harness = Harness::start(5).await;
    let (status, _, document) = harness.call("GET", "/openapi.json", None).await;
    assert_eq!(status, 200);
    assert_eq!(document["openapi"], "3.1.0");
    let paths = document["paths"].as_object().expect("paths");
    let documented: BTreeSet<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .expect("item")
                .keys()
                .map(|method| (method.to_uppercase(), path.clone()))
        })
        .collect();
    // Every path the document has, one segment more or less, or another after a
    // task's id; with every method.
    let mut candidates = BTreeSet::new();
    for path in paths.keys() {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        candidates.insert(path.clone());
        candidates.insert(format!("{path}/more"));
        candidates.insert(format!("/{}", segments[..segments.len() - 1].join("/")));
        candidates.insert(format!("/{}/x/cancel", segments.join("/")));
        candidates.insert(format!("/{}/{{id}}", segments.join("/")));
        candidates.insert(path.replace("{queue}", "scheduler"));
    }
    // A concrete path is an instance of a documented one if each segment is the
    // same or stands for an id.
    let instance_of = |concrete: &str, template: &str| {
        let (c, t): (Vec<_>, Vec<_>) = (
            concrete.trim_matches('/').split('/').collect(),
            template.trim_matches('/').split('/').collect(),
        );
        c.len() == t.len() && c.iter().zip(&t).all(|(c, t)| c == t || t.starts_with('{'))
    };
    let mut answered = BTreeSet::new();
    for path in &candidates {
        let concrete = path
            .replace("{id}", "no-such-task")
            .replace("{queue}", "nowhere");
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            let (status, body) = raw_call(&harness, method, &concrete).await;
            let message = body["error"]["message"].as_str().unwrap_or_default();
            if status == 405 || (status == 404 && message.starts_with("no route")) {
                continue;
            }
            let route = documented
                .iter()
                .find(|(m, template)| m == method && instance_of(&concrete, template));
            assert!(
                route.is_some(),
                "{method} {concrete} is answered ({status}: {body}) and not documented"
            );
            answered.extend(route.cloned());
        }
    }
    assert_eq!(answered, documented, "every documented route is answered");
    assert!(documented.len() >= 15, "{documented:?}");
}

/// A call with `{}` for a body, whatever the answer's type: its status, and its body
/// as JSON (a string when it is not JSON, the console's page).
async fn raw_call(harness: &Harness, method: &str, path: &str) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let response = harness
        .http
        .request(method, format!("http://{}{path}", harness.running.api))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("the API answers");
    let status = response.status().as_u16();
    let text = response.text().await.expect("a body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_queues_are_listed_shown_and_redriven() {
    let harness = Harness::start(1).await;
    let backend = &harness.running.system.backend;
    let queues = &harness.running.system.queues;
    let send = |body: &str| OutgoingMessage {
        body: body.into(),
        delay: Duration::ZERO,
        trace: None,
    };
    // A poison message, dead-lettered after its one receive; and a message for a task
    // not yet submitted, put there as if dead-lettered in an outage.
    backend
        .send(&queues.scheduler, &[send("not json")])
        .await
        .expect("sent");
    let dead_letters = QueueName::parse("scheduler-dlq").expect("name");
    let early = json!({"type": "run", "task_id": "early"}).to_string();
    backend
        .send(&dead_letters, &[send(&early)])
        .await
        .expect("sent");
    for _ in 0..40 {
        harness.advance(Duration::from_secs(31));
        if harness.depth(&dead_letters).await.visible == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, _, listed) = harness.call("GET", "/operator/dead-letters", None).await;
    assert_eq!(status, 200, "{listed:#}");
    assert_eq!(
        listed["queues"],
        json!([
            {"queue": "scheduler", "source": "scheduler", "messages": 2},
            {"queue": "agent-requests", "source": "agent-requests", "messages": 0},
            {"queue": "agent-responses", "source": "agent-responses", "messages": 0},
            // Drained in direct ingestion too: a buffered run's submissions may be there.
            {"queue": "ingest", "source": "ingest", "messages": 0},
        ])
    );
    let (_, _, shown) = harness
        .call("GET", "/operator/dead-letters/scheduler", None)
        .await;
    let messages = shown["messages"].as_array().expect("messages");
    let bodies: BTreeSet<String> = messages.iter().map(|m| m["body"].to_string()).collect();
    assert_eq!(
        bodies,
        BTreeSet::from([json!("not json").to_string(), early.clone()])
    );
    let early_message = messages
        .iter()
        .find(|m| m["task_id"] == "early")
        .expect("the early message names its task");

    // The early message goes back once its task exists, and is handled.
    harness.put_task("early", &quick(None)).await;
    harness.settle_in("early", "Processed").await;
    let redrive = |body: Value| {
        let harness = &harness;
        async move {
            harness
                .call(
                    "POST",
                    "/operator/dead-letters/scheduler/redrive",
                    Some(body.to_string().as_bytes()),
                )
                .await
        }
    };
    let (status, _, answer) = redrive(json!({"ids": [early_message["id"]]})).await;
    assert_eq!(
        (status, answer["redriven"].as_u64()),
        (200, Some(1)),
        "{answer:#}"
    );
    let (_, _, answer) = redrive(json!({"ids": ["no-such-message"]})).await;
    assert_eq!(answer["redriven"], 0);
    harness.settle_in("early", "Processed").await;
    assert_eq!(
        harness.depth(&dead_letters).await.visible,
        1,
        "the redriven message was handled; the poison stays"
    );
    let (status, _, refused) = redrive(json!({"max": 0})).await;
    assert_eq!(
        (status, refused["error"]["field"].as_str()),
        (400, Some("max"))
    );

    // Named, more than a redrive without ids takes by default: every one goes back.
    let never = |n: usize| json!({"type": "run", "task_id": format!("never-{n}")}).to_string();
    let sent: Vec<_> = (0..12).map(|n| send(&never(n))).collect();
    backend.send(&dead_letters, &sent).await.expect("sent");
    let (_, _, shown) = harness
        .call("GET", "/operator/dead-letters/scheduler", None)
        .await;
    let named: Vec<&Value> = shown["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| {
            m["task_id"]
                .as_str()
                .is_some_and(|t| t.starts_with("never-"))
        })
        .map(|m| &m["id"])
        .collect();
    assert_eq!(named.len(), 12, "{shown:#}");
    let (status, _, answer) = redrive(json!({ "ids": named })).await;
    assert_eq!(
        (status, answer["redriven"].as_u64()),
        (200, Some(12)),
        "{answer:#}"
    );

    let (status, _, missing) = harness
        .call("GET", "/operator/dead-letters/elsewhere", None)
        .await;
    assert_eq!(
        (status, missing["error"]["field"].as_str()),
        (404, Some("queue"))
    );
}

/// A look at a dead-letter queue of large messages answers within what a Lambda
/// function may send API Gateway (6 MB): the messages that fit 4 MiB, not all a
/// hundred of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_at_large_dead_letters_shows_what_fits_an_answer() {
    let harness = Harness::start(1).await;
    let backend = &harness.running.system.backend;
    let dead_letters = QueueName::parse("scheduler-dlq").expect("name");
    let large = OutgoingMessage {
        body: json!({"type": "run", "task_id": "x".repeat(200 * 1024)}).to_string(),
        delay: Duration::ZERO,
        trace: None,
    };
    for _ in 0..30 {
        backend
            .send(&dead_letters, std::slice::from_ref(&large))
            .await
            .expect("sent");
    }
    let (status, _, shown) = harness
        .call("GET", "/operator/dead-letters/scheduler", None)
        .await;
    assert_eq!(status, 200);
    let answer = shown.to_string().len();
    assert!(answer <= sas_api::MAX_ANSWER_BYTES, "{answer} bytes");
    let count = shown["messages"].as_array().expect("messages").len();
    assert!((1..30).contains(&count), "{count} of 30 shown");
}
