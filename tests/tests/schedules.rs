//! Schedules, end to end on the local system as an operator runs them through `sas`,
//! on the harness's clock: a schedule every minute under each overlap policy, a
//! downtime caught up within its window, a run fired twice that is one task, a
//! schedule paused, resumed and deleted, and a state machine run on a schedule.

use std::time::Duration;

use sas_tests::Harness;
use serde_json::{Value, json};

const MINUTE: Duration = Duration::from_secs(60);

/// Creates schedule `name` every minute on approved-refund (each run waits for its
/// approval), with `more` options.
async fn every_minute(harness: &Harness, name: &str, more: &[&str]) -> String {
    let input = tempfile::NamedTempFile::new().expect("a file");
    let order = json!({"order_id": name, "customer_id": "c-1", "amount": 10});
    std::fs::write(input.path(), order.to_string()).expect("written");
    let path = input.path().to_str().expect("a path");
    let mut arguments = vec![
        "schedules",
        "create",
        name,
        "--workflow",
        "approved-refund",
        "--every",
        "1m",
        "--input",
        path,
    ];
    arguments.extend_from_slice(more);
    harness.sas_ok(&arguments).await
}

async fn schedule(harness: &Harness, name: &str) -> Value {
    let (status, _, body) = harness
        .call("GET", &format!("/operator/schedules/{name}"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The ids of the tasks waiting for their approval, of runs of `name`.
async fn waiting_runs(harness: &Harness, name: &str) -> Vec<String> {
    let (_, _, page) = harness
        .call("GET", "/operator/tasks?state=Processing&limit=100", None)
        .await;
    let mut ids: Vec<String> = (page["tasks"].as_array().expect("tasks").iter())
        .filter_map(|t| t["id"].as_str())
        .filter(|id| id.starts_with(&format!("{name}-")))
        .map(str::to_owned)
        .collect();
    ids.sort();
    ids
}

/// Waits for run `id` to wait for its approval.
async fn waiting(harness: &Harness, id: &str) {
    harness
        .wait_for(id, "waiting for its approval", |t| {
            t["steps"][1]["state"] == "Processing"
        })
        .await;
}

async fn approve(harness: &Harness, id: &str) {
    waiting(harness, id).await;
    let path = format!("/operator/tasks/{id}/steps/approve/complete");
    let body = br#"{"output": {"approved_by": "ana"}}"#;
    let (status, _, answer) = harness.call("POST", &path, Some(body)).await;
    assert_eq!(status, 202, "{answer}");
    harness.settle_in(id, "Processed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_every_minute_under_each_overlap_policy() {
    let harness = Harness::start(5).await;
    for (name, overlap) in [
        ("skips", "skip"),
        ("buffers", "buffer_one"),
        ("allows", "allow_all"),
    ] {
        let created = every_minute(&harness, name, &["--overlap", overlap]).await;
        assert!(created.contains(&format!("{name}  active")), "{created}");
        assert!(
            created.contains("next runs  2027-01-15T08:01:00.000Z, 2027-01-15T08:02:00.000Z"),
            "{created}"
        );
    }
    assert_eq!(
        harness.fire_schedules().await.runs,
        0,
        "no run before its time"
    );

    // Each minute's runs are let reach their approval before the clock moves on (an
    // agent answers nothing once its step's complete-by has passed).
    for (minute, started) in [
        ("0801", &["skips", "buffers", "allows"][..]),
        ("0802", &["allows"]),
        ("0803", &["allows"]),
    ] {
        harness.advance(MINUTE);
        assert_eq!(harness.fire_schedules().await.runs, started.len());
        for name in started {
            waiting(&harness, &format!("{name}-20270115T{minute}00Z")).await;
        }
    }
    assert_eq!(
        waiting_runs(&harness, "skips").await,
        ["skips-20270115T080100Z"]
    );
    let skips = schedule(&harness, "skips").await;
    assert_eq!(
        (skips["started"].as_u64(), skips["skipped"].as_u64()),
        (Some(1), Some(2))
    );

    let allows = waiting_runs(&harness, "allows").await;
    assert_eq!(
        allows,
        [
            "allows-20270115T080100Z",
            "allows-20270115T080200Z",
            "allows-20270115T080300Z"
        ]
    );

    let buffers = schedule(&harness, "buffers").await;
    assert_eq!(buffers["buffered"], "2027-01-15T08:02:00.000Z", "{buffers}");
    assert_eq!(
        buffers["next_runs"][0], "2027-01-15T08:02:00.000Z",
        "the buffered run is next"
    );
    assert_eq!(
        buffers["skipped"], 1,
        "one run buffered, the one after it skipped"
    );
    let shown = harness.sas_ok(&["schedules", "show", "buffers"]).await;
    assert!(
        shown.contains("runs       1 started, 1 skipped, 0 missed"),
        "{shown}"
    );
    assert!(
        shown.contains("last run   buffers-20270115T080100Z at 2027-01-15T08:01:00.000Z"),
        "{shown}"
    );

    // The buffered run starts once the running one has ended, under its own instant.
    approve(&harness, "buffers-20270115T080100Z").await;
    let ended = harness.task("buffers-20270115T080100Z").await;
    assert_eq!(
        ended["attributes"],
        json!({"customer": "c-1", "amount": 10, "approved_by": "ana"}),
        "its search attributes, the approver's once the approval came"
    );
    let report = harness.fire_schedules().await;
    assert_eq!(report.runs, 1, "{report:?}");
    assert_eq!(
        waiting_runs(&harness, "buffers").await,
        ["buffers-20270115T080200Z"]
    );
    let buffers = schedule(&harness, "buffers").await;
    assert_eq!(buffers["buffered"], Value::Null);
    assert_eq!(buffers["last_run"]["task_id"], "buffers-20270115T080200Z");

    let listed = harness.sas_ok(&["schedules", "list"]).await;
    for row in [
        "allows   approved-refund  every 1m  allow_all   active  2027-01-15T08:04:00.000Z  allows-20270115T080300Z",
        "buffers  approved-refund  every 1m  buffer_one  active  2027-01-15T08:04:00.000Z  buffers-20270115T080200Z",
        "skips    approved-refund  every 1m  skip        active  2027-01-15T08:04:00.000Z  skips-20270115T080100Z",
    ] {
        assert!(listed.contains(row), "'{row}' in:\n{listed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downtime_is_caught_up_within_the_window_and_a_run_fired_twice_is_one_task() {
    let harness = Harness::start(5).await;
    every_minute(
        &harness,
        "nightly",
        &["--overlap", "allow_all", "--catch-up-window", "3m"],
    )
    .await;
    // Ten minutes with nothing firing: the engine was down.
    harness.advance(10 * MINUTE + Duration::from_secs(30));
    let app = &harness.running.system.app;
    let (first, second) = tokio::join!(app.fire_schedule("nightly"), app.fire_schedule("nightly"));
    let started = first.expect("fired") + second.expect("fired");
    assert_eq!(
        started, 3,
        "each run started by one firing, found by the other"
    );
    assert_eq!(
        waiting_runs(&harness, "nightly").await,
        [
            "nightly-20270115T080800Z",
            "nightly-20270115T080900Z",
            "nightly-20270115T081000Z"
        ],
        "the runs within the window: 08:07:30 to 08:10:30"
    );
    let nightly = schedule(&harness, "nightly").await;
    assert_eq!(
        (nightly["started"].as_u64(), nightly["missed"].as_u64()),
        (Some(3), Some(7))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_paused_runs_nothing_resumes_from_now_and_is_deleted() {
    let harness = Harness::start(5).await;
    every_minute(&harness, "reports", &[]).await;
    let paused = harness.sas_ok(&["schedules", "pause", "reports"]).await;
    assert_eq!(paused.trim(), "reports paused");
    harness.advance(5 * MINUTE + Duration::from_secs(10));
    assert_eq!(harness.fire_schedules().await.runs, 0);
    let resumed = harness.sas_ok(&["schedules", "resume", "reports"]).await;
    assert_eq!(
        resumed.trim(),
        "reports resumed: next run 2027-01-15T08:06:00.000Z"
    );
    harness.advance(MINUTE);
    assert_eq!(harness.fire_schedules().await.runs, 1);
    assert_eq!(
        waiting_runs(&harness, "reports").await,
        ["reports-20270115T080600Z"]
    );

    let deleted = harness.sas_ok(&["schedules", "delete", "reports"]).await;
    assert_eq!(deleted.trim(), "reports deleted (its runs go on)");
    harness.advance(MINUTE);
    assert_eq!(harness.fire_schedules().await.runs, 0);
    let (ok, _, error) = harness.sas(&["schedules", "show", "reports"]).await;
    assert!(!ok);
    assert!(
        error.contains("404 not_found: no schedule 'reports'"),
        "{error}"
    );

    for (workflow, refused) in [
        (
            "approved-refund",
            "400 invalid_field: input.amount: is required",
        ),
        ("nope", "400 unknown_workflow: no workflow named 'nope'"),
    ] {
        let create = [
            "schedules",
            "create",
            "bad",
            "--workflow",
            workflow,
            "--every",
            "1m",
        ];
        let (ok, _, error) = harness.sas(&create).await;
        assert!(!ok && error.contains(refused), "{workflow}: {error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_machine_runs_on_a_schedule() {
    let harness = Harness::start(5).await;
    let input = tempfile::NamedTempFile::new().expect("a file");
    std::fs::write(input.path(), r#"{"name": "ana"}"#).expect("written");
    let path = input.path().to_str().expect("a path");
    let create = [
        "schedules",
        "create",
        "greetings",
        "--workflow",
        "greet",
        "--cron",
        "*/5 * * * *",
    ];
    harness
        .sas_ok(&[&create[..], &["--input", path]].concat())
        .await;
    harness.advance(5 * MINUTE);
    assert_eq!(harness.fire_schedules().await.runs, 1);
    let run = harness
        .settle_in("greetings-20270115T080500Z", "Processed")
        .await;
    assert_eq!(run["status"], "SUCCEEDED", "{run}");
    assert_eq!(
        run["attributes"],
        json!({"state_machine": "greet"}),
        "an execution is found by its machine"
    );
}
