//! The functions' configuration, from the environment Lambda gives them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use sas_domain::services::{self, Service};

/// Every environment variable the functions read: the template and the CDK
/// construct set exactly these.
pub const VARIABLES: [&str; 20] = [
    "TABLE_NAME",
    "PAYLOAD_BUCKET",
    "SCHEDULER_QUEUE_URL",
    "AGENT_REQUEST_QUEUE_URL",
    "AGENT_RESPONSE_QUEUE_URL",
    "INGEST_QUEUE_URL",
    "INGESTION",
    "ALERT_TOPIC_ARN",
    "NOTIFICATION_QUEUE_PREFIX",
    "SERVICE_URLS",
    "LEASE_SHARDS",
    "LEASE_BUCKET_SECONDS",
    "TASK_RETENTION_DAYS",
    "SUPERVISOR_BATCH",
    "METRICS_NAMESPACE",
    "AUTH_MODE",
    "OPERATOR_SCOPE",
    "SCHEDULE_GROUP",
    "SCHEDULE_TARGET_ARN",
    "SCHEDULE_ROLE_ARN",
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

/// How the API's callers are known (`AUTH_MODE`): the template sets it to match the
/// authorizer it puts on the routes, and the submission function reads the caller
/// from what that authorizer vouched for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authentication {
    /// `NONE`: the callers' routes have no authorizer; nobody owns tasks.
    None,
    /// `JWT`: API Gateway checked the caller's token; the owner is its `sub`, and an
    /// operator is a token with `operator_scope` (`OPERATOR_SCOPE`).
    Jwt {
        /// The scope the operator routes need.
        operator_scope: String,
    },
    /// `IAM`: API Gateway checked the caller's SigV4 signature; the owner is its
    /// principal. Who may call the operator routes is then the IAM policies' choice.
    Iam,
}

impl Authentication {
    fn from_lookup(lookup: &impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        match lookup("AUTH_MODE").as_deref() {
            None | Some("NONE") => Ok(Self::None),
            Some("JWT") => Ok(Self::Jwt {
                operator_scope: lookup("OPERATOR_SCOPE").unwrap_or_else(|| "sas/operator".into()),
            }),
            Some("IAM") => Ok(Self::Iam),
            Some(other) => Err(ConfigError::Invalid(
                "AUTH_MODE",
                format!("{other}: expected NONE, JWT or IAM"),
            )),
        }
    }
}

/// How the API takes a submission (`INGESTION`, from `IngestionMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingestion {
    /// `DIRECT`: its task is written before the API answers.
    Direct,
    /// `BUFFERED`: it is checked and queued on the ingest queue, and the scheduler
    /// creates its task.
    Buffered,
}

impl Ingestion {
    fn from_lookup(
        lookup: &impl Fn(&str) -> Option<String>,
        ingest_queue_url: Option<&String>,
    ) -> Result<Self, ConfigError> {
        let ingestion = lookup("INGESTION").filter(|mode| !mode.is_empty());
        match (ingestion.as_deref(), ingest_queue_url) {
            // Unset, as a deployment before `INGESTION` sets it: a queue meant buffered.
            (None, Some(_)) | (Some("BUFFERED"), Some(_)) => Ok(Self::Buffered),
            (None | Some("DIRECT"), _) => Ok(Self::Direct),
            (Some("BUFFERED"), None) => Err(ConfigError::Invalid(
                "INGESTION",
                "BUFFERED needs INGEST_QUEUE_URL".into(),
            )),
            (Some(other), _) => Err(ConfigError::Invalid(
                "INGESTION",
                format!("{other}: expected DIRECT or BUFFERED"),
            )),
        }
    }
}

/// The most partitions the expiry index may have (`LEASE_SHARDS`, `LeaseShards`).
pub const MAX_LEASE_SHARDS: u32 = 1000;

/// The table of the task state, as the DynamoDB adapter uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSettings {
    /// The table's name.
    pub table: String,
    /// Partitions of the expiry index.
    pub lease_shards: u32,
    /// The expiry index's sort key is a lease's end rounded up to a multiple of this
    /// from the task's creation: the leases of a task mostly end in its first bucket,
    /// so its index entry is rewritten only when the bucket changes, not at every step;
    /// the supervisor finds an expired lease up to this much later. Zero for exact ends.
    pub lease_bucket: Duration,
    /// How long finished tasks are kept before DynamoDB's TTL deletes them.
    pub retention: Duration,
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
    /// The queue of buffered submissions, which the scheduler drains in either mode
    /// (`IngestQueue`): a stack switched from buffered to direct ingestion still
    /// creates the tasks it had accepted. `None` (unset or empty): no such queue.
    pub ingest_queue_url: Option<String>,
    /// Whether the API buffers submissions on the ingest queue (`IngestionMode`).
    pub ingestion: Ingestion,
    /// The operators' alert topic.
    pub alert_topic_arn: String,
    /// The S3 bucket of the values too large for a record or a message.
    pub payload_bucket: String,
    /// How callers' notification queues must be named for the functions to post to
    /// them (`NotificationQueuePrefix`); `None` (unset or empty): any name.
    pub notification_queue_prefix: Option<String>,
    /// Remote services by agent name: base URLs, headers, credentials.
    pub services: HashMap<String, Service>,
    /// Tasks the supervisor recovers per query.
    pub supervisor_batch: usize,
    /// The CloudWatch namespace of the metrics.
    pub metrics_namespace: String,
    /// Where more workflow definitions are, beside the built-in ones: on Lambda,
    /// `workflows/` in the function's package or its layer (set at start, not read from
    /// a variable).
    pub workflows_dir: Option<PathBuf>,
    /// How the API's callers are known.
    pub authentication: Authentication,
    /// Where schedules' wake-ups go (EventBridge Scheduler); `None` (any of its
    /// variables unset or empty): the supervisor's sweep alone fires schedules.
    pub wakeups: Option<WakeupTarget>,
}

