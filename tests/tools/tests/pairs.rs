//! `bench pairs` through its output: two builds of the local server in turn, each
//! pair's first run alternating, then each figure's ratio over the pairs.

use std::path::PathBuf;
use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(args)
        .output()
        .expect("bench runs")
}

/// The server this test's bench starts as its own build: beside the bench.
fn sas_local() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_bench")).with_file_name("sas-local")
}

#[test]
fn pairs_run_both_builds_in_turn_and_compare_each_figure() {
    // The baseline is the same build under another name: what matters here is which
    // runs, in what order, and the report.
    let copy = tempfile::tempdir().expect("a directory");
    let baseline = copy.path().join("sas-local-before");
    let first = bench(&["run", "--tasks", "1", "--concurrency", "1", "--warmup", "0"]);
    assert!(first.status.success(), "{first:?}");
    std::fs::copy(sas_local(), &baseline).expect("the server copied");
    let baseline = baseline.to_str().expect("a path in UTF-8");
    let output = bench(&[
        "pairs",
        "--baseline",
        baseline,
        "--pairs",
        "2",
        "--tasks",
        "10",
        "--concurrency",
        "2",
        "--warmup",
        "0",
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2 + 4 + 1 + 4, "{stdout}");
    assert!(lines[0].starts_with("# ") && lines[0].contains(" command: bench pairs "));
    assert!(
        lines[1].ends_with(&format!(" baseline={baseline}")),
        "{}",
        lines[1]
    );
    let runs: Vec<&str> = lines[2..6]
        .iter()
        .map(|line| line.split(" engine=").next().unwrap_or_default())
        .collect();
    assert_eq!(
        runs,
        [
            "pair=1 build=this",
            "pair=1 build=baseline",
            "pair=2 build=baseline",
            "pair=2 build=this"
        ],
        "{stdout}"
    );
    for line in &lines[2..6] {
        assert!(line.contains(" completed=10 errors=0 "), "{line}");
    }
    assert_eq!(
        lines[6],
        "# this build over the baseline, the median of 2 pairs' ratios:"
    );
    for (line, figure) in lines[7..]
        .iter()
        .zip(["tasks_per_s", "p50_ms", "p99_ms", "server_cpu_s"])
    {
        let (name, rest) = line.split_once(": ").expect("a figure's line");
        assert_eq!(name, figure);
        let (ratio, pairs) = rest.split_once("x, higher in ").expect("a ratio");
        assert!(ratio.parse::<f64>().is_ok_and(|r| r > 0.0), "{line}");
        assert!(pairs.ends_with(" of 2 pairs"), "{line}");
    }
}

#[test]
fn a_baseline_that_is_not_there_is_named() {
    let output = bench(&[
        "pairs",
        "--baseline",
        "/nonexistent/sas-local",
        "--pairs",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("no build of sas-local at /nonexistent/sas-local"),
        "{stderr}"
    );
}
