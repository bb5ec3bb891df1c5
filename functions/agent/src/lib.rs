//! The agent function's actor: a [`StepCaller`] calling the remote services over HTTP
//! (and a state machine's Lambda functions through Lambda's API) and answering over SQS. It links no state store: an agent keeps no state but its
//! circuit breakers.

use std::sync::Arc;

use aws_types::SdkConfig;
use sas_core::clock::WallClock;
use sas_core::step_caller::StepCaller;
use sas_domain::resilience::BreakerSettings;
use sas_http_remote::HttpRemote;
use sas_lambda::StartError;
use sas_lambda::config::Config;
use sas_lambda_invoke::WithLambda;

/// The step caller, calling the remote services over HTTP (and Lambda functions
/// through Lambda's API) and answering over SQS.
///
/// # Errors
/// [`StartError`] when a queue URL is invalid.
pub fn step_caller(config: &Config, sdk: &SdkConfig) -> Result<StepCaller, StartError> {
    let (queues, sqs) = sas_lambda::queues(config, sdk)?;
    let services = Arc::new(HttpRemote::new(
        config.services.clone(),
        None,
        Arc::new(sas_credentials::AwsCredentials::new(sdk)),
    ));
    // `AWS_ENDPOINT_URL` is in `sdk` already; Lambda's own endpoint may differ.
    let lambda_endpoint = std::env::var("AWS_ENDPOINT_URL_LAMBDA").ok();
    Ok(StepCaller::new(
        Arc::new(WithLambda::new(sdk, lambda_endpoint, services)),
        sqs,
        Arc::new(WallClock),
        queues.agent_responses,
        BreakerSettings::default(),
        fastrand::u64(..),
    ))
}
