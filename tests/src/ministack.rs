//! The real stack on [MiniStack](https://pypi.org/project/ministack/): `infra/template.yaml`
//! deployed with `sam deploy`, the functions' debug binaries laid out as `sam build`
//! lays them out, run by the emulator as Lambda functions through their real triggers
//! (the HTTP API, the SQS event-source mappings, the EventBridge schedule), each under
//! its execution role with IAM enforced (`AUTH=true`).
//!
//! Where MiniStack is wrong and AWS right, the harness works around it, never the
//! template (README, "The stack deployed on MiniStack"); the deployed copy of the
//! template ([`emulator_template`], for SAM's and the CDK app's alike):
//! - leaves out the alarms on metric math (`Metrics:`), which make the stack roll back;
//! - leaves out the topic's and the queues' TLS-only denials: MiniStack is served over
//!   plain HTTP here, and it evaluates `aws:SecureTransport`;
//! - grants `sqs:SendMessageBatch` wherever the template grants `sqs:SendMessage`, on
//!   the same resources: MiniStack asks for the one where AWS authorises a batch send as
//!   the other;
//! - grants the `scheduler:` actions granted on the stack's schedule group's schedules on
//!   the default group's too: MiniStack authorises a call on a schedule as on
//!   `schedule/default/NAME`, whatever its group;
//! - writes an event-source mapping's `ScalingConfig.MaximumConcurrency` given by a
//!   `!Ref` as the parameter's number: MiniStack stores it as a string, which stops
//!   every SQS poller.
//!
//! This module holds the emulator's server; beside it, each a module of its own:
//! [`client`], requests signed with SigV4; [`template`], the template as MiniStack can
//! deploy it; [`deploy`], the stack deployed with SAM's CLI or the CDK's; [`calls`],
//! what a test asks of the deployed stack.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use aws_types::SdkConfig;
use sas_lambda::sdk;

use crate::aws::{free_port, repository};

mod calls;
mod client;
mod deploy;
mod template;

pub use client::{AccessKey, Answer, Client};
pub use deploy::{Deployment, lay_out_as_cargo_lambda, sam_cli};
pub use template::{deployable_template, emulator_template, emulator_template_json};

/// The region the stack is deployed in.
pub const REGION: &str = "us-east-1";
/// The credentials of the emulator's account root, which deploys and drives the stack.
const ACCESS_KEY: &str = "test";

/// The functions deployed: their logical id in the template and their binary (the
/// submission's twice, its reads a function of their own).
pub const FUNCTIONS: [(&str, &str); 5] = [
    ("SubmissionFunction", "sas-submission"),
    ("ReadFunction", "sas-submission"),
    ("SchedulerFunction", "sas-scheduler"),
    ("AgentFunction", "sas-agent"),
    ("SupervisorFunction", "sas-supervisor"),
];

/// A MiniStack server on a free port of 127.0.0.1 with IAM enforced, its temporary files
/// (and the functions' code) under a directory of its own; stopped, with every function
/// it started, when dropped.
pub struct MiniStack {
    child: Child,
    /// Its URL, for `AWS_ENDPOINT_URL`.
    pub endpoint: String,
    dir: tempfile::TempDir,
}

impl MiniStack {
    /// Starts MiniStack: `$SAS_MINISTACK`, or the `ministack` of the repository's
    /// `.venv-ministack` that `./tests/run` installs.
    ///
    /// # Panics
    /// With instructions, when MiniStack is not installed or does not start.
    #[must_use]
    pub fn start() -> Self {
        let binary = std::env::var("SAS_MINISTACK").map_or_else(
            |_| repository().join(".venv-ministack/bin/ministack"),
            PathBuf::from,
        );
        assert!(
            binary.exists(),
            "MiniStack is not installed at {}: run ./tests/run, which installs it into \
             .venv-ministack, or `python3 -m venv .venv-ministack && .venv-ministack/bin/pip \
             install -r tests/requirements-ministack.txt`, or set SAS_MINISTACK to a ministack binary",
            binary.display()
        );
        let port = free_port();
        let endpoint = format!("http://127.0.0.1:{port}");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).expect("MiniStack's TMPDIR");
        let log = std::fs::File::create(dir.path().join("ministack.log")).expect("a log file");
        let child = Command::new(&binary)
            .env("GATEWAY_PORT", port.to_string())
            .env("BIND_HOST", "127.0.0.1")
            .env("MINISTACK_HOST", "127.0.0.1")
            .env("AWS_ENDPOINT_URL", &endpoint)
            .env("AUTH", "true")
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            // Its own process group, so that dropping it stops the functions it started.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let ministack = Self {
            child,
            endpoint,
            dir,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "MiniStack did not listen on port {port} within 60 s: {}",
                ministack.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        ministack
    }

    /// The last lines MiniStack logged, for failure messages.
    #[must_use]
    pub fn log_tail(&self) -> String {
        tail(&self.dir.path().join("ministack.log"), 40)
    }

    /// An SDK configuration pointed at MiniStack with the root's credentials, built as
    /// the functions build theirs.
    ///
    /// # Panics
    /// Never: the configuration is complete.
    #[must_use]
    pub fn sdk(&self) -> SdkConfig {
        sdk::sdk_config(|name| match name {
            "AWS_REGION" => Some(REGION.into()),
            "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY" => Some(ACCESS_KEY.into()),
            "AWS_ENDPOINT_URL" => Some(self.endpoint.clone()),
            _ => None,
        })
        .expect("a complete SDK configuration")
    }
}

impl Drop for MiniStack {
    fn drop(&mut self) {
        // The whole group: MiniStack and the functions' processes it started.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
