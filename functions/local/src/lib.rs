//! The whole pattern in one local process: the HTTP API, the scheduler, the
//! agents and the supervisor over the embedded durable backend, and mock remote
//! services with fault injection.
//!
//! Assembles `sas-core`'s actors over `sas-embedded`, `sas-http-remote` and
//! `sas-mock-services`; links nothing of AWS's.

pub mod auth;
mod calls_thread;
pub mod polling;
pub mod runtime;
pub mod server;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use sas_core::clock::Clock;
use sas_domain::services::{self, Service};
use sas_embedded::Durability;

pub use runtime::{Ingestion, Settings, System};

/// Where the local process listens, and how its system is set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// The API's address.
    pub api_addr: SocketAddr,
    /// The mock services' address; `None` to run without them.
    pub mock_addr: Option<SocketAddr>,
    /// Whether the mock services fsync the effects they record.
    pub mock_durable: bool,
    /// The system's settings. Services with no URL are the mock services'.
    pub settings: Settings,
    /// Who may call the API.
    pub authentication: Arc<auth::Authentication>,
    /// The region and account Step Functions' ARNs name (`AWS_REGION`,
    /// `SAS_ACCOUNT_ID`).
    pub place: (String, String),
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn parsed<T: std::str::FromStr>(name: &str, default: T) -> anyhow::Result<T>
where
    T::Err: std::fmt::Display,
{
    match var(name) {
        Some(text) => text
            .parse()
            .map_err(|e| anyhow::anyhow!("{name}={text}: {e}")),
        None => Ok(default),
    }
}

fn duration(name: &str, default: Duration) -> anyhow::Result<Duration> {
    match var(name) {
        Some(text) => {
            humantime::parse_duration(&text).map_err(|e| anyhow::anyhow!("{name}={text}: {e}"))
        }
        None => Ok(default),
    }
}

/// The runtime's worker threads: `TOKIO_WORKER_THREADS`, or one (`main.rs` says why).
/// Read here rather than by tokio, which panics on a value it cannot take.
///
/// # Errors
/// A value that is not a whole number of threads, 1 or more, by name.
pub fn worker_threads() -> anyhow::Result<std::num::NonZeroUsize> {
    parsed("TOKIO_WORKER_THREADS", std::num::NonZeroUsize::MIN)
}

/// How long the worker thread keeps polling for work after its last before it
/// sleeps (`polling`): `SAS_POLL_BEFORE_SLEEP`, 200 µs unless it says otherwise;
/// with more than one worker thread, none.
///
/// # Errors
/// A value that is not a duration, by name.
pub fn poll_before_sleep() -> anyhow::Result<Duration> {
    let budget = duration("SAS_POLL_BEFORE_SLEEP", Duration::from_micros(200))?;
    Ok(if worker_threads()?.get() == 1 {
        budget
    } else {
        Duration::ZERO
    })
}

