//! The system under measure: `sas-local` started on an empty data directory with its
//! settings, the remote service a benchmark may call apart, and the drone delivery
//! every benchmark runs unless told otherwise.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::ValueEnum;
use sas_tools::Ingestion;
use serde_json::{Value, json};

/// Steps of the drone delivery.
pub(super) const STEPS: usize = 5;

/// The remote services a benchmark's steps call.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Services {
    /// The mock services in `sas-local`'s own process, which keep each call's record,
    /// answer with what they received, and take `--service-latency-ms`.
    Builtin,
    /// One remote service in a process of its own, answering `{}` at once to any
    /// call, as the peers' `bench.sh` runs theirs (it answers `ok`): the server's CPU
    /// is then its own work alone, and its records hold what the peers' do.
    Apart,
}

impl Services {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Builtin => "builtin",
            Self::Apart => "apart",
        }
    }
}

/// The agents of the drone delivery, straight or in parallel: each at the remote
/// service when the services are apart, each slowed by `--service-latency-ms` when
/// they are built in.
pub(super) const AGENTS: [&str; 5] = ["account", "package", "transport", "drone", "delivery"];

/// The remote service of `--services apart`, stopped when dropped.
pub(super) struct RemoteService {
    child: Child,
    /// Its base URL: every agent's service, and Lambda's `Invoke` API (it answers
    /// `{}`, a function's payload).
    pub(super) url: String,
}

impl RemoteService {
    pub(super) fn start() -> anyhow::Result<Self> {
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

    /// CPU seconds (user + system) the service has used so far.
    pub(super) fn cpu_seconds(&self) -> f64 {
        cpu_seconds_of(&self.child.id().to_string())
    }

    /// `SAS_SERVICES`: every agent at this service.
    pub(super) fn settings(&self) -> String {
        let services: serde_json::Map<String, Value> = AGENTS
            .iter()
            .map(|agent| ((*agent).to_owned(), json!({ "url": self.url })))
            .collect();
        Value::Object(services).to_string()
    }
}

/// CPU seconds (user + system: `utime` and `stime`, in ticks of 1/100 s) process
/// `pid` (`self`: this one) has used so far.
pub(super) fn cpu_seconds_of(pid: &str) -> f64 {
    let ticks = sas_tools::process_stat_sum(pid, &[11, 12]) as f64;
    ticks / 100.0
}

/// The machine's CPU ticks so far, over all its CPUs: busy (neither idle nor waiting
/// on the disk) and in all (`/proc/stat`'s first line; a guest's time is in its user
/// time already); and how many CPUs it counts them over (its `cpuN` lines).
pub(super) fn host_ticks() -> (f64, f64, usize) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<f64> = (stat.lines().next().unwrap_or_default().split_whitespace())
        .skip(1)
        .take(8)
        .filter_map(|field| field.parse().ok())
        .collect();
    let total: f64 = ticks.iter().sum();
    let waiting: f64 = ticks.iter().skip(3).take(2).sum();
    let one_cpu = |line: &&str| {
        (line.strip_prefix("cpu"))
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    };
    (total - waiting, total, stat.lines().filter(one_cpu).count())
}

impl Drop for RemoteService {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serves `{}` to any call, at once, until killed.
pub(super) async fn remote() -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("remote=http://{}", listener.local_addr()?);
    let router =
        axum::Router::new().fallback(|_body: axum::body::Bytes| async { axum::Json(json!({})) });
    axum::serve(listener, router).await?;
    Ok(())
}

/// When the server's store flushes (`SAS_DURABILITY`).
#[derive(Clone, Copy, ValueEnum)]
pub(super) enum Durability {
    /// At every commit: a commit survives a power cut.
    Full,
    /// At WAL checkpoints: a commit survives kill -9, not a power cut.
    Process,
}

impl Durability {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Process => "process",
        }
    }
}

