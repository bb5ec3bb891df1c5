//! What the four Lambda functions share: configuration from the environment,
//! clients built once per cold start, and the translation of Lambda events into
//! calls of the actors and of their outcomes back (HTTP responses, partial batch
//! failures). Each function's `main` is a few lines over this, on a current-thread
//! runtime: an instance handles one event at a time, its work (the records of a batch
//! at once) waits on the network, and no worker threads are started at a cold start.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use aws_lambda_events::encodings::Body;
use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::http::{HeaderValue, header};
use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use aws_smithy_http_client::tls;
use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_types::SdkConfig;
use base64::Engine as _;
use serde_json::{Value, json};
use tracing::{Instrument, error, info_span};

use crate::adapters::dynamodb::{DynamoStore, TableSettings};
use crate::adapters::http_remote::HttpRemote;
use crate::adapters::sns::{EmfMetrics, SnsAlerts};
use crate::adapters::sqs::{Sqs, queue_name};
use crate::agent::Agent;
use crate::api::{self, ApiRequest};
use crate::app::{App, HandleError, Ports, QueueNames};
use crate::domain::agent::BreakerSettings;
use crate::domain::workflow::{Registry, RegistryError};
use crate::ports::QueueError;
use crate::time::WallClock;

/// Every environment variable the functions read: the template and the CDK
/// construct set exactly these.
pub const VARIABLES: [&str; 11] = [
    "TABLE_NAME",
    "SCHEDULER_QUEUE_URL",
    "AGENT_REQUEST_QUEUE_URL",
    "AGENT_RESPONSE_QUEUE_URL",
    "ALERT_TOPIC_ARN",
    "SERVICE_URLS",
    "LEASE_SHARDS",
    "LEASE_BUCKET_SECONDS",
    "TASK_RETENTION_DAYS",
    "SUPERVISOR_BATCH",
    "METRICS_NAMESPACE",
];

/// A variable missing or unusable, by name; reported at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is not set.
    #[error("environment variable {0} is not set")]
    Missing(&'static str),
    /// A variable is set to something unusable.
    #[error("environment variable {0} is invalid: {1}")]
    Invalid(&'static str, String),
}

/// The functions' configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The table, its expiry shards and retention.
    pub table: TableSettings,
    /// The scheduler's queue.
    pub scheduler_queue_url: String,
    /// The agents' request queue.
    pub agent_request_queue_url: String,
    /// The agents' response queue.
    pub agent_response_queue_url: String,
    /// The operators' alert topic.
    pub alert_topic_arn: String,
    /// Remote services by agent name, to base URLs.
    pub services: HashMap<String, String>,
    /// Tasks the supervisor recovers per query.
    pub supervisor_batch: usize,
    /// The CloudWatch namespace of the metrics.
    pub metrics_namespace: String,
    /// Where more workflow definitions are, beside the built-in ones.
    pub workflows_dir: Option<PathBuf>,
}

impl Config {
    /// Reads the configuration from `lookup`, a variable's value by name.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first variable missing or invalid.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let required = |name: &'static str| lookup(name).ok_or(ConfigError::Missing(name));
        let number = |name: &'static str, default: u64| -> Result<u64, ConfigError> {
            lookup(name).map_or(Ok(default), |v| {
                v.parse()
                    .map_err(|e| ConfigError::Invalid(name, format!("{v}: {e}")))
            })
        };
        let services = match lookup("SERVICE_URLS") {
            Some(text) => serde_json::from_str(&text).map_err(|e| {
                ConfigError::Invalid(
                    "SERVICE_URLS",
                    format!("expected a JSON object of agent name to URL: {e}"),
                )
            })?,
            None => HashMap::new(),
        };
        let lease_shards = u32::try_from(number("LEASE_SHARDS", 8)?)
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| ConfigError::Invalid("LEASE_SHARDS", "must be 1 to 1000".into()))?;
        Ok(Self {
            table: TableSettings {
                table: required("TABLE_NAME")?,
                lease_shards,
                lease_bucket: Duration::from_secs(number("LEASE_BUCKET_SECONDS", 60)?),
                retention: Duration::from_secs(number("TASK_RETENTION_DAYS", 30)? * 86_400),
            },
            scheduler_queue_url: required("SCHEDULER_QUEUE_URL")?,
            agent_request_queue_url: required("AGENT_REQUEST_QUEUE_URL")?,
            agent_response_queue_url: required("AGENT_RESPONSE_QUEUE_URL")?,
            alert_topic_arn: required("ALERT_TOPIC_ARN")?,
            services,
            supervisor_batch: usize::try_from(number("SUPERVISOR_BATCH", 100)?)
                .unwrap_or(100)
                .max(1),
            metrics_namespace: lookup("METRICS_NAMESPACE")
                .unwrap_or_else(|| "SchedulerAgentSupervisor".into()),
            workflows_dir: None,
        })
    }
}

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
/// function runs ([`app`] or [`agent`]), so that its binary links only the clients
/// that actor uses. What fails is logged and reported to Lambda as the function's
/// init error, whose message (naming the variable missing or invalid) the console
/// and the logs then show, and the process ends.
pub async fn init<T>(build: impl FnOnce(&Config, &SdkConfig) -> Result<T, StartError>) -> T {
    lambda_runtime::tracing::init_default_subscriber();
    let lookup = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let built = Config::from_lookup(lookup)
        .map_err(StartError::from)
        .and_then(|config| Ok((config, sdk_config(lookup)?)))
        .and_then(|(config, sdk)| build(&config, &sdk));
    match built {
        Ok(built) => built,
        Err(error) => {
            error!(%error, "the function cannot start");
            report_init_error(&error).await;
            std::process::exit(1)
        }
    }
}

