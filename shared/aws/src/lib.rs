//! The task state on AWS: DynamoDB as the state store ([`store`]), SNS as the
//! operators' alerts ([`alerts`]), EventBridge Scheduler as schedules' wake-ups
//! ([`wakeups`]), S3 as the values stored apart (`sas_lambda::payloads`, deleted with
//! their tasks: [`deletions`]), and
//! [`app`], the actors the submission, scheduler and supervisor functions run over
//! them. The agent function keeps no state and
//! links none of this.
//!
//! Depends on `sas-core` (the ports it implements) and `sas-lambda` (configuration,
//! SDK clients, SQS and metrics).

pub mod alerts;
#[cfg(test)]
mod conformance;
pub mod deletions;
pub mod store;
#[cfg(any(test, feature = "test-util"))]
pub mod table;
pub mod wakeups;

use std::sync::Arc;

use aws_types::SdkConfig;
use sas_core::app::{App, Ports};
use sas_core::clock::WallClock;
use sas_domain::services::Directory;
use sas_lambda::StartError;
use sas_lambda::config::{Config, Ingestion};
use sas_lambda::metrics::EmfMetrics;
use sas_lambda::payloads::S3Payloads;

use crate::alerts::SnsAlerts;
use crate::store::DynamoStore;
use crate::wakeups::EventBridgeWakeups;

/// Submission, scheduler, supervisor and operator actions over DynamoDB, SQS and SNS,
/// as function `function`.
///
/// # Errors
/// [`StartError`] when a queue URL or a workflow definition is invalid.
pub fn app(config: &Config, sdk: &SdkConfig, function: &str) -> Result<App, StartError> {
    let (queues, sqs) = sas_lambda::queues(config, sdk)?;
    let workflows = sas_lambda::workflows(config.workflows_dir.as_deref())?;
    workflows.limit_services(Directory {
        services: config.services.clone(),
        fallback: None,
    });
    let dead_letters = Arc::clone(&sqs);
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
    let mut app = App::new(ports, Arc::new(workflows), queues, instance)
        .with_payloads(Arc::new(S3Payloads::new(
            sdk,
            config.payload_bucket.clone(),
        )))
        .with_deadline_messages(true)
        .with_sealed_tasks(true)
        .with_dead_letters(dead_letters);
    if let Some(prefix) = &config.notification_queue_prefix {
        app = app.with_notification_prefix(prefix.clone());
    }
    if let Some(telemetry) = sas_lambda::telemetry() {
        app = app.with_spans(telemetry);
    }
    if let Some(target) = &config.wakeups {
        app = app.with_wakeups(Arc::new(EventBridgeWakeups::new(sdk, target.clone())));
    }
    let Some(url) = &config.ingest_queue_url else {
        return Ok(app);
    };
    let ingest = sas_lambda::sqs::queue_name(url)?;
    Ok(match config.ingestion {
        Ingestion::Buffered => app.with_ingestion(ingest),
        Ingestion::Direct => app.draining(ingest),
    })
}
