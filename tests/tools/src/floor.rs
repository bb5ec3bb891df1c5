//! The physical floor under a task: what the disk's flush of a write costs on this
//! machine now, and what a run's commits write to SQLite's WAL, counted from the
//! system calls the server makes.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// The 4 KiB blocks of a file that the disk writes back, the unit a flush pays by.
pub const BLOCK: u64 = 4096;

/// Where a probe's writes land, each flushed before the next is made. On a disk that
/// writes back whole blocks, a flush's price is set by the blocks its write touches
/// and by whether the file's blocks or size must change, more than by its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Over the same bytes each time, at the file's start: one block while the write
    /// holds in one, the least a write of its size can cost.
    InPlace,
    /// One after another through a file written whole before: SQLite's WAL, which is
    /// written again from its start after a checkpoint.
    Reused,
    /// One after another through a file whose length was set but never written, its
    /// blocks allocated by the writes: a journal made with `set_len`, as fjall's is.
    Sparse,
    /// One after another at the end of a file that grows with each.
    Appended,
}

impl Placement {
    pub const ALL: [Self; 4] = [Self::InPlace, Self::Reused, Self::Sparse, Self::Appended];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::InPlace => "in-place",
            Self::Reused => "reused",
            Self::Sparse => "sparse",
            Self::Appended => "appended",
        }
    }

    /// Where the `round`th write of `bytes` is made.
    fn offset(self, bytes: usize, round: usize) -> u64 {
        match self {
            Self::InPlace => 0,
            Self::Reused | Self::Sparse | Self::Appended => (bytes * round) as u64,
        }
    }

    /// The blocks a write of `bytes` touches on average over `rounds` writes.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn blocks_per_write(self, bytes: usize, rounds: usize) -> f64 {
        let touched: u64 = (0..rounds)
            .map(|round| {
                let start = self.offset(bytes, round);
                let end = start + bytes.max(1) as u64 - 1;
                end / BLOCK - start / BLOCK + 1
            })
            .sum();
        touched as f64 / rounds.max(1) as f64
    }
}

/// The median time of `rounds` flushes (`fdatasync`) of a `bytes`-long write made
/// over a file's old blocks in `dir` ([`Placement::InPlace`]).
///
/// # Errors
/// When the file cannot be made, written or flushed.
pub fn flush_time(dir: &Path, bytes: usize, rounds: usize) -> std::io::Result<Duration> {
    let mut times = flush_times(dir, bytes, rounds, Duration::ZERO, Placement::InPlace)?;
    times.sort_unstable();
    Ok(times.get(times.len() / 2).copied().unwrap_or_default())
}

/// The times of `rounds` flushes (`fdatasync`) of `bytes`-long writes made in a new
/// file in `dir` where `placement` says, each `pause` after the one before, in the
/// order they were made: the disk's slow spells show as runs of slow flushes.
///
/// # Errors
/// When the file cannot be made, written or flushed.
pub fn flush_times(
    dir: &Path,
    bytes: usize,
    rounds: usize,
    pause: Duration,
    placement: Placement,
) -> std::io::Result<Vec<Duration>> {
    let path = dir.join(format!("flush-probe-{bytes}-{}", placement.name()));
    let file = File::create(&path)?;
    let write = vec![0x5a_u8; bytes];
    match placement {
        Placement::InPlace => file.write_all_at(&write, 0)?,
        Placement::Reused => file.write_all_at(&vec![0; bytes * rounds], 0)?,
        Placement::Sparse => file.set_len((bytes * rounds) as u64)?,
        Placement::Appended => {}
    }
    file.sync_all()?;
    let mut times = Vec::with_capacity(rounds);
    for round in 0..rounds {
        std::thread::sleep(pause);
        let started = Instant::now();
        file.write_all_at(&write, placement.offset(bytes, round))?;
        file.sync_data()?;
        times.push(started.elapsed());
    }
    std::fs::remove_file(&path)?;
    Ok(times)
}

/// The `quantile` (0 to 1) of the sums of `run` flush times one after another in
/// `times`: what the flushes of a task whose `run` commits follow each other cost, in
/// the disk's slow spells as in its quick ones. Zero when `times` holds fewer.
#[must_use]
pub fn quantile_of_runs(times: &[Duration], run: usize, quantile: f64) -> Duration {
    let mut sums: Vec<Duration> = times.windows(run.max(1)).map(|w| w.iter().sum()).collect();
    sums.sort_unstable();
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let at = ((sums.len() as f64 * quantile) as usize).min(sums.len().saturating_sub(1));
    sums.get(at).copied().unwrap_or_default()
}

