//! Flow control through the API: a submission's priority, kept by its task and its
//! children.

use sas_tests::{Harness, delivery_input};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_carries_a_priority_from_1_to_5_its_task_shows_it_and_3_is_the_default() {
    let harness = Harness::start(5).await;
    let urgent = json!({ "workflow": "drone-delivery", "input": delivery_input(), "priority": 1 });
    let (status, task) = harness.put_task("urgent", &urgent).await;
    assert_eq!(status, 202, "{task}");
    assert_eq!(task["priority"], 1);
    let plain = json!({ "workflow": "drone-delivery", "input": delivery_input() });
    let (_, task) = harness.put_task("plain", &plain).await;
    assert_eq!(task["priority"], 3, "the default");

    for priority in [json!(0), json!(6), json!(-1), json!("high")] {
        let body = json!({ "workflow": "drone-delivery", "input": delivery_input(), "priority": priority });
        let (status, answer) = harness.put_task("refused", &body).await;
        assert_eq!(status, 400, "{priority}: {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("priority"),
            "{priority}: the error names the field: {answer}"
        );
    }
    // A repeat with another priority is another request.
    let (status, answer) = harness
        .put_task(
            "urgent",
            &json!({ "workflow": "drone-delivery", "input": delivery_input(), "priority": 2 }),
        )
        .await;
    assert_eq!(status, 409, "{answer}");
    harness.settle_in("urgent", "Processed").await;
}
