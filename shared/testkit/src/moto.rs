//! A moto server for the tests of the AWS adapters: started on a free port of
//! 127.0.0.1, stopped when dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The directory of the repository.
fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A free port of 127.0.0.1.
#[must_use]
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A moto server on a free port of 127.0.0.1, stopped when dropped.
pub struct Moto {
    child: Child,
    /// Its URL, for `AWS_ENDPOINT_URL`.
    pub endpoint: String,
}

impl Moto {
    /// Its process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts moto: `$SAS_MOTO_SERVER`, or the `moto_server` of the repository's
    /// `.venv` that `./tests/run` installs.
    ///
    /// # Panics
    /// With instructions, when moto is not installed or does not start.
    #[must_use]
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts moto with these environment variables (`MOTO_RECORDER_FILEPATH`, say).
    ///
    /// # Panics
    /// With instructions, when moto is not installed or does not start.
    #[must_use]
    pub fn start_with(environment: &[(&str, &str)]) -> Self {
        Self::spawn(environment, false)
    }

    /// Starts moto serving one request at a time. DynamoDB applies an item's
    /// conditional write atomically; moto's threaded server does not (two UpdateItems
    /// on one item can both pass their condition before either writes), so writes
    /// racing on purpose are tested on this one.
    ///
    /// # Panics
    /// With instructions, when moto is not installed or does not start.
    #[must_use]
    pub fn start_serial() -> Self {
        Self::spawn(&[], true)
    }

    fn spawn(environment: &[(&str, &str)], serial: bool) -> Self {
        /// moto's own server (`moto/server.py`), with werkzeug's threads off.
        const SERIAL: &str = "import sys
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
run_simple(sys.argv[1], int(sys.argv[2]), DomainDispatcherApplication(create_backend_app), threaded=False)";
        let binary = std::env::var("SAS_MOTO_SERVER").map_or_else(
            |_| repository().join(".venv/bin/moto_server"),
            PathBuf::from,
        );
        assert!(
            binary.exists(),
            "moto is not installed at {}: run ./tests/run, which installs it into .venv, \
             or `python3 -m venv .venv && .venv/bin/pip install 'moto[server]==5.2.5'`, \
             or set SAS_MOTO_SERVER to a moto_server binary",
            binary.display()
        );
        let port = free_port();
        let port_text = port.to_string();
        let mut command = if serial {
            // The Python of moto's environment, beside its moto_server.
            let mut command = Command::new(binary.with_file_name("python"));
            command.args(["-c", SERIAL, "127.0.0.1", &port_text]);
            command
        } else {
            let mut command = Command::new(&binary);
            command.args(["-H", "127.0.0.1", "-p", &port_text]);
            command
        };
        let child = command
            .env("MOTO_PORT", &port_text)
            .envs(environment.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let moto = Self {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "moto did not listen on port {port} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        moto
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
