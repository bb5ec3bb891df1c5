//! Moves onto a new version, end to end on the local system as an operator makes them
//! through the API and `sas`: refunds of version 1 waiting for their approval moved onto
//! version 2 in bulk, a renamed step carried, the new step run once they are approved;
//! and a move refused, naming the step, with nothing moved.

use sas_domain::ids::TaskId;
use sas_domain::submission::Submission;
use sas_tests::Harness;
use serde_json::{Value, json};

/// Submits refund `id` on version 1, as a caller did before version 2 shipped, and
/// waits for it to wait for its approval.
async fn refund_on_version_1(harness: &Harness, id: &str) {
    let app = &harness.running.system.app;
    let version_1 = (app.workflows().version("approved-refund", 1)).expect("version 1");
    let input = json!({"order_id": id, "customer_id": "c-1", "amount": 120});
    let submission = Submission::new(TaskId::parse(id).expect("an id"), input);
    app.submit_on(version_1, submission)
        .await
        .expect("submitted");
    harness
        .wait_for(id, "waiting for its approval", |t| {
            t["steps"][1]["state"] == "Processing"
        })
        .await;
}

/// The operator's view of task `id`.
async fn task(harness: &Harness, id: &str) -> Value {
    harness
        .call("GET", &format!("/operator/tasks/{id}"), None)
        .await
        .2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_waiting_for_approval_move_onto_version_2_and_finish_there() {
    let harness = Harness::start(5).await;
    let ids: Vec<String> = (1..=5).map(|i| format!("refund-{i}")).collect();
    for id in &ids {
        refund_on_version_1(&harness, id).await;
    }

    let planned = harness
        .sas_ok(&[
            "tasks",
            "move",
            "refund-1",
            "--to-version",
            "2",
            "--rename",
            "refund-payment=pay-back",
            "--dry-run",
        ])
        .await;
    for line in [
        "refund-1: version 1 to 2",
        "check-order  Processed",
        "approve  Processing",
        "refund-payment -> pay-back  Pending",
        "notify-customer  new",
    ] {
        assert!(planned.contains(line), "'{line}' in:\n{planned}");
    }
    assert_eq!(task(&harness, "refund-1").await["workflow"]["version"], 1);

    let moved = harness
        .sas_ok(&[
            "move-all",
            "--batch",
            "refunds-v2",
            "--workflow",
            "approved-refund",
            "--workflow-version",
            "1",
            "--to-version",
            "2",
            "--rename",
            "refund-payment=pay-back",
        ])
        .await;
    assert!(
        moved.contains("batch refunds-v2: 5 examined, 5 matched, 5 moved, 0 skipped"),
        "{moved}"
    );
    for id in &ids {
        let path = format!("/operator/tasks/{id}/steps/approve/complete");
        let (status, _, answer) = harness
            .call(
                "POST",
                &path,
                Some(br#"{"output": {"approved_by": "ana"}}"#),
            )
            .await;
        assert_eq!(status, 202, "{answer}");
        harness.settle_in(id, "Processed").await;
        let task = task(&harness, id).await;
        assert_eq!(task["workflow"]["version"], 2);
        let steps: Vec<(&str, &str)> = (task["steps"].as_array().expect("steps").iter())
            .map(|s| {
                (
                    s["name"].as_str().unwrap_or(""),
                    s["state"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            steps,
            [
                ("check-order", "Processed"),
                ("approve", "Processed"),
                ("pay-back", "Processed"),
                ("notify-customer", "Processed"),
            ]
        );
        let history = task["history"].as_array().expect("history");
        assert!(
            history.iter().any(|e| e["event"] == "moved"
                && e["from_version"] == 1
                && e["to_version"] == 2
                && e["by"] == "operator"),
            "{history:?}"
        );
    }
    assert_eq!(
        harness.calls("orders").await,
        5,
        "the checks were not called again"
    );
    assert_eq!(
        harness.calls("notification").await,
        5,
        "version 2's new step ran"
    );
    let shown = harness.sas_ok(&["tasks", "show", "refund-1"]).await;
    assert!(
        shown.contains("moved by operator from version 1 to 2"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_that_would_put_a_step_at_work_on_other_work_is_refused_and_moves_nothing() {
    let harness = Harness::start(5).await;
    refund_on_version_1(&harness, "refund-held").await;
    let refusals = [
        (
            json!({"version": 2, "renamed": {"approve": "pay-back"}}),
            "step 'approve' is a wait (wait for its callback, 1day at most); version 2's 'pay-back' is a call (/refunds): it does other work",
        ),
        (
            json!({"version": 7}),
            "workflow 'approved-refund' has no version 7",
        ),
        (json!({"version": 1}), "it is on version 1 already"),
    ];
    for (body, says) in refusals {
        let (status, _, answer) = harness
            .call(
                "POST",
                "/operator/tasks/refund-held/move",
                Some(body.to_string().as_bytes()),
            )
            .await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (409, Some("conflict")),
            "{answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "'{says}' in {message}");
    }
    let held = task(&harness, "refund-held").await;
    assert_eq!(held["workflow"]["version"], 1, "nothing moved");
}

/// A state machine's execution waiting in a Wait state, moved through `sas` onto the
/// revision `UpdateStateMachine` made, ends as that revision says; a revision without
/// the state it stands in is refused through the API, naming the state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_moves_onto_its_state_machines_next_revision_and_ends_there() {
    let harness = Harness::start(5).await;
    let waits = |state: &str, said: &str| {
        json!({"StartAt": state, "States": {
            state: {"Type": "Wait", "Seconds": 60, "Next": "Say"},
            "Say": {"Type": "Pass", "Result": said, "End": true}}})
        .to_string()
    };
    let create = json!({"name": "waiter", "definition": waits("Wait", "v1"), "roleArn": "r"});
    let made = harness.step_functions("CreateStateMachine", &create).await;
    let machine = &made["stateMachineArn"];
    let start = json!({"stateMachineArn": machine, "name": "moving-1", "input": "{}"});
    let started = harness.step_functions("StartExecution", &start).await;
    harness
        .wait_for("moving-1", "waiting", |t| {
            t["steps"][0]["state"] == "Processing"
        })
        .await;
    for (state, said) in [("Wait", "v2"), ("Nap", "v3")] {
        let update = json!({"stateMachineArn": machine, "definition": waits(state, said)});
        harness.step_functions("UpdateStateMachine", &update).await;
    }

    let (status, _, answer) = harness
        .call(
            "POST",
            "/operator/tasks/moving-1/move",
            Some(br#"{"version": 3}"#),
        )
        .await;
    assert_eq!(status, 409, "{answer}");
    let says = "step 'Wait' is Processing: version 3 has no step 'Wait' to carry it to";
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "'{says}' in {message}");

    let moved = harness
        .sas_ok(&["tasks", "move", "moving-1", "--to-version", "2"])
        .await;
    assert!(moved.contains("moving-1 moved to waiter v2"), "{moved}");
    harness.advance(std::time::Duration::from_secs(61));
    harness.sweep().await;
    let ended = harness.execution_ended(&started["executionArn"]).await;
    assert_eq!(ended["status"], "SUCCEEDED", "{ended}");
    assert_eq!(ended["output"], r#""v2""#, "{ended}");
}
