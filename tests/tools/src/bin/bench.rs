//! Benchmarks the local system through its HTTP API. It starts `sas-local` (built by
//! cargo beside this binary, in its profile) on an empty data directory, with mock
//! remote services that answer at once and keep their record in memory, drives it,
//! and prints one line. With `--services apart` the steps call instead a remote
//! service in a process of its own that answers `{}` at once, as the peers' does.
//!
//! `cargo run --release -p sas-tools --bin bench -- COMMAND [OPTIONS]`, where COMMAND is:
//!
//! ```text
//! run [--tasks 2000] [--concurrency 64] [--warmup 200] [--durability full|process]
//!     [--parallel] [--service-latency-ms 0] [--services builtin|apart]
//!     [--ingestion direct|buffered] [--mode attach|call] [--under COMMAND]
//!     closed loop: each of C clients submits a drone delivery (5 steps), waits for it
//!     to be Processed (GET /tasks/{id}?wait=20s; with --mode call, in the submission
//!     itself, PUT /tasks/{id}?wait=20s), and takes the next
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
//! map [--parcels 1000] [--by-id] [--durability full|process]
//!     one parcel order, each parcel shipped by a child task (twenty at a time): the
//!     time from its submission to Processed, children a second, the server's peak
//!     memory; --by-id names each parcel by a short id alone (parcel-order-by-id),
//!     which 10,000 parcels take to fit in a request
//! remote
//!     the remote service `--services apart` starts: on 127.0.0.1, one thread, `{}`
//!     at once to any call; prints its address
//! ```

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use sas_tools::Ingestion;
use sas_tools::floor::{
    Placement, STRACE_OPTIONS, WalWrites, flush_time, flush_times, quantile_of_runs,
};
use serde_json::{Value, json};
use tokio::sync::Mutex;

/// Steps of the drone delivery.
const STEPS: usize = 5;

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
        /// A command the server runs under, its words split at spaces, such as
        /// `valgrind --tool=callgrind`: the server is then stopped with SIGTERM, and
        /// waited for, so that the command can write its report.
        #[arg(long, value_delimiter = ' ', num_args = 1)]
        under: Vec<String>,
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
        /// Rounds: each engine once per round and concurrency, in turn.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Tasks measured at concurrency 64.
        #[arg(long, default_value_t = 3000)]
        tasks: usize,
        /// Tasks measured at concurrency 1.
        #[arg(long, default_value_t = 500)]
        tasks_at_one: usize,
        /// The remote services our steps call.
        #[arg(long, value_enum, default_value_t = Services::Apart)]
        services: Services,
        /// How every engine's clients ask for a task and its end (the peers' third
        /// argument).
        #[arg(long, value_enum, default_value_t = Mode::Attach)]
        mode: Mode,
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
        #[arg(long, value_enum, default_value_t = SweptStore::Embedded)]
        store: SweptStore,
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

/// The remote services a benchmark's steps call.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Services {
    /// The mock services in `sas-local`'s own process, which keep each call's record,
    /// answer with what they received, and take `--service-latency-ms`.
    Builtin,
    /// One remote service in a process of its own, answering `{}` at once to any
    /// call, as the peers' `bench.sh` runs theirs (it answers `ok`): the server's CPU
    /// is then its own work alone, and its records hold what the peers' do.
    Apart,
}

impl Services {
    fn name(self) -> &'static str {
        match self {
            Self::Builtin => "builtin",
            Self::Apart => "apart",
        }
    }
}

/// The agents of the drone delivery, straight or in parallel: each at the remote
/// service when the services are apart, each slowed by `--service-latency-ms` when
/// they are built in.
const AGENTS: [&str; 5] = ["account", "package", "transport", "drone", "delivery"];

/// The remote service of `--services apart`, stopped when dropped.
struct RemoteService {
    child: Child,
    url: String,
}

impl RemoteService {
    fn start() -> anyhow::Result<Self> {
        // The workspace's build, the first time a server is started, may rebuild this
        // very program (its features unified with the workspace's): the binary it
        // leaves is the one to start, not the path this process was started from.
        let mut child = Command::new(sas_tests::function_binary("bench"))
            .arg("remote")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start the remote service")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
        let url = line
            .trim()
            .strip_prefix("remote=")
            .with_context(|| format!("no remote= in {line:?}"))?
            .to_owned();
        Ok(Self { child, url })
    }

    /// `SAS_SERVICES`: every agent at this service.
    fn settings(&self) -> String {
        let services: serde_json::Map<String, Value> = AGENTS
            .iter()
            .map(|agent| ((*agent).to_owned(), json!({ "url": self.url })))
            .collect();
        Value::Object(services).to_string()
    }
}

impl Drop for RemoteService {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serves `{}` to any call, at once, until killed.
async fn remote() -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("remote=http://{}", listener.local_addr()?);
    let router =
        axum::Router::new().fallback(|_body: axum::body::Bytes| async { axum::Json(json!({})) });
    axum::serve(listener, router).await?;
    Ok(())
}

/// The store a sweep is measured on.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SweptStore {
    /// The embedded backend: the sweep's time, and the time to open the store again
    /// (which reads the leases back).
    Embedded,
    /// DynamoDB on moto: the requests of one pass (moto's recorder), the task records
    /// read consistently among them.
    Dynamodb,
}

/// When the server's store flushes (`SAS_DURABILITY`).
#[derive(Clone, Copy, ValueEnum)]
enum Durability {
    /// At every commit: a commit survives a power cut.
    Full,
    /// At WAL checkpoints: a commit survives kill -9, not a power cut.
    Process,
}

impl Durability {
    fn name(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Process => "process",
        }
    }
}

struct Server {
    child: Child,
    api: String,
    /// The mock services' base URL.
    mock: String,
    /// Stopped with SIGTERM and waited for (it runs under another command).
    graceful: bool,
    _data: tempfile::TempDir,
}

impl Server {
    fn start(durability: Durability) -> anyhow::Result<Self> {
        Self::start_with(durability, Ingestion::Direct, &[], None, None)
    }