/// What a run wrote to SQLite's WAL, from the output of `strace -f -y -xx -s 24 -e
/// trace=pwrite64,fdatasync,fsync` ([`STRACE_OPTIONS`]): the bytes written to the WAL
/// file, its commits and flushes, and its frames by the kind of page each holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WalWrites {
    pub bytes: u64,
    pub writes: u64,
    /// Commits: frames whose header gives the database's size, each a transaction's last.
    pub commits: u64,
    /// Flushes of the WAL: one a commit, and one before each checkpoint.
    pub flushes: u64,
    /// Of the flushes, those made with `fsync`, which flushes the file's timestamps
    /// too, where `fdatasync` does not (SQLite as built here, `.cargo/config.toml`).
    pub fsyncs: u64,
    /// Commits whose thread wrote the WAL again, or stopped, before flushing it.
    pub unflushed_commits: u64,
    pub frames: Frames,
}

/// The options strace needs for [`WalWrites::from_strace`]: each descriptor's path,
/// and a written buffer's first 24 bytes in hexadecimal (a frame's header, which names
/// its page, and the first byte of the page, which says its kind).
pub const STRACE_OPTIONS: &str = "-f -qq -y -xx -s 24 -e trace=pwrite64,fdatasync,fsync";

/// WAL frames by the kind of page they hold (the first byte of a b-tree page).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Frames {
    /// Page 1: the database's header (its free-page list) and the schema's root.
    pub header: u64,
    pub table_leaf: u64,
    pub table_interior: u64,
    pub index_leaf: u64,
    pub index_interior: u64,
    /// A row's overflow, or a page of the free list.
    pub other: u64,
}

impl Frames {
    fn count(&mut self, page: u32, first_byte: Option<u8>) {
        let kind = match (page, first_byte) {
            (1, _) => &mut self.header,
            (_, Some(0x0d)) => &mut self.table_leaf,
            (_, Some(0x05)) => &mut self.table_interior,
            (_, Some(0x0a)) => &mut self.index_leaf,
            (_, Some(0x02)) => &mut self.index_interior,
            _ => &mut self.other,
        };
        *kind += 1;
    }

    #[must_use]
    pub fn total(&self) -> u64 {
        self.header
            + self.table_leaf
            + self.table_interior
            + self.index_leaf
            + self.index_interior
            + self.other
    }
}

/// SQLite writes a frame as two writes: its 24-byte header (the page's number, then
/// the database's size in pages when the frame ends a commit, else 0), then its page.
const FRAME_HEADER: u64 = 24;

impl WalWrites {
    /// Counts the WAL's writes, frames and flushes in strace's lines (`-y` names each
    /// file descriptor's path, so the WAL's are those ending in `-wal`).
    #[must_use]
    pub fn from_strace(trace: &str) -> Self {
        /// What one thread has written and not yet followed up.
        #[derive(Default)]
        struct Thread {
            /// The page whose frame header was its last write.
            frame_of_page: Option<u32>,
            /// A commit's frame written, and the WAL not flushed since.
            unflushed: bool,
        }
        let mut counted = Self::default();
        let mut threads: HashMap<String, Thread> = HashMap::new();
        for (thread, call) in whole_calls(trace) {
            let Some(call) = Call::parse(&call) else {
                continue;
            };
            if !call.path.ends_with(b"-wal") {
                continue;
            }
            let thread = threads.entry(thread).or_default();
            match call.name {
                "pwrite64" => {
                    let Some(written) = call.result else { continue };
                    counted.bytes += written;
                    counted.writes += 1;
                    if written == FRAME_HEADER {
                        let word = |at: usize| {
                            call.data
                                .get(at..at + 4)
                                .and_then(|word| word.try_into().ok())
                                .map(u32::from_be_bytes)
                        };
                        counted.unflushed_commits += u64::from(thread.unflushed);
                        thread.frame_of_page = word(0);
                        thread.unflushed = word(4).is_some_and(|size| size > 0);
                        counted.commits += u64::from(thread.unflushed);
                    } else if let Some(page) = thread.frame_of_page.take() {
                        counted.frames.count(page, call.data.first().copied());
                    }
                }
                name => {
                    counted.flushes += 1;
                    counted.fsyncs += u64::from(name == "fsync");
                    thread.unflushed = false;
                }
            }
        }
        counted.unflushed_commits += threads
            .values()
            .map(|t| u64::from(t.unflushed))
            .sum::<u64>();
        counted
    }

