//! The local server's durability, seen in its system calls: `bench run` under strace,
//! and its WAL's writes and flushes counted from the trace.

use std::process::Command;

use sas_tools::floor::{STRACE_OPTIONS, WalWrites};

/// Tasks the run makes, each of six commits or more.
const TASKS: u64 = 20;

#[test]
fn every_commit_of_the_local_servers_wal_is_flushed_with_fdatasync() {
    let traced = Command::new("strace")
        .args(["-f", "-o", "/dev/null", "true"])
        .output();
    assert!(
        traced.is_ok_and(|o| o.status.success()),
        "this test traces the server's system calls with strace: apt-get install strace, \
         where ptrace is allowed"
    );
    let trace = tempfile::NamedTempFile::new().expect("a trace file");
    let under = format!("strace {STRACE_OPTIONS} -o {}", trace.path().display());
    let tasks = TASKS.to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args([
            "run",
            "--tasks",
            &tasks,
            "--concurrency",
            "1",
            "--warmup",
            "0",
        ])
        .args(["--ingestion", "direct", "--under", &under])
        .output()
        .expect("bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains(&format!(" completed={tasks} ")),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let wal = WalWrites::from_strace(&std::fs::read_to_string(trace.path()).expect("the trace"));
    assert!(wal.commits >= 6 * TASKS, "commits: {wal:?}");
    // Each commit flushed by its thread before that thread writes the WAL again.
    assert_eq!(wal.unflushed_commits, 0, "a commit not flushed: {wal:?}");
    // SQLite built with HAVE_FDATASYNC (.cargo/config.toml), as Postgres flushes its WAL.
    assert_eq!(
        wal.fsyncs, 0,
        "flushed with fsync, not fdatasync (is LIBSQLITE3_FLAGS set in the environment? \
         it overrides .cargo/config.toml's): {wal:?}"
    );
}
