//! The schedules from the console: each with its cadence, what it starts, its overlap
//! policy and its next runs; paused and resumed from its row.

use sas_tests::{Harness, delivery_input};
use serde_json::json;

use super::{Driver, click, screenshot, wait_text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_a_schedules_next_runs_and_pauses_and_resumes_it() {
    let harness = Harness::start(1).await;
    let schedule = json!({"workflow": "drone-delivery", "cron": "0 9 * * MON-FRI",
                          "time_zone": "Europe/Paris", "overlap": "buffer_one",
                          "input": delivery_input()});
    let body = schedule.to_string();
    let (status, _, created) = harness
        .call(
            "PUT",
            "/operator/schedules/weekday-deliveries",
            Some(body.as_bytes()),
        )
        .await;
    assert_eq!(status, 201, "{created}");

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser
        .goto(&format!("http://{}/#/schedules", harness.running.api))
        .await
        .expect("the schedules");
    let row = "#schedules tr[data-schedule='weekday-deliveries']";
    let shown = wait_text(&browser, row, |t| t.contains("0 9 * * MON-FRI")).await;
    for expected in [
        "Europe/Paris",
        "drone-delivery",
        "buffer_one",
        "0 · 0 · 0",
        "Pause",
    ] {
        assert!(shown.contains(expected), "{expected} in:\n{shown}");
    }
    // Its next three runs, each a weekday's morning in the browser's own time.
    let next = wait_text(&browser, &format!("{row} .next-runs"), |t| !t.is_empty()).await;
    assert_eq!(next.lines().count(), 3, "{next}");
    screenshot(&browser, "schedules-1-listed.png").await;

    click(&browser, &format!("{row} button.toggle")).await;
    let paused = wait_text(&browser, &format!("{row} .next-runs"), |t| t == "paused").await;
    assert_eq!(paused, "paused");
    let (_, _, read) = harness
        .call("GET", "/operator/schedules/weekday-deliveries", None)
        .await;
    assert_eq!(read["paused"], true, "{read}");
    assert_eq!(read["next_runs"], json!([]), "no run while paused");
    screenshot(&browser, "schedules-2-paused.png").await;

    click(&browser, &format!("{row} button.toggle")).await;
    wait_text(&browser, &format!("{row} .next-runs"), |t| {
        t.lines().count() == 3
    })
    .await;
    let (_, _, read) = harness
        .call("GET", "/operator/schedules/weekday-deliveries", None)
        .await;
    assert_eq!(read["paused"], false, "{read}");
}
