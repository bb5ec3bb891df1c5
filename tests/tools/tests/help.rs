//! Each tool prints its usage for `--help` and exits 0; a bad option gets clap's
//! error and a non-zero exit, not a panic. And, through their output, `bench flush`,
//! which needs no server, and `bench pairs`, two builds of the local server in turn.

use std::path::PathBuf;
use std::process::{Command, Output};

fn run(binary: &str, args: &[&str]) -> Output {
    Command::new(binary)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {binary}: {e}"))
}

/// What `bench` with `args` printed, once it succeeded.
fn bench_stdout(args: &[&str]) -> String {
    let output = run(env!("CARGO_BIN_EXE_bench"), args);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Runs `binary` with `args` and checks that it prints its usage, naming `options`.
fn assert_help(binary: &str, args: &[&str], options: &[&str]) {
    let output = run(binary, args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{binary} {args:?}: {}\n{stdout}{stderr}",
        output.status
    );
    assert!(stdout.contains("Usage:"), "{binary} {args:?}:\n{stdout}");
    for option in options {
        assert!(
            stdout.contains(option),
            "{binary} {args:?} does not name {option}:\n{stdout}"
        );
    }
}

/// The report's first line: a UTC time, this checkout's commit, the CPUs and the
/// command as it was given.
fn assert_provenance(line: &str, command: &str) {
    let head = git(&["rev-parse", "--short=7", "HEAD"]);
    let fields: Vec<&str> = line.split(' ').collect();
    assert_eq!(fields[0], "#", "{line}");
    assert!(
        humantime::parse_rfc3339(fields[1]).is_ok(),
        "a UTC time in {line}"
    );
    let checkout = fields[2].strip_prefix("checkout=").unwrap_or_default();
    assert!(checkout.starts_with(&head), "checkout={head} in {line}");
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    assert_eq!(fields[3], format!("cpus={cpus}"), "{line}");
    assert!(line.ends_with(&format!(" command: {command}")), "{line}");
}

fn git(args: &[&str]) -> String {
    let output = run("git", args);
    assert!(output.status.success(), "git {args:?}");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[test]
fn bench_flush_prints_each_placements_flushes_and_their_medians() {
    let stdout = bench_stdout(&[
        "flush",
        "--bytes",
        "3000",
        "--flushes",
        "4",
        "--rounds",
        "2",
    ]);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1 + 2 * 4 + 1 + 4, "{stdout}");
    assert_provenance(lines[0], "bench flush --bytes 3000 --flushes 4 --rounds 2");
    assert_eq!(lines[9], "# medians of 2 rounds of 4 flushes");
    // 3,000 bytes at 0, 3,000, 6,000, 9,000 cross blocks 0; 0-1; 1-2; 2.
    for (line, (placement, blocks)) in lines[10..].iter().zip([
        ("in-place", "1.00"),
        ("reused", "1.50"),
        ("sparse", "1.50"),
        ("appended", "1.50"),
    ]) {
        let start = format!("bytes=3000 placement={placement} blocks_per_write={blocks} p50_us=");
        assert!(line.starts_with(&start), "{line}");
        assert!(line.contains(" p99_us="), "{line}");
    }
}

#[test]
fn bench_pairs_runs_both_builds_in_turn_and_compares_each_figure() {
    // The baseline is this build under another name: what matters here is which runs,
    // in what order, and the report. A first run has cargo build the server.
    bench_stdout(&["run", "--tasks", "1", "--concurrency", "1", "--warmup", "0"]);
    let sas_local = PathBuf::from(env!("CARGO_BIN_EXE_bench")).with_file_name("sas-local");
    let copy = tempfile::tempdir().expect("a directory");
    let baseline = copy.path().join("sas-local-before");
    std::fs::copy(sas_local, &baseline).expect("the server copied");
    let baseline = baseline.to_str().expect("a path in UTF-8");
    let args = [
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
    ];
    let stdout = bench_stdout(&args);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2 + 4 + 1 + 4, "{stdout}");
    assert_provenance(lines[0], &format!("bench {}", args.join(" ")));
    assert!(
        lines[1].ends_with(&format!(" baseline={baseline}")),
        "{}",
        lines[1]
    );
    let runs: Vec<&str> = (lines[2..6].iter())
        .map(|line| line.split(" engine=").next().unwrap_or_default())
        .collect();
    let order = [
        "pair=1 build=this",
        "pair=1 build=baseline",
        "pair=2 build=baseline",
        "pair=2 build=this",
    ];
    assert_eq!(runs, order, "{stdout}");
    for line in &lines[2..6] {
        assert!(line.contains(" completed=10 errors=0 "), "{line}");
    }
    let heading = "# this build over the baseline, the median of 2 pairs' ratios:";
    assert_eq!(lines[6], heading);
    let figures = ["tasks_per_s", "p50_ms", "p99_ms", "server_cpu_s"];
    for (line, figure) in lines[7..].iter().zip(figures) {
        let (name, rest) = line.split_once(": ").expect("a figure's line");
        assert_eq!(name, figure);
        let (ratio, pairs) = rest.split_once("x, higher in ").expect("a ratio");
        assert!(ratio.parse::<f64>().is_ok_and(|r| r > 0.0), "{line}");
        assert!(pairs.ends_with(" of 2 pairs"), "{line}");
    }
}

