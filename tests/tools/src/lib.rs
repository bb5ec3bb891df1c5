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

/// The sum of the fields `at` of process `pid`'s `/proc/PID/stat` (`self`: this
/// one), counted from 0 after the command's closing parenthesis (a command may hold
/// spaces and parentheses); a field missing or unreadable counts 0.
#[must_use]
pub fn process_stat_sum(pid: &str, at: &[usize]) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    at.iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum()
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

#[cfg(test)]
mod tests {
    use super::process_stat_sum;

    /// A child whose command holds spaces and a closing parenthesis, which the fields
    /// are counted after: its parent's pid (field 1) is read as this process's.
    #[test]
    fn a_process_stat_field_is_counted_after_the_command_whatever_it_holds() {
        let dir = tempfile::tempdir().expect("a directory");
        let program = dir.path().join("a) b c");
        std::fs::copy("/bin/sleep", &program).expect("a copy of sleep");
        let mut child = std::process::Command::new(&program)
            .arg("5")
            .spawn()
            .expect("the child");
        let pid = child.id().to_string();
        // Until its `exec`, the child's command is this test's.
        let started = std::time::Instant::now();
        while std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .ok()
            .as_deref()
            != Some("a) b c\n")
        {
            assert!(
                started.elapsed().as_secs() < 5,
                "the child never ran its program"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let parent = process_stat_sum(&pid, &[1]);
        child.kill().expect("killed");
        let _ = child.wait();
        assert_eq!(parent, u64::from(std::process::id()));
        assert_eq!(process_stat_sum("0", &[1]), 0, "no such process");
    }
}