/// Tells Lambda's Runtime API why the function could not start (`/init/error`).
async fn report_init_error(error: &StartError) {
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_none() {
        return;
    }
    let body = json!({ "errorType": "Runtime.ConfigError", "errorMessage": error.to_string() });
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

/// Submission, scheduler, supervisor and operator actions over DynamoDB, SQS and SNS,
/// as function `function`.
///
/// # Errors
/// [`StartError`] when a queue URL or a workflow definition is invalid.
pub fn app(config: &Config, sdk: &SdkConfig, function: &str) -> Result<App, StartError> {
    let (queues, sqs) = queues(config, sdk)?;
    let workflows = Registry::load(config.workflows_dir.as_deref())?;
    let ports = Ports {
        store: Arc::new(DynamoStore::new(sdk, config.table.clone())),
        queues: sqs,
        alerts: Arc::new(SnsAlerts::new(sdk, config.alert_topic_arn.clone())),
        metrics: Arc::new(EmfMetrics::new(
            config.metrics_namespace.clone(),
            function.to_owned(),
        )),
        clock: Arc::new(WallClock),
    };
    // 64 random bits name an instance well enough, in fewer bytes of every task item.
    let instance = format!("{function}-{:016x}", fastrand::u64(..));
    Ok(App::new(ports, Arc::new(workflows), queues, instance).with_deadline_messages(true))
}

/// The agents, calling the remote services over HTTP and answering over SQS.
///
/// # Errors
/// [`StartError`] when a queue URL is invalid.
pub fn agent(config: &Config, sdk: &SdkConfig) -> Result<Agent, StartError> {
    let (queues, sqs) = queues(config, sdk)?;
    Ok(Agent::new(
        Arc::new(HttpRemote::new(config.services.clone(), None)),
        sqs,
        Arc::new(WallClock),
        queues.agent_responses,
        BreakerSettings::default(),
        fastrand::u64(..),
    ))
}

/// The three queues by name, and SQS over their URLs.
fn queues(config: &Config, sdk: &SdkConfig) -> Result<(QueueNames, Arc<Sqs>), QueueError> {
    let names = QueueNames {
        scheduler: queue_name(&config.scheduler_queue_url)?,
        agent_requests: queue_name(&config.agent_request_queue_url)?,
        agent_responses: queue_name(&config.agent_response_queue_url)?,
    };
    let sqs = Sqs::new(
        sdk,
        [
            (names.scheduler.clone(), config.scheduler_queue_url.clone()),
            (
                names.agent_requests.clone(),
                config.agent_request_queue_url.clone(),
            ),
            (
                names.agent_responses.clone(),
                config.agent_response_queue_url.clone(),
            ),
        ],
    );
    Ok((names, Arc::new(sqs)))
}

/// The SDK's configuration from what Lambda puts in the environment, `lookup` giving
/// a variable's value by name: the region (`AWS_REGION`), the credentials
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), and, when set,
/// `AWS_ENDPOINT_URL` (an emulator) and `AWS_MAX_ATTEMPTS`; everything else is the
/// clients' defaults, and TLS is set up at the first request. Built here rather than by
/// aws-config's loader, whose provider chains, profile files and STS client cost every
/// cold start 0.1 to 0.3 ms, 105 KB of it data for the loader to relocate
/// (BENCHMARKS.md), to read what Lambda always sets in the environment.
///
/// # Errors
/// [`ConfigError`] naming the first variable missing or invalid.
pub fn sdk_config(lookup: impl Fn(&str) -> Option<String>) -> Result<SdkConfig, ConfigError> {
    use aws_sdk_sqs::config::retry::RetryConfig;
    use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region, SharedCredentialsProvider};

    let required = |name: &'static str| lookup(name).ok_or(ConfigError::Missing(name));
    let credentials = Credentials::new(
        required("AWS_ACCESS_KEY_ID")?,
        required("AWS_SECRET_ACCESS_KEY")?,
        lookup("AWS_SESSION_TOKEN"),
        None,
        "environment",
    );
    let mut retry = RetryConfig::standard();
    if let Some(value) = lookup("AWS_MAX_ATTEMPTS") {
        let attempts = value
            .parse()
            .ok()
            .filter(|&n: &u32| n >= 1)
            .ok_or_else(|| {
                ConfigError::Invalid("AWS_MAX_ATTEMPTS", format!("{value}: must be 1 or more"))
            })?;
        retry = retry.with_max_attempts(attempts);
    }
    let https = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::AwsLc,
        ))
        .build_https();
    let mut sdk = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(required("AWS_REGION")?))
        .credentials_provider(SharedCredentialsProvider::new(credentials))
        .retry_config(retry)
        .http_client(SharedHttpClient::new(TlsAtFirstRequest(https)));
    sdk.set_endpoint_url(lookup("AWS_ENDPOINT_URL"));
    Ok(sdk.build())
}

