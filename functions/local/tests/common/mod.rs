//! What the tests that run the `sas-local` binary share.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// `sas-local` on `data` and free ports, with `variables` set beside those it always
/// has (or instead of them), ready to be spawned.
pub fn command(data: &Path, variables: &[(&str, &str)]) -> Command {
    let workflows = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/workflows");
    let mut command = Command::new(env!("CARGO_BIN_EXE_sas-local"));
    command
        .env("SAS_DATA_DIR", data)
        .env("SAS_WORKFLOWS_DIR", workflows)
        .env("SAS_API_ADDR", "127.0.0.1:0")
        .env("SAS_MOCK_ADDR", "127.0.0.1:0")
        .env("SAS_SUPERVISOR_INTERVAL", "200ms")
        .env("RUST_LOG", "error")
        .envs(variables.iter().copied());
    command
}

/// Starts [`command`]; returns the child and the base URLs of its API and of its
/// mock services.
pub fn spawn_with(data: &Path, variables: &[(&str, &str)]) -> (Child, String, String) {
    let mut child = command(data, variables)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("sas-local starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("a ready line");
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
            .to_owned()
    };
    (child, field("api"), field("mock"))
}
