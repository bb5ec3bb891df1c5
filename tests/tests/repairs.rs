//! Repairs, end to end on the local system as an operator makes them, through the API
//! and `sas`: a wrong drop-off patched and the task resumed without its checks called
//! again; a bad output corrected and the step that read it undone and run again with
//! the corrected value; a restart from a middle step; and the refusals, each naming
//! why.

use sas_tests::{Harness, delivery_input};
use serde_json::{Value, json};

/// The delivery whose checks read neither the drop-off nor the package.
fn checked(notify: Option<&str>) -> Value {
    json!({ "workflow": "drone-delivery-checked", "input": delivery_input(), "notify": notify })
}

/// Asks for a repair of `task` (`POST /operator/tasks/{task}/repair`): the status and
/// the answer.
async fn repair(harness: &Harness, task: &str, body: &Value) -> (u16, Value) {
    let path = format!("/operator/tasks/{task}/repair");
    let (status, _, answer) = harness
        .call("POST", &path, Some(body.to_string().as_bytes()))
        .await;
    (status, answer)
}

/// The calls each check's service took.
async fn checks_called(harness: &Harness) -> (u64, u64) {
    (
        harness.calls("account").await,
        harness.calls("transport").await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_drop_off_is_patched_and_the_task_goes_on_without_its_checks_called_again() {
    let harness = Harness::start(5).await;
    harness.refuse_once("delivery").await;
    harness
        .put_task("fix-1", &checked(Some("fix-1-events")))
        .await;
    harness.settle_in("fix-1", "Error").await;
    assert_eq!(checks_called(&harness).await, (1, 1));

    let arguments = [
        "tasks",
        "repair",
        "fix-1",
        "--input",
        r#"{"dropoff": "Dock 4"}"#,
        "--reason",
        "the drop-off was wrong",
    ];
    let planned = harness
        .sas_ok(&[&arguments[..], &["--dry-run"]].concat())
        .await;
    for line in [
        "fix-1: the repair would",
        "keep                    check-account, check-transport",
        "run again               create-package, schedule-drone, create-delivery",
    ] {
        assert!(planned.contains(line), "'{line}' in:\n{planned}");
    }
    assert_eq!(
        harness.task("fix-1").await["run"],
        1,
        "a dry run changes nothing"
    );

    let repaired = harness.sas_ok(&arguments).await;
    assert_eq!(
        repaired.trim(),
        "fix-1 repaired: run 2, Pending; runs again: create-package, schedule-drone, create-delivery"
    );
    let task = harness.settle_in("fix-1", "Processed").await;
    assert_eq!(checks_called(&harness).await, (1, 1), "the checks are kept");
    assert_eq!(task["input"]["dropoff"], "Dock 4");
    assert_eq!(task["earlier_inputs"][0]["input"]["dropoff"], "Bondi");
    let repair = &task["resubmissions"][0];
    assert_eq!(repair["by"], "operator");
    assert_eq!(repair["repair"]["reason"], "the drop-off was wrong");
    assert_eq!(
        repair["repair"]["patch"]["input"],
        json!({"dropoff": "Dock 4"})
    );
    let told = harness
        .notified("fix-1-events", "the repair", |n| n["repair"].is_object())
        .await;
    assert_eq!(told["repair"]["repair"]["reason"], "the drop-off was wrong");
    let shown = harness.sas_ok(&["tasks", "show", "fix-1"]).await;
    assert!(
        shown.contains("repaired by operator: run 2 (the drop-off was wrong)"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrected_output_is_what_the_step_after_it_is_run_again_with() {
    let harness = Harness::start(5).await;
    harness.put_task("fix-2", &checked(None)).await;
    let task = harness.settle_in("fix-2", "Processed").await;
    let package = task["steps"][1]["output"]["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let body = json!({
        "outputs": {"create-package": {"id": "pkg-corrected"}},
        "reason": "the package service answered another order's package",
    });
    let (status, answer) = repair(&harness, "fix-2", &body).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["state"], "Compensating", "the drone is undone first");
    harness.settle_in("fix-2", "Processed").await;
    let drone: Vec<(String, u64)> = (harness.effects_of("fix-2").await.into_iter())
        .filter(|(service, _, _)| service == "drone")
        .map(|(_, operation, calls)| (operation, calls))
        .collect();
    assert!(
        drone.contains(&(format!("PUT /drones/for/{package}"), 1))
            && drone.contains(&("PUT /drones/for/pkg-corrected".to_owned(), 1))
            && drone
                .iter()
                .any(|(op, _)| op.starts_with("DELETE /drones/")),
        "booked for the wrong package, undone, booked for the right one: {drone:?}"
    );
    assert_eq!(checks_called(&harness).await, (1, 1));
    assert_eq!(harness.calls("delivery").await, 1, "the delivery is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_from_a_middle_step_undoes_what_came_after_it_and_runs_it_again() {
    let harness = Harness::start(5).await;
    harness.put_task("fix-3", &checked(None)).await;
    harness.settle_in("fix-3", "Processed").await;
    let body = json!({"from": "schedule-drone", "dry_run": true});
    let (status, answer) = repair(&harness, "fix-3", &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["plan"],
        json!({
            "kept": ["check-account", "create-package", "check-transport"],
            "patched": [],
            "undone_first": ["schedule-drone"],
            "run_again": ["schedule-drone", "create-delivery"],
            "same_key": ["create-delivery"],
        })
    );
    let (status, answer) = repair(&harness, "fix-3", &json!({"from": "schedule-drone"})).await;
    assert_eq!(status, 202, "{answer}");
    let task = harness.settle_in("fix-3", "Processed").await;
    assert_eq!(task["run"], 2);
    let effects = harness.effects_of("fix-3").await;
    let drones = effects
        .iter()
        .filter(|(s, op, _)| s == "drone" && op.starts_with("PUT"));
    assert_eq!(
        drones.count(),
        2,
        "booked again under the new run's key: {effects:?}"
    );
    assert!(
        effects.contains(&("delivery".into(), "/deliveries".into(), 2)),
        "the delivery, which nothing undoes, is asked again under its key and made once: {effects:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_that_could_act_twice_or_does_not_apply_is_refused_naming_why() {
    let harness = Harness::start(5).await;
    harness.put_task("fix-4", &checked(None)).await;
    harness.settle_in("fix-4", "Processed").await;
    let refused = [
        (
            json!({"input": {"customer_id": "c-2"}}),
            409,
            "conflict",
            "the repair changes what is sent to create-delivery",
        ),
        (
            json!({"input": [{"op": "remove", "path": "/nowhere"}]}),
            400,
            "invalid_field",
            "input: ",
        ),
        (
            json!({"input": {"weight_kg": "heavy"}}),
            400,
            "invalid_field",
            "input.weight_kg",
        ),
        (json!({"from": "fly"}), 404, "not_found", "no step 'fly'"),
        (
            json!({"outputs": {"create-delivery": {}}, "from": "check-transport"}),
            409,
            "conflict",
            "outputs.create-delivery: step 'create-delivery' runs again",
        ),
        (
            json!({"input": {"dropoff": "Bondi"}}),
            409,
            "conflict",
            "no step would run again",
        ),
        (
            json!({"inputs": {}}),
            400,
            "invalid_field",
            "unknown field `inputs`",
        ),
    ];
    for (body, status, code, says) in refused {
        let (got, answer) = repair(&harness, "fix-4", &body).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}: {answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{body}: '{says}' in {message}");
    }
    let task = harness.task("fix-4").await;
    assert_eq!(
        (task["run"].as_u64(), task["state"].as_str()),
        (Some(1), Some("Processed"))
    );
    let (status, _, answer) = harness
        .call("POST", "/tasks/fix-4/repair", Some(b"{}"))
        .await;
    assert_eq!(status, 404, "a caller has no repair route: {answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_repair_takes_each_task_a_filter_names_once_and_reports_what_it_refuses() {
    let harness = Harness::start(5).await;
    harness
        .faults("delivery", json!({"permanent_error_rate": 1.0, "times": 3}))
        .await;
    for i in 1..=3 {
        harness
            .put_task(&format!("bulk-fix-{i}"), &checked(None))
            .await;
        harness.settle_in(&format!("bulk-fix-{i}"), "Error").await;
    }
    // Another, refused at its package: the filter's step passes it over.
    harness.refuse_once("package").await;
    harness.put_task("bulk-other", &checked(None)).await;
    harness.settle_in("bulk-other", "Error").await;
    let arguments = [
        "repair-all",
        "--batch",
        "drop-offs",
        "--workflow",
        "drone-delivery-checked",
        "--workflow-version",
        "1",
        "--input",
        r#"{"dropoff": "Dock 4"}"#,
        "--reason",
        "the drop-offs were wrong",
    ];
    let at_the_delivery = ["--step", "create-delivery"];
    let done = harness
        .sas_ok(&[&arguments[..], &at_the_delivery].concat())
        .await;
    assert!(
        done.contains("batch drop-offs: 4 examined, 3 matched, 3 repaired, 0 skipped"),
        "{done}"
    );
    for i in 1..=3 {
        let id = format!("bulk-fix-{i}");
        harness.settle_in(&id, "Processed").await;
        let path = format!("/operator/tasks/{id}");
        let (_, _, task) = harness.call("GET", &path, None).await;
        assert_eq!(task["input"]["dropoff"], "Dock 4");
        assert_eq!(
            task["resubmissions"][0]["batch"], "drop-offs",
            "an operator sees the batch"
        );
    }
    assert_eq!(
        checks_called(&harness).await,
        (4, 3),
        "each check once a task (the fourth's account checked, its transport never)"
    );

    // Run again under its batch, over the tasks now Processed: none is taken twice.
    let again = harness
        .sas_ok(&[&arguments[..], &["--state", "Processed"]].concat())
        .await;
    assert!(
        again.contains("3 examined, 3 matched, 0 repaired, 3 skipped"),
        "{again}"
    );
    // Another batch whose patch would have the deliveries act twice: each refused.
    let refused = harness
        .sas_ok(&[
            "repair-all",
            "--batch",
            "customers",
            "--state",
            "Processed",
            "--input",
            r#"{"customer_id": "c-2"}"#,
        ])
        .await;
    assert!(
        refused.contains("0 repaired")
            && refused.contains(
                "3 refused; the first because the repair changes what is sent to create-delivery"
            ),
        "{refused}"
    );
    let (_, _, nobodys) = harness
        .call(
            "POST",
            "/operator/bulk/repair",
            Some(br#"{"batch": "owners", "owner": "nobody"}"#),
        )
        .await;
    assert_eq!(
        (nobodys["examined"].as_u64(), nobodys["matched"].as_u64()),
        (Some(1), Some(0)),
        "the package's failure is nobody's: {nobodys}"
    );
    let (status, _, answer) = harness
        .call(
            "POST",
            "/operator/bulk/cancel",
            Some(br#"{"batch": "b", "from": "check-account"}"#),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["field"].as_str()),
        (400, Some("from")),
        "only a bulk repair takes a repair's fields: {answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_executions_stopped_state_is_patched_and_the_execution_goes_on_from_it() {
    let harness = Harness::start(5).await;
    let body = json!({"workflow": "greet-strictly", "input": {"greet": "someone"}});
    harness.put_task("fix-greeting", &body).await;
    let failed = harness.settle_in("fix-greeting", "Error").await;
    assert_eq!(failed["status"], "FAILED");

    let (status, answer) = repair(
        &harness,
        "fix-greeting",
        &json!({"input": {"name": "Ana"}, "dry_run": true}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["plan"]["run_again"], json!(["Greet"]));
    let outputs = json!({"outputs": {"Greet": {"greeting": "hi"}}});
    let (status, answer) = repair(&harness, "fix-greeting", &outputs).await;
    assert_eq!(
        (status, answer["error"]["field"].as_str()),
        (400, Some("outputs")),
        "a state machine has no steps' outputs to patch: {answer}"
    );

    let body = json!({"input": {"name": "Ana"}, "reason": "the caller forgot the name"});
    let (status, answer) = repair(&harness, "fix-greeting", &body).await;
    assert_eq!(status, 202, "{answer}");
    let task = harness.settle_in("fix-greeting", "Processed").await;
    assert_eq!(task["status"], "SUCCEEDED");
    assert_eq!(task["output"], json!({"greeting": "Hello, Ana!"}));
    let repair = &task["resubmissions"][0]["repair"];
    assert_eq!(repair["reason"], "the caller forgot the name");
    assert_eq!(repair["run_again"], json!(["Greet"]));
    assert_eq!(
        task["input"],
        json!({"greet": "someone"}),
        "the execution's input stays"
    );
}

/// A state machine's execution that succeeded runs again from a middle state, its
/// input there patched, through `sas`: the states before it are not entered again; a
/// restart the engine cannot make is refused, naming `from`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_succeeded_execution_runs_again_from_a_middle_state_with_its_input_patched() {
    let harness = Harness::start(5).await;
    let relay = json!({"StartAt": "Stamp", "States": {
        "Stamp": {"Type": "Pass", "Parameters": {"order.$": "$.order", "stamped": true}, "Next": "Double"},
        "Double": {"Type": "Pass", "End": true, "Parameters": {
            "stamped.$": "$.stamped", "total.$": "States.MathAdd($.order.amount, $.order.amount)"}}}});
    let assigning = json!({"StartAt": "Keep", "States": {
        "Keep": {"Type": "Pass", "Assign": {"kept": 1}, "Next": "Done"},
        "Done": {"Type": "Pass", "End": true}}});
    for (name, definition) in [("relay", relay), ("assigning", assigning)] {
        let create = json!({"name": name, "definition": definition.to_string(), "roleArn": "r"});
        let made = harness.step_functions("CreateStateMachine", &create).await;
        let start = json!({"stateMachineArn": made["stateMachineArn"], "name": format!("{name}-1"),
            "input": r#"{"order": {"amount": 2}}"#});
        let started = harness.step_functions("StartExecution", &start).await;
        let ended = harness.execution_ended(&started["executionArn"]).await;
        assert_eq!(ended["status"], "SUCCEEDED", "{ended}");
    }
    assert_eq!(
        harness.task("relay-1").await["output"],
        json!({"stamped": true, "total": 4})
    );

    let printed = harness
        .sas_ok(&[
            "tasks",
            "repair",
            "relay-1",
            "--from",
            "Double",
            "--input",
            r#"{"order": {"amount": 5}}"#,
            "--reason",
            "the amount was wrong",
        ])
        .await;
    assert!(printed.contains("relay-1 repaired: run 2"), "{printed}");
    let task = harness.settle_in("relay-1", "Processed").await;
    assert_eq!(
        task["output"],
        json!({"stamped": true, "total": 10}),
        "{task}"
    );
    let history = harness
        .step_functions(
            "GetExecutionHistory",
            &json!({"executionArn": "arn:aws:states:us-east-1:000000000000:execution:relay:relay-1"}),
        )
        .await;
    let entered: Vec<&str> = (history["events"].as_array().expect("events").iter())
        .filter_map(|e| e["stateEnteredEventDetails"]["name"].as_str())
        .collect();
    assert_eq!(
        entered,
        ["Stamp", "Double", "Double"],
        "Stamp not entered again"
    );

    for (id, from, says) in [
        ("relay-1", "Nowhere", "no step 'Nowhere'"),
        ("assigning-1", "Done", "sets variables (Assign)"),
    ] {
        let (status, answer) = repair(&harness, id, &json!({"from": from})).await;
        assert!(matches!(status, 400 | 404), "{id} from {from}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "'{says}' in {answer}");
    }
}

/// `RepairExecution`, beside `RedriveExecution` in Step Functions' protocol: a failed
/// execution's dry run says what runs again, its repair patches the stopped state's
/// input and it succeeds; a state it never had is refused, naming `fromState`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_execution_patches_a_failed_executions_state_through_the_protocol() {
    let harness = Harness::start(5).await;
    let body = json!({"workflow": "greet-strictly", "input": {"greet": "someone"}});
    harness.put_task("greeting", &body).await;
    harness.settle_in("greeting", "Error").await;
    let arn = "arn:aws:states:us-east-1:000000000000:execution:greet-strictly:greeting";

    let dry = json!({"executionArn": arn, "input": r#"{"name": "Ana"}"#, "dryRun": true});
    let planned = harness.step_functions("RepairExecution", &dry).await;
    assert_eq!(planned, json!({"runAgain": ["Greet"]}));
    let (status, refused) = harness
        .step_functions_answer(
            "RepairExecution",
            &json!({"executionArn": arn, "fromState": "Farewell"}),
        )
        .await;
    assert_eq!(
        (status, refused["__type"].as_str()),
        (400, Some("ValidationException")),
        "{refused}"
    );
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("'fromState'")),
        "{refused}"
    );

    let asked = json!({"executionArn": arn, "input": r#"{"name": "Ana"}"#,
        "reason": "the caller forgot the name"});
    let repaired = harness.step_functions("RepairExecution", &asked).await;
    assert_eq!(repaired["runAgain"], json!(["Greet"]), "{repaired}");
    assert!(repaired["redriveDate"].is_f64(), "{repaired}");
    let ended = harness.execution_ended(&json!(arn)).await;
    assert_eq!(ended["status"], "SUCCEEDED", "{ended}");
    assert_eq!(ended["output"], r#"{"greeting":"Hello, Ana!"}"#);
}