#[test]
fn bench_pairs_names_a_baseline_that_is_not_there() {
    let args = [
        "pairs",
        "--baseline",
        "/nonexistent/sas-local",
        "--pairs",
        "1",
    ];
    let output = run(env!("CARGO_BIN_EXE_bench"), &args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("no build of sas-local at /nonexistent/sas-local"),
        "{stderr}"
    );
}

#[test]
fn bench_prints_its_usage() {
    let bench = env!("CARGO_BIN_EXE_bench");
    assert_help(
        bench,
        &["--help"],
        &[
            "run",
            "pairs",
            "ingest",
            "sweep",
            "flush",
            "--tasks",
            "--rates",
            "[default: 2000]",
        ],
    );
    assert_help(
        bench,
        &["run", "--help"],
        &["--tasks", "--concurrency", "--warmup", "--durability"],
    );
    assert_help(
        bench,
        &["pairs", "--help"],
        &[
            "--baseline",
            "--pairs",
            "--tasks",
            "--concurrency",
            "--asl-http",
        ],
    );
    assert_help(bench, &["ingest", "--help"], &["--rates", "--seconds"]);
    assert_help(
        bench,
        &["sweep", "--help"],
        &["--tasks", "--expired-percent", "--store"],
    );
}

#[test]
fn coldstart_prints_its_usage() {
    assert_help(
        env!("CARGO_BIN_EXE_coldstart"),
        &["--help"],
        &["--runs", "[default: 10]"],
    );
}

#[test]
fn cost_prints_its_usage() {
    assert_help(
        env!("CARGO_BIN_EXE_cost"),
        &["--help"],
        &[
            "--tasks",
            "--lease-bucket-seconds",
            "--waves",
            "--workflow",
            "--input",
            "--workflows",
        ],
    );
}

#[test]
fn deadlines_prints_its_usage() {
    assert_help(
        env!("CARGO_BIN_EXE_deadlines"),
        &["--help"],
        &["--tasks", "[default: 20]"],
    );
}

#[test]
fn simulate_prints_its_usage() {
    assert_help(
        env!("CARGO_BIN_EXE_simulate"),
        &["--help"],
        &["--seed", "--seeds", "--trace", "--from"],
    );
}

#[test]
fn an_unknown_option_is_an_error_not_a_panic() {
    let binary = env!("CARGO_BIN_EXE_bench");
    let output = run(binary, &["--no-such-option"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "bench exited 0:\n{stderr}");
    assert!(stderr.contains("unexpected argument"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_durability_outside_its_choices_is_an_error() {
    let output = run(
        env!("CARGO_BIN_EXE_bench"),
        &["run", "--durability", "none"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "bench exited 0:\n{stderr}");
    assert!(
        stderr.contains("possible values: full, process"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn cost_refuses_an_input_not_an_object_and_a_workflows_directory_it_cannot_read() {
    let cost = env!("CARGO_BIN_EXE_cost");
    let output = run(cost, &["--input", "[1, 2]"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--input") && stderr.contains("must be a JSON object"),
        "{stderr}"
    );
    let output = run(cost, &["--workflows", "/no/such/directory"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--workflows: /no/such/directory"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
