//! Schedules on the deployed stack, woken by EventBridge Scheduler alone (the
//! supervisor's sweep a day off): a schedule's wake-ups set, paused and deleted by the
//! API, and its runs under each overlap policy and after a downtime. They run beside
//! the waits of [`super::workflows`], in the minutes those take.

use std::time::Duration;

use sas_tests::ministack::Deployment;
use serde_json::{Value, json};

use super::{operator, wait_for_task};

/// Creates the schedule `naps` (a nap every minute, `allow_all`) through the deployed
/// API, and `skips`, `buffers` and `catches` (a cool-off of ten minutes every minute,
/// whose runs overlap, under `skip`, `buffer_one` and `allow_all` with a catch-up
/// window of five minutes); checks the EventBridge Scheduler schedule `naps` set;
/// gives that schedule's group.
pub(super) async fn wake_ups_start(stack: &Deployment) -> String {
    let naps = json!({"workflow": "nap", "every": "1m", "overlap": "allow_all",
        "input": {"customer_id": "c-1"}});
    let cool_off = |overlap: &str| {
        json!({"workflow": "cool-off", "every": "1m", "overlap": overlap,
            "input": {"customer_id": "c-1", "window_start": "2030-01-01T00:00:00Z"}})
    };
    let mut catches = cool_off("allow_all");
    catches["catch_up_window"] = json!("5m");
    for (name, schedule) in [
        ("naps", naps),
        ("skips", cool_off("skip")),
        ("buffers", cool_off("buffer_one")),
        ("catches", catches),
    ] {
        let path = format!("/operator/schedules/{name}");
        let (status, created) = operator(stack, "PUT", &path, Some(&schedule)).await;
        if status != 201 {
            let logs = stack.logs("SubmissionFunction").await.join("\n");
            panic!("PUT {path}: {status} {created}; the API's logs:\n{logs}");
        }
    }
    let scheduler = aws_sdk_scheduler::Client::new(&stack.sdk);
    let groups = scheduler
        .list_schedule_groups()
        .send()
        .await
        .expect("groups");
    let group = (groups.schedule_groups().iter())
        .filter_map(|g| g.name())
        .find(|name| name.ends_with("-schedules"))
        .expect("the stack's schedule group")
        .to_owned();
    let wake_up = (scheduler
        .get_schedule()
        .group_name(&group)
        .name("naps")
        .send())
    .await
    .expect("the schedule's wake-ups, set by the API");
    assert_eq!(wake_up.schedule_expression(), Some("rate(1 minute)"));
    let target = wake_up.target().expect("a target");
    assert!(
        target.arn().ends_with("-SupervisorFunction"),
        "{}",
        target.arn()
    );
    assert_eq!(target.input(), Some(r#"{"schedule":"naps"}"#));
    group
}

/// The schedule `name` as the deployed API shows it, once `ready` holds of it, within
/// `minutes` (its wake-ups come every minute).
async fn schedule_when(
    stack: &Deployment,
    name: &str,
    minutes: u32,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let path = format!("/operator/schedules/{name}");
    let mut seen = Value::Null;
    for _ in 0..minutes * 30 {
        let (status, body) = operator(stack, "GET", &path, None).await;
        assert_eq!(status, 200, "{body}");
        if ready(&body) {
            return body;
        }
        seen = body;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let logs = stack.logs("SupervisorFunction").await.join("\n");
    panic!(
        "{name} not as awaited within {minutes} minutes: {seen}; the supervisor's logs:\n{logs}"
    );
}

/// `buffer_one`: the instant that comes while the first run of `buffers` runs is kept,
/// and its run starts, under its own instant, at the first wake-up after the first
/// run ended (cancelled here, in Error).
pub(super) async fn a_buffered_run_starts_once_the_running_one_ends(stack: &Deployment) {
    let buffers = schedule_when(stack, "buffers", 4, |s| s["buffered"].is_string()).await;
    assert_eq!(buffers["started"], 1, "buffer_one: one run: {buffers}");
    let first = buffers["last_run"]["task_id"]
        .as_str()
        .expect("the first run");
    let path = format!("/operator/tasks/{first}/cancel");
    let (status, cancelled) = operator(stack, "POST", &path, Some(&json!({}))).await;
    assert_eq!(status, 202, "{cancelled}");
    let kept = buffers["buffered"].clone();
    let buffers = schedule_when(stack, "buffers", 4, |s| s["started"] == 2).await;
    assert_eq!(
        buffers["last_run"]["at"], kept,
        "the kept instant's run started once the first ended: {buffers}"
    );
}

/// Downtime: the wake-ups of `catches` stopped (its EventBridge schedule disabled
/// behind the engine's back, as if nothing woke it) past an instant of it; once they
/// come back, the run of that instant starts late, within the schedule's catch-up
/// window, and none is counted missed.
pub(super) async fn runs_missed_while_nothing_woke_the_engine_are_caught_up(
    stack: &Deployment,
    group: &str,
) {
    let started = |s: &Value| s["started"].as_u64().unwrap_or_default();
    schedule_when(stack, "catches", 4, |s| started(s) >= 1).await;
    let scheduler = aws_sdk_scheduler::Client::new(&stack.sdk);
    let set_state = |state: aws_sdk_scheduler::types::ScheduleState| {
        let scheduler = &scheduler;
        async move {
            let wake_up = (scheduler.get_schedule().group_name(group).name("catches"))
                .send()
                .await
                .expect("the schedule's wake-ups");
            (scheduler.update_schedule())
                .group_name(group)
                .name("catches")
                .set_schedule_expression(wake_up.schedule_expression)
                .set_schedule_expression_timezone(wake_up.schedule_expression_timezone)
                .set_flexible_time_window(wake_up.flexible_time_window)
                .set_target(wake_up.target)
                .state(state)
                .send()
                .await
                .expect("the wake-ups' state changed");
        }
    };
    set_state(aws_sdk_scheduler::types::ScheduleState::Disabled).await;
    // Its next instant, less than a minute off, comes and goes while nothing wakes
    // the engine (and the supervisor's sweep is a day off).
    let (_, shown) = operator(stack, "GET", "/operator/schedules/catches", None).await;
    let due = shown["next_runs"][0]
        .as_str()
        .expect("its next run")
        .to_owned();
    tokio::time::sleep(Duration::from_secs(75)).await;
    let (_, before) = operator(stack, "GET", "/operator/schedules/catches", None).await;
    set_state(aws_sdk_scheduler::types::ScheduleState::Enabled).await;
    let after = schedule_when(stack, "catches", 4, |s| started(s) > started(&before)).await;
    assert_eq!(after["missed"], 0, "none missed: {after}");
    let late = format!(
        "catches-{}",
        due.replace(['-', ':'], "").replace(".000", "")
    );
    let (status, task) = operator(stack, "GET", &format!("/operator/tasks/{late}"), None).await;
    assert_eq!(
        status, 200,
        "the run of {due}, whose time passed with nothing to wake the engine, started \
         once the wake-ups came back: {task}; the schedule before {before}, after {after}"
    );
}

/// With no sweep in this test (`SupervisorRate` a day), the runs of `naps` start by
/// EventBridge Scheduler's wake-ups alone; paused, its wake-ups are disabled, and
/// deleted, gone.
pub(super) async fn naps_run_then_wake_ups_stop(stack: &Deployment, group: &str) {
    let naps = schedule_when(stack, "naps", 3, |s| s["started"].as_u64() >= Some(1)).await;
    let run = naps["last_run"]["task_id"].as_str().expect("its run");
    let instant = run.strip_prefix("naps-").unwrap_or_default();
    assert!(
        instant.len() == 16 && instant.ends_with('Z') && instant.as_bytes()[8] == b'T',
        "a run's id is the schedule's name and its instant: {run}"
    );
    wait_for_task(stack, run, "a run's task", Duration::from_secs(60), |t| {
        t["workflow"]["name"] == "nap"
    })
    .await;

    // The cool-off's first run is still running at its schedule's next instants:
    // `skip` starts none and counts them skipped.
    let skips = schedule_when(stack, "skips", 4, |s| s["skipped"].as_u64() >= Some(1)).await;
    assert_eq!(
        skips["started"], 1,
        "skip: one run, the next instants skipped while it runs: {skips}"
    );

    let scheduler = aws_sdk_scheduler::Client::new(&stack.sdk);
    let (status, paused) = operator(stack, "POST", "/operator/schedules/naps/pause", None).await;
    assert_eq!(status, 200, "{paused}");
    let wake_up = (scheduler
        .get_schedule()
        .group_name(group)
        .name("naps")
        .send())
    .await
    .expect("the schedule's wake-ups");
    assert_eq!(
        wake_up.state(),
        Some(&aws_sdk_scheduler::types::ScheduleState::Disabled)
    );
    let (status, deleted) = operator(stack, "DELETE", "/operator/schedules/naps", None).await;
    assert_eq!(status, 200, "{deleted}");
    let gone = scheduler
        .get_schedule()
        .group_name(group)
        .name("naps")
        .send()
        .await;
    assert!(
        gone.is_err(),
        "the wake-ups deleted with the schedule: {gone:?}"
    );
}