    /// The server, with the workflows of `workflows` (`SAS_WORKFLOWS_DIR`) beside the
    /// built-in ones, and the services' settings `services` (`SAS_SERVICES`).
    fn start_with(
        durability: Durability,
        ingestion: Ingestion,
        under: &[String],
        workflows: Option<&std::path::Path>,
        services: Option<&str>,
    ) -> anyhow::Result<Self> {
        let binary = sas_tests::function_binary("sas-local");
        let data = tempfile::tempdir()?;
        let mut command = match under.split_first() {
            Some((program, arguments)) => {
                let mut command = Command::new(program);
                command.args(arguments).arg(&binary);
                command
            }
            None => Command::new(&binary),
        };
        if let Some(workflows) = workflows {
            command.env("SAS_WORKFLOWS_DIR", workflows);
        }
        if let Some(services) = services {
            command.env("SAS_SERVICES", services);
        }
        let mut child = command
            .env("SAS_INGESTION", ingestion.name())
            .env("SAS_DATA_DIR", data.path())
            .env("SAS_API_ADDR", "127.0.0.1:0")
            .env("SAS_MOCK_ADDR", "127.0.0.1:0")
            .env("SAS_MOCK_DURABILITY", "off")
            .env("SAS_DURABILITY", durability.name())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(name))
                .map(str::to_owned)
                .with_context(|| format!("no {name} in {line:?}"))
        };
        let (api, mock) = (field("api=")?, field("mock=")?);
        Ok(Self {
            child,
            api,
            mock,
            graceful: !under.is_empty(),
            _data: data,
        })
    }

    /// CPU seconds (user + system) the server has used so far.
    fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // The fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks: f64 = [11, 12]
            .iter()
            .filter_map(|&i| fields.get(i)?.parse::<f64>().ok())
            .sum();
        ticks / 100.0
    }

    /// The server's peak resident memory, in MiB.
    fn peak_rss_mb(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        kib / 1024.0
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.graceful {
            // The server itself: a tracer's child (strace detaches on SIGTERM and
            // would leave it running), or the command it runs in (valgrind).
            let pid = self.child.id().to_string();
            let children = Command::new("pkill").args(["-TERM", "-P", &pid]).status();
            if !children.is_ok_and(|s| s.success()) {
                let _ = Command::new("kill").args(["-TERM", &pid]).status();
            }
            let deadline = Instant::now() + Duration::from_secs(120);
            while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The drone delivery, straight: what every benchmark runs unless told otherwise.
const DRONE: &str = "drone-delivery";

fn delivery(workflow: &str, i: usize) -> Value {
    json!({
        "workflow": workflow,
        "input": {"customer_id": format!("c-{i}"), "pickup": "Sydney", "dropoff": "Bondi", "weight_kg": 1.2},
    })
}

/// The `q`-quantile of sorted samples, nearest rank, in milliseconds.
fn quantile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1000.0
}

/// How a client asks for a task and its end: the peers' `bench.sh` modes of the same
/// names.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Two requests: the submission, answered once the task is written, then
    /// `GET /tasks/{id}?wait=20s`.
    Attach,
    /// One request: `PUT /tasks/{id}?wait=20s`, answered with the task's end.
    Call,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Attach => "attach",
            Self::Call => "call",
        }
    }
}

/// One task: submit, then wait for it to finish, in one request or two. Returns
/// (the submission's answer, end to end), or None.
async fn one_task(
    http: &reqwest::Client,
    api: &str,
    load: Load,
    id: &str,
    i: usize,
) -> Option<(Duration, Duration)> {
    // Only its state is read: the rest of the task is skipped, not built as a tree,
    // so that the client's CPU, on the same two cores, stays small.
    #[derive(serde::Deserialize)]
    struct Waited {
        state: String,
    }
    let start = Instant::now();
    let wait = match load.mode {
        Mode::Attach => "",
        Mode::Call => "?wait=20s",
    };
    let answer = http
        .put(format!("{api}/tasks/{id}{wait}"))
        .json(&delivery(load.workflow, i))
        .send()
        .await
        .ok()?;
    let ack = start.elapsed();
    let mut ended = match answer.status().as_u16() {
        200 => Some(answer.json::<Waited>().await.ok()?.state),
        202 => None,
        _ => return None,
    };
    loop {
        match ended.as_deref() {
            Some("Processed") => return Some((ack, start.elapsed())),
            Some("Error") => return None,
            _ => {}
        }
        let task: Waited = http
            .get(format!("{api}/tasks/{id}?wait=20s"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        ended = Some(task.state);
    }
}

/// Runs `tasks` tasks through `load`'s clients.
async fn closed_loop(
    api: &str,
    load: Load,
    prefix: &str,
    tasks: usize,
) -> (Vec<Duration>, Vec<Duration>, usize) {
    let concurrency = load.concurrency;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency * 2)
        .build()
        .expect("client");
    let next = Arc::new(AtomicUsize::new(0));
    let samples = Arc::new(Mutex::new((
        Vec::with_capacity(tasks),
        Vec::with_capacity(tasks),
        0usize,
    )));
    let clients: Vec<_> = (0..concurrency)
        .map(|_| {
            let (http, next, samples, api, prefix) = (
                http.clone(),
                Arc::clone(&next),
                Arc::clone(&samples),
                api.to_owned(),
                prefix.to_owned(),
            );
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= tasks {
                        return;
                    }
                    let outcome = one_task(&http, &api, load, &format!("{prefix}-{i}"), i).await;
                    let mut samples = samples.lock().await;
                    match outcome {
                        Some((ack, total)) => {
                            samples.0.push(ack);
                            samples.1.push(total);
                        }
                        None => samples.2 += 1,
                    }
                }
            })
        })
        .collect();
    for client in clients {
        let _ = client.await;
    }
    let (mut acks, mut totals, errors) = std::mem::take(&mut *samples.lock().await);
    acks.sort_unstable();
    totals.sort_unstable();
    (acks, totals, errors)
}

/// What a closed-loop run measured, as one `key=value` line.
struct Measured {
    tasks_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    line: String,
}

impl Measured {
    /// A number in the line, by its key.
    fn field(&self, key: &str) -> Option<f64> {
        number_in(&self.line, key)
    }