    /// Bytes of WAL a commit wrote, on average.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn bytes_per_commit(&self) -> f64 {
        self.bytes as f64 / self.commits.max(1) as f64
    }
}

/// strace's lines with `-f`, each as (its thread, its call whole): a call that
/// another thread's call interrupted is one line `NAME(ARGS <unfinished ...>` and,
/// later, another `<... NAME resumed>) = RESULT`, joined here.
fn whole_calls(trace: &str) -> impl Iterator<Item = (String, String)> + '_ {
    let mut unfinished: HashMap<String, String> = HashMap::new();
    trace.lines().filter_map(move |line| {
        let (thread, call) = match line.split_once(' ') {
            Some((pid, call)) if pid.bytes().all(|b| b.is_ascii_digit()) => {
                (pid, call.trim_start())
            }
            _ => ("", line),
        };
        if let Some(start) = call.strip_suffix(" <unfinished ...>") {
            unfinished.insert(thread.to_owned(), start.to_owned());
            return None;
        }
        let whole = match call.split_once(" resumed>") {
            Some((_, rest)) if call.starts_with("<... ") => {
                format!("{}{rest}", unfinished.remove(thread)?)
            }
            _ => call.to_owned(),
        };
        Some((thread.to_owned(), whole))
    })
}

/// One system call in strace's output: its name, the path of its file descriptor, the
/// start of the buffer it wrote (if any) and its result.
struct Call {
    name: &'static str,
    path: Vec<u8>,
    data: Vec<u8>,
    result: Option<u64>,
}

impl Call {
    fn parse(line: &str) -> Option<Self> {
        let (name, rest) = ["pwrite64(", "fdatasync(", "fsync("]
            .into_iter()
            .find_map(|call| Some((&call[..call.len() - 1], line.split_once(call)?.1)))?;
        let (_, rest) = rest.split_once('<')?;
        let (path, rest) = rest.split_once('>')?;
        let data = rest
            .split_once('"')
            .and_then(|(_, rest)| rest.split_once('"'))
            .map_or(&[][..], |(data, _)| data.as_bytes());
        // After the call's closing parenthesis, `= RESULT`, aligned with spaces or not.
        let result = line
            .rsplit_once(')')
            .and_then(|(_, after)| after.trim_start().strip_prefix('='))
            .and_then(|result| result.split_whitespace().next()?.parse().ok());
        Some(Self {
            name,
            path: unescape(path.as_bytes()),
            data: unescape(data),
            result,
        })
    }
}

