//! The agent function's actor: a [`StepCaller`] calling the remote services over HTTP
//! (and the AWS services a state machine's Tasks name through their APIs) and
//! answering over SQS, requests and answers too large for a message kept in S3. It
//! links no state store: an agent keeps no state but its circuit breakers.

use std::sync::Arc;

use aws_types::SdkConfig;
use sas_aws_tasks::AwsTasks;
use sas_core::clock::WallClock;
use sas_core::ports::Metrics;
use sas_core::step_caller::StepCaller;
use sas_domain::resilience::BreakerSettings;
use sas_http_remote::HttpRemote;
use sas_lambda::StartError;
use sas_lambda::config::Config;
use sas_lambda::payloads::S3Payloads;

/// The step caller, calling the remote services over HTTP (and the AWS services a
/// state machine's Tasks name through their APIs) and answering over SQS.
///
/// # Errors
/// [`StartError`] when a queue URL is invalid.
pub fn step_caller(
    config: &Config,
    sdk: &SdkConfig,
    metrics: Arc<dyn Metrics>,
) -> Result<StepCaller, StartError> {
    let (queues, sqs) = sas_lambda::queues(config, sdk)?;
    let credentials = Arc::new(sas_credentials::AwsCredentials::new(sdk));
    let services = Arc::new(HttpRemote::new(
        config.services.clone(),
        None,
        Arc::clone(&credentials) as _,
    ));
    let environment = |name: &str| std::env::var(name).ok();
    let payloads = S3Payloads::new(sdk, config.payload_bucket.clone());
    let step_caller = StepCaller::new(
        Arc::new(AwsTasks::new(sdk, environment, credentials, services)),
        sqs,
        Arc::new(WallClock),
        queues.agent_responses,
        BreakerSettings::default(),
        fastrand::u64(..),
    )
    .with_payloads(Arc::new(payloads))
    .with_metrics(metrics);
    Ok(match sas_lambda::telemetry() {
        Some(telemetry) => step_caller.with_spans(telemetry),
        None => step_caller,
    })
}
