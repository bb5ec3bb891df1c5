//! `cost` on a workflow of the user's own, through its real output: its tasks run on
//! moto (started by the tool, as the other emulator tests start it) and are counted.

use std::process::{Command, Output};

/// Runs `cost` with `args`.
fn cost(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cost"))
        .args(args)
        .output()
        .expect("cost runs")
}

/// Two steps, on agents no built-in workflow names.
const RESERVE_AND_SHIP: &str = r#"{
  "name": "reserve-and-ship",
  "version": 1,
  "input": { "sku": "string" },
  "pickup_timeout": "30s",
  "defaults": { "complete_by": "10s" },
  "steps": [
    { "name": "reserve", "agent": "inventory", "call": "/stock/reserve" },
    { "name": "ship", "agent": "shipping", "call": "/shipments" }
  ]
}"#;

/// The report of `cost` on `tasks` tasks of `reserve-and-ship` with `args` beside:
/// its lines but the metrics' JSON, once it has succeeded.
fn reserve_and_ship_report(tasks: &str, args: &[&str]) -> String {
    let workflows = tempfile::tempdir().expect("a directory");
    std::fs::write(
        workflows.path().join("reserve-and-ship.json"),
        RESERVE_AND_SHIP,
    )
    .expect("the definition");
    let mut all = vec![
        "--tasks",
        tasks,
        "--waves",
        "1",
        "--workflow",
        "reserve-and-ship",
        "--input",
        r#"{"sku": "a-1"}"#,
        "--workflows",
        workflows.path().to_str().expect("a UTF-8 path"),
    ];
    all.extend_from_slice(args);
    let output = cost(&all);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Vec<&str> = stdout
        .lines()
        .filter(|line| !line.starts_with('{'))
        .collect();
    let report = report.join("\n");
    assert!(
        output.status.success(),
        "{}\n{report}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    report
}

#[test]
fn cost_counts_a_workflow_of_ones_own_with_its_steps_and_prices() {
    let report = reserve_and_ship_report("3", &[]);
    let first = report.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("# ")
            && first.contains(" checkout=")
            && first.contains(" command: cost --tasks 3 ")
            && first.contains(r#" --input '{"sku": "a-1"}' "#),
        "the report says where it came from: {first}"
    );
    for expected in [
        "3 tasks of reserve-and-ship (2.0 steps run each)",
        // A task's item: its creation, its claim, and one write a step (the
        // deployment's key, which seals the tasks the requests carry, the workflow's
        // definition and the count of expiry shards are written once, for all of
        // them).
        "the table's write units per task by item: SECRET 0.3, SETTINGS 0.3, TASK 4.0, WORKFLOW 0.3",
        "dollars per million tasks of reserve-and-ship",
        "Step Functions Standard, 4.0 transitions per task",
    ] {
        assert!(report.contains(expected), "{expected:?} in:\n{report}");
    }
    let total: f64 = report
        .lines()
        .find_map(|line| line.trim().strip_prefix("total "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|dollars| dollars.parse().ok())
        .unwrap_or_else(|| panic!("a total in:\n{report}"));
    assert!(total > 0.0, "{report}");
}

/// Ten submissions in one request, created together from one batch of the ingest
/// queue by a scheduler that has written no lease yet, on a new table: the count of
/// expiry shards is written once, not once for each creation that came before the
/// first write ended.
#[test]
fn cost_counts_one_write_of_the_shards_count_for_a_batch_that_comes_together() {
    let report = reserve_and_ship_report("10", &["--ingestion", "buffered", "--batch", "10"]);
    let by_item = report
        .lines()
        .find(|line| line.contains("the table's write units per task by item:"))
        .unwrap_or_else(|| panic!("the write units by item in:\n{report}"));
    assert!(by_item.contains(" SETTINGS 0.1,"), "{by_item}\n{report}");
}

#[test]
fn cost_of_a_workflow_it_does_not_know_is_the_apis_refusal_not_a_panic() {
    let output = cost(&[
        "--tasks",
        "1",
        "--waves",
        "1",
        "--workflow",
        "no-such-workflow",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the API refused a task of no-such-workflow")
            && !stderr.contains("panicked"),
        "{stderr}"
    );
}
