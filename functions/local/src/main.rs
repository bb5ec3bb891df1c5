//! `sas-local`: the whole system on this machine. Configuration is by `SAS_*`
//! environment variables (the book, `docs/src/deploying/settings.md`); the first line on stdout gives the
//! addresses, for scripts and tests.

use std::sync::Arc;

use clap::Parser;
use sas_core::clock::WallClock;
use sas_local::polling::Polling;
use tracing_subscriber::EnvFilter;

/// The whole system on this machine: the HTTP API, the scheduler, the agents, the
/// supervisor and mock remote services, on an embedded durable store.
///
/// It takes no arguments: its settings are environment variables, all optional.
#[derive(Parser)]
#[command(version, after_help = SETTINGS)]
struct Arguments {}

const SETTINGS: &str = "\
Settings (every one in the book, docs/src/deploying/settings.md):
  SAS_API_ADDR               the API [127.0.0.1:8080; port 0: any free port]
  SAS_MOCK_ADDR              the mock services [127.0.0.1:8081; off: none]
  SAS_DATA_DIR               the databases [.sas-data]
  SAS_WORKFLOWS_DIR          more workflow definitions
  SAS_DURABILITY             full: fsync at every commit; process: survives kill -9 [full]
  SAS_INGESTION              direct or buffered [direct]
  SAS_POLL_BEFORE_SLEEP      how long the worker polls for work before it sleeps
                             [200us; 0s: at once]
  SAS_SERVICE_URL_<AGENT>    a real service's base URL, in place of the mock
  SAS_SERVICES               services with their settings, as JSON
  SAS_AUTH_JWKS, SAS_AUTH_DEV_KEY, SAS_AUTH_ISSUER, SAS_AUTH_AUDIENCE
                             callers' tokens checked; without a key the API is open
  AWS_REGION, SAS_ACCOUNT_ID the region and account in Step Functions' ARNs
                             [us-east-1, 000000000000]
  RUST_LOG                   the log filter [info]
  OTEL_EXPORTER_OTLP_ENDPOINT
                             where tasks' traces go over OTLP/HTTP, with the other
                             standard OTEL_* settings [none]

The first line on stdout gives the addresses: sas-local ready: api=... mock=... data=...";

/// Many small allocations per step (JSON, HTTP, SQL rows) across threads: mimalloc
/// spends a fraction of the CPU the system allocator does on them. It is built
/// without transparent huge pages (`no_thp`): asked for them, the kernel zeroed 2 MiB
/// at each first touch of a fresh arena page, 4% of the server's CPU at 64 clients
/// and a fifth of its p99 (`bench/HISTORY.md`, "Without transparent huge pages").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One worker thread for every function and the HTTP servers, unless
/// `TOKIO_WORKER_THREADS` says otherwise: beside the embedded store's writer thread,
/// which takes the commits (and their fsyncs) off it under load, and the agents'
/// calls' thread (`calls_thread`), that is a pipeline over two cores. A second worker
/// costs more in wake-ups and stolen tasks between the two than it brings
/// (`bench/HISTORY.md`, "After one worker thread and commits on the caller's thread").
fn main() -> anyhow::Result<()> {
    Arguments::parse();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    let polling = Polling::new(sas_local::poll_before_sleep()?, &mut builder);
    let runtime = builder
        .worker_threads(sas_local::worker_threads()?.get())
        .enable_all()
        .build()?;
    polling.start(runtime.handle());
    runtime.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = sas_local::Config::from_env()?;
    sas_domain::machine::set_place(&config.place.0, &config.place.1);
    let data_dir = config.settings.data_dir.clone();
    let durability = config.settings.durability;
    tracing::info!("the API is {}", config.authentication.describe());
    let running = sas_local::start(config, Arc::new(WallClock)).await?;
    let mock = running
        .mock
        .map_or_else(|| "off".to_owned(), |a| format!("http://{a}"));
    println!(
        "sas-local ready: api=http://{} mock={mock} data={} durability=\"{}\"",
        running.api,
        data_dir.display(),
        durability.describe()
    );
    shutdown_signal().await;
    tracing::info!("stopping");
    running.system.stop().await;
    Ok(())
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
