//! Benchmarks the local system through its HTTP API. It starts `sas-local` (built by
//! cargo beside this binary, in its profile) on an empty data directory, with mock
//! remote services that answer at once and keep their record in memory, drives it,
//! and prints one line. With `--services apart` the steps call instead a remote
//! service in a process of its own that answers `{}` at once, as the peers' does.
//!
//! `target/server/bench COMMAND [OPTIONS]`, after `cargo build --profile server
//! --workspace --bin bench --bin sas-local` (the profile a long-running `sas-local` is
//! built in, with the workspace's features: what this program builds again when the
//! code has changed), where COMMAND is:
//!
//! ```text
//! run [--tasks 2000] [--concurrency 64] [--warmup 200] [--durability full|process]
//!     [--parallel | --asl | --asl-http] [--service-latency-ms 0] [--services builtin|apart]
//!     [--ingestion direct|buffered] [--mode attach|call] [--under COMMAND]
//!     closed loop: each of C clients submits a drone delivery (5 steps), waits for it
//!     to be Processed (GET /tasks/{id}?wait=20s; with --mode call, in the submission
//!     itself, PUT /tasks/{id}?wait=20s), and takes the next; the line gives the
//!     server's CPU and, beside it, the service apart's, this process's (the
//!     clients') and the machine's busy share (host_busy_pct=BUSY/ALL)
//! pairs --baseline PATH [--pairs 8] [run's options but --under]
//!     run's closed loop with this build of sas-local and the one at PATH (a copy of
//!     target/server/sas-local from before a change) in turn, each pair's first run
//!     alternating: every line, then for tasks/s, p50, p99 and the server's CPU the
//!     median of the pairs' ratios (this build's over the baseline's) and in how many
//!     pairs this build's is higher
//! ingest [--rates 250,500,1000,2000,4000] [--seconds 5] [--durability full|process]
//!     open loop: POST /tasks alone at each rate; the highest with p99 under 50 ms
//! burst [--tasks 50000] [--senders 512] [--ingestion direct|buffered]
//!     a burst: every submission sent at once, as fast as the client can (at most
//!     SENDERS in flight); then each task waited for: acceptance, drain, lost
//! limits [--tasks 50000] [--max-concurrency 50] [--service-latency-ms 100]
//!     [--urgent-percent 2] [--senders 512]
//!     a buffered burst of drone deliveries, the drone service taking that long a call
//!     and limited to that many at once (0: no limit), the account service not: the
//!     drone's peak concurrency, the account's calls a second, and p50/p99 from
//!     submission to Processed of the priority-1 tasks against the priority-3 ones
//! compare [--peers ../shared/peers] [--rounds 3] [--tasks 3000] [--tasks-at-one 500]
//!     [--services apart|builtin] [--mode attach|call]
//!     sas-local (buffered, then direct ingestion), Restate and DBOS in turn (each
//!     peer's `bench.sh`, after its `setup.sh`, in the same mode: a submission and a
//!     wait, or one call), at concurrency 64 and at 1, ROUNDS
//!     times; every line as it comes, then the medians and our ratios to each peer.
//!     Our steps call a remote service apart, as the peers' do, unless told otherwise.
//!     Beside them, the floor at 1: first the WAL a task's commits write (a run of 200
//!     under strace), then in each round the disk's flush of 4 KiB and of a commit's
//!     size and a loopback round trip; a task's floor is its commits' flushes and its
//!     six round trips (the submission and the answer with its end, five calls), and
//!     Postgres's WAL is read from DBOS's line. What the disk
//!     alone makes of its p99: the p99 of as many flushes one after another, out of
//!     3,000 a round (the disk's slow spells come and go), and the same round trips
//! sweep [--tasks 100000] [--expired-percent 1] [--store embedded|dynamodb]
//!     the supervisor's sweep of a store of that many tasks, some with expired leases:
//!     the rows it reads, the time it takes and the time to open the store again (in
//!     process, on the embedded backend), or on DynamoDB on moto the requests of one
//!     pass and the records it reads
//! search [--tasks 100000] [--customers 1000]
//!     tasks found by two search attributes (customer c-7 in the eu) among that many,
//!     in process on the embedded backend: found, the index entries examined, the
//!     search's time and its slowest page's
//! asl [--rounds 3] [--tasks 3000] [--tasks-at-one 500]
//!     the drone delivery in the project's language and twice in the Amazon States
//!     Language (`tests/tools/workflows/drone-delivery-asl-http.asl.json`, five HTTP
//!     Tasks at the workflow's services; `drone-delivery-asl.asl.json`, five Lambda
//!     Tasks that the remote service apart plays), in turn, at concurrency 64 and at 1,
//!     ROUNDS times: every line, then the medians (tasks and states a second, p50/p99,
//!     the server's CPU a task) and each state machine's ratios to the workflow
//! map [--parcels 1000] [--by-id] [--durability full|process]
//!     one parcel order, each parcel shipped by a child task (twenty at a time): the
//!     time from its submission to Processed, children a second, the server's peak
//!     memory; --by-id names each parcel by a short id alone (parcel-order-by-id),
//!     which 10,000 parcels take to fit in a request
//! remote
//!     the remote service `--services apart` starts: on 127.0.0.1, one thread, `{}`
//!     at once to any call; prints its address
//! ```
//!
//! This file holds the command line and runs each benchmark; each is a module of its
//! own ([`run`], [`pairs`], [`compare`], [`asl`], [`burst`], [`limits`], [`map`], [`sweep`], [`search`], and [`floor`]'s
//! `flush`), beside [`server`], the system they measure, and [`stats`], their figures.