    /// Reads a peer's `bench.sh` line (`workflows_per_s=`, `p50_ms=`, `p99_ms=`).
    fn parse(line: &str) -> Option<Self> {
        let field = |key: &str| number_in(line, key);
        Some(Self {
            tasks_per_s: field("workflows_per_s")?,
            p50_ms: field("p50_ms")?,
            p99_ms: field("p99_ms")?,
            line: line.to_owned(),
        })
    }
}

/// The number after `key=` in a line of `key=value` fields.
fn number_in(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))?
        .parse()
        .ok()
}

/// A closed loop's shape: tasks measured, clients at once, tasks run before.
#[derive(Clone, Copy)]
struct Load {
    tasks: usize,
    concurrency: usize,
    warmup: usize,
    /// The workflow each task runs: the drone delivery, straight or with its checks
    /// in parallel.
    workflow: &'static str,
    /// Added to every call of every mock service, in milliseconds.
    service_latency_ms: u64,
    /// The remote services the steps call.
    services: Services,
    /// How a client asks for a task and its end.
    mode: Mode,
}

async fn measure(
    load: Load,
    durability: Durability,
    ingestion: Ingestion,
    under: &[String],
) -> anyhow::Result<Measured> {
    let Load {
        tasks,
        concurrency,
        warmup,
        workflow,
        service_latency_ms,
        services,
        mode,
    } = load;
    anyhow::ensure!(
        service_latency_ms == 0 || services == Services::Builtin,
        "--service-latency-ms is the mock services' (--services builtin)"
    );
    let remote = match services {
        Services::Apart => Some(RemoteService::start()?),
        Services::Builtin => None,
    };
    let settings = remote.as_ref().map(RemoteService::settings);
    let server = Server::start_with(durability, ingestion, under, None, settings.as_deref())?;
    if service_latency_ms > 0 {
        let http = reqwest::Client::new();
        for service in AGENTS {
            http.put(format!("{}/faults/{service}", server.mock))
                .json(&json!({ "latency_ms": service_latency_ms }))
                .send()
                .await?
                .error_for_status()?;
        }
    }
    closed_loop(&server.api, load, "warmup", warmup).await;
    let cpu_before = server.cpu_seconds();
    let started = Instant::now();
    let (acks, totals, errors) = closed_loop(&server.api, load, "task", tasks).await;
    let wall = started.elapsed().as_secs_f64();
    let cpu = server.cpu_seconds() - cpu_before;
    #[allow(clippy::cast_precision_loss)]
    let rate = totals.len() as f64 / wall;
    let durable = match durability {
        Durability::Full => {
            "sqlite WAL flushed at every commit; a task's write answered after its commit, a message receivable once written, committed before anything that follows from it"
        }
        Durability::Process => {
            "sqlite WAL flushed at checkpoints (survives kill -9, not power loss)"
        }
    };
    // In call mode the first answer is the task's end: no acknowledgement of its own.
    let acknowledged = match mode {
        Mode::Attach => format!(
            " submit_ack_p50_ms={:.2} submit_ack_p99_ms={:.2}",
            quantile(&acks, 0.5),
            quantile(&acks, 0.99)
        ),
        Mode::Call => String::new(),
    };
    let line = format!(
        "engine=sas-local workflow={workflow} service_latency_ms={service_latency_ms} n={tasks} concurrency={concurrency} completed={} errors={errors} wall_s={wall:.3} tasks_per_s={rate:.1} steps_per_s={:.1} \
         p50_ms={:.2} p99_ms={:.2} max_ms={:.2}{acknowledged} server_cpu_s={cpu:.2} server_cpu_pct={:.0} \
         server_peak_rss_mb={:.1} ingestion={} services={} mode={} durability={} fsync=\"{durable}\"",
        totals.len(),
        rate * STEPS as f64,
        quantile(&totals, 0.5),
        quantile(&totals, 0.99),
        totals.last().map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0),
        cpu / wall * 100.0,
        server.peak_rss_mb(),
        ingestion.name(),
        services.name(),
        mode.name(),
        durability.name(),
    );
    Ok(Measured {
        tasks_per_s: rate,
        p50_ms: quantile(&totals, 0.5),
        p99_ms: quantile(&totals, 0.99),
        line,
    })
}

/// Runs a peer's `bench.sh TASKS CONCURRENCY MODE` (warm-up as ours) and reads its
/// line.
fn peer(script: &std::path::Path, load: Load) -> anyhow::Result<Measured> {
    let output = Command::new("bash")
        .arg(script)
        .arg(load.tasks.to_string())
        .arg(load.concurrency.to_string())
        .arg(load.mode.name())
        .env("WARMUP", load.warmup.to_string())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.contains("p99_ms="))
        .unwrap_or_default();
    anyhow::ensure!(
        output.status.success(),
        "{} failed ({}): {line}; set it up with its setup.sh",
        script.display(),
        output.status
    );
    Measured::parse(line).with_context(|| format!("no measurement in {stdout:?}"))
}

/// The median of some figures.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

