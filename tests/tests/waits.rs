//! Waits end to end on the embedded backend, through the HTTP API: a person's
//! approval (a callback step without an agent) skipped under an amount, given by its
//! token or refused on the owner's route; the drone's service calling back at the
//! pickup scan, with heartbeats and a timeout; timers, a later start, and pause and
//! resume. The clock is the harness's: nothing here waits in real time for a timer.

use std::time::Duration;

use sas_core::app::{Recovery, SweepReport};
use sas_core::clock::Clock as _;
use sas_domain::decide::Verdict;
use sas_tests::{Harness, delivery_input, step, step_states};
use serde_json::{Value, json};

fn refund(amount: f64) -> Value {
    json!({ "workflow": "refund",
            "input": { "order_id": "o-1", "customer_id": "c-1", "amount": amount } })
}

/// The token of `name`'s wait for its callback, once it waits.
async fn token_of(harness: &Harness, id: &str, name: &str) -> String {
    let task = harness
        .wait_for(id, "waiting for its callback", |t| {
            step(t, name)["waiting"]["for"] == "callback"
        })
        .await;
    step(&task, name)["waiting"]["token"]
        .as_str()
        .expect("a token in the task's view")
        .to_owned()
}

async fn post(harness: &Harness, path: &str, body: &Value) -> (u16, Value) {
    let (status, _, body) = harness
        .call("POST", path, Some(body.to_string().as_bytes()))
        .await;
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_refund_skips_its_approval_and_a_large_one_waits_for_a_person_once() {
    let harness = Harness::start(5).await;
    harness.put_task("small", &refund(99.5)).await;
    let small = harness.settle_in("small", "Processed").await;
    assert_eq!(
        step_states(&small),
        ["Processed", "Skipped", "Processed", "Processed"]
    );

    harness.put_task("large", &refund(250.0)).await;
    let token = token_of(&harness, "large", "approve").await;
    let task = harness.task("large").await;
    assert_eq!(step(&task, "refund-payment")["state"], "Pending");
    assert_eq!(
        step(&task, "approve")["waiting"]["until"],
        "2027-01-16T08:00:00.000Z",
        "24 hours from its start: {task}"
    );

    let (status, body) = post(&harness, "/callbacks/not-a-token", &json!({"output": {}})).await;
    assert_eq!((status, &body["error"]["code"]), (404, &json!("not_found")));
    // Another signature: one of its characters changed.
    let at = token.len() - 5;
    let other = if &token[at..=at] == "A" { "B" } else { "A" };
    let forged = format!("{}{other}{}", &token[..at], &token[at + 1..]);
    let (status, _) = post(
        &harness,
        &format!("/callbacks/{forged}"),
        &json!({"output": {}}),
    )
    .await;
    assert_eq!(status, 404, "a token with another signature is none");
    let (status, body) = post(&harness, &format!("/callbacks/{token}"), &json!({})).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_body"))
    );

    let approval = json!({ "output": { "approved_by": "ana" } });
    let (status, body) = post(&harness, &format!("/callbacks/{token}"), &approval).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({ "step": "approve", "state": "Processed" }));
    let (status, body) = post(&harness, &format!("/callbacks/{token}"), &approval).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("not_waiting")),
        "a token is used once: {body}"
    );
    let task = harness.settle_in("large", "Processed").await;
    assert_eq!(
        step(&task, "approve")["output"],
        json!({ "approved_by": "ana" })
    );
    let woke = task["history"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e["event"] == "woke"))
        .expect("the approval in the history");
    assert_eq!(woke["by"], "token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_refused_on_the_owners_route_fails_and_pays_nothing() {
    let harness = Harness::start(5).await;
    harness.put_task("refused", &refund(500.0)).await;
    token_of(&harness, "refused", "approve").await;
    let (status, body) = post(
        &harness,
        "/tasks/refused/steps/no-such-step/complete",
        &json!({ "output": {} }),
    )
    .await;
    assert_eq!((status, &body["error"]["field"]), (404, &json!("step")));
    let (status, body) = post(
        &harness,
        "/tasks/refused/steps/approve/complete",
        &json!({ "error": "the goods were not returned" }),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let task = harness.settle_in("refused", "Error").await;
    assert_eq!(
        step_states(&task),
        ["Processed", "Error", "Pending", "Pending"]
    );
    assert_eq!(
        step(&task, "approve")["error"],
        "the goods were not returned"
    );
    assert_eq!(harness.calls("payment").await, 0, "nothing refunded");
    let (status, _) = post(
        &harness,
        "/tasks/refused/steps/approve/complete",
        &json!({ "output": {} }),
    )
    .await;
    assert_eq!(status, 409, "the wait is over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pickup_scan_calls_back_heartbeats_push_its_lease_and_a_missed_one_retries_it() {
    let harness = Harness::start(5).await;
    let body = json!({ "workflow": "drone-delivery-pickup", "input": delivery_input() });
    harness.put_task("scan", &body).await;
    let first = token_of(&harness, "scan", "schedule-drone").await;
    let task = harness.task("scan").await;
    let drone = step(&task, "schedule-drone");
    assert_eq!(drone["state"], "Processing");
    assert_eq!(
        drone["complete_by"], "2027-01-15T08:30:00.000Z",
        "a heartbeat due: {drone}"
    );
    assert_eq!(
        drone["waiting"]["until"], "2027-01-15T10:00:00.000Z",
        "2 hours: {drone}"
    );

    harness.advance(Duration::from_secs(20 * 60));
    let (status, body) = post(
        &harness,
        &format!("/callbacks/{first}/heartbeat"),
        &json!({}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["complete_by"], "2027-01-15T08:50:00.000Z",
        "pushed 30m on: {body}"
    );

    // The next heartbeat is lost: the wait times out and is retried, the drone's
    // service called again under the same key and with the same token, the one a
    // service that deduplicates by key kept.
    harness.advance(Duration::from_secs(31 * 60));
    harness.sweep().await;
    let second = token_of(&harness, "scan", "schedule-drone").await;
    assert_eq!(
        first, second,
        "the retry carries the token its service kept"
    );
    let task = harness.task("scan").await;
    assert_eq!(step(&task, "schedule-drone")["attempt"], 2);
    assert_eq!(step(&task, "schedule-drone")["failure_count"], 1);

    let scanned = json!({ "output": { "scanned_at": "2027-01-15T08:52:00Z" } });
    let (status, _) = post(&harness, &format!("/callbacks/{first}"), &scanned).await;
    assert_eq!(status, 200);
    let task = harness.settle_in("scan", "Processed").await;
    assert_eq!(step_states(&task), ["Processed"; 5]);
    assert_eq!(step(&task, "schedule-drone")["output"], scanned["output"]);
    let effects = harness.effects_of("scan").await;
    assert!(
        effects.contains(&("drone".into(), "/drones/schedule".into(), 2)),
        "one drone scheduled, called twice under its key: {effects:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_end_at_their_time_and_a_paused_task_starts_nothing_until_resumed() {
    let harness = Harness::start(5).await;
    let body = json!({ "workflow": "cool-off",
        "input": { "customer_id": "c-1", "window_start": "2027-01-15T09:00:00+01:00" } });
    harness.put_task("timer", &body).await;
    let task = harness
        .wait_for("timer", "cooling off", |t| {
            step(t, "cool-off")["waiting"]["for"] == "timer"
        })
        .await;
    assert_eq!(
        step(&task, "cool-off")["waiting"]["until"],
        "2027-01-15T08:10:00.000Z"
    );

    harness.advance(Duration::from_secs(9 * 60));
    let (status, body) = post(&harness, "/tasks/timer/pause", &json!({})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["paused"]["by"], "owner");
    // The timer ends while the task is paused (found by the supervisor's sweep, every
    // second locally): the next timer, already past (09:00 at +01:00), does not start.
    harness.advance(Duration::from_secs(61));
    harness.sweep().await;
    harness
        .wait_for("timer", "its timer ended", |t| {
            step(t, "cool-off")["state"] == "Processed"
        })
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let task = harness.task("timer").await;
    assert_eq!(
        step_states(&task),
        ["Processed", "Processed", "Pending", "Pending"],
        "paused: {task}"
    );
    let (status, _) = post(&harness, "/operator/tasks/timer/resume", &json!({})).await;
    assert_eq!(status, 202);
    let task = harness.settle_in("timer", "Processed").await;
    assert_eq!(step_states(&task), ["Processed"; 4]);
    assert_eq!(harness.calls("delivery").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_of_a_year_is_left_alone_until_its_end() {
    let harness = Harness::start(5).await;
    let body = json!({ "workflow": "cool-off",
        "input": { "customer_id": "c-1", "window_start": "2028-01-15T08:00:00Z" } });
    harness.put_task("year", &body).await;
    harness
        .wait_for("year", "cooling off", |t| {
            step(t, "cool-off")["waiting"]["for"] == "timer"
        })
        .await;
    harness.advance(Duration::from_secs(10 * 60));
    assert_eq!(harness.sweep().await, report(&[(Verdict::Woke, 1)]));
    harness
        .wait_for("year", "waiting a year", |t| {
            step(t, "at-dropoff-window")["waiting"]["until"] == "2028-01-15T08:00:00.000Z"
        })
        .await;

    // The supervisor's sweeps through the year find nothing to do (here, where no
    // deadline message comes, the sweep ends the timer; on AWS the look-ahead a
    // quarter of an hour before sends the one message that does, decide's tests
    // show).
    for _ in 0..12 {
        harness.advance(Duration::from_secs(30 * 24 * 3600));
        assert_eq!(harness.sweep().await, report(&[]));
    }
    harness.advance(Duration::from_secs(5 * 24 * 3600 - 11 * 60));
    assert_eq!(harness.sweep().await, report(&[]), "a minute before");
    harness.advance(Duration::from_secs(60));
    assert_eq!(harness.sweep().await, report(&[(Verdict::Woke, 1)]));
    let task = harness.settle_in("year", "Processed").await;
    assert_eq!(step_states(&task), ["Processed"; 4]);
}

fn report(decided: &[(Verdict, usize)]) -> SweepReport {
    decided
        .iter()
        .map(|&(verdict, n)| (Recovery::Decided(verdict), n))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_to_start_later_is_pending_until_then_and_bulk_pause_and_resume_take_each_once() {
    let harness = Harness::start(5).await;
    let later = json!({ "workflow": "drone-delivery", "input": delivery_input(),
                        "start_at": "2027-01-15T09:00:00Z" });
    let (status, task) = harness.put_task("later", &later).await;
    assert_eq!(status, 202);
    assert_eq!(task["start_at"], "2027-01-15T09:00:00.000Z");
    // A character of several bytes where an offset would be, and an offset that moves
    // the instant past the year 9999, are refused as the word is (they took the server
    // down).
    for (id, start_at) in [
        ("bad-start", "tomorrow"),
        ("bad-1", "a€12345"),
        ("bad-2", "9999-12-31T23:00:00-05:00"),
    ] {
        let submission = json!({ "workflow": "drone-delivery", "input": delivery_input(), "start_at": start_at });
        let (status, body) = harness.put_task(id, &submission).await;
        assert_eq!(
            (status, &body["error"]["field"]),
            (400, &json!("start_at")),
            "{start_at}"
        );
    }
    let (status, _, listed) = harness
        .call("GET", "/operator/tasks?state=Pending", None)
        .await;
    assert_eq!(
        (status, listed["tasks"][0]["id"].as_str()),
        (200, Some("later")),
        "{listed}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(harness.calls("account").await, 0, "not before its start");

    let filter = |batch: &str| json!({ "batch": batch, "workflow": "drone-delivery" });
    let (status, report) = post(
        &harness,
        "/operator/bulk/pause",
        &json!({ "batch": "p1", "state": "Pending" }),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["taken"], 1, "{report}");
    let (_, again) = post(
        &harness,
        "/operator/bulk/pause",
        &json!({ "batch": "p2", "state": "Pending" }),
    )
    .await;
    assert_eq!(
        again["taken"], 0,
        "a paused task is not paused again: {again}"
    );
    harness.advance(Duration::from_secs(3600));
    harness.sweep().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(harness.calls("account").await, 0, "paused past its start");
    let (_, resumed) = post(&harness, "/operator/bulk/resume", &filter("r1")).await;
    assert_eq!(resumed["taken"], 1, "{resumed}");
    let task = harness.settle_in("later", "Processed").await;
    assert!(task["paused"].is_null());
    let events: Vec<&str> = task["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter_map(|e| e["event"].as_str())
        .filter(|e| ["paused", "resumed"].contains(e))
        .collect();
    assert_eq!(events, ["paused", "resumed"]);
}

/// A wait for a task's end holds its caller's request, and on Lambda a whole
/// invocation: a task that will not move before the wait ends (to start later) is
/// answered at once, and one that starts within the wait is waited for. The clock is
/// tokio's, paused: time passes only while something waits.
#[tokio::test(start_paused = true)]
async fn a_wait_for_a_task_that_will_not_move_before_it_ends_is_answered_at_once() {
    let world = sas_tests::Buffering::new();
    let app = world.direct_over(world.ports(), "api");
    let wait = Duration::from_secs(20);
    for (id, starts_in, waits) in [
        ("a-day-ahead", Duration::from_secs(86_400), false),
        ("in-ten-seconds", Duration::from_secs(10), true),
    ] {
        let id = sas_domain::ids::TaskId::parse(id).expect("id");
        let mut submission = sas_domain::submission::Submission::new(id.clone(), delivery_input());
        submission.start_at = Some(world.clock.now().plus(starts_in));
        app.submit("drone-delivery", submission)
            .await
            .expect("submitted");
        let started = tokio::time::Instant::now();
        let task = app
            .wait_final(&id, wait)
            .await
            .expect("read")
            .expect("the task");
        assert_eq!(task.state, sas_domain::task::TaskState::Pending);
        assert_eq!(started.elapsed() >= starts_in, waits, "{id}");
    }
}
