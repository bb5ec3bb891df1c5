//! What the measurement tools share: the requests moto's recorder wrote, and the
//! physical floor under a task.

pub mod floor;
pub mod recording;

/// How the system under measure takes a submission: `sas-local`'s `SAS_INGESTION`,
/// the stack's `IngestionMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Ingestion {
    /// The task written before the answer.
    Direct,
    /// The request queued (committed) before the answer; the task created after.
    Buffered,
}

impl Ingestion {
    /// Its name on a command line and in a report.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Buffered => "buffered",
        }
    }
}

/// A report's first line: when it was measured, from which checkout (its commit as
/// the tool runs, with `-dirty` for changes not committed: what `bench` builds the
/// server from; a tool built before a change does not know it), on how many CPUs and
/// with what guest halt polling (a VM's idle vCPUs polling before they halt: at one
/// client every engine's speed moves by a third with it,
/// `bench/halt-polling-2026-11-29.log`), and the command, its words quoted as a shell
/// would need them, so that a log kept in `bench/` says where it came from.
#[must_use]
pub fn provenance() -> String {
    let when = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    let checkout = std::process::Command::new("git")
        .args([
            "describe",
            "--always",
            "--dirty",
            "--abbrev=7",
            "--exclude=*",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map_or_else(
            || "unknown".to_owned(),
            |output| String::from_utf8_lossy(&output.stdout).trim().to_owned(),
        );
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let halt_polling =
        std::fs::read_to_string("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
            .map(|ns| format!(" guest_halt_poll_ns={}", ns.trim()))
            .unwrap_or_default();
    let mut arguments = std::env::args();
    let program = arguments.next().map_or_else(String::new, |path| {
        std::path::Path::new(&path)
            .file_name()
            .map_or(path.clone(), |name| name.to_string_lossy().into_owned())
    });
    let words: Vec<String> = std::iter::once(program).chain(arguments).collect();
    // Only a NUL, which no argument holds, cannot be quoted.
    let command =
        shlex::try_join(words.iter().map(String::as_str)).unwrap_or_else(|_| words.join(" "));
    format!("# {when} checkout={checkout} cpus={cpus}{halt_polling} command: {command}")
}
