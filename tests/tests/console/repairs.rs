//! A repair from a task's page: a wrong drop-off patched, what would run again
//! previewed, the repair made, and the page showing who repaired the task and why; and
//! a move onto a new version, previewed and made.

use sas_domain::ids::TaskId;
use sas_domain::submission::Submission;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_previews_and_moves_a_refund_waiting_for_approval_onto_version_2() {
    let harness = Harness::start(5).await;
    // Submitted before version 2 shipped: on version 1.
    let app = &harness.running.system.app;
    let version_1 = (app.workflows().version("approved-refund", 1)).expect("version 1");
    let input = json!({"order_id": "o-1", "customer_id": "c-1", "amount": 120});
    let submission = Submission::new(TaskId::parse("console-move").expect("id"), input);
    app.submit_on(version_1, submission)
        .await
        .expect("submitted");
    harness
        .wait_for("console-move", "waiting for its approval", |t| {
            t["steps"][1]["state"] == "Processing"
        })
        .await;

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    let console = format!("http://{}/", harness.running.api);
    task_page(&browser, &console, "console-move", "Processing").await;
    click(&browser, "#move-open").await;
    click(&browser, "#move-preview").await;
    let plan = wait_text(&browser, "#move-plan", |t| t.contains("notify-customer")).await;
    for line in [
        "approve Processing",
        "refund-payment dropped",
        "pay-back new",
        "notify-customer new",
    ] {
        assert!(plan.contains(line), "'{line}' in:\n{plan}");
    }
    screenshot(&browser, "move-1-preview.png").await;
    click(&browser, "#move-apply").await;
    wait_text(&browser, ".kv", |t| t.contains("approved-refund v2")).await;
    let (status, _, answer) = harness
        .call(
            "POST",
            "/operator/tasks/console-move/steps/approve/complete",
            Some(br#"{"output": {"approved_by": "ana"}}"#),
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    wait_text(&browser, "#task-state", |t| t == "Processed").await;
    screenshot(&browser, "move-2-moved.png").await;
    browser.close().await.expect("the browser closes");
}
