//! The `sas` command line, run as a person runs it, against the local system: its
//! real output, its exit codes.

use sas_tests::{Harness, delivery_input};
use serde_json::{Value, json};

#[path = "cli/machines.rs"]
mod machines;

fn quick() -> Value {
    json!({ "workflow": "drone-delivery-quick", "input": delivery_input() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_lists_shows_edits_resubmits_and_watches_a_task_from_the_command_line() {
    let harness = Harness::start(5).await;
    harness.refuse_once("delivery").await;
    harness.put_task("cli-failed", &quick()).await;
    harness.settle_in("cli-failed", "Error").await;

    let listed = harness.sas_ok(&["tasks", "list", "--state", "Error"]).await;
    let header = listed.lines().next().expect("a header");
    for column in ["TASK", "STATE", "WORKFLOW", "RUN", "ERROR"] {
        assert!(header.contains(column), "{listed}");
    }
    let row = listed
        .lines()
        .find(|l| l.contains("cli-failed"))
        .unwrap_or_else(|| panic!("the failed task is listed: {listed}"));
    assert!(row.contains("Error") && row.contains("422"), "{row}");

    let shown = harness.sas_ok(&["tasks", "show", "cli-failed"]).await;
    for expected in [
        "cli-failed  Error  drone-delivery-quick v1  run 1",
        "error: step 'create-delivery' failed",
        "create-package   Compensated",
        "█ call  ▒ compensation",
        "compensation of schedule-drone (attempt 2) succeeded",
        "entered Compensating",
        "entered Error",
    ] {
        assert!(shown.contains(expected), "'{expected}' in:\n{shown}");
    }
    let timeline = shown
        .lines()
        .find(|l| l.contains("schedule-drone") && l.contains("Compensated"))
        .expect("the drone's row");
    // The harness's clock stands still while the task runs: its bars share a cell.
    assert!(
        timeline.contains('█') || timeline.contains('▒'),
        "the drone's step on the timeline: {timeline}"
    );
    let json: Value = serde_json::from_str(
        &harness
            .sas_ok(&["--json", "tasks", "show", "cli-failed"])
            .await,
    )
    .expect("--json prints JSON");
    assert_eq!(json["id"], "cli-failed");

    let mut edited = delivery_input();
    edited["customer_id"] = json!("c-edited");
    let input = tempfile::NamedTempFile::new().expect("a file");
    std::fs::write(input.path(), edited.to_string()).expect("written");
    let path = input.path().to_str().expect("a path");
    let resubmitted = harness
        .sas_ok(&["tasks", "resubmit", "cli-failed", "--input", path])
        .await;
    assert_eq!(resubmitted.trim(), "cli-failed resubmitted: run 2, Pending");
    let watched = harness
        .sas_ok(&["tasks", "watch", "cli-failed", "--timeout", "30s"])
        .await;
    let last = watched.lines().last().expect("a line");
    assert!(last.contains("Processed"), "{watched}");
    assert_eq!(harness.task("cli-failed").await["input"], edited);

    let (success, out, err) = harness.sas(&["tasks", "show", "nobody"]).await;
    assert!(!success && out.is_empty(), "{out}");
    assert_eq!(err.trim(), "sas: 404 not_found: no task 'nobody'");
    let (success, _, err) = harness.sas(&["tasks", "resubmit", "cli-failed"]).await;
    assert!(!success);
    assert!(err.contains("409 not_in_error"), "{err}");
}

/// An input too large for a request's body (here 200 KB, over 48 KiB) is uploaded by the
/// command line first, by the request `POST /payloads/uploads` answers, and the task
/// submitted with its reference: the task has it whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_input_is_uploaded_then_submitted_by_reference_from_the_command_line() {
    let harness = Harness::start(5).await;
    let mut large = delivery_input();
    large["manifest"] = json!("m".repeat(200 * 1024));
    let input = tempfile::NamedTempFile::new().expect("a file");
    std::fs::write(
        input.path(),
        serde_json::to_vec_pretty(&large).expect("json"),
    )
    .expect("written");
    let path = input.path().to_str().expect("a path");
    let submitted = harness
        .sas_ok(&[
            "tasks",
            "submit",
            "drone-delivery",
            "--input",
            path,
            "--id",
            "cli-large",
        ])
        .await;
    assert!(
        submitted.starts_with("cli-large  "),
        "{}",
        &submitted[..submitted.len().min(300)]
    );
    let task = harness.settle_in("cli-large", "Processed").await;
    assert_eq!(task["input"], large, "the input whole, as the file gave it");
    assert!(
        harness.data.path().join("payloads").is_dir(),
        "the value kept apart"
    );
}

/// A caller submits a task and waits for its end in one command, and sees it as
/// `tasks show` shows it; without a wait, the task as it was answered; a bad
/// submission is refused with the field named and nothing submitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_submits_a_task_and_waits_for_its_end_from_the_command_line() {
    let harness = Harness::start(5).await;
    let input = tempfile::NamedTempFile::new().expect("a file");
    std::fs::write(input.path(), delivery_input().to_string()).expect("written");
    let path = input.path().to_str().expect("a path");
    let submit = |extra: &'static [&'static str]| {
        let mut arguments = vec!["tasks", "submit", "drone-delivery-quick", "--input", path];
        arguments.extend(extra);
        arguments
    };

    let ended = harness
        .sas_ok(&submit(&["--id", "cli-run", "--wait", "10s"]))
        .await;
    assert!(
        ended.starts_with("cli-run  Processed  drone-delivery-quick v1  run 1"),
        "{ended}"
    );
    for step in ["check-account", "create-delivery"] {
        let row = ended
            .lines()
            .find(|l| l.trim_start().starts_with(step))
            .unwrap_or_else(|| panic!("{step}'s row in:\n{ended}"));
        assert!(row.contains("Processed"), "{row}");
    }
    assert!(ended.contains("entered Processed"), "{ended}");

    let answered: Value = serde_json::from_str(
        &harness
            .sas_ok(&[&["--json"][..], &submit(&["--priority", "1"])].concat())
            .await,
    )
    .expect("--json prints JSON");
    let id = answered["id"].as_str().expect("a generated id");
    assert_eq!(answered["priority"], 1, "{answered:#}");
    assert_eq!(
        harness.task(id).await["workflow"]["name"],
        "drone-delivery-quick"
    );

    // Unanswered (nothing listens there): the error names the id the CLI gave the
    // task, and that id sends it again as the same task.
    let (success, _, err) = harness
        .sas(&[&["--api", "http://127.0.0.1:9"][..], &submit(&[])].concat())
        .await;
    assert!(!success && err.contains("cannot reach the API"), "{err}");
    let unanswered = err
        .split("--id ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("the id in: {err}"));
    let mut again = submit(&["--wait", "10s"]);
    again.extend(["--id", unanswered]);
    let ended = harness.sas_ok(&again).await;
    assert!(
        ended.starts_with(&format!("{unanswered}  Processed")),
        "{ended}"
    );

    let (success, out, err) = harness
        .sas(&[
            "tasks",
            "submit",
            "drone-delivery-quick",
            "--id",
            "cli-empty",
        ])
        .await;
    assert!(!success && out.is_empty(), "{out}");
    assert!(
        err.starts_with("sas: 400 invalid_field") && err.contains("input.customer_id"),
        "{err}"
    );
    let (success, _, err) = harness
        .sas(&submit(&["--id", "cli-long", "--wait", "1m"]))
        .await;
    assert!(
        !success && err.contains("wait: must be a duration up to 20s"),
        "{err}"
    );
    for refused in ["cli-empty", "cli-long"] {
        let (success, _, err) = harness.sas(&["tasks", "show", refused]).await;
        assert!(!success && err.contains("404"), "{refused}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_from_the_command_line_takes_each_task_once_and_the_dead_letters_show() {
    let harness = Harness::start(5).await;
    harness
        .faults("account", json!({ "permanent_error_rate": 1.0 }))
        .await;
    for id in ["r-1", "r-2", "r-3"] {
        harness.put_task(id, &quick()).await;
        harness.settle_in(id, "Error").await;
    }
    let arguments = [
        "redrive",
        "--batch",
        "accounts-fixed",
        "--error-contains",
        "422",
        "--per-second",
        "1000",
    ];
    let first = harness.sas_ok(&arguments).await;
    assert!(
        first.contains("batch accounts-fixed: 3 examined, 3 matched, 3 resubmitted, 0 skipped"),
        "{first}"
    );
    for id in ["r-1", "r-2", "r-3"] {
        harness.settle_in(id, "Error").await;
    }
    let again = harness.sas_ok(&arguments).await;
    assert!(
        again.contains("3 examined, 3 matched, 0 resubmitted, 3 skipped"),
        "the same batch again takes none: {again}"
    );
    let json: Value = serde_json::from_str(
        &harness
            .sas_ok(&[&["--json"], &arguments[..]].concat())
            .await,
    )
    .expect("JSON");
    assert_eq!(
        (json["taken"].as_u64(), json["skipped"].as_u64()),
        (Some(0), Some(3))
    );

    let queues = harness.sas_ok(&["dlq", "list"]).await;
    for role in ["scheduler", "agent-requests", "agent-responses"] {
        assert!(
            queues
                .lines()
                .any(|l| l.trim_start().starts_with(role) && l.trim_end().ends_with('0')),
            "{queues}"
        );
    }
    let redriven = harness
        .sas_ok(&["dlq", "redrive", "scheduler", "--max", "5"])
        .await;
    assert_eq!(redriven.trim(), "0 message(s) sent back to scheduler");
    let workflows = harness.sas_ok(&["workflows"]).await;
    assert!(workflows.contains("drone-delivery-quick v1"), "{workflows}");
    assert!(workflows.contains("/drones/cancel"), "{workflows}");
}

/// The delivery service makes the delivery and answers too late, three dispatches
/// running: past its threshold the task is undone as far as it can be and ends in
/// Error with the delivery, which nothing undoes, listed as not undone, which
/// `sas tasks show` says. A resubmission calls the delivery again under the key it
/// had: the service makes one delivery, not a second under a new key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_delivery_is_shown_not_undone_and_a_resubmission_makes_no_second() {
    let harness = Harness::start(5).await;
    harness
        .leave_the_quick_delivery_late("cli-late", &delivery_input())
        .await;
    let task = harness.task("cli-late").await;
    assert_eq!(task["not_undone"], json!(["create-delivery"]), "{task:#}");
    let shown = harness.sas_ok(&["tasks", "show", "cli-late"]).await;
    assert!(
        shown.contains("not undone: create-delivery (its effect may be in place"),
        "{shown}"
    );
    harness.sas_ok(&["tasks", "resubmit", "cli-late"]).await;
    harness.settle_in("cli-late", "Processed").await;
    let deliveries: Vec<_> = harness
        .effects_of("cli-late")
        .await
        .into_iter()
        .filter(|(service, _, _)| service == "delivery")
        .collect();
    assert_eq!(
        deliveries,
        [("delivery".to_owned(), "/deliveries".to_owned(), 4)],
        "one delivery, called four times under one key"
    );
}

/// An order of three parcels, each shipped by a child task: `sas tasks show` counts
/// them, `sas tasks children` lists them page by page, and a child names its parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orders_parcels_are_counted_listed_by_item_and_each_names_its_parent() {
    let harness = Harness::start(5).await;
    let parcels: Vec<Value> = ["north", "south", "east"]
        .iter()
        .enumerate()
        .map(|(n, gate)| json!({ "id": format!("p{n}"), "dropoff": format!("{gate} gate"), "weight_kg": 0.5 }))
        .collect();
    let order = json!({
        "workflow": "parcel-order",
        "input": { "order_id": "cli-order", "customer_id": "c-1", "parcels": parcels },
    });
    harness.put_task("cli-order", &order).await;
    harness.settle_in("cli-order", "Processed").await;

    let shown = harness.sas_ok(&["tasks", "show", "cli-order"]).await;
    assert!(
        shown.contains(
            "children of deliver-each: 3 children, 3 started: 3 succeeded, 0 failed, 0 running \
             (sas tasks children cli-order --step deliver-each)"
        ),
        "{shown}"
    );
    let span = shown
        .lines()
        .find(|l| l.trim_start().starts_with("deliver-each"))
        .expect("the map's row");
    assert!(span.contains("Processed") && span.contains('█'), "{span}");

    // A page of two, the step found as the only one that starts children.
    let page = harness
        .sas_ok(&["tasks", "children", "cli-order", "--limit", "2"])
        .await;
    let lines: Vec<&str> = page.lines().collect();
    assert_eq!(
        lines[0],
        "deliver-each: 3 children, 3 started: 3 succeeded, 0 failed, 0 running"
    );
    for column in ["ITEM", "TASK", "STATE", "RUN", "UPDATED", "ERROR"] {
        assert!(lines[1].contains(column), "{page}");
    }
    assert_eq!(lines.len(), 5, "two children and a hint: {page}");
    assert_eq!(lines[4], "(more: --all, or raise --limit)");
    // Every page, by item.
    let all = harness
        .sas_ok(&[
            "tasks",
            "children",
            "cli-order",
            "--step",
            "deliver-each",
            "--limit",
            "2",
            "--all",
        ])
        .await;
    let rows: Vec<Vec<&str>> = all
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "{all}");
    for (n, row) in rows.iter().enumerate() {
        assert_eq!(
            row[..4].join(" "),
            format!("{n} cli-order~deliver-each~{n} Processed 1"),
            "item, id, state, run: {all}"
        );
    }
    let json: Value = serde_json::from_str(
        &harness
            .sas_ok(&[
                "--json",
                "tasks",
                "children",
                "cli-order",
                "--limit",
                "1",
                "--all",
            ])
            .await,
    )
    .expect("--json prints JSON");
    assert_eq!(
        (&json["step"], &json["counts"]["succeeded"], &json["next"]),
        (&json!("deliver-each"), &json!(3), &Value::Null)
    );
    assert_eq!(json["tasks"].as_array().map(Vec::len), Some(3), "{json:#}");

    // A child, shown by its id, names its parent's step and its item.
    let child = harness
        .sas_ok(&["tasks", "show", "cli-order~deliver-each~2"])
        .await;
    assert!(
        child.starts_with(
            "cli-order~deliver-each~2  Processed  ship-parcel v1  run 1  FailureCount 0\n\
             child of cli-order, step deliver-each, item 2\n"
        ),
        "{child}"
    );

    let (success, out, err) = harness
        .sas(&["tasks", "children", "cli-order", "--step", "check-account"])
        .await;
    assert!(!success && out.is_empty(), "{out}");
    assert_eq!(
        err.trim(),
        "sas: 400 invalid_query: step: name one of the steps of task 'cli-order' that \
         started children (deliver-each)"
    );
    let workflows = harness.sas_ok(&["workflows"]).await;
    let map = workflows
        .lines()
        .find(|l| l.contains("deliver-each"))
        .unwrap_or_else(|| panic!("the map's step: {workflows}"));
    assert!(
        map.contains("map: ship-parcel over input.parcels") && map.contains("the children's own"),
        "{map}"
    );
    // A wait for a callback starts no children: it has nothing to undo.
    let approve = workflows
        .lines()
        .find(|l| l.contains("wait for its callback"))
        .unwrap_or_else(|| panic!("the refund's approval: {workflows}"));
    assert!(
        approve.contains("approve") && approve.contains("nothing to undo"),
        "{approve}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_approves_a_refund_and_pauses_and_resumes_a_task_from_the_command_line() {
    let harness = Harness::start(5).await;
    let refund = |amount: u32| {
        json!({ "workflow": "refund",
                "input": { "order_id": "o-1", "customer_id": "c-1", "amount": amount } })
    };
    harness.put_task("cli-refund", &refund(300)).await;
    harness
        .wait_for("cli-refund", "waiting for its approval", |t| {
            sas_tests::step(t, "approve")["waiting"]["for"] == "callback"
        })
        .await;
    let shown = harness.sas_ok(&["tasks", "show", "cli-refund"]).await;
    let hint = shown
        .lines()
        .find(|l| l.starts_with("approve waits for its callback until"))
        .unwrap_or_else(|| panic!("the wait and its token shown:\n{shown}"));
    let token = hint
        .split("sas callback ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the token after 'sas callback'");
    assert!(
        shown.contains("approve (attempt 1) waits until 2027-01-16T08:00:00.000Z"),
        "{shown}"
    );

    let approval = tempfile::NamedTempFile::new().expect("a file");
    std::fs::write(approval.path(), r#"{"approved_by": "ana"}"#).expect("written");
    let path = approval.path().to_str().expect("a path");
    let used = harness.sas_ok(&["callback", token, "--output", path]).await;
    assert_eq!(used.trim(), "approve: Processed");
    let (success, _, error) = harness.sas(&["callback", token, "--output", path]).await;
    assert!(!success, "a token is used once");
    assert!(error.contains("does not wait for this callback"), "{error}");
    let task = harness.settle_in("cli-refund", "Processed").await;
    assert_eq!(
        sas_tests::step(&task, "approve")["output"],
        json!({ "approved_by": "ana" })
    );

    harness.put_task("cli-refused", &refund(400)).await;
    harness
        .wait_for("cli-refused", "waiting for its approval", |t| {
            sas_tests::step(t, "approve")["waiting"]["for"] == "callback"
        })
        .await;
    let paused = harness.sas_ok(&["tasks", "pause", "cli-refused"]).await;
    assert!(paused.starts_with("cli-refused paused: "), "{paused}");
    let shown = harness.sas_ok(&["tasks", "show", "cli-refused"]).await;
    assert!(shown.contains("paused by operator at "), "{shown}");
    let resumed = harness.sas_ok(&["tasks", "resume", "cli-refused"]).await;
    assert!(resumed.starts_with("cli-refused resumed: "), "{resumed}");
    let refused = harness
        .sas_ok(&[
            "tasks",
            "complete",
            "cli-refused",
            "approve",
            "--error",
            // What a caller may send as a step's error: terminal escapes (write the
            // clipboard, erase the line) and a mark that reverses the text after it.
            "no receipt\u{1b}]52;c;aGk=\u{7}\u{1b}[2K\u{202e}tpiecer",
        ])
        .await;
    assert_eq!(refused.trim(), "cli-refused approve: Error");
    harness.settle_in("cli-refused", "Error").await;
    let shown = harness.sas_ok(&["tasks", "show", "cli-refused"]).await;
    for expected in [
        "paused by operator",
        "resumed by operator",
        "approve's callback used by operator",
        "no receipt\\u{1b}]52;c;aGk=\\u{7}\\u{1b}[2K\\u{202e}tpiecer",
    ] {
        assert!(shown.contains(expected), "'{expected}' in:\n{shown}");
    }
    let listed = harness.sas_ok(&["tasks", "list", "--state", "Error"]).await;
    for out in [&shown, &listed] {
        assert!(
            !out.chars()
                .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
            "shown as the terminal would act on it: {out:?}"
        );
    }
}

/// The line of `service`'s table row whose text holds `holding`.
fn row<'o>(out: &'o str, service: &str, holding: &str) -> &'o str {
    out.lines()
        .find(|line| line.trim_start().starts_with(service) && line.contains(holding))
        .unwrap_or_else(|| panic!("no row of {service} with '{holding}' in:\n{out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_each_services_limits_and_calls_from_the_command_line() {
    let harness = Harness::start_with_services(
        r#"{"drone": {"max_concurrency": 1, "rate": {"per_second": 20, "burst": 5}}}"#,
    )
    .await;
    harness.faults("drone", json!({ "latency_ms": 5000 })).await;
    for i in 0..3 {
        let body = json!({ "workflow": "drone-delivery", "input": delivery_input() });
        harness.put_task(&format!("cli-limited-{i}"), &body).await;
    }
    harness
        .services_when(None, |v| {
            let gate = &sas_tests::service(v, "drone")["limits"][0]["gate"];
            gate["in_flight"] == 1 && gate["waiting"] == 2
        })
        .await;
    let out = harness.sas_ok(&["services"]).await;
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "SERVICE", "LIMITED", "BY", "IN", "FLIGHT", "WAITING", "LONGEST", "WAIT", "RATE"
        ],
        "{out}"
    );
    let drone: Vec<&str> = row(&out, "drone", "its settings")
        .split_whitespace()
        .collect();
    assert_eq!(
        drone[..6],
        ["drone", "its", "settings", "1/1", "2", "0s"],
        "{out}"
    );
    assert!(
        row(&out, "drone", "its settings").contains("20/s, burst 5"),
        "{out}"
    );
    row(&out, "account", "not limited");
    let per_customer = row(
        &out,
        "delivery",
        "step one-delivery-per-customer/create-delivery",
    );
    assert!(
        per_customer.contains("per input.customer_id") && per_customer.contains("-/1 each key"),
        "{out}"
    );
    assert!(
        out.contains("`sas services --key <value>` shows one"),
        "{out}"
    );
    let keyed = harness.sas_ok(&["services", "--key", "c-1"]).await;
    let per_customer = row(
        &keyed,
        "delivery",
        "step one-delivery-per-customer/create-delivery",
    );
    assert!(per_customer.contains(" 0/1 "), "{keyed}");
    let json: Value = serde_json::from_str(&harness.sas_ok(&["--json", "services"]).await)
        .expect("JSON for scripts");
    assert!(json["services"].is_array(), "{json}");
    for i in 0..3 {
        harness
            .settle_in(&format!("cli-limited-{i}"), "Processed")
            .await;
    }
}