impl Config {
    /// Reads the configuration from `SAS_*` environment variables; every one has a
    /// default (the book, `docs/src/deploying/settings.md`).
    ///
    /// # Errors
    /// A variable that does not parse, by name.
    pub fn from_env() -> anyhow::Result<Self> {
        let durability = match var("SAS_DURABILITY").as_deref() {
            None | Some("full") => Durability::Full,
            Some("process") => Durability::Process,
            Some(other) => anyhow::bail!("SAS_DURABILITY={other}: expected 'full' or 'process'"),
        };
        let mock_addr = match var("SAS_MOCK_ADDR").as_deref() {
            Some("off") => None,
            Some(addr) => Some(
                addr.parse()
                    .with_context(|| format!("SAS_MOCK_ADDR={addr}"))?,
            ),
            None => Some(SocketAddr::from(([127, 0, 0, 1], 8081))),
        };
        let mut services = match var("SAS_SERVICES") {
            Some(json) => {
                services::parse(&json).map_err(|e| anyhow::anyhow!("SAS_SERVICES: {e}"))?
            }
            None => HashMap::new(),
        };
        services.extend(std::env::vars().filter_map(|(key, url)| {
            let agent = key.strip_prefix("SAS_SERVICE_URL_")?;
            Some((
                agent.to_ascii_lowercase().replace('_', "-"),
                Service::at(url),
            ))
        }));
        let mock_durable = match var("SAS_MOCK_DURABILITY").as_deref() {
            None | Some("full") => true,
            Some("off") => false,
            Some(other) => anyhow::bail!("SAS_MOCK_DURABILITY={other}: expected 'full' or 'off'"),
        };
        let region = var("AWS_REGION").unwrap_or_else(|| "us-east-1".to_owned());
        if !region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            anyhow::bail!("AWS_REGION={region}: expected a region's name, such as eu-west-1");
        }
        let account = var("SAS_ACCOUNT_ID").unwrap_or_else(|| "000000000000".to_owned());
        if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) {
            anyhow::bail!("SAS_ACCOUNT_ID={account}: expected an account id of 12 digits");
        }
        Ok(Self {
            place: (region, account),
            authentication: Arc::new(auth::Authentication::from_vars(var)?),
            mock_durable,
            api_addr: parsed("SAS_API_ADDR", SocketAddr::from(([127, 0, 0, 1], 8080)))?,
            mock_addr,
            settings: Settings {
                data_dir: PathBuf::from(var("SAS_DATA_DIR").unwrap_or_else(|| ".sas-data".into())),
                workflows_dir: var("SAS_WORKFLOWS_DIR").map(PathBuf::from),
                durability,
                supervisor_interval: Some(duration(
                    "SAS_SUPERVISOR_INTERVAL",
                    Duration::from_secs(1),
                )?),
                scheduler_concurrency: parsed("SAS_SCHEDULER_CONCURRENCY", 32)?,
                ingest_concurrency: parsed("SAS_INGEST_CONCURRENCY", 8)?,
                agent_concurrency: parsed("SAS_AGENT_CONCURRENCY", 64)?,
                max_receive_count: parsed("SAS_MAX_RECEIVE_COUNT", 5)?,
                services,
                services_fallback: None,
                ingestion: match var("SAS_INGESTION").as_deref() {
                    None | Some("direct") => Ingestion::Direct,
                    Some("buffered") => Ingestion::Buffered,
                    Some(other) => {
                        anyhow::bail!("SAS_INGESTION={other}: expected 'direct' or 'buffered'")
                    }
                },
            },
        })
    }
}

/// The running process: its addresses and its parts.
pub struct Running {
    /// Where the API listens.
    pub api: SocketAddr,
    /// Where the mock services listen.
    pub mock: Option<SocketAddr>,
    /// The mock services.
    pub mocks: Option<sas_mock_services::Shared>,
    /// The actors.
    pub system: System,
}

/// Binds the listeners and starts everything.
///
/// # Errors
/// When an address cannot be bound or the system cannot start.
pub async fn start(mut config: Config, clock: Arc<dyn Clock>) -> anyhow::Result<Running> {
    std::fs::create_dir_all(&config.settings.data_dir)
        .with_context(|| format!("cannot create {}", config.settings.data_dir.display()))?;
    let (mock, mocks) = match config.mock_addr {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} for the mock services"))?;
            let addr = listener.local_addr()?;
            let mocks = sas_mock_services::MockServices::open(
                &config.settings.data_dir.join("mock-services.db"),
                fastrand::u64(..),
                config.mock_durable,
            )
            .context("cannot open the mock services' database")?;
            server::spawn(listener, sas_mock_services::router(Arc::clone(&mocks)));
            config.settings.services_fallback = Some(format!("http://{addr}"));
            (Some(addr), Some(mocks))
        }
        None => (None, None),
    };
    let system = System::start(config.settings, clock).await?;
    let listener = tokio::net::TcpListener::bind(config.api_addr)
        .await
        .with_context(|| format!("cannot listen on {} for the API", config.api_addr))?;
    let api = listener.local_addr()?;
    let shared = server::Shared {
        app: Arc::clone(&system.app),
        backend: Arc::clone(&system.backend),
        authentication: config.authentication,
    };
    server::spawn(listener, server::router(shared, api));
    Ok(Running {
        api,
        mock,
        mocks,
        system,
    })
}
