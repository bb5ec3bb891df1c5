//! A repair from a task's page: a wrong drop-off patched, what would run again
//! previewed, the repair made, and the page showing who repaired the task and why.

use sas_tests::{Harness, delivery_input};
use serde_json::json;

use super::{Driver, click, screenshot, task_page, type_into, wait_text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_patches_a_wrong_drop_off_previews_the_repair_and_makes_it() {
    let harness = Harness::start(5).await;
    harness.refuse_once("delivery").await;
    let task = json!({ "workflow": "drone-delivery-checked", "input": delivery_input() });
    harness.put_task("console-fix", &task).await;
    harness.settle_in("console-fix", "Error").await;

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    let console = format!("http://{}/", harness.running.api);
    task_page(&browser, &console, "console-fix", "Error").await;
    click(&browser, "#repair-open").await;
    type_into(&browser, "#repair-input", r#"{"dropoff": "Dock 4"}"#).await;
    type_into(&browser, "#repair-reason", "the drop-off was wrong").await;
    click(&browser, "#repair-preview").await;
    let kept = wait_text(&browser, "#repair-plan [data-plan='kept']", |t| {
        !t.is_empty()
    })
    .await;
    assert_eq!(kept, "check-account, check-transport");
    let again = wait_text(&browser, "#repair-plan [data-plan='run_again']", |t| {
        !t.is_empty()
    })
    .await;
    assert_eq!(again, "create-package, schedule-drone, create-delivery");
    assert_eq!(
        harness.task("console-fix").await["run"],
        1,
        "a preview changes nothing"
    );
    screenshot(&browser, "repair-1-preview.png").await;

    click(&browser, "#repair-apply").await;
    wait_text(&browser, "#task-state", |t| t == "Processed").await;
    let told = wait_text(&browser, "#resubmissions", |t| t.contains("repaired")).await;
    assert!(
        told.contains("Run 2: repaired by operator")
            && told.contains("(the drop-off was wrong); ran again: create-package"),
        "{told}"
    );
    wait_text(&browser, "#task-input", |t| t.contains("Dock 4")).await;
    assert_eq!(
        (
            harness.calls("account").await,
            harness.calls("transport").await
        ),
        (1, 1),
        "the checks were not called again"
    );
    screenshot(&browser, "repair-2-repaired.png").await;
    browser.close().await.expect("the browser closes");
}
