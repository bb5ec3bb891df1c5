//! The floor under a task: the WAL a task's commits write (under strace), the disk's
//! flushes and a loopback round trip probed each round; and `bench flush`.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use sas_tools::Ingestion;
use sas_tools::floor::{
    Placement, STRACE_OPTIONS, WalWrites, flush_time, flush_times, quantile_of_runs,
};

use super::run::{Load, Mode, measure};
use super::server::{Durability, Launch, STEPS, Server, Services};
use super::stats::{median, quantile};

/// A task's WAL at concurrency 1, counted from the system calls of a run under strace.
pub(super) struct TaskWal {
    pub(super) writes: WalWrites,
    /// The tasks the run made.
    tasks: u64,
}

impl TaskWal {
    #[allow(clippy::cast_precision_loss)]
    pub(super) fn per_task(&self, n: u64) -> f64 {
        n as f64 / self.tasks.max(1) as f64
    }

    #[allow(clippy::cast_precision_loss)]
    pub(super) fn per_commit(&self, n: u64) -> f64 {
        n as f64 / self.writes.commits.max(1) as f64
    }

    pub(super) fn commits_per_task(&self) -> f64 {
        self.per_task(self.writes.commits)
    }

    /// Its `wal` line's words after the engine's name.
    pub(super) fn words(&self) -> String {
        format!(
            "commits_per_task={:.2} flushes_per_task={:.2} fsyncs_per_task={:.2} wal_bytes_per_commit={:.0} wal_kb_per_task={:.1} wal_writes_per_commit={:.2} {}",
            self.commits_per_task(),
            self.per_task(self.writes.flushes),
            self.per_task(self.writes.fsyncs),
            self.writes.bytes_per_commit(),
            self.per_task(self.writes.bytes) / 1024.0,
            self.per_commit(self.writes.writes),
            self.frames_per_commit(),
        )
    }

    /// The frames a commit wrote, by the kind of page each held, as words of a line.
    fn frames_per_commit(&self) -> String {
        let frames = &self.writes.frames;
        [
            ("frames_per_commit", frames.total()),
            ("header_page", frames.header),
            ("table_leaf", frames.table_leaf),
            ("table_interior", frames.table_interior),
            ("index_leaf", frames.index_leaf),
            ("index_interior", frames.index_interior),
            ("overflow_or_free", frames.other),
        ]
        .map(|(name, n)| format!("{name}={:.2}", self.per_commit(n)))
        .join(" ")
    }
}

/// Runs 200 tasks of `workflow` at concurrency 1 on a server under `strace`, and
/// counts what its commits wrote to the WAL.
pub(super) async fn wal_writes(
    workflow: &'static str,
    ingestion: Ingestion,
    services: Services,
    mode: Mode,
) -> anyhow::Result<TaskWal> {
    const TASKS: usize = 200;
    let trace = tempfile::NamedTempFile::new()?;
    let under: Vec<String> = std::iter::once("strace")
        .chain(STRACE_OPTIONS.split(' '))
        .chain(["-o"])
        .map(str::to_owned)
        .chain([trace.path().display().to_string()])
        .collect();
    let load = Load {
        tasks: TASKS,
        concurrency: 1,
        warmup: 0,
        workflow,
        service_latency_ms: 0,
        services,
        mode,
    };
    let launch = Launch {
        under: &under,
        build: None,
    };
    measure(load, Durability::Full, ingestion, launch)
        .await
        .context("the WAL is counted with strace: apt-get install strace")?;
    Ok(TaskWal {
        writes: WalWrites::from_strace(&std::fs::read_to_string(trace.path())?),
        tasks: TASKS as u64,
    })
}

/// The floor under a task at concurrency 1, measured now: the disk's flush of a 4 KiB
/// write and of a write of a commit's size, and a loopback HTTP round trip.
pub(super) struct Probe {
    flush_4k_us: f64,
    /// One a mode of ours, in `OURS`'s order, each of its own commits' size.
    flush_commit_us: Vec<(f64, f64)>,
    /// The p99 of a task's flushes, one a mode of ours: as many of its commits' size
    /// one after another as it makes commits, out of [`TAIL_FLUSHES`].
    task_flushes_p99_us: Vec<f64>,
    loopback_rtt_us: f64,
}

/// Flushes the probe of the disk's tail makes, each after [`TAIL_PAUSE`]: long enough
/// to meet the slow spells of this machine's disk, which come and go within a second.
const TAIL_FLUSHES: usize = 3_000;

/// About the time a commit at concurrency 1 has between it and the one before.
const TAIL_PAUSE: Duration = Duration::from_micros(150);

/// Round trips over loopback on a task's path at concurrency 1: the client's
/// submission and the answer that ends its wait, and the five steps' calls to the
/// mock services. A wait asked for apart from the submission (`--mode attach`) is
/// sent while the task runs: its request is on no task's path, and the mode does not
/// change the floor.
const ROUND_TRIPS_PER_TASK: f64 = 1.0 + STEPS as f64;

