//! Schedules: their runs' instants and ids, each overlap policy, the catch-up window,
//! pause and resume, and what wakes the engine on AWS.

use serde_json::json;

use super::{Overlap, Schedule, ScheduleSpec};
use crate::time::Timestamp;

fn at(text: &str) -> Timestamp {
    Timestamp::parse_rfc3339(text).expect("a valid instant")
}

fn spec(cadence: serde_json::Value) -> ScheduleSpec {
    let mut body = json!({"workflow": "drone-delivery", "input": {"order": 1}});
    body.as_object_mut()
        .expect("an object")
        .extend(cadence.as_object().expect("an object").clone());
    serde_json::from_value(body).expect("a valid spec")
}

fn every_minute(overlap: Overlap) -> Schedule {
    let mut spec = spec(json!({"every": "1m", "catch_up_window": "5m"}));
    spec.overlap = overlap;
    Schedule::new("reports", spec, at("2026-12-04T09:00:00.250Z")).expect("a valid schedule")
}

fn instants(firing: &super::Firing) -> Vec<String> {
    firing.runs.iter().map(|run| run.at.to_rfc3339()).collect()
}

#[test]
fn a_cron_expression_runs_in_its_time_zone_across_a_clock_change() {
    let spec = spec(json!({"cron": "30 2 * * *", "time_zone": "Europe/Paris"}));
    let schedule = Schedule::new("nightly", spec, at("2027-03-26T12:00:00.460Z")).expect("valid");
    let runs: Vec<String> = (schedule.next_runs(at("2027-03-26T12:00:00.460Z"), 3))
        .into_iter()
        .map(Timestamp::to_rfc3339)
        .collect();
    // 02:30 in Paris is 01:30 UTC in winter; on the 28th the clocks skip 02:00-03:00,
    // and the run falls after the change; then 00:30 UTC in summer.
    assert_eq!(runs[0], "2027-03-27T01:30:00.000Z");
    assert_eq!(runs[1], "2027-03-28T01:00:00.000Z");
    assert_eq!(runs[2], "2027-03-29T00:30:00.000Z");
    assert_eq!(runs.len(), 3);
}

#[test]
fn a_period_counts_from_the_creation_to_the_second() {
    let schedule = every_minute(Overlap::Skip);
    assert_eq!(
        schedule.next_run().map(Timestamp::to_rfc3339).as_deref(),
        Some("2026-12-04T09:01:00.000Z")
    );
    let firing = schedule
        .fire(at("2026-12-04T09:01:00.100Z"), false)
        .expect("fires");
    assert_eq!(instants(&firing), ["2026-12-04T09:01:00.000Z"]);
    assert_eq!(firing.runs[0].id.as_str(), "reports-20261204T090100Z");
    let again = (firing.schedule.fire(at("2026-12-04T09:01:30Z"), true)).expect("fires");
    assert!(again.runs.is_empty(), "an instant is run once");
}

#[test]
fn skip_passes_over_the_runs_that_come_while_one_runs() {
    let schedule = every_minute(Overlap::Skip);
    let firing = schedule
        .fire(at("2026-12-04T09:03:10Z"), true)
        .expect("fires");
    assert!(firing.runs.is_empty());
    assert_eq!(firing.schedule.state.skipped, 3);
    let firing = schedule
        .fire(at("2026-12-04T09:03:10Z"), false)
        .expect("fires");
    assert_eq!(instants(&firing), ["2026-12-04T09:01:00.000Z"]);
    assert_eq!(firing.schedule.state.skipped, 2);
}

#[test]
fn buffer_one_keeps_one_run_for_when_the_last_has_ended() {
    let schedule = every_minute(Overlap::BufferOne);
    let firing = schedule
        .fire(at("2026-12-04T09:03:10Z"), true)
        .expect("fires");
    assert!(firing.runs.is_empty());
    assert_eq!(
        firing.schedule.state.buffered,
        Some(at("2026-12-04T09:01:00Z"))
    );
    assert_eq!(firing.schedule.state.skipped, 2);
    assert_eq!(
        firing.schedule.next_run(),
        Some(at("2026-12-04T09:01:00Z")),
        "the buffered run is the next"
    );
    let still = firing
        .schedule
        .fire(at("2026-12-04T09:03:20Z"), true)
        .expect("fires");
    assert!(still.runs.is_empty(), "nothing starts while the last runs");
    let ended = firing
        .schedule
        .fire(at("2026-12-04T09:03:30Z"), false)
        .expect("fires");
    assert_eq!(instants(&ended), ["2026-12-04T09:01:00.000Z"]);
    assert_eq!(ended.schedule.state.buffered, None);
    let next = ended
        .schedule
        .fire(at("2026-12-04T09:04:00Z"), true)
        .expect("fires");
    assert_eq!(
        next.schedule.state.buffered,
        Some(at("2026-12-04T09:04:00Z")),
        "the buffered run runs; the next is buffered behind it"
    );
}

