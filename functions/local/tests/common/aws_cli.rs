//! The AWS CLI and boto3 as a person runs them against `sas-local` (included by the
//! tests of Step Functions' API, by its path).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The repository's root.
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A tool of the repository's `.venv` (`./tests/run` installs them from
/// `tests/requirements.txt`), or `$SAS_PYTHON`'s beside it.
pub fn tool(name: &str) -> PathBuf {
    let bin = std::env::var("SAS_PYTHON").map_or_else(
        |_| repository().join(".venv/bin"),
        |python| Path::new(&python).with_file_name(""),
    );
    let tool = bin.join(name);
    assert!(
        tool.exists(),
        "no {} : run ./tests/run, which installs boto3 and the AWS CLI into .venv, or \
         `.venv/bin/pip install -r tests/requirements.txt`, or set SAS_PYTHON",
        tool.display()
    );
    tool
}

/// `aws stepfunctions` with `arguments` against `api`, as a person runs it: what it
/// prints, read as JSON (`null` where it prints nothing). The `sync-` host prefix of
/// `StartSyncExecution` and `TestState` is turned off, as at any address.
pub fn aws(api: &str, arguments: &[&str]) -> Value {
    let ran = Command::new(tool("aws"))
        .args(["stepfunctions", "--endpoint-url", api])
        .args(arguments)
        .env("AWS_ACCESS_KEY_ID", "any")
        .env("AWS_SECRET_ACCESS_KEY", "any")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_DISABLE_HOST_PREFIX_INJECTION", "true")
        .output()
        .expect("the AWS CLI runs");
    assert!(
        ran.status.success(),
        "aws stepfunctions {arguments:?}: {}",
        String::from_utf8_lossy(&ran.stderr)
    );
    if ran.stdout.iter().all(u8::is_ascii_whitespace) {
        return Value::Null;
    }
    serde_json::from_slice(&ran.stdout).expect("the CLI prints JSON")
}

/// The execution `arn` once it has ended, as `describe-execution` prints it.
pub async fn ended(api: &str, arn: &str) -> Value {
    for _ in 0..200 {
        let described = aws(api, &["describe-execution", "--execution-arn", arn]);
        if described["status"] != "RUNNING" {
            return described;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{arn} did not end");
}