/// strace's text of bytes, its `\xNN` escapes decoded.
fn unescape(text: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text;
    while let Some((&first, tail)) = rest.split_first() {
        let escaped = tail
            .strip_prefix(b"x")
            .filter(|_| first == b'\\')
            .and_then(|hex| std::str::from_utf8(hex.get(..2)?).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        if let Some(byte) = escaped {
            bytes.push(byte);
            rest = &tail[3..];
        } else {
            bytes.push(first);
            rest = tail;
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wals_commits_flushes_and_frames_are_counted_and_other_files_are_not() {
        let db = r"\x2f\x64\x62"; // "/db"
        let wal = format!(r"{db}\x2d\x77\x61\x6c"); // "/db-wal"
        let header = |page: u8, size: u8| {
            format!(
                "1 pwrite64(7<{wal}>, \"\\x00\\x00\\x00\\x{page:02x}\\x00\\x00\\x00\\x{size:02x}\"..., 24, 0) = 24"
            )
        };
        let page = |first: u8| {
            format!("1 pwrite64(7<{wal}>, \"\\x{first:02x}\\x00\"..., 1024, 24) = 1024")
        };
        let flush = |call: &str| format!("1 {call}(7<{wal}>) = 0");
        let trace = [
            header(1, 0),
            page(0x00),
            header(2, 0),
            page(0x0d),
            header(3, 0),
            page(0x0a),
            header(4, 9),
            page(0x00),
            flush("fsync"),
            // A checkpoint's flush, and a write to the database itself.
            flush("fdatasync"),
            format!("1 pwrite64(8<{db}>, \"\\x0d\"..., 1024, 0) = 1024"),
            header(5, 9),
            page(0x05),
            flush("fdatasync"),
        ]
        .join("\n");
        let counted = WalWrites::from_strace(&trace);
        assert_eq!(
            counted.frames,
            Frames {
                header: 1,
                table_leaf: 1,
                table_interior: 1,
                index_leaf: 1,
                index_interior: 0,
                other: 1,
            }
        );
        assert_eq!(
            (
                counted.commits,
                counted.flushes,
                counted.fsyncs,
                counted.writes,
                counted.bytes
            ),
            (2, 3, 1, 10, 5 * (24 + 1024))
        );
        assert!((counted.bytes_per_commit() - 2620.0).abs() < f64::EPSILON);
        assert_eq!(counted.unflushed_commits, 0);
    }

    #[test]
    fn interrupted_calls_are_joined_and_a_commit_its_thread_left_unflushed_is_counted() {
        let wal = r"\x2f\x64\x62\x2d\x77\x61\x6c"; // "/db-wal"
        let header =
            |page: u8| format!(r#"7<{wal}>, "\x00\x00\x00\x{page:02x}\x00\x00\x00\x09"..., 24, 0"#);
        let page =
            |first: u8| format!(r#"1 pwrite64(7<{wal}>, "\x{first:02x}\x00"..., 1024, 24) = 1024"#);
        let trace = [
            format!("1 pwrite64({} <unfinished ...>", header(2)),
            // Another thread's flush (the checkpointer's) is not this commit's.
            format!("2 fdatasync(7<{wal}>) = 0"),
            // strace aligns the pid's column: two spaces here.
            "1  <... pwrite64 resumed>) = 24".to_owned(),
            page(0x0d),
            // The next commit, the one before not flushed by its thread.
            format!("1 pwrite64({}) = 24", header(3)),
            page(0x0a),
            format!("1 fdatasync(7<{wal}>)                      = 0"),
        ]
        .join("\n");
        let counted = WalWrites::from_strace(&trace);
        assert_eq!(
            (
                counted.commits,
                counted.unflushed_commits,
                counted.flushes,
                counted.writes,
                counted.bytes
            ),
            (2, 1, 2, 4, 2 * (24 + 1024))
        );
        assert_eq!(
            (counted.frames.table_leaf, counted.frames.index_leaf),
            (1, 1)
        );
    }

    #[test]
    fn a_tasks_flushes_are_summed_one_after_another_so_a_slow_spell_counts_whole() {
        let ms = Duration::from_millis;
        // Quick flushes of 1 ms, and a slow spell of three of 5 ms.
        let times = [1, 1, 1, 5, 5, 5, 1, 1, 1, 1].map(ms);
        assert_eq!(quantile_of_runs(&times, 3, 0.0), ms(3));
        assert_eq!(quantile_of_runs(&times, 3, 0.99), ms(15));
        assert_eq!(quantile_of_runs(&times, 3, 0.5), ms(7));
        assert_eq!(quantile_of_runs(&times, 11, 0.99), Duration::ZERO);
    }

    #[test]
    fn a_flush_probe_measures_a_time_in_every_placement_and_leaves_no_file() {
        let dir = tempfile::tempdir().expect("dir");
        assert!(flush_time(dir.path(), 4096, 3).expect("probe") > Duration::ZERO);
        for placement in Placement::ALL {
            let times = flush_times(dir.path(), 500, 3, Duration::ZERO, placement).expect("probe");
            assert_eq!(times.len(), 3, "{placement:?}");
            assert!(times.iter().all(|t| *t > Duration::ZERO), "{placement:?}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    }

    #[test]
    fn writes_one_after_another_touch_the_blocks_they_cross() {
        // 3,000 bytes at 0, 3,000, 6,000 and 9,000: blocks 0; 0-1; 1-2; 2.
        assert!((Placement::Reused.blocks_per_write(3000, 4) - 1.5).abs() < f64::EPSILON);
        assert!((Placement::InPlace.blocks_per_write(3000, 4) - 1.0).abs() < f64::EPSILON);
        assert!((Placement::Appended.blocks_per_write(4096, 3) - 1.0).abs() < f64::EPSILON);
        assert!((Placement::InPlace.blocks_per_write(8192, 2) - 2.0).abs() < f64::EPSILON);
    }
}