async fn compare(
    peers: &std::path::Path,
    rounds: usize,
    tasks: usize,
    tasks_at_one: usize,
    services: Services,
    mode: Mode,
) -> anyhow::Result<()> {
    /// Ours in each ingestion mode, then the peers (each a directory of `peers`).
    const ENGINES: [&str; 4] = ["sas-local-buffered", "sas-local-direct", "restate", "dbos"];
    const OURS: [Ingestion; 2] = [Ingestion::Buffered, Ingestion::Direct];
    let loads = [
        Load {
            tasks,
            concurrency: 64,
            warmup: 200,
            workflow: DRONE,
            service_latency_ms: 0,
            services,
            mode,
        },
        Load {
            tasks: tasks_at_one,
            concurrency: 1,
            warmup: 50,
            workflow: DRONE,
            service_latency_ms: 0,
            services,
            mode,
        },
    ];
    println!("{}", sas_tools::provenance());
    let mut results: Vec<Vec<Vec<Measured>>> = loads
        .iter()
        .map(|_| ENGINES.iter().map(|_| Vec::new()).collect())
        .collect();
    let mut walls = Vec::new();
    for ingestion in OURS {
        let wal = wal_writes(ingestion, services, mode).await?;
        println!(
            "wal engine=sas-local-{} commits_per_task={:.2} flushes_per_task={:.2} fsyncs_per_task={:.2} wal_bytes_per_commit={:.0} wal_kb_per_task={:.1} wal_writes_per_commit={:.2} {}",
            ingestion.name(),
            wal.commits_per_task(),
            wal.per_task(wal.writes.flushes),
            wal.per_task(wal.writes.fsyncs),
            wal.writes.bytes_per_commit(),
            wal.per_task(wal.writes.bytes) / 1024.0,
            wal.per_commit(wal.writes.writes),
            wal.frames_per_commit(),
        );
        walls.push(wal);
    }
    let mut probes = Vec::new();
    for round in 1..=rounds {
        for (load, &shape) in loads.iter().enumerate() {
            if shape.concurrency == 1 {
                let probe = Probe::measure(&walls).await?;
                println!("round={round} {probe}");
                probes.push(probe);
            }
            for (engine, name) in ENGINES.iter().enumerate() {
                // Each run on a settled machine: the disk flushed, the last run's
                // processes gone.
                let _ = Command::new("sync").status();
                tokio::time::sleep(Duration::from_secs(3)).await;
                let measured = match OURS.get(engine) {
                    Some(&ingestion) => measure(shape, Durability::Full, ingestion, &[]).await?,
                    None => peer(&peers.join(name).join("bench.sh"), shape)?,
                };
                println!("round={round} engine={name} {}", measured.line);
                results[load][engine].push(measured);
            }
        }
    }
    println!("medians of {rounds}:");
    for (
        load,
        Load {
            tasks: n,
            concurrency,
            ..
        },
    ) in loads.iter().enumerate()
    {
        let figures: Vec<(f64, f64, f64)> = results[load]
            .iter()
            .map(|runs| {
                let of = |f: fn(&Measured) -> f64| median(runs.iter().map(f).collect());
                (of(|m| m.tasks_per_s), of(|m| m.p50_ms), of(|m| m.p99_ms))
            })
            .collect();
        for (engine, (name, (rate, p50, p99))) in ENGINES.iter().zip(&figures).enumerate() {
            let ratios: String = if let Some(wal) = walls.get(engine) {
                if *concurrency == 1 {
                    let floor = median(probes.iter().map(|p| p.floor_ms(engine, wal)).collect());
                    let disk_p99 = median(probes.iter().map(|p| p.disk_p99_ms(engine)).collect());
                    format!(
                        " floor_ms={floor:.2} p50/floor={:.2}x disk_p99_ms={disk_p99:.2} \
                         p99/disk_p99={:.2}x",
                        p50 / floor,
                        p99 / disk_p99
                    )
                } else {
                    String::new()
                }
            } else {
                OURS.iter()
                    .zip(&figures)
                    .map(|(ours, (our_rate, _, our_p99))| {
                        format!(
                            " {}/theirs: throughput {:.2}x p99 {:.2}x",
                            ours.name(),
                            our_rate / rate,
                            our_p99 / p99
                        )
                    })
                    .collect()
            };
            println!(
                "concurrency={concurrency} n={n} engine={name} tasks_per_s={rate:.1} p50_ms={p50:.2} p99_ms={p99:.2}{ratios}"
            );
        }
    }
    println!(
        "floor at 1, medians of the rounds' probes: {}",
        Probe::medians(&probes)
    );
    if let Some(runs) = loads
        .iter()
        .position(|l| l.concurrency == 1)
        .and_then(|load| results[load].get(ENGINES.len() - 1))
    {
        let of = |key: &str| median(runs.iter().filter_map(|m| m.field(key)).collect());
        let (kb, syncs) = (of("wal_kb_per_workflow"), of("wal_syncs_per_step"));
        println!(
            "wal engine=dbos (Postgres) wal_kb_per_workflow={kb:.1} wal_syncs_per_workflow={:.1} wal_bytes_per_commit={:.0}",
            syncs * STEPS as f64,
            kb * 1024.0 / (syncs * STEPS as f64),
        );
    }
    Ok(())
}

/// A task's WAL at concurrency 1, counted from the system calls of a run under strace.
struct TaskWal {
    writes: WalWrites,
    /// The tasks the run made.
    tasks: u64,
}

impl TaskWal {
    #[allow(clippy::cast_precision_loss)]
    fn per_task(&self, n: u64) -> f64 {
        n as f64 / self.tasks.max(1) as f64
    }

    #[allow(clippy::cast_precision_loss)]
    fn per_commit(&self, n: u64) -> f64 {
        n as f64 / self.writes.commits.max(1) as f64
    }

