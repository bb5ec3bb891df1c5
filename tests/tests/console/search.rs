//! Tasks found by their search attributes from the console's list: refunds of many
//! customers, one customer's found by an attribute typed in the filter, with how many
//! the index examined; and a task's page showing its attributes.

use std::sync::Arc;

use sas_domain::ids::TaskId;
use sas_domain::submission::Submission;
use sas_domain::time::Timestamp;
use sas_tests::Harness;
use serde_json::json;

use super::{Driver, click, screenshot, type_into, wait_text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_finds_a_customers_refunds_by_an_attribute() {
    let harness = Harness::start(5).await;
    let app = &harness.running.system.app;
    let refunds = app
        .workflows()
        .latest("approved-refund")
        .expect("the test workflow");
    for i in 0..60 {
        let input = json!({"order_id": format!("o-{i}"), "customer_id": format!("c-{}", i % 20), "amount": 10});
        let submission = Submission {
            // To start in a year: each waits Pending, its attributes kept.
            start_at: Some(Timestamp(1_800_000_000_000 + 365 * 86_400_000)),
            ..Submission::new(TaskId::parse(format!("refund-{i}")).expect("an id"), input)
        };
        app.submit_on(Arc::clone(&refunds), submission)
            .await
            .expect("submitted");
    }

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser
        .goto(&format!("http://{}/", harness.running.api))
        .await
        .expect("the console opens");
    click(&browser, "[data-tab='Pending']").await;
    wait_text(&browser, "#view", |t| t.contains("refund-10")).await;
    type_into(&browser, "#attributes", "customer=c-7").await;
    click(&browser, "#find").await;
    let listed = wait_text(&browser, "#view", |t| t.contains("3 examined")).await;
    for id in ["refund-7", "refund-27", "refund-47"] {
        assert!(listed.contains(id), "{id} in:\n{listed}");
    }
    assert!(
        !listed.contains("refund-8\n") && !listed.contains("refund-59"),
        "{listed}"
    );
    screenshot(&browser, "search-1-customer.png").await;

    click(&browser, "tr[data-task-id='refund-27']").await;
    let attributes = wait_text(&browser, "#task-attributes", |t| !t.is_empty()).await;
    assert_eq!(attributes, "amount=10 customer=c-7");
}
