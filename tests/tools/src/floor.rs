//! The physical floor under a task: what the disk's flush of a write costs on this
//! machine now, and what a run's commits write to SQLite's WAL, counted from the
//! system calls the server makes.

use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// The median time of `rounds` flushes (`fdatasync`) of a `bytes`-long write made
/// over a file's old blocks in `dir`, as SQLite's WAL is written once it has grown.
///
/// # Errors
/// When the file cannot be made, written or flushed.
pub fn flush_time(dir: &Path, bytes: usize, rounds: usize) -> std::io::Result<Duration> {
    let path = dir.join(format!("flush-probe-{bytes}"));
    let file = File::create(&path)?;
    let block = vec![0x5a_u8; bytes];
    file.write_all_at(&block, 0)?;
    file.sync_all()?;
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        file.write_all_at(&block, 0)?;
        file.sync_data()?;
        times.push(started.elapsed());
    }
    std::fs::remove_file(&path)?;
    times.sort_unstable();
    Ok(times.get(times.len() / 2).copied().unwrap_or_default())
}

/// What a run wrote to SQLite's WAL, from `strace -f -y -e trace=pwrite64,fdatasync,fsync`'s
/// output: the bytes written to the WAL file and the flushes of it (one a commit).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WalWrites {
    pub bytes: u64,
    pub writes: u64,
    pub commits: u64,
}

impl WalWrites {
    /// Counts the WAL's writes and flushes in strace's lines (`-y` names each file
    /// descriptor's path, so the WAL's are those ending in `-wal>`).
    #[must_use]
    pub fn from_strace(trace: &str) -> Self {
        let mut counted = Self::default();
        for line in trace.lines().filter(|l| l.contains("-wal>")) {
            if line.contains("pwrite64(") {
                let written = line
                    .rsplit_once(") = ")
                    .and_then(|(_, result)| result.trim().parse::<u64>().ok());
                if let Some(written) = written {
                    counted.bytes += written;
                    counted.writes += 1;
                }
            } else if line.contains("fdatasync(") || line.contains("fsync(") {
                counted.commits += 1;
            }
        }
        counted
    }

    /// Bytes of WAL a commit wrote, on average.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn bytes_per_commit(&self) -> f64 {
        self.bytes as f64 / self.commits.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wals_writes_and_flushes_are_counted_and_other_files_are_not() {
        let trace = "\
4242 pwrite64(7</tmp/x/state.db-wal>, \"\"..., 24, 4096) = 24
4242 pwrite64(7</tmp/x/state.db-wal>, \"\"..., 4096, 4120) = 4096
4242 pwrite64(5</tmp/x/state.db>, \"\"..., 4096, 0) = 4096
4242 fdatasync(7</tmp/x/state.db-wal>) = 0
4243 fsync(5</tmp/x/state.db>) = 0
4242 pwrite64(7</tmp/x/state.db-wal>, \"\"..., 4120, 8216) = 4120
4242 fdatasync(7</tmp/x/state.db-wal>) = 0
";
        let counted = WalWrites::from_strace(trace);
        assert_eq!(
            counted,
            WalWrites {
                bytes: 24 + 4096 + 4120,
                writes: 3,
                commits: 2
            }
        );
        assert!((counted.bytes_per_commit() - 4120.0).abs() < f64::EPSILON);
    }

    #[test]
    fn a_flush_probe_measures_a_time_and_leaves_no_file() {
        let dir = tempfile::tempdir().expect("dir");
        let time = flush_time(dir.path(), 4096, 3).expect("probe");
        assert!(time > Duration::ZERO);
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    }
}