    fn commits_per_task(&self) -> f64 {
        self.per_task(self.writes.commits)
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

/// Runs 200 tasks at concurrency 1 on a server under `strace`, and counts what its
/// commits wrote to the WAL.
async fn wal_writes(
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
        workflow: DRONE,
        service_latency_ms: 0,
        services,
        mode,
    };
    measure(load, Durability::Full, ingestion, &under)
        .await
        .context("the WAL is counted with strace: apt-get install strace")?;
    Ok(TaskWal {
        writes: WalWrites::from_strace(&std::fs::read_to_string(trace.path())?),
        tasks: TASKS as u64,
    })
}

/// The floor under a task at concurrency 1, measured now: the disk's flush of a 4 KiB
/// write and of a write of a commit's size, and a loopback HTTP round trip.
struct Probe {
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
    async fn measure(walls: &[TaskWal]) -> anyhow::Result<Self> {
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
    fn floor_ms(&self, engine: usize, wal: &TaskWal) -> f64 {
        let flush = self.flush_commit_us[engine].1;
        (wal.commits_per_task() * flush + self.round_trips_us()) / 1000.0
    }

    /// What the disk alone makes of the p99 of a task of our mode at `engine`: the p99
    /// of its flushes one after another, and its round trips at their median. Not a
    /// floor: the disk's slow spells come and go, and a run may meet fewer than the
    /// probe did.
    fn disk_p99_ms(&self, engine: usize) -> f64 {
        (self.task_flushes_p99_us[engine] + self.round_trips_us()) / 1000.0
    }

    /// A task's loopback round trips, at the probe's median, in microseconds.
    fn round_trips_us(&self) -> f64 {
        ROUND_TRIPS_PER_TASK * self.loopback_rtt_us
    }

    /// The medians of several probes, as one probe's line.
    fn medians(probes: &[Self]) -> String {
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

async fn ingest(rates: &[u32], seconds: u64, durability: Durability) -> anyhow::Result<()> {
    let server = Server::start(durability)?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .build()?;
    let mut best = None;
    for &rate in rates {
        let latencies = Arc::new(Mutex::new(Vec::new()));
        let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let total = rate as usize * usize::try_from(seconds).unwrap_or(1);
        let started = Instant::now();
        let mut requests = Vec::with_capacity(total);
        for i in 0..total {
            ticks.tick().await;
            let (http, api, latencies) = (http.clone(), server.api.clone(), Arc::clone(&latencies));
            requests.push(tokio::spawn(async move {
                let start = Instant::now();
                let sent = http
                    .post(format!("{api}/tasks"))
                    .json(&delivery(DRONE, i))
                    .send()
                    .await;
                let ok = sent.is_ok_and(|r| r.status() == 202);
                latencies.lock().await.push(ok.then(|| start.elapsed()));
            }));
        }
        for request in requests {
            let _ = request.await;
        }
        let wall = started.elapsed().as_secs_f64();
        let results = std::mem::take(&mut *latencies.lock().await);
        let errors = results.iter().filter(|r| r.is_none()).count();
        let mut ok: Vec<Duration> = results.into_iter().flatten().collect();
        ok.sort_unstable();
        let p99 = quantile(&ok, 0.99);
        #[allow(clippy::cast_precision_loss)]
        let achieved = ok.len() as f64 / wall;
        println!(
            "engine=sas-local mode=ingest target_rate={rate} achieved_rate={achieved:.0} accepted={} errors={errors} p50_ms={:.2} p99_ms={p99:.2} max_ms={:.2} durability={}",
            ok.len(),
            quantile(&ok, 0.5),
            ok.last().map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0),
            durability.name(),
        );
        if errors == 0 && p99 < 50.0 && achieved >= f64::from(rate) * 0.95 {
            best = Some(rate);
        }
    }
    println!(
        "highest sustained rate with p99 under 50 ms: {}",
        best.map_or("none of those tried".into(), |r| format!("{r}/s"))
    );
    Ok(())
}

/// Milliseconds since the epoch of an RFC 3339 time.
fn epoch_millis(text: &str) -> Option<f64> {
    let at = humantime::parse_rfc3339(text).ok()?;
    Some(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64() * 1000.0)
}

/// Submits `tasks` tasks `burst-<i>`, each as `body` gives it, as fast as the client
/// can with at most `senders` in flight: the times of those accepted, sorted, and
/// when each was sent (milliseconds since the epoch).
async fn submit_burst(
    server: &Server,
    http: &reqwest::Client,
    tasks: usize,
    senders: usize,
    body: impl Fn(usize) -> Value,
) -> anyhow::Result<(Vec<Duration>, Vec<f64>)> {
    let slots = Arc::new(tokio::sync::Semaphore::new(senders));
    let mut requests = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let permit = Arc::clone(&slots).acquire_owned().await?;
        let (http, api, body) = (http.clone(), server.api.clone(), body(i));
        requests.push(tokio::spawn(async move {
            let sent_at = now_millis();
            let start = Instant::now();
            let sent = http
                .put(format!("{api}/tasks/burst-{i}"))
                .json(&body)
                .send()
                .await;
            drop(permit);
            let accepted = sent.is_ok_and(|r| r.status() == 202);
            (accepted.then(|| start.elapsed()), sent_at)
        }));
    }
    let mut accepted = Vec::with_capacity(tasks);
    let mut sent_at = Vec::with_capacity(tasks);
    for request in requests {
        let (took, at) = request.await?;
        accepted.extend(took);
        sent_at.push(at);
    }
    accepted.sort_unstable();
    Ok((accepted, sent_at))
}

/// Milliseconds since the epoch, now.
fn now_millis() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// Waits for each of tasks `burst-<i>` to be Processed, by a few readers (a reader
/// waiting is a load on the server, which a burst's client would not add): when each
/// was (milliseconds since the epoch), by index; `None` for one never Processed.
async fn processed_at(
    server: &Server,
    http: &reqwest::Client,
    tasks: usize,
) -> anyhow::Result<Vec<Option<f64>>> {
    let readers = Arc::new(tokio::sync::Semaphore::new(8));
    let mut waits = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let permit = Arc::clone(&readers).acquire_owned().await?;
        let (http, api) = (http.clone(), server.api.clone());
        waits.push(tokio::spawn(async move {
            let mut end = None;
            for _ in 0..30 {
                let answer = http
                    .get(format!("{api}/tasks/burst-{i}?wait=20s"))
                    .send()
                    .await;
                let Ok(answer) = answer else { continue };
                let task: Value = answer.json().await.unwrap_or_default();
                if task["state"] == "Processed" {
                    end = task["updated_at"].as_str().and_then(epoch_millis);
                    break;
                }
            }
            drop(permit);
            end
        }));
    }
    let mut ends = Vec::with_capacity(tasks);
    for wait in waits {
        ends.push(wait.await?);
    }
    Ok(ends)
}

/// A client for a burst of `senders` requests at once.
fn burst_client(senders: usize) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(senders)
        .timeout(Duration::from_secs(60))
        .build()?)
}

