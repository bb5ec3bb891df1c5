//! The agents' calls of AWS Lambda functions: a state machine's Task state asks the
//! [`LAMBDA_AGENT`] for an `Invoke` ([`InvokeRequest`]), and this adapter makes it with
//! the AWS SDK, on AWS and against any endpoint that speaks Lambda's API
//! (`AWS_ENDPOINT_URL_LAMBDA`, then `AWS_ENDPOINT_URL`, as the AWS SDKs read them). A
//! function's own error is an answer like any other ([`InvokeAnswer`]): the scheduler
//! shapes it as Step Functions does. Every other service is called by the
//! [`RemoteCall`] it is given.

use std::sync::Arc;

use async_trait::async_trait;
use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_sdk_lambda::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::LogType;
use aws_types::SdkConfig;
use aws_types::region::Region;
use serde_json::{Value, json};
use tracing::debug;

use sas_core::ports::{RemoteCall, RemoteError, RemoteRequest};
use sas_domain::machine::{InvokeAnswer, InvokeRequest, LAMBDA_AGENT};

/// Calls Lambda for the [`LAMBDA_AGENT`], and every other service through `others`.
pub struct WithLambda {
    lambda: aws_sdk_lambda::Client,
    others: Arc<dyn RemoteCall>,
}

impl WithLambda {
    /// Lambda through the SDK configured by `sdk`, at `endpoint` when one is given
    /// (an emulator, a local stand-in).
    #[must_use]
    pub fn new(sdk: &SdkConfig, endpoint: Option<String>, others: Arc<dyn RemoteCall>) -> Self {
        let mut config = aws_sdk_lambda::config::Builder::from(sdk);
        // Without an endpoint of its own, Lambda's is the SDK configuration's
        // (`AWS_ENDPOINT_URL`): setting none would clear it.
        if endpoint.is_some() {
            config.set_endpoint_url(endpoint);
        }
        Self {
            lambda: aws_sdk_lambda::Client::from_conf(config.build()),
            others,
        }
    }

    async fn invoke(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        let invoke: InvokeRequest = serde_json::from_str(request.payload.as_str())
            .map_err(|error| RemoteError::Permanent(format!("not an Invoke request: {error}")))?;
        let mut call = self.lambda.invoke().function_name(&invoke.function);
        if !invoke.payload.is_empty() {
            call = call.payload(Blob::new(invoke.payload.into_bytes()));
        }
        if invoke.log_tail {
            call = call.log_type(LogType::Tail);
        }
        let answer = call
            .send()
            .await
            .map_err(|error| refused(&invoke.function, &error))?;
        let answer = InvokeAnswer {
            payload: answer
                .payload
                .map(|payload| String::from_utf8_lossy(payload.as_ref()).into_owned())
                .unwrap_or_default(),
            function_error: answer.function_error,
            log_result: answer.log_result,
        };
        serde_json::to_value(answer).map_err(|error| RemoteError::Unusable(error.to_string()))
    }
}

/// How an `Invoke` that Lambda refused fails: again later when Lambda may take it (it
/// throttles, it fails, it is not reached), for good otherwise, with the error as Step
/// Functions names it (`Lambda.ResourceNotFoundException`) and its message as the
/// cause.
fn refused<E: ProvideErrorMetadata + std::fmt::Debug>(
    function: &str,
    error: &SdkError<E, aws_sdk_lambda::config::http::HttpResponse>,
) -> RemoteError {
    let status = match error {
        SdkError::ServiceError(service) => service.raw().status().as_u16(),
        _ => {
            debug!(function, ?error, "Lambda not reached");
            return RemoteError::Transient(format!(
                "Lambda was not reached to invoke '{function}'"
            ));
        }
    };
    let code = error.code().unwrap_or("ServiceException");
    if status == 429 || status >= 500 {
        return RemoteError::Transient(format!("Lambda answered {status} ({code})"));
    }
    let request_id = match error {
        SdkError::ServiceError(service) => service
            .raw()
            .headers()
            .get("x-amzn-RequestId")
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    };
    // As Step Functions quotes an error of Lambda's API (in its SDK's words).
    let cause = format!(
        "{} (Service: AWSLambda; Status Code: {status}; Error Code: {code}; Request ID: {request_id}; Proxy: null)",
        error.message().unwrap_or(code)
    );
    let failure = json!({"Error": format!("Lambda.{code}"), "Cause": cause});
    RemoteError::Permanent(failure.to_string())
}

#[async_trait]
impl RemoteCall for WithLambda {
    async fn call(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        if request.service != LAMBDA_AGENT {
            return self.others.call(request).await;
        }
        tokio_timeout(request, self.invoke(request)).await
    }
}

/// The call, bounded by the request's timeout (the time left before its step's
/// complete-by, after which nothing may be sent).
async fn tokio_timeout(
    request: &RemoteRequest,
    call: impl std::future::Future<Output = Result<Value, RemoteError>>,
) -> Result<Value, RemoteError> {
    tokio::time::timeout(request.timeout, call)
        .await
        .unwrap_or_else(|_| {
            Err(RemoteError::Transient(
                "Lambda did not answer in time".to_owned(),
            ))
        })
}

/// An SDK configuration for a process that is not a Lambda function (the local one):
/// the region and credentials from the environment when it has them (`AWS_REGION`,
/// `AWS_ACCESS_KEY_ID`, ...), else `us-east-1` and credentials no emulator checks.
#[must_use]
pub fn local_sdk(lookup: impl Fn(&str) -> Option<String>) -> SdkConfig {
    let region = lookup("AWS_REGION")
        .or_else(|| lookup("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|| "us-east-1".to_owned());
    let credentials = Credentials::new(
        lookup("AWS_ACCESS_KEY_ID").unwrap_or_else(|| "local".to_owned()),
        lookup("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|| "local".to_owned()),
        lookup("AWS_SESSION_TOKEN"),
        None,
        "environment",
    );
    SdkConfig::builder()
        .behavior_version(aws_sdk_lambda::config::BehaviorVersion::latest())
        .region(Region::new(region))
        .credentials_provider(SharedCredentialsProvider::new(credentials))
        .build()
}

/// Where Lambda is, as the AWS SDKs read it: `AWS_ENDPOINT_URL_LAMBDA`, then
/// `AWS_ENDPOINT_URL`; `None` for Lambda itself.
#[must_use]
pub fn endpoint(lookup: impl Fn(&str) -> Option<String>) -> Option<String> {
    lookup("AWS_ENDPOINT_URL_LAMBDA").or_else(|| lookup("AWS_ENDPOINT_URL"))
}