#[test]
fn allow_all_starts_every_run_that_has_come() {
    let schedule = every_minute(Overlap::AllowAll);
    let firing = schedule
        .fire(at("2026-12-04T09:03:10Z"), true)
        .expect("fires");
    assert_eq!(
        instants(&firing),
        [
            "2026-12-04T09:01:00.000Z",
            "2026-12-04T09:02:00.000Z",
            "2026-12-04T09:03:00.000Z"
        ]
    );
    assert_eq!(firing.schedule.state.started, 3);
    assert_eq!(
        firing.schedule.state.last_run.map(|run| run.id.to_string()),
        Some("reports-20261204T090300Z".to_owned())
    );
}

#[test]
fn after_downtime_only_the_runs_within_the_catch_up_window_start() {
    let schedule = every_minute(Overlap::AllowAll);
    let firing = schedule
        .fire(at("2026-12-04T10:00:30Z"), false)
        .expect("fires");
    assert_eq!(
        instants(&firing),
        [
            "2026-12-04T09:56:00.000Z",
            "2026-12-04T09:57:00.000Z",
            "2026-12-04T09:58:00.000Z",
            "2026-12-04T09:59:00.000Z",
            "2026-12-04T10:00:00.000Z"
        ]
    );
    assert_eq!(firing.schedule.state.missed, 55);
}

#[test]
fn a_paused_schedule_starts_nothing_and_resumes_from_now() {
    let schedule = every_minute(Overlap::AllowAll).paused(true, at("2026-12-04T09:00:30Z"));
    let firing = schedule
        .fire(at("2026-12-04T09:05:00Z"), false)
        .expect("fires");
    assert!(firing.runs.is_empty());
    assert_eq!(schedule.next_run(), None);
    let resumed = schedule.paused(false, at("2026-12-04T09:05:30Z"));
    assert_eq!(resumed.next_run(), Some(at("2026-12-04T09:06:00Z")));
    let firing = resumed
        .fire(at("2026-12-04T09:06:01Z"), false)
        .expect("fires");
    assert_eq!(instants(&firing), ["2026-12-04T09:06:00.000Z"]);
}

#[test]
fn a_changed_cadence_runs_nothing_before_the_change() {
    let schedule = every_minute(Overlap::AllowAll);
    let changed = schedule
        .respecified(spec(json!({"every": "10m"})), at("2026-12-04T09:30:00Z"))
        .expect("valid");
    assert_eq!(changed.next_run(), Some(at("2026-12-04T09:40:00Z")));
    let input_only = schedule
        .respecified(
            spec(json!({"every": "1m", "catch_up_window": "5m"})),
            at("2026-12-04T09:30:00Z"),
        )
        .expect("valid");
    assert_eq!(
        input_only.state, schedule.state,
        "the same cadence keeps its place"
    );
}

#[test]
fn what_a_schedule_refuses_names_the_field() {
    let refused = |cadence: serde_json::Value| {
        let spec = spec(cadence);
        Schedule::new("s", spec, Timestamp::default())
            .expect_err("refused")
            .field()
    };
    assert_eq!(refused(json!({})), "cron");
    assert_eq!(refused(json!({"cron": "* * * * *", "every": "1m"})), "cron");
    assert_eq!(refused(json!({"cron": "61 * * * *"})), "cron");
    assert_eq!(refused(json!({"cron": "0 0 * * * *"})), "cron");
    assert_eq!(refused(json!({"every": "500ms"})), "every");
    assert_eq!(refused(json!({"every": "1500ms"})), "every");
    assert_eq!(refused(json!({"every": "soon"})), "every");
    assert_eq!(
        refused(json!({"cron": "* * * * *", "time_zone": "Mars/Olympus"})),
        "time_zone"
    );
    assert_eq!(
        refused(json!({"every": "1m", "catch_up_window": "400 days"})),
        "catch_up_window"
    );
    let long = "n".repeat(super::MAX_NAME + 1);
    let spec = spec(json!({"every": "1m"}));
    assert_eq!(
        Schedule::new(&long, spec.clone(), Timestamp::default()).map_err(|e| e.field()),
        Err("name")
    );
    assert!(Schedule::new(&"n".repeat(super::MAX_NAME), spec, Timestamp::default()).is_ok());
    assert!(
        serde_json::from_value::<ScheduleSpec>(json!({"workflow": "w", "evry": "1m"})).is_err(),
        "an unknown field is refused"
    );
}

#[test]
fn the_wake_up_on_aws_falls_on_or_before_every_run() {
    let wake_up = |cadence: serde_json::Value| {
        Schedule::new("s", spec(cadence), Timestamp::default())
            .and_then(|s| s.cadence())
            .expect("valid")
            .wake_up()
    };
    assert_eq!(
        wake_up(json!({"cron": "0 9 * * MON-FRI"})),
        "cron(0 9 * * ? *)"
    );
    assert_eq!(
        wake_up(json!({"cron": "15 */2 1 * *"})),
        "cron(15 */2 1 * ? *)"
    );
    assert_eq!(wake_up(json!({"cron": "0 0 1 * 1"})), "cron(0 0 * * ? *)");
    assert_eq!(wake_up(json!({"cron": "@daily"})), "rate(1 minute)");
    assert_eq!(wake_up(json!({"every": "10s"})), "rate(1 minute)");
    assert_eq!(wake_up(json!({"every": "1m"})), "rate(1 minute)");
    assert_eq!(wake_up(json!({"every": "90s"})), "rate(1 minute)");
    assert_eq!(wake_up(json!({"every": "15m"})), "rate(15 minutes)");
}