async fn burst(tasks: usize, senders: usize, ingestion: Ingestion) -> anyhow::Result<()> {
    let server = Server::start_with(Durability::Full, ingestion, &[], None, None)?;
    let http = burst_client(senders)?;
    let cpu_before = server.cpu_seconds();
    let began = now_millis();
    let started = Instant::now();
    let (accepted, _) =
        submit_burst(&server, &http, tasks, senders, |i| delivery(DRONE, i)).await?;
    let accept_wall = started.elapsed().as_secs_f64();
    let errors = tasks - accepted.len();
    let ends = processed_at(&server, &http, tasks).await?;
    let lost = ends.iter().filter(|e| e.is_none()).count();
    let last = ends.iter().flatten().fold(began, |a, b| a.max(*b));
    let drained = (last - began) / 1000.0;
    #[allow(clippy::cast_precision_loss)]
    let (accept_rate, processed_rate) = (
        accepted.len() as f64 / accept_wall,
        (tasks - lost) as f64 / drained,
    );
    println!(
        "engine=sas-local mode=burst ingestion={} tasks={tasks} senders={senders} accepted={} errors={errors} accept_wall_s={accept_wall:.2} accept_per_s={accept_rate:.0} accept_p50_ms={:.2} accept_p99_ms={:.2} accept_max_ms={:.2} drained_s={drained:.2} processed_per_s={processed_rate:.0} lost={lost} server_cpu_s={:.1} durability=full",
        ingestion.name(),
        accepted.len(),
        quantile(&accepted, 0.5),
        quantile(&accepted, 0.99),
        accepted
            .last()
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0),
        server.cpu_seconds() - cpu_before,
    );
    Ok(())
}

/// The mock services' count of calls to `service`, and its peak of calls at once.
async fn mock_calls(mock: &str, http: &reqwest::Client, service: &str) -> (u64, u64) {
    let calls: Value = match http.get(format!("{mock}/calls?of={service}")).send().await {
        Ok(answer) => answer.json().await.unwrap_or_default(),
        Err(_) => Value::Null,
    };
    (
        calls["calls"][service].as_u64().unwrap_or(0),
        calls["concurrency"][service]["peak"].as_u64().unwrap_or(0),
    )
}

/// A buffered burst of drone deliveries against a drone service limited to
/// `max_concurrency` calls at once (0: none), each call `latency_ms` long: one line.
async fn limits(
    tasks: usize,
    max_concurrency: u32,
    latency_ms: u64,
    urgent_percent: usize,
    senders: usize,
) -> anyhow::Result<()> {
    let services = (max_concurrency > 0)
        .then(|| json!({ "drone": { "max_concurrency": max_concurrency } }).to_string());
    let server = Server::start_with(
        Durability::Full,
        Ingestion::Buffered,
        &[],
        None,
        services.as_deref(),
    )?;
    let http = burst_client(senders)?;
    http.put(format!("{}/faults/drone", server.mock))
        .json(&json!({ "latency_ms": latency_ms }))
        .send()
        .await?
        .error_for_status()?;
    // One task in every `every` is urgent, spread evenly through the burst.
    let every = 100 / urgent_percent.clamp(1, 100);
    let urgent = |i: usize| i % every == every / 2;
    // The account service's calls, counted as they come: when the first and the last
    // of the burst's were made.
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let (http, watching) = (http.clone(), Arc::clone(&watching));
        let mock = server.mock.clone();
        tokio::spawn(async move {
            let (mut first, mut last) = (None, None);
            while watching.load(Ordering::Relaxed) {
                let (calls, _) = mock_calls(&mock, &http, "account").await;
                let now = Instant::now();
                if calls > 0 && first.is_none() {
                    first = Some(now);
                }
                if calls as usize >= tasks && last.is_none() {
                    last = Some(now);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            first.zip(last).map(|(first, last)| last - first)
        })
    };
    let (accepted, sent_at) = submit_burst(&server, &http, tasks, senders, |i| {
        let mut body = delivery(DRONE, i);
        if urgent(i) {
            body["priority"] = json!(1);
        }
        body
    })
    .await?;
    let ends = processed_at(&server, &http, tasks).await?;
    watching.store(false, Ordering::Relaxed);
    let account_span = watcher.await?;
    let (drone_calls, drone_peak) = mock_calls(&server.mock, &http, "drone").await;
    let mut took = (Vec::new(), Vec::new());
    for (i, end) in ends.iter().enumerate() {
        let Some(end) = end else { continue };
        let time = Duration::from_secs_f64((end - sent_at[i]).max(0.0) / 1000.0);
        if urgent(i) { &mut took.0 } else { &mut took.1 }.push(time);
    }
    took.0.sort_unstable();
    took.1.sort_unstable();
    let lost = ends.iter().filter(|e| e.is_none()).count();
    let drained = (ends.iter().flatten().fold(0.0_f64, |a, b| a.max(*b))
        - sent_at.iter().copied().fold(f64::MAX, f64::min))
        / 1000.0;
    #[allow(clippy::cast_precision_loss)]
    let account_per_s = account_span.map_or(f64::NAN, |span| tasks as f64 / span.as_secs_f64());
    #[allow(clippy::cast_precision_loss)]
    let drone_per_s = drone_calls as f64 / drained;
    let seconds = |sorted: &[Duration], q: f64| quantile(sorted, q) / 1000.0;
    println!(
        "engine=sas-local mode=limits ingestion=buffered tasks={tasks} accepted={} drone_max_concurrency={max_concurrency} drone_latency_ms={latency_ms} drone_peak={drone_peak} drone_calls={drone_calls} drone_calls_per_s={drone_per_s:.0} account_calls_per_s={account_per_s:.0} urgent={} p1_p50_s={:.2} p1_p99_s={:.2} p3_p50_s={:.2} p3_p99_s={:.2} drained_s={drained:.1} lost={lost} durability=full",
        accepted.len(),
        took.0.len(),
        seconds(&took.0, 0.5),
        seconds(&took.0, 0.99),
        seconds(&took.1, 0.5),
        seconds(&took.1, 0.99),
    );
    Ok(())
}

/// `n` in base 36: 10,000 ids in at most three characters each.
fn base36(mut n: usize) -> String {
    let mut digits = Vec::new();
    loop {
        digits.push(char::from_digit((n % 36) as u32, 36).unwrap_or('0'));
        n /= 36;
        if n == 0 {
            return digits.iter().rev().collect();
        }
    }
}

/// A parcel order of `parcels` parcels, as `parcel-order` or `parcel-order-by-id` takes it.
fn parcel_order(parcels: usize, by_id: bool) -> Value {
    if !by_id {
        return sas_tests::parcel_order("order", parcels);
    }
    let ids: Vec<String> = (0..parcels).map(base36).collect();
    json!({
        "workflow": "parcel-order-by-id",
        "input": {"order_id": "order", "customer_id": "c-1", "dropoff": "Bondi", "weight_kg": 1.5, "parcels": ids},
    })
}

/// One parcel order of `parcels` parcels, submitted and waited for until Processed.
async fn map(parcels: usize, by_id: bool, durability: Durability) -> anyhow::Result<()> {
    let workflows = sas_tests::aws::repository().join("tests/tools/workflows");
    let server = Server::start_with(durability, Ingestion::Direct, &[], Some(&workflows), None)?;
    let order = parcel_order(parcels, by_id);
    let body = order.to_string();
    let body_bytes = body.len();
    let http = reqwest::Client::new();
    let cpu_before = server.cpu_seconds();
    let began = std::time::SystemTime::now();
    let started = Instant::now();
    let put = http
        .put(format!("{}/tasks/order", server.api))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    anyhow::ensure!(
        put.status() == 202,
        "the order of {body_bytes} bytes refused: {} {}",
        put.status(),
        put.text().await?
    );
    let task = loop {
        let task: Value = http
            .get(format!("{}/tasks/order?wait=20s", server.api))
            .send()
            .await?
            .json()
            .await?;
        match task["state"].as_str() {
            Some("Processed") => break task,
            Some("Error") => anyhow::bail!("the order failed: {task}"),
            _ => {}
        }
    };
    let wall = started.elapsed().as_secs_f64();
    let (cpu, peak_rss) = (server.cpu_seconds() - cpu_before, server.peak_rss_mb());
    // When each child ended (its last write), from the submission.
    let began = began.duration_since(std::time::UNIX_EPOCH)?.as_secs_f64() * 1000.0;
    let children = sas_tests::all_children("order", "deliver-each", 100, async |path| {
        let answer = http
            .get(format!("{}{path}", server.api))
            .send()
            .await
            .expect("a page of children");
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap_or_default())
    })
    .await;
    let mut ended: Vec<Duration> = children
        .iter()
        .filter_map(|child| epoch_millis(child["updated_at"].as_str()?))
        .map(|at| Duration::from_secs_f64((at - began).max(0.0) / 1000.0))
        .collect();
    ended.sort_unstable();
    let step = &task["steps"][1];
    let at = |field: &str| step[field].as_str().and_then(epoch_millis);
    let map_s = at("finished_at")
        .zip(at("started_at"))
        .map_or(f64::NAN, |(end, start)| (end - start) / 1000.0);
    let last = quantile(&ended, 1.0) / 1000.0;
    #[allow(clippy::cast_precision_loss)]
    let (joined_rate, ended_rate) = (parcels as f64 / wall, parcels as f64 / last);
    println!(
        "engine=sas-local mode=map workflow={} parcels={parcels} body_bytes={body_bytes} succeeded={} failed={} \
         submission_to_processed_s={wall:.2} map_step_s={map_s:.2} children_per_s={joined_rate:.0} \
         children_ended_p50_s={:.2} children_ended_p99_s={:.2} last_child_ended_s={last:.2} \
         children_ended_per_s={ended_rate:.0} server_cpu_s={cpu:.1} server_peak_rss_mb={peak_rss:.1} durability={}",
        order["workflow"].as_str().unwrap_or_default(),
        step["output"]["succeeded"],
        step["output"]["failed"],
        quantile(&ended, 0.5) / 1000.0,
        quantile(&ended, 0.99) / 1000.0,
        durability.name(),
    );
    Ok(())
}