/// The SDK's HTTPS client, less its check at client construction, which loads and
/// parses the system's root certificates: a few milliseconds of every cold start,
/// paid instead by the first request (which opens a connection anyway).
#[derive(Debug)]
struct TlsAtFirstRequest(SharedHttpClient);

impl HttpClient for TlsAtFirstRequest {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        self.0.http_connector(settings, components)
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        self.0.connector_metadata()
    }
}

/// The submission function: an API Gateway HTTP API (payload 2.0) request, served
/// by the same handler as the local server.
pub async fn http(app: &App, request: ApiGatewayV2httpRequest) -> ApiGatewayV2httpResponse {
    let body = match (request.body, request.is_base64_encoded) {
        (None, _) => Vec::new(),
        (Some(text), false) => text.into_bytes(),
        (Some(text), true) => match base64::engine::general_purpose::STANDARD.decode(text) {
            Ok(bytes) => bytes,
            Err(_) => {
                return respond(
                    400,
                    None,
                    &json!({"error": {"code": "invalid_body", "message": "the body is not valid base64"}}),
                );
            }
        },
    };
    let response = api::handle(
        app,
        ApiRequest {
            method: request.request_context.http.method.as_str(),
            path: request.raw_path.as_deref().unwrap_or("/"),
            query: request
                .raw_query_string
                .as_deref()
                .filter(|q| !q.is_empty()),
            body: &body,
        },
    )
    .await;
    respond(
        response.status,
        response.location.as_deref(),
        &response.body,
    )
}

fn respond(status: u16, location: Option<&str>, body: &Value) -> ApiGatewayV2httpResponse {
    let mut response = ApiGatewayV2httpResponse::default();
    response.status_code = i64::from(status);
    response.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(location) = location.and_then(|l| HeaderValue::from_str(l).ok()) {
        response.headers.insert(header::LOCATION, location);
    }
    response.body = Some(Body::Text(body.to_string()));
    response
}

/// The scheduler and agent functions: handles every record of an SQS batch, each
/// in its own span, at once, and names only the failed ones, so that only they are
/// delivered again (and in the end dead-lettered). Needs ReportBatchItemFailures.
pub async fn sqs_batch<H, F>(event: SqsEvent, handler: H) -> SqsBatchResponse
where
    H: Fn(String) -> F,
    F: Future<Output = Result<(), HandleError>>,
{
    let handling = event.records.into_iter().map(|record| {
        let id = record.message_id.unwrap_or_default();
        let receive_count = record
            .attributes
            .get("ApproximateReceiveCount")
            .cloned()
            .unwrap_or_default();
        let span = info_span!("message", message_id = %id, receive_count = %receive_count);
        let outcome = handler(record.body.unwrap_or_default());
        async move {
            match outcome.await {
                Ok(()) => None,
                Err(e) => {
                    error!(error = %e, "message failed; it will be delivered again");
                    Some(id)
                }
            }
        }
        .instrument(span)
    });
    let mut response = SqsBatchResponse::default();
    for id in futures_util::future::join_all(handling)
        .await
        .into_iter()
        .flatten()
    {
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = id;
        response.batch_item_failures.push(failure);
    }
    response
}

