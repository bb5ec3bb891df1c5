//! What the four Lambda functions share: configuration from the environment,
//! clients built once per cold start, and the translation of Lambda events into
//! calls of the actors and of their outcomes back (HTTP responses, partial batch
//! failures). Each function's `main` is a few lines over this, on a current-thread
//! runtime: an instance handles one event at a time, its work (the records of a batch
//! at once) waits on the network, and no worker threads are started at a cold start.
//!
//! Here: [`config`] (the environment), [`sdk`] (the SDK's configuration and clients),
//! [`events`] (Lambda's events to the actors and back), [`sqs`] (the queues port),
//! [`metrics`] (the metrics port, as EMF lines), [`payloads`] (the values stored apart,
//! in S3), [`init`], which starts a function, and [`telemetry`], its exporter of
//! tasks' traces, which sends an invocation's spans before it ends ([`flushing`]). Depends on `sas-core`, the Lambda
//! runtime and the SQS and S3 clients; the state store and the alerts are `sas-aws`'s,
//! the remote calls `sas-http-remote`'s, so that the agent function links neither
//! DynamoDB nor SNS.

pub mod config;
#[cfg(test)]
mod conformance;
#[cfg(any(test, feature = "test-util"))]
pub mod emulator;
pub mod events;
pub mod metrics;
pub mod payloads;
pub mod sdk;
pub mod sqs;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use aws_types::SdkConfig;
use sas_core::app::QueueNames;
use sas_core::ports::{Chain, QueueError};
use sas_domain::workflow::{Registry, RegistryError};
use sas_telemetry::Telemetry;
use serde_json::json;
use tracing::error;

use crate::config::{Config, ConfigError};
use crate::sdk::sdk_config;
use crate::sqs::{Sqs, queue_name};

/// Why the functions could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is incomplete.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A workflow definition is invalid.
    #[error(transparent)]
    Workflows(#[from] RegistryError),
    /// A queue URL is not one.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// What every function starts with: JSON logs, the configuration and the SDK's
/// configuration from the environment, then `build`, which builds only the actor the
/// function runs (`sas_aws::app` or `sas_agent::step_caller`), so that its binary
/// links only the clients that actor uses. What fails is logged and reported to
/// Lambda as the function's init error, whose message (naming the variable missing or
/// invalid) the console and the logs then show, and the process ends.
pub async fn init<T>(build: impl FnOnce(&Config, &SdkConfig) -> Result<T, StartError>) -> T {
    lambda_runtime::tracing::init_default_subscriber();
    let lookup = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let built = Config::from_lookup(lookup)
        .map_err(StartError::from)
        .map(|mut config| {
            config.workflows_dir = packaged_workflows(lookup("LAMBDA_TASK_ROOT"));
            // Step Functions' ARNs name the stack's region (Lambda's own variable) and
            // account (its alert topic's).
            let region = lookup("AWS_REGION").unwrap_or_else(|| "us-east-1".to_owned());
            let account = config.alert_topic_arn.split(':').nth(4).unwrap_or_default();
            sas_domain::machine::set_place(&region, account);
            config
        })
        .and_then(|config| Ok((config, sdk_config(lookup)?)))
        .and_then(|(config, sdk)| build(&config, &sdk));
    match built {
        Ok(built) => built,
        Err(error) => {
            error!(error = %Chain(&error), "the function cannot start");
            report_init_error(&error).await;
            std::process::exit(1)
        }
    }
}

/// The OpenTelemetry settings the SAM template and the CDK construct set on every
/// function (from `TraceExportEndpoint` and `TraceExportProtocol`): where the spans
/// go, and how. The exporter reads them with the rest of the standard's
/// ([`telemetry`]); empty, nothing is exported.
pub const TRACE_EXPORT_SETTINGS: [&str; 2] =
    ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL"];

/// The function's exporter of tasks' traces, when the `OTEL_*` settings ask for one
/// (an OTLP endpoint: the ADOT layer's collector, or one of your own), built at the
/// first call. Settings it cannot use are logged, and the function runs without it.
pub fn telemetry() -> Option<Arc<Telemetry>> {
    static TELEMETRY: OnceLock<Option<Arc<Telemetry>>> = OnceLock::new();
    let built = TELEMETRY.get_or_init(|| {
        let name = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| "sas".into());
        Telemetry::from_env(&name)
            .inspect_err(|problem| error!(%problem, "traces are not exported"))
            .ok()
            .flatten()
            .map(Arc::new)
    });
    built.clone()
}

