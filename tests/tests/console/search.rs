//! Tasks found by their search attributes from the console's list: refunds of many
//! customers, one customer's found by an attribute typed in the filter, with how many
//! the index examined; and a task's page showing its attributes.

use sas_tests::Harness;

use super::{Driver, click, screenshot, type_into, wait_text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_finds_a_customers_refunds_by_an_attribute() {
    let harness = Harness::start(5).await;
    harness.waiting_refunds(60, 20).await;

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
    assert_eq!(attributes, "amount=60 customer=c-7");
}