/// Names the scheduler's queues, for an app the sweep runs over.
fn queue_names() -> anyhow::Result<sas_core::app::QueueNames> {
    let name = |n: &str| sas_domain::ids::QueueName::parse(n).context("queue");
    Ok(sas_core::app::QueueNames {
        scheduler: name("scheduler")?,
        agent_requests: name("agent-requests")?,
        agent_responses: name("agent-responses")?,
    })
}

/// Writes `tasks` drone deliveries to `store`, `at_once` at a time, `expired_percent`
/// of them with a lease expired at `now`, the others' running an hour; returns how
/// long it took.
async fn load_leases(
    store: &Arc<dyn sas_core::ports::StateStore>,
    tasks: usize,
    expired_percent: usize,
    now: sas_domain::time::Timestamp,
    at_once: usize,
) -> anyhow::Result<Duration> {
    use sas_domain::decide::submit;
    use sas_domain::ids::TaskId;
    use sas_domain::submission::Submission;
    use sas_domain::workflow::Registry;

    let drone = Registry::built_in()
        .latest("drone-delivery")
        .context("drone delivery")?;
    let expired_every = 100 / expired_percent.clamp(1, 100);
    let loading = Instant::now();
    let mut writes = Vec::new();
    for i in 0..tasks {
        let submission = Submission::new(
            TaskId::parse(format!("t{i}"))?,
            delivery(DRONE, i)["input"].clone(),
        );
        let (mut task, order, _) = submit(&drone, submission, now);
        task.complete_by = Some(if i % expired_every == 0 {
            now.plus(Duration::ZERO)
        } else {
            now.plus(Duration::from_secs(3600))
        });
        let store = Arc::clone(store);
        writes.push(tokio::spawn(
            async move { store.create(&task, &order).await },
        ));
        if writes.len() == at_once {
            for write in writes.drain(..) {
                write.await??;
            }
        }
    }
    for write in writes {
        write.await??;
    }
    Ok(loading.elapsed())
}