/// Where schedules' wake-ups go: an EventBridge Scheduler schedule group, and the
/// function each wake-up invokes under a role the service assumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeupTarget {
    /// The schedule group (`SCHEDULE_GROUP`).
    pub group: String,
    /// The supervisor function's ARN (`SCHEDULE_TARGET_ARN`).
    pub function_arn: String,
    /// The role EventBridge Scheduler invokes it under (`SCHEDULE_ROLE_ARN`).
    pub role_arn: String,
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
            Some(text) => services::parse(&text)
                .map_err(|reason| ConfigError::Invalid("SERVICE_URLS", reason))?,
            None => HashMap::new(),
        };
        let lease_shards = u32::try_from(number("LEASE_SHARDS", 8)?)
            .ok()
            .filter(|n| (1..=MAX_LEASE_SHARDS).contains(n))
            .ok_or_else(|| {
                ConfigError::Invalid("LEASE_SHARDS", format!("must be 1 to {MAX_LEASE_SHARDS}"))
            })?;
        let ingest_queue_url = lookup("INGEST_QUEUE_URL").filter(|url| !url.is_empty());
        Ok(Self {
            ingestion: Ingestion::from_lookup(&lookup, ingest_queue_url.as_ref())?,
            ingest_queue_url,
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
            payload_bucket: required("PAYLOAD_BUCKET")?,
            notification_queue_prefix: lookup("NOTIFICATION_QUEUE_PREFIX")
                .filter(|prefix| !prefix.is_empty()),
            services,
            supervisor_batch: usize::try_from(number("SUPERVISOR_BATCH", 100)?)
                .unwrap_or(100)
                .max(1),
            metrics_namespace: lookup("METRICS_NAMESPACE")
                .unwrap_or_else(|| "SchedulerAgentSupervisor".into()),
            workflows_dir: None,
            authentication: Authentication::from_lookup(&lookup)?,
            wakeups: WakeupTarget::from_lookup(&lookup),
        })
    }
}

impl WakeupTarget {
    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let set = |name: &str| lookup(name).filter(|value| !value.is_empty());
        Some(Self {
            group: set("SCHEDULE_GROUP")?,
            function_arn: set("SCHEDULE_TARGET_ARN")?,
            role_arn: set("SCHEDULE_ROLE_ARN")?,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn lookup(overrides: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
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
            ("PAYLOAD_BUCKET", "sas-payloads"),
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
        assert_eq!(
            (config.ingest_queue_url.as_deref(), config.ingestion),
            (None, Ingestion::Direct),
            "direct ingestion by default"
        );
        let url = "https://sqs.eu-west-1.amazonaws.com/1/sas-ingest";
        let drained = Config::from_lookup(lookup(&[
            ("INGEST_QUEUE_URL", url),
            ("INGESTION", "DIRECT"),
        ]))
        .expect("complete");
        assert_eq!(
            (drained.ingest_queue_url.as_deref(), drained.ingestion),
            (Some(url), Ingestion::Direct),
            "a queue to drain, submissions written at once"
        );
        let earlier = Config::from_lookup(lookup(&[("INGEST_QUEUE_URL", url)])).expect("complete");
        assert_eq!(
            earlier.ingestion,
            Ingestion::Buffered,
            "a queue without INGESTION, as set before it was: buffered"
        );
        let buffered = Config::from_lookup(lookup(&[
            ("INGEST_QUEUE_URL", url),
            ("INGESTION", "BUFFERED"),
        ]))
        .expect("complete");
        assert_eq!(buffered.ingestion, Ingestion::Buffered);
        for (ingestion, url, reason) in [
            ("BUFFERED", "", "BUFFERED needs INGEST_QUEUE_URL"),
            ("buffered", url, "buffered: expected DIRECT or BUFFERED"),
        ] {
            let refused = Config::from_lookup(lookup(&[
                ("INGEST_QUEUE_URL", url),
                ("INGESTION", ingestion),
            ]))
            .expect_err("refused");
            assert_eq!(
                refused.to_string(),
                format!("environment variable INGESTION is invalid: {reason}")
            );
        }
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
        assert_eq!(config.services["drone"].url, "https://drones.example.com");
        assert_eq!(config.authentication, Authentication::None);
        let jwt = Config::from_lookup(lookup(&[("AUTH_MODE", "JWT")])).expect("JWT");
        assert_eq!(
            jwt.authentication,
            Authentication::Jwt {
                operator_scope: "sas/operator".into()
            }
        );
        let basic = Config::from_lookup(lookup(&[("AUTH_MODE", "BASIC")])).expect_err("no BASIC");
        assert!(basic.to_string().contains("AUTH_MODE"), "{basic}");
        let read: Vec<_> = VARIABLES
            .iter()
            .filter(|v| lookup(&[])(v).is_some())
            .collect();
        assert_eq!(
            read.len(),
            6,
            "the six required variables are among those declared"
        );
    }
}