/// The supervisor function, on its EventBridge schedule: one pass over the expired
/// leases, `batch` tasks per query ([`App::sweep`]).
///
/// # Errors
/// [`HandleError`] when the store fails; the next run picks up the rest.
pub async fn sweep(
    app: &App,
    batch: usize,
    event: EventBridgeEvent<Value>,
) -> Result<Value, HandleError> {
    let span = info_span!("sweep", event_id = event.id.as_deref().unwrap_or_default());
    let report = app.sweep(batch).instrument(span).await?;
    Ok(json!(report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(overrides: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let mut values: HashMap<String, String> = [
            ("TABLE_NAME", "state"),
            (
                "SCHEDULER_QUEUE_URL",
                "https://sqs.eu-west-1.amazonaws.com/1/sas-scheduler",
            ),
            (
                "AGENT_REQUEST_QUEUE_URL",
                "https://sqs.eu-west-1.amazonaws.com/1/sas-agent-requests",
            ),
            (
                "AGENT_RESPONSE_QUEUE_URL",
                "https://sqs.eu-west-1.amazonaws.com/1/sas-agent-responses",
            ),
            ("ALERT_TOPIC_ARN", "arn:aws:sns:eu-west-1:1:sas-alerts"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        for (k, v) in overrides {
            values.insert((*k).to_owned(), (*v).to_owned());
        }
        move |name| values.get(name).filter(|v| !v.is_empty()).cloned()
    }

    #[test]
    fn the_configuration_names_what_is_missing_or_invalid() {
        let config = Config::from_lookup(lookup(&[])).expect("complete");
        assert_eq!(
            (config.table.lease_shards, config.supervisor_batch),
            (8, 100)
        );
        assert_eq!(config.table.retention, Duration::from_secs(30 * 86_400));
        let missing = Config::from_lookup(lookup(&[("ALERT_TOPIC_ARN", "")])).expect_err("missing");
        assert_eq!(
            missing.to_string(),
            "environment variable ALERT_TOPIC_ARN is not set"
        );
        let invalid = Config::from_lookup(lookup(&[("LEASE_SHARDS", "0")])).expect_err("invalid");
        assert!(
            invalid
                .to_string()
                .starts_with("environment variable LEASE_SHARDS is invalid"),
            "{invalid}"
        );
        let services =
            Config::from_lookup(lookup(&[("SERVICE_URLS", "[1]")])).expect_err("not an object");
        assert!(services.to_string().contains("SERVICE_URLS"), "{services}");
        let config = Config::from_lookup(lookup(&[(
            "SERVICE_URLS",
            r#"{"drone":"https://drones.example.com"}"#,
        )]))
        .expect("services");
        assert_eq!(config.services["drone"], "https://drones.example.com");
        let read: Vec<_> = VARIABLES
            .iter()
            .filter(|v| lookup(&[])(v).is_some())
            .collect();
        assert_eq!(
            read.len(),
            5,
            "the five required variables are among those declared"
        );
    }

    #[tokio::test]
    async fn the_sdk_configuration_is_what_lambda_sets_and_names_what_is_missing() {
        use aws_sdk_sqs::config::ProvideCredentials;

        let lambda = [
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", "token"),
        ];
        let sdk = sdk_config(lookup(&lambda)).expect("complete");
        assert_eq!(
            sdk.region().map(ToString::to_string).as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(
            (
                sdk.endpoint_url(),
                sdk.retry_config().map(|r| r.max_attempts())
            ),
            (None, Some(3))
        );
        let credentials = sdk
            .credentials_provider()
            .expect("credentials")
            .provide_credentials()
            .await
            .expect("credentials");
        assert_eq!(
            (credentials.access_key_id(), credentials.session_token()),
            ("AKID", Some("token"))
        );

        let emulator = [
            lambda.as_slice(),
            &[
                ("AWS_ENDPOINT_URL", "http://127.0.0.1:4566"),
                ("AWS_MAX_ATTEMPTS", "5"),
            ],
        ]
        .concat();
        let sdk = sdk_config(lookup(&emulator)).expect("complete");
        assert_eq!(
            (
                sdk.endpoint_url(),
                sdk.retry_config().map(|r| r.max_attempts())
            ),
            (Some("http://127.0.0.1:4566"), Some(5))
        );

        let no_region = [lambda.as_slice(), &[("AWS_REGION", "")]].concat();
        let missing = sdk_config(lookup(&no_region)).expect_err("missing");
        assert_eq!(
            missing.to_string(),
            "environment variable AWS_REGION is not set"
        );
        let no_attempts = [lambda.as_slice(), &[("AWS_MAX_ATTEMPTS", "0")]].concat();
        let invalid = sdk_config(lookup(&no_attempts)).expect_err("invalid");
        assert_eq!(
            invalid.to_string(),
            "environment variable AWS_MAX_ATTEMPTS is invalid: 0: must be 1 or more"
        );
    }
}
