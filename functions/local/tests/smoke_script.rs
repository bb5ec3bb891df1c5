//! The README's run command, and a setting it cannot take; and the LocalStack smoke test script
//! (`infra/localstack/smoke.sh`), run here against `sas-local`, which serves the same
//! API: the script itself is proven, though the LocalStack deployment around it needs
//! Docker.

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn the_smoke_script_sees_a_drone_delivery_processed() {
    let data = tempfile::tempdir().expect("data directory");
    let (mut child, api, _) = common::spawn_with(data.path(), &[]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/localstack/smoke.sh");
    let output = Command::new("bash")
        .arg(&script)
        .args([api.as_str(), "60"])
        .output()
        .expect("the script runs");
    let _ = child.kill();
    let _ = child.wait();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("Processed"), "{stdout}");
}

#[test]
fn the_readme_run_command_runs_the_local_system() {
    // `cargo run -p sas-local`, as the README has it; an address that cannot parse makes
    // the binary stop at once, naming the variable: proof it was the system that ran.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new(env!("CARGO"))
        .args(["run", "--quiet", "-p", "sas-local"])
        .current_dir(root)
        .env("SAS_API_ADDR", "not-an-address")
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("SAS_API_ADDR=not-an-address"), "{stderr}");
}

#[test]
fn a_worker_thread_count_it_cannot_take_stops_it_naming_the_variable() {
    for value in ["0", "two"] {
        let output = Command::new(env!("CARGO_BIN_EXE_sas-local"))
            .env("TOKIO_WORKER_THREADS", value)
            .output()
            .expect("sas-local runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("TOKIO_WORKER_THREADS={value}"))
                && !stderr.contains("panicked"),
            "a clear error, not a panic: {stderr}"
        );
    }
}