pub(super) struct Server {
    child: Child,
    pub(super) api: String,
    /// The mock services' base URL.
    pub(super) mock: String,
    /// Stopped with SIGTERM and waited for (it runs under another command).
    graceful: bool,
    _data: tempfile::TempDir,
}

/// How the server is started: which build of `sas-local` (this checkout's, built by
/// cargo beside the bench, or another), and under which command, its words (`strace`,
/// `valgrind --tool=callgrind`), if any.
#[derive(Clone, Copy, Default)]
pub(super) struct Launch<'a> {
    pub(super) under: &'a [String],
    pub(super) build: Option<&'a std::path::Path>,
}

impl Launch<'_> {
    /// The `sas-local` it starts.
    pub(super) fn binary(&self) -> std::path::PathBuf {
        self.build.map_or_else(
            || sas_tests::function_binary("sas-local"),
            std::path::Path::to_path_buf,
        )
    }
}

impl Server {
    pub(super) fn start(durability: Durability) -> anyhow::Result<Self> {
        Self::start_with(
            durability,
            Ingestion::Direct,
            Launch::default(),
            None,
            None,
            None,
        )
    }

    /// The server, with the workflows of `workflows` (`SAS_WORKFLOWS_DIR`) beside the
    /// built-in ones, the services' settings `services` (`SAS_SERVICES`), and Lambda's
    /// API at `lambda` (`AWS_ENDPOINT_URL_LAMBDA`) for state machines' Tasks.
    pub(super) fn start_with(
        durability: Durability,
        ingestion: Ingestion,
        launch: Launch,
        workflows: Option<&std::path::Path>,
        services: Option<&str>,
        lambda: Option<&str>,
    ) -> anyhow::Result<Self> {
        let binary = launch.binary();
        let data = tempfile::tempdir()?;
        let mut command = match launch.under.split_first() {
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
        if let Some(lambda) = lambda {
            command.env("AWS_ENDPOINT_URL_LAMBDA", lambda);
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
            graceful: !launch.under.is_empty(),
            _data: data,
        })
    }

    /// CPU seconds (user + system) the server has used so far.
    pub(super) fn cpu_seconds(&self) -> f64 {
        cpu_seconds_of(&self.child.id().to_string())
    }

    /// The server's peak resident memory, in MiB.
    pub(super) fn peak_rss_mb(&self) -> f64 {
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
pub(super) const DRONE: &str = "drone-delivery";

/// The drone delivery written in the Amazon States Language
/// (`tests/tools/workflows/drone-delivery-asl.asl.json`): its five calls Lambda
/// functions, which the remote service apart plays.
pub(super) const DRONE_ASL: &str = "drone-delivery-asl";

/// The drone delivery in the Amazon States Language with its five calls HTTP Tasks
/// (`tests/tools/workflows/drone-delivery-asl-http.asl.json`, `http:invoke`) at the
/// paths the workflow's steps call, under the base URL its input names
/// (`services_at`): the transport the workflow's steps use, so that what differs
/// from the workflow is the language alone.
pub(super) const DRONE_ASL_HTTP: &str = "drone-delivery-asl-http";

/// The benchmarks' own workflows, beside the built-in ones.
pub(super) fn tool_workflows() -> std::path::PathBuf {
    sas_tests::aws::repository().join("tests/tools/workflows")
}

pub(super) fn delivery(workflow: &str, i: usize) -> Value {
    json!({
        "workflow": workflow,
        "input": {"customer_id": format!("c-{i}"), "pickup": "Sydney", "dropoff": "Bondi", "weight_kg": 1.2},
    })
}

/// A delivery of `workflow` as a client of the run submits it: the services' base URL
/// in its input where the workflow reads it there ([`DRONE_ASL_HTTP`]).
pub(super) fn delivery_at(workflow: &str, i: usize, services_at: &str) -> Value {
    let mut body = delivery(workflow, i);
    if workflow == DRONE_ASL_HTTP {
        body["input"]["services_at"] = json!(services_at);
    }
    body
}