mod asl;
mod burst;
mod compare;
mod floor;
mod limits;
mod map;
mod pairs;
mod run;
mod search;
mod server;
mod stats;
mod sweep;

use clap::{Parser, Subcommand};
use sas_tools::Ingestion;

use asl::asl;
use burst::{burst, ingest};
use compare::compare;
use floor::flush;
use limits::limits;
use map::map;
use pairs::pairs;
use run::{Load, Mode, measure};
use search::search;
use server::{DRONE, DRONE_ASL, DRONE_ASL_HTTP, Durability, Launch, Services, remote};
use sweep::{BenchStore, sweep};

/// Benchmarks the local system (`sas-local`, built by cargo if need be) through its
/// HTTP API, or the supervisor's sweep in process; prints one line a measurement.
#[derive(Parser)]
#[command(flatten_help = true, disable_help_subcommand = true)]
struct Args {
    #[command(subcommand)]
    command: Benchmark,
}

#[derive(Subcommand)]
enum Benchmark {
    /// Closed loop: each client submits a drone delivery, waits until it is Processed,
    /// and takes the next.
    Run {
        #[command(flatten)]
        load: LoadOptions,
        /// A command the server runs under, its words split at spaces, such as
        /// `valgrind --tool=callgrind`: the server is then stopped with SIGTERM, and
        /// waited for, so that the command can write its report.
        #[arg(long, value_delimiter = ' ', num_args = 1)]
        under: Vec<String>,
    },
    /// The closed loop of `run`, with this build of `sas-local` and another in turn
    /// (ABBA: each pair's first run alternates): each run's line, then for each figure
    /// the median of the pairs' ratios, this build's over the other's, and in how many
    /// pairs this build's is higher.
    Pairs {
        #[command(flatten)]
        load: LoadOptions,
        /// The other build of `sas-local`: a copy of `target/server/sas-local` from
        /// before a change, say.
        #[arg(long)]
        baseline: std::path::PathBuf,
        /// Pairs of runs.
        #[arg(long, default_value_t = 8)]
        pairs: usize,
    },
    /// Open loop: POST /tasks alone at each rate; the highest with p99 under 50 ms.
    Ingest {
        /// Requests a second, one rate after the other.
        #[arg(long, value_delimiter = ',', default_value = "250,500,1000,2000,4000")]
        rates: Vec<u32>,
        /// Seconds at each rate.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// When the server's store flushes.
        #[arg(long, value_enum, default_value_t = Durability::Full)]
        durability: Durability,
    },
    /// A burst: every submission sent as fast as the client can, then each task
    /// waited for until Processed.
    Burst {
        /// Submissions in the burst.
        #[arg(long, default_value_t = 50_000)]
        tasks: usize,
        /// Requests in flight at most (the client's connections).
        #[arg(long, default_value_t = 512)]
        senders: usize,
        /// How the server takes a submission (`SAS_INGESTION`).
        #[arg(long, value_enum, default_value_t = Ingestion::Buffered)]
        ingestion: Ingestion,
    },
    /// A buffered burst against a limited service: its peak concurrency, the calls a
    /// second of a service not limited, and the priorities' times to Processed.
    Limits {
        /// Submissions in the burst.
        #[arg(long, default_value_t = 50_000)]
        tasks: usize,
        /// The drone service's calls at once, at most; 0 for no limit.
        #[arg(long, default_value_t = 50)]
        max_concurrency: u32,
        /// Milliseconds each drone call takes.
        #[arg(long, default_value_t = 100)]
        service_latency_ms: u64,
        /// The share of the tasks, in percent, submitted with priority 1 (spread
        /// evenly through the burst); the others have the default, 3.
        #[arg(long, default_value_t = 2)]
        urgent_percent: usize,
        /// Requests in flight at most (the client's connections).
        #[arg(long, default_value_t = 512)]
        senders: usize,
    },
    /// sas-local (buffered, then direct ingestion), Restate and DBOS in turn, at
    /// concurrency 64 and at 1, several rounds: each measurement's line, then the
    /// medians and the ratios.
    Compare {
        /// The peers' directory, with `restate/bench.sh` and `dbos/bench.sh` (each
        /// set up by its `setup.sh`).
        #[arg(long, default_value = "../shared/peers")]
        peers: std::path::PathBuf,
        #[command(flatten)]
        rounds: Rounds,
        /// The remote services our steps call.
        #[arg(long, value_enum, default_value_t = Services::Apart)]
        services: Services,
        /// How every engine's clients ask for a task and its end (the peers' third
        /// argument).
        #[arg(long, value_enum, default_value_t = Mode::Attach)]
        mode: Mode,
    },
    /// The drone delivery in the project's language and in the Amazon States
    /// Language, in turn, at concurrency 64 and at 1, several rounds, both calling the
    /// remote service apart: each line, then the medians and the state machine's
    /// ratios to the workflow.
    Asl {
        #[command(flatten)]
        rounds: Rounds,
    },
    /// One parcel order whose map ships each parcel by a child task: its time from
    /// submission to Processed, children a second, the server's peak memory.
    Map {
        /// Parcels in the order: its children.
        #[arg(long, default_value_t = 1000)]
        parcels: usize,
        /// Runs `parcel-order-by-id` (`tests/tools/workflows`), whose parcels are short
        /// ids, instead of `parcel-order`, whose parcels are objects: a request holds
        /// 64 KiB, some 1,270 parcel objects.
        #[arg(long)]
        by_id: bool,
        /// When the server's store flushes.
        #[arg(long, value_enum, default_value_t = Durability::Full)]
        durability: Durability,
    },
    /// The supervisor's sweep of a store of that many tasks, some with expired leases,
    /// in process on the embedded backend, or on DynamoDB on moto.
    Sweep {
        /// Tasks in the store.
        #[arg(long, default_value_t = 100_000)]
        tasks: usize,
        /// The share of them, in percent, whose lease has expired.
        #[arg(long, default_value_t = 1)]
        expired_percent: usize,
        /// The store swept.
        #[arg(long, value_enum, default_value_t = BenchStore::Embedded)]
        store: BenchStore,
    },
    /// Tasks found by two search attributes among that many, in process on the
    /// embedded backend (the index entries examined, and each page's time) or on
    /// DynamoDB on moto (the requests and the records read).
    Search {
        /// Tasks in the store.
        #[arg(long, default_value_t = 100_000)]
        tasks: usize,
        /// Customers they are spread over (the attribute searched first).
        #[arg(long, default_value_t = 1_000)]
        customers: usize,
        /// The store searched.
        #[arg(long, value_enum, default_value_t = BenchStore::Embedded)]
        store: BenchStore,
    },
    /// The disk's flush of a write by its size and by where it lands, every size and
    /// placement in turn, several rounds, each flush [`TAIL_PAUSE`] after the one
    /// before (as a commit at concurrency 1 is): what a store's commit pays for how it
    /// writes. A line a measurement, then the medians of the rounds.
    Flush {
        /// The writes' sizes in bytes: by default about what a commit of DBOS's
        /// Postgres and one of ours write at concurrency 1 (BENCHMARKS.md's table), 1 KiB
        /// (a WAL frame of ours), a block and two.
        #[arg(long, value_delimiter = ',', default_value = "491,1024,2960,4096,8192")]
        bytes: Vec<usize>,
        /// Flushes of each size and placement a round.
        #[arg(long, default_value_t = 1000)]
        flushes: usize,
        /// Rounds.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// The remote service `--services apart` starts: on 127.0.0.1, one thread,
    /// answering `{}` at once to any call; prints `remote=<its URL>`.
    Remote,
}

/// The rounds of a comparison, and the tasks each measures.
#[derive(clap::Args, Clone, Copy)]
struct Rounds {
    /// Rounds: each contender once per round and concurrency, in turn.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Tasks measured at concurrency 64.
    #[arg(long, default_value_t = 3000)]
    tasks: usize,
    /// Tasks measured at concurrency 1.
    #[arg(long, default_value_t = 500)]
    tasks_at_one: usize,
}

impl Rounds {
    /// The drone delivery's loads of a round: at 64 clients, then at 1, each after its
    /// warm-up.
    fn loads(self, services: Services, mode: Mode) -> [Load; 2] {
        let load = |tasks, concurrency, warmup| Load {
            tasks,
            concurrency,
            warmup,
            workflow: DRONE,
            service_latency_ms: 0,
            services,
            mode,
        };
        [load(self.tasks, 64, 200), load(self.tasks_at_one, 1, 50)]
    }
}

/// What a closed loop runs, and against what: `run`'s and `pairs`'.
#[derive(clap::Args)]
struct LoadOptions {
    /// Tasks measured.
    #[arg(long, default_value_t = 2000)]
    tasks: usize,
    /// Clients at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Tasks run before the measurement.
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// When the server's store flushes.
    #[arg(long, value_enum, default_value_t = Durability::Full)]
    durability: Durability,
    /// How the server takes a submission (`SAS_INGESTION`).
    #[arg(long, value_enum, default_value_t = Ingestion::Direct)]
    ingestion: Ingestion,
    /// Runs the drone delivery with its two checks in parallel
    /// (`drone-delivery-parallel`) instead of the straight one.
    #[arg(long)]
    parallel: bool,
    /// Runs the drone delivery written in the Amazon States Language
    /// (`drone-delivery-asl`, with `--services apart`).
    #[arg(long, conflicts_with = "parallel")]
    asl: bool,
    /// Runs the drone delivery written in the Amazon States Language with HTTP
    /// Tasks (`drone-delivery-asl-http`, with `--services apart`).
    #[arg(long, conflicts_with_all = ["parallel", "asl"])]
    asl_http: bool,
    /// Milliseconds added to every call of every mock service (a remote service's
    /// own time, which parallel steps overlap).
    #[arg(long, default_value_t = 0)]
    service_latency_ms: u64,
    /// The remote services the steps call.
    #[arg(long, value_enum, default_value_t = Services::Builtin)]
    services: Services,
    /// How a client asks for a task and its end.
    #[arg(long, value_enum, default_value_t = Mode::Attach)]
    mode: Mode,
}

impl LoadOptions {
    fn load(&self) -> Load {
        Load {
            tasks: self.tasks,
            concurrency: self.concurrency,
            warmup: self.warmup,
            workflow: match (self.parallel, self.asl, self.asl_http) {
                (true, ..) => "drone-delivery-parallel",
                (_, true, _) => DRONE_ASL,
                (.., true) => DRONE_ASL_HTTP,
                _ => DRONE,
            },
            service_latency_ms: self.service_latency_ms,
            services: self.services,
            mode: self.mode,
        }
    }
}

fn main() -> anyhow::Result<()> {
    let command = Args::parse().command;
    let runtime = match command {
        // One thread, as the peers' remote service has.
        Benchmark::Remote => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?,
        _ => tokio::runtime::Runtime::new()?,
    };
    runtime.block_on(benchmark(command))
}

async fn benchmark(command: Benchmark) -> anyhow::Result<()> {
    match command {
        Benchmark::Run { load, under } => {
            let launch = Launch {
                under: &under,
                build: None,
            };
            let measured = measure(load.load(), load.durability, load.ingestion, launch).await?;
            println!("{}", measured.line);
            Ok(())
        }
        Benchmark::Pairs {
            load,
            baseline,
            pairs: count,
        } => {
            pairs(
                &load.load(),
                load.durability,
                load.ingestion,
                &baseline,
                count,
            )
            .await
        }
        Benchmark::Ingest {
            rates,
            seconds,
            durability,
        } => ingest(&rates, seconds, durability).await,
        Benchmark::Burst {
            tasks,
            senders,
            ingestion,
        } => burst(tasks, senders, ingestion).await,
        Benchmark::Limits {
            tasks,
            max_concurrency,
            service_latency_ms,
            urgent_percent,
            senders,
        } => {
            limits(
                tasks,
                max_concurrency,
                service_latency_ms,
                urgent_percent,
                senders,
            )
            .await
        }
        Benchmark::Compare {
            peers,
            rounds,
            services,
            mode,
        } => compare(&peers, rounds, services, mode).await,
        Benchmark::Asl { rounds } => asl(rounds).await,
        Benchmark::Map {
            parcels,
            by_id,
            durability,
        } => map(parcels, by_id, durability).await,
        Benchmark::Sweep {
            tasks,
            expired_percent,
            store,
        } => sweep(tasks, expired_percent, store).await,
        Benchmark::Search {
            tasks,
            customers,
            store,
        } => search(tasks, customers, store).await,
        Benchmark::Flush {
            bytes,
            flushes,
            rounds,
        } => flush(&bytes, flushes, rounds),
        Benchmark::Remote => remote().await,
    }
}
