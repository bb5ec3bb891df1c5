//! The `sas-local` binary run as a person runs it: on free ports, with a data
//! directory of the test's, and settings of the test's in its environment.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A `sas-local` process, killed when dropped.
pub struct Local {
    child: Child,
    /// The API's `host:port`.
    pub api: String,
    /// The mock services' `host:port`.
    pub mock: String,
}

impl Local {
    /// Starts `binary` with its defaults (the built-in workflows, the mock
    /// services), as `cargo run -p sas-local` does, but for its ports, its data in
    /// `data`, and the settings `settings`.
    ///
    /// # Errors
    /// When it does not start, or says no address on its first line.
    pub fn start(binary: &Path, data: &Path, settings: &[(&str, &str)]) -> Result<Self, String> {
        let mut child = Command::new(binary)
            .env("SAS_DATA_DIR", data)
            .env("SAS_API_ADDR", "127.0.0.1:0")
            .env("SAS_MOCK_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "error")
            .envs(settings.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("sas-local does not start: {e}"))?;
        let stdout = child.stdout.take().ok_or("no piped stdout")?;
        // Made before the ready line is read, so that a failure to read it stops it.
        let mut local = Self {
            child,
            api: String::new(),
            mock: String::new(),
        };
        let mut ready = String::new();
        BufReader::new(stdout)
            .read_line(&mut ready)
            .map_err(|e| format!("sas-local's ready line: {e}"))?;
        let field = |name: &str| {
            ready
                .split_whitespace()
                .find_map(|f| f.strip_prefix(&format!("{name}=http://")))
                .map(str::to_owned)
                .ok_or_else(|| format!("sas-local said no {name} address: {ready:?}"))
        };
        local.api = field("api")?;
        local.mock = field("mock")?;
        Ok(local)
    }

    /// Stops it as Ctrl-C does, and waits for it to exit.
    pub fn stop(mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        let _ = self.child.wait();
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