/// Handles an invocation with `handled`, then sends the spans it finished before
/// answering: Lambda freezes the function between invocations, and a span left
/// waiting would be sent at the next one, or never.
pub async fn flushing<T>(handled: impl Future<Output = T>) -> T {
    let answer = handled.await;
    if let Some(telemetry) = telemetry() {
        telemetry.flush().await;
    }
    answer
}

/// Where a deployment's own workflow definitions are: `workflows/` in the function's
/// package, beside its `bootstrap` (under `task_root`), or in a layer's (`/opt/workflows`);
/// `None` when neither exists, and only the built-in ones run.
fn packaged_workflows(task_root: Option<String>) -> Option<PathBuf> {
    task_root
        .map(|root| PathBuf::from(root).join("workflows"))
        .into_iter()
        .chain([PathBuf::from("/opt/workflows")])
        .find(|dir| dir.is_dir())
}

/// Tells Lambda's Runtime API why the function could not start (`/init/error`).
async fn report_init_error(error: &StartError) {
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_none() {
        return;
    }
    let body =
        json!({ "errorType": "Runtime.ConfigError", "errorMessage": Chain(error).to_string() });
    let request = aws_lambda_events::http::Request::builder()
        .method("POST")
        .uri("/2018-06-01/runtime/init/error")
        .header("lambda-runtime-function-error-type", "Runtime.ConfigError")
        .body(lambda_runtime_api_client::body::Body::from(
            body.to_string(),
        ));
    let client = lambda_runtime_api_client::PooledClient::builder().build();
    let reported = match request {
        Ok(request) => client.call(request).await.map(drop),
        Err(e) => Err(e.into()),
    };
    if let Err(e) = reported {
        error!(error = %e, "the init error could not be reported to the Runtime API");
    }
}

/// The three queues by name, and SQS over their URLs.
///
/// # Errors
/// [`QueueError`] when a URL's last segment is not a queue name.
pub fn queues(config: &Config, sdk: &SdkConfig) -> Result<(QueueNames, Arc<Sqs>), QueueError> {
    let names = QueueNames {
        scheduler: queue_name(&config.scheduler_queue_url)?,
        agent_requests: queue_name(&config.agent_request_queue_url)?,
        agent_responses: queue_name(&config.agent_response_queue_url)?,
    };
    let mut known = vec![
        (names.scheduler.clone(), config.scheduler_queue_url.clone()),
        (
            names.agent_requests.clone(),
            config.agent_request_queue_url.clone(),
        ),
        (
            names.agent_responses.clone(),
            config.agent_response_queue_url.clone(),
        ),
    ];
    if let Some(url) = &config.ingest_queue_url {
        known.push((queue_name(url)?, url.clone()));
    }
    Ok((names, Arc::new(Sqs::new(sdk, known))))
}

/// The built-in workflows, and those of `dir` when given: its `*.json` files, in the
/// order of their names.
///
/// # Errors
/// [`StartError::Workflows`] naming the first file unreadable or invalid.
pub fn workflows(dir: Option<&Path>) -> Result<Registry, StartError> {
    let mut files = Vec::new();
    if let Some(dir) = dir {
        let unreadable = |path: &Path, source| RegistryError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| unreadable(dir, e))?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
            .collect();
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path).map_err(|e| unreadable(&path, e))?;
            files.push((path.display().to_string(), text));
        }
    }
    Ok(Registry::with_files(files)?)
}
