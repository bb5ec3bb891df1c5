//! Each tool prints its usage for `--help` and exits 0; a bad option gets clap's
//! error and a non-zero exit, not a panic. And `bench flush`, which needs no server,
//! run through its output.

use std::process::{Command, Output};

fn run(binary: &str, args: &[&str]) -> Output {
    Command::new(binary)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {binary}: {e}"))
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
    let output = run(
        env!("CARGO_BIN_EXE_bench"),
        &[
            "flush",
            "--bytes",
            "3000",
            "--flushes",
            "4",
            "--rounds",
            "2",
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
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
fn bench_prints_its_usage() {
    let bench = env!("CARGO_BIN_EXE_bench");
    assert_help(
        bench,
        &["--help"],
        &[
            "run",
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