impl Probe {
    pub(super) async fn measure(walls: &[TaskWal]) -> anyhow::Result<Self> {
        const FLUSHES: usize = 200;
        let dir = tempfile::tempdir()?;
        let micros = |d: Duration| d.as_secs_f64() * 1e6;
        let flush_4k_us = micros(flush_time(dir.path(), 4096, FLUSHES)?);
        let mut flush_commit_us = Vec::new();
        let mut task_flushes_p99_us = Vec::new();
        for wal in walls {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let (bytes, commits) = (
                wal.writes.bytes_per_commit().round() as usize,
                wal.commits_per_task().round() as usize,
            );
            flush_commit_us.push((
                bytes as f64,
                micros(flush_time(dir.path(), bytes.max(1), FLUSHES)?),
            ));
            let times = flush_times(
                dir.path(),
                bytes.max(1),
                TAIL_FLUSHES,
                TAIL_PAUSE,
                Placement::InPlace,
            )?;
            task_flushes_p99_us.push(micros(quantile_of_runs(&times, commits, 0.99)));
        }
        let server = Server::start(Durability::Full)?;
        let http = reqwest::Client::new();
        let mut trips = Vec::new();
        for _ in 0..500 {
            let started = Instant::now();
            http.get(format!("{}/faults", server.mock))
                .send()
                .await?
                .bytes()
                .await?;
            trips.push(micros(started.elapsed()));
        }
        Ok(Self {
            flush_4k_us,
            flush_commit_us,
            task_flushes_p99_us,
            loopback_rtt_us: median(trips),
        })
    }

    /// The floor under a task of our mode at `engine` (its position in `OURS` and in
    /// the WAL counts measured): its commits, each a flush of its size, and its round
    /// trips.
    pub(super) fn floor_ms(&self, engine: usize, wal: &TaskWal) -> f64 {
        let flush = self.flush_commit_us[engine].1;
        (wal.commits_per_task() * flush + self.round_trips_us()) / 1000.0
    }

    /// What the disk alone makes of the p99 of a task of our mode at `engine`: the p99
    /// of its flushes one after another, and its round trips at their median. Not a
    /// floor: the disk's slow spells come and go, and a run may meet fewer than the
    /// probe did.
    pub(super) fn disk_p99_ms(&self, engine: usize) -> f64 {
        (self.task_flushes_p99_us[engine] + self.round_trips_us()) / 1000.0
    }

    /// A task's loopback round trips, at the probe's median, in microseconds.
    fn round_trips_us(&self) -> f64 {
        ROUND_TRIPS_PER_TASK * self.loopback_rtt_us
    }

    /// The medians of several probes, as one probe's line.
    pub(super) fn medians(probes: &[Self]) -> String {
        let of = |f: &dyn Fn(&Self) -> f64| median(probes.iter().map(f).collect());
        let commits: Vec<String> = (0..probes.first().map_or(0, |p| p.flush_commit_us.len()))
            .map(|i| {
                format!(
                    "flush_{bytes:.0}_bytes_us={:.0} task_flushes_{bytes:.0}_bytes_p99_us={:.0}",
                    of(&|p| p.flush_commit_us[i].1),
                    of(&|p| p.task_flushes_p99_us[i]),
                    bytes = of(&|p| p.flush_commit_us[i].0),
                )
            })
            .collect();
        format!(
            "flush_4096_bytes_us={:.0} {} loopback_rtt_us={:.0} round_trips_per_task={ROUND_TRIPS_PER_TASK}",
            of(&|p| p.flush_4k_us),
            commits.join(" "),
            of(&|p| p.loopback_rtt_us),
        )
    }
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&Self::medians(std::slice::from_ref(self)))
    }
}

/// [`Benchmark::Flush`].
pub(super) fn flush(sizes: &[usize], flushes: usize, rounds: usize) -> anyhow::Result<()> {
    println!("{}", sas_tools::provenance());
    let dir = tempfile::tempdir()?;
    let cases: Vec<(usize, Placement)> = sizes
        .iter()
        .flat_map(|&bytes| Placement::ALL.map(|placement| (bytes.max(1), placement)))
        .collect();
    let mut measured: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); cases.len()];
    for round in 1..=rounds {
        for (&(bytes, placement), (p50s, p99s)) in cases.iter().zip(&mut measured) {
            let mut times = flush_times(dir.path(), bytes, flushes, TAIL_PAUSE, placement)?;
            times.sort_unstable();
            let (p50, p99) = (
                quantile(&times, 0.5) * 1000.0,
                quantile(&times, 0.99) * 1000.0,
            );
            println!(
                "round={round} bytes={bytes} placement={} p50_us={p50:.0} p99_us={p99:.0}",
                placement.name()
            );
            p50s.push(p50);
            p99s.push(p99);
        }
    }
    println!("# medians of {rounds} rounds of {flushes} flushes");
    for (&(bytes, placement), (p50s, p99s)) in cases.iter().zip(measured) {
        println!(
            "bytes={bytes} placement={} blocks_per_write={:.2} p50_us={:.0} p99_us={:.0}",
            placement.name(),
            placement.blocks_per_write(bytes, flushes),
            median(p50s),
            median(p99s),
        );
    }
    Ok(())
}