/// A store of `tasks` drone deliveries, `expired_percent` of them with an expired
/// lease, then the supervisor's sweeps until none is left expired.
async fn sweep(tasks: usize, expired_percent: usize, store: SweptStore) -> anyhow::Result<()> {
    use sas_core::app::{App, Ports};
    use sas_core::clock::{Clock, WallClock};
    use sas_core::ports::{ExpiredCursor, LeaseIndex};
    use sas_domain::workflow::Registry;
    use sas_embedded::Embedded;

    let data = tempfile::tempdir()?;
    let path = data.path().join("state.db");
    let embedded = Arc::new(Embedded::open(
        &path,
        Arc::new(WallClock),
        sas_embedded::Durability::Process,
    )?);
    if store == SweptStore::Dynamodb {
        return sweep_on_moto(tasks, expired_percent, embedded).await;
    }
    let now = WallClock.now();
    let loaded = load_leases(
        &(Arc::clone(&embedded) as _),
        tasks,
        expired_percent,
        now,
        512,
    )
    .await?;
    let ports = Ports::of(&embedded, Arc::new(WallClock));
    let app = App::new(
        ports,
        Arc::new(Registry::built_in()),
        queue_names()?,
        "bench".into(),
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    let started = Instant::now();
    let probe = Instant::now();
    let found = embedded
        .expired(WallClock.now(), usize::MAX, &ExpiredCursor::default())
        .await?
        .tasks
        .len();
    let query = probe.elapsed();
    let recovered: usize = app.sweep(100).await?.values().sum();
    let swept = started.elapsed();
    // Opened again, the store reads its leases back (through the index on `leased`).
    drop((app, embedded));
    let opening = Instant::now();
    drop(Embedded::open(
        &path,
        Arc::new(WallClock),
        sas_embedded::Durability::Process,
    )?);
    let reopened = opening.elapsed();
    println!(
        "engine=sas-local mode=sweep tasks={tasks} expired={found} recovered={recovered} expiry_query_ms={:.2} sweep_ms={:.1} \
         load_s={:.1} reopen_ms={:.1}",
        query.as_secs_f64() * 1000.0,
        swept.as_secs_f64() * 1000.0,
        loaded.as_secs_f64(),
        reopened.as_secs_f64() * 1000.0,
    );
    Ok(())
}

/// The sweep over DynamoDB on moto, with the deployment's defaults (8 lease shards,
/// 60 s buckets, batches of 100), the queues in `embedded`: the DynamoDB requests of
/// one pass, as moto's recorder saw them.
async fn sweep_on_moto(
    tasks: usize,
    expired_percent: usize,
    embedded: Arc<sas_embedded::Embedded>,
) -> anyhow::Result<()> {
    use sas_aws::store::DynamoStore;
    use sas_core::app::{App, Ports};
    use sas_core::clock::{Clock, WallClock};
    use sas_core::ports::NoMetrics;
    use sas_domain::workflow::Registry;
    use sas_lambda::config::TableSettings;
    use sas_tests::aws::{Moto, create_table, emulator};

    let recording = tempfile::NamedTempFile::new()?;
    let recording_path = recording.path().to_str().context("path")?.to_owned();
    let moto = Moto::start_with(&[("MOTO_RECORDER_FILEPATH", recording_path.as_str())]);
    let sdk = emulator::sdk(&moto.endpoint);
    create_table(&aws_sdk_dynamodb::Client::new(&sdk), "sweep").await;
    let settings = TableSettings {
        table: "sweep".into(),
        lease_shards: 8,
        lease_bucket: Duration::from_secs(60),
        retention: Duration::from_secs(30 * 86_400),
    };
    let store: Arc<dyn sas_core::ports::StateStore> = Arc::new(DynamoStore::new(&sdk, settings));
    // One at a time: moto's transactions at once fail ("dictionary changed size
    // during iteration").
    let loaded = load_leases(&store, tasks, expired_percent, WallClock.now(), 1).await?;
    let ports = Ports {
        store,
        queues: Arc::clone(&embedded) as _,
        alerts: embedded,
        metrics: Arc::new(NoMetrics),
        clock: Arc::new(WallClock),
    };
    let app = App::new(
        ports,
        Arc::new(Registry::built_in()),
        queue_names()?,
        "bench".into(),
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    let recorder = |action: &'static str| {
        let url = format!("{}/moto-api/recorder/{action}", moto.endpoint);
        async move { reqwest::Client::new().post(url).send().await }
    };
    recorder("start-recording").await?;
    let started = Instant::now();
    let report = app.sweep(100).await?;
    let swept = started.elapsed();
    recorder("stop-recording").await?;

    let mut requests: std::collections::BTreeMap<String, usize> = Default::default();
    let (mut expiry_queries, mut consistent_reads) = (0, 0);
    for recorded in sas_tools::recording::requests(&std::fs::read_to_string(&recording_path)?) {
        let request = &recorded.request;
        if request["IndexName"] == "expiry" {
            expiry_queries += 1;
        }
        for table in request["RequestItems"].as_object().into_iter().flatten() {
            if table.1["ConsistentRead"] == true {
                consistent_reads += table.1["Keys"].as_array().map_or(0, Vec::len);
            }
        }
        *requests.entry(recorded.operation).or_default() += 1;
    }
    println!(
        "engine=dynamodb-moto mode=sweep tasks={tasks} recovered={} sweep_s={:.1} load_s={:.1} \
         expiry_queries={expiry_queries} consistent_record_reads={consistent_reads} requests={requests:?}",
        report.values().sum::<usize>(),
        swept.as_secs_f64(),
        loaded.as_secs_f64(),
    );
    Ok(())
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
        Benchmark::Run {
            tasks,
            concurrency,
            warmup,
            durability,
            ingestion,
            parallel,
            service_latency_ms,
            services,
            mode,
            under,
        } => {
            let load = Load {
                tasks,
                concurrency,
                warmup,
                workflow: if parallel {
                    "drone-delivery-parallel"
                } else {
                    DRONE
                },
                service_latency_ms,
                services,
                mode,
            };
            println!(
                "{}",
                measure(load, durability, ingestion, &under).await?.line
            );
            Ok(())
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
            tasks,
            tasks_at_one,
            services,
            mode,
        } => compare(&peers, rounds, tasks, tasks_at_one, services, mode).await,
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
        Benchmark::Flush {
            bytes,
            flushes,
            rounds,
        } => flush(&bytes, flushes, rounds),
        Benchmark::Remote => remote().await,
    }
}

/// [`Benchmark::Flush`].
fn flush(sizes: &[usize], flushes: usize, rounds: usize) -> anyhow::Result<()> {
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
