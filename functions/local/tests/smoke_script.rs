//! The LocalStack smoke test script (`infra/localstack/smoke.sh`), run here against
//! `sas-local`, which serves the same API: the script itself is proven, though the
//! LocalStack deployment around it needs Docker.

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn the_smoke_script_sees_a_drone_delivery_processed() {
    let data = tempfile::tempdir().expect("data directory");
    let (mut child, api, _) = common::spawn(data.path());
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
