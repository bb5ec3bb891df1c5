//! The README's run command, its `--help`, an argument and a setting it cannot take; and the LocalStack smoke test script
//! (`infra/localstack/smoke.sh`), run here against `sas-local`, which serves the same
//! API, unauthenticated and with tokens: the script itself is proven, though the
//! LocalStack deployment around it needs Docker (its IAM mode runs against the stack
//! deployed on MiniStack, in `tests/tests/deployed.rs`).

mod common;

use std::path::Path;
use std::process::Command;

/// Runs `infra/localstack/smoke.sh` against `api`, with `TOKEN` set when given: its
/// exit status and its output.
fn smoke(api: &str, token: Option<&str>) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/localstack/smoke.sh");
    let mut command = Command::new("bash");
    command.arg(&script).args([api, "60"]);
    // Neither a token nor AWS credentials from the environment: the test says which.
    for variable in ["TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
        command.env_remove(variable);
    }
    if let Some(token) = token {
        command.env("TOKEN", token);
    }
    let output = command.output().expect("the script runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[test]
fn the_smoke_script_sees_a_drone_delivery_processed() {
    let data = tempfile::tempdir().expect("data directory");
    let (mut child, api, _) = common::spawn_with(data.path(), &[]);
    let (succeeded, output) = smoke(&api, None);
    let _ = child.kill();
    let _ = child.wait();
    assert!(succeeded, "{output}");
    assert!(output.contains("Processed"), "{output}");
}

/// The script's JWT mode (`AuthMode=JWT`), against sas-local requiring tokens: with a
/// token it sees the delivery Processed; without one, it stops at the 401.
#[test]
fn the_smoke_script_calls_with_its_token_when_given_one() {
    const KEY: &str = "a-development-key-for-the-smoke-test!!";
    let data = tempfile::tempdir().expect("data directory");
    let (mut child, api, _) = common::spawn_with(data.path(), &[("SAS_AUTH_DEV_KEY", KEY)]);
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
        + 600;
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &serde_json::json!({ "sub": "smoke-tester", "exp": expires }),
        &jsonwebtoken::EncodingKey::from_secret(KEY.as_bytes()),
    )
    .expect("a token");
    let with = smoke(&api, Some(&token));
    let without = smoke(&api, None);
    let _ = child.kill();
    let _ = child.wait();
    assert!(with.0 && with.1.contains("Processed"), "{}", with.1);
    assert!(
        !without.0 && without.1.contains("answered 401"),
        "{}",
        without.1
    );
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

#[test]
fn help_prints_the_settings_and_an_argument_is_refused_without_starting() {
    let run = |argument: &str| {
        Command::new(env!("CARGO_BIN_EXE_sas-local"))
            .arg(argument)
            // Were it to start, it would fail here at once, and say so.
            .env("SAS_API_ADDR", "not-an-address")
            .output()
            .expect("sas-local runs")
    };
    let help = run("--help");
    let stdout = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success(), "{help:?}");
    for setting in [
        "SAS_API_ADDR",
        "SAS_DATA_DIR",
        "SAS_DURABILITY",
        "Usage: sas-local",
    ] {
        assert!(stdout.contains(setting), "{setting} in: {stdout}");
    }
    let refused = run("--port=9000");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--port") && stderr.contains("--help") && !stderr.contains("SAS_API_ADDR"),
        "the argument named, and the system not started: {stderr}"
    );
}
