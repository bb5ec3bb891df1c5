//! `bench run`: the closed loop, each client submitting a task, waiting for its end
//! and taking the next, in one request or two; what it measured.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::ValueEnum;
use sas_tools::Ingestion;
use serde_json::json;
use tokio::sync::Mutex;

use super::server::{
    AGENTS, DRONE_ASL, DRONE_ASL_HTTP, Durability, Launch, RemoteService, STEPS, Server, Services,
    cpu_seconds_of, delivery_at, host_ticks, tool_workflows,
};
use super::stats::{number_in, quantile};

/// How a client asks for a task and its end: the peers' `bench.sh` modes of the same
/// names.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Mode {
    /// Two requests: the submission, answered once the task is written, then
    /// `GET /tasks/{id}?wait=20s`.
    Attach,
    /// One request: `PUT /tasks/{id}?wait=20s`, answered with the task's end.
    Call,
}

impl Mode {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Attach => "attach",
            Self::Call => "call",
        }
    }
}

/// Where a run's clients send: the server's API, and the remote services' base URL
/// (empty with the services built in).
#[derive(Clone)]
struct Targets {
    api: String,
    services_at: String,
}

/// One task: submit, then wait for it to finish, in one request or two. Returns
/// (the submission's answer, end to end), or None.
async fn one_task(
    http: &reqwest::Client,
    Targets { api, services_at }: &Targets,
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
        .json(&delivery_at(load.workflow, i, services_at))
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
    targets: &Targets,
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
            let (http, next, samples, targets, prefix) = (
                http.clone(),
                Arc::clone(&next),
                Arc::clone(&samples),
                targets.clone(),
                prefix.to_owned(),
            );
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= tasks {
                        return;
                    }
                    let outcome =
                        one_task(&http, &targets, load, &format!("{prefix}-{i}"), i).await;
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
pub(super) struct Measured {
    pub(super) tasks_per_s: f64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) line: String,
}

impl Measured {
    /// A number in the line, by its key.
    pub(super) fn field(&self, key: &str) -> Option<f64> {
        number_in(&self.line, key)
    }

    /// Reads a peer's `bench.sh` line (`workflows_per_s=`, `p50_ms=`, `p99_ms=`).
    pub(super) fn parse(line: &str) -> Option<Self> {
        let field = |key: &str| number_in(line, key);
        Some(Self {
            tasks_per_s: field("workflows_per_s")?,
            p50_ms: field("p50_ms")?,
            p99_ms: field("p99_ms")?,
            line: line.to_owned(),
        })
    }
}

/// A closed loop's shape: tasks measured, clients at once, tasks run before.
#[derive(Clone, Copy)]
pub(super) struct Load {
    pub(super) tasks: usize,
    pub(super) concurrency: usize,
    pub(super) warmup: usize,
    /// The workflow each task runs: the drone delivery, straight or with its checks
    /// in parallel.
    pub(super) workflow: &'static str,
    /// Added to every call of every mock service, in milliseconds.
    pub(super) service_latency_ms: u64,
    /// The remote services the steps call.
    pub(super) services: Services,
    /// How a client asks for a task and its end.
    pub(super) mode: Mode,
}

pub(super) async fn measure(
    load: Load,
    durability: Durability,
    ingestion: Ingestion,
    launch: Launch<'_>,
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
    anyhow::ensure!(
        ![DRONE_ASL, DRONE_ASL_HTTP].contains(&workflow) || services == Services::Apart,
        "the state machine's functions and APIs are played by the service apart (--services apart)"
    );
    let remote = match services {
        Services::Apart => Some(RemoteService::start()?),
        Services::Builtin => None,
    };
    let settings = remote.as_ref().map(RemoteService::settings);
    let server = Server::start_with(
        durability,
        ingestion,
        launch,
        Some(&tool_workflows()),
        settings.as_deref(),
        remote.as_ref().map(|remote| remote.url.as_str()),
    )?;
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
    let targets = Targets {
        api: server.api.clone(),
        services_at: remote
            .as_ref()
            .map_or_else(String::new, |remote| remote.url.clone()),
    };
    closed_loop(&targets, load, "warmup", warmup).await;
    let cpu_before = server.cpu_seconds();
    let harness_before = Harness::now(remote.as_ref());
    let started = Instant::now();
    let (acks, totals, errors) = closed_loop(&targets, load, "task", tasks).await;
    let wall = started.elapsed().as_secs_f64();
    let cpu = server.cpu_seconds() - cpu_before;
    let harness = Harness::now(remote.as_ref()).since(&harness_before, wall);
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
         p50_ms={:.2} p99_ms={:.2} max_ms={:.2}{acknowledged} server_cpu_s={cpu:.2} server_cpu_pct={:.0}{harness} \
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

/// What the rest of the machine did while the server ran: the service apart's CPU,
/// this process's (the clients'), and the machine's busy share, as the peers' lines
/// give theirs.
struct Harness {
    services_cpu_s: Option<f64>,
    driver_cpu_s: f64,
    host: (f64, f64, usize),
}

impl Harness {
    fn now(remote: Option<&RemoteService>) -> Self {
        Self {
            services_cpu_s: remote.map(RemoteService::cpu_seconds),
            driver_cpu_s: cpu_seconds_of("self"),
            host: host_ticks(),
        }
    }

    /// The fields of a run's line (` services_cpu_pct=… driver_cpu_pct=…
    /// host_busy_pct=BUSY/ALL`), from `before` to this, over `wall` seconds.
    fn since(&self, before: &Self, wall: f64) -> String {
        let pct = |seconds: f64| seconds / wall * 100.0;
        let services = (self.services_cpu_s.zip(before.services_cpu_s))
            .map(|(now, then)| format!(" services_cpu_pct={:.0}", pct(now - then)))
            .unwrap_or_default();
        let (busy, total) = (self.host.0 - before.host.0, self.host.1 - before.host.1);
        #[allow(clippy::cast_precision_loss)]
        let all = self.host.2 as f64 * 100.0;
        let busy = if total > 0.0 { busy / total * all } else { 0.0 };
        format!(
            "{services} driver_cpu_pct={:.0} host_busy_pct={busy:.0}/{all:.0}",
            pct(self.driver_cpu_s - before.driver_cpu_s)
        )
    }
}
