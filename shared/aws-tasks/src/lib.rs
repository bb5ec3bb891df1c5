//! The agents' calls of the AWS services a state machine's Task states name, each
//! asked of the agent named for its service: Lambda's `Invoke` ([`lambda`], through
//! the AWS SDK), the JSON APIs of DynamoDB, SQS and EventBridge ([`json_api`], signed
//! with SigV4 and sent as the API's own request), SNS's `Publish` ([`sns`], through
//! the AWS SDK), and S3's `GetObject` and `PutObject` for a distributed Map's reader and writer
//! ([`s3`]). Each service is reached on AWS, or at any endpoint that speaks its API
//! (`AWS_ENDPOINT_URL_<SERVICE>`, then `AWS_ENDPOINT_URL`, as the AWS SDKs read them).
//! A service's refusal fails the call for good with the error as Step Functions names
//! it (`DynamoDB.ConditionalCheckFailedException`), a throttle or a fault of its own
//! is tried again. Every other service is called by the [`RemoteCall`] it is given.

mod json_api;
mod lambda;
mod s3;
mod signed;
mod sns;

use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use aws_credential_types::Credentials as Keys;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_sdk_lambda::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::http::Response;
use aws_types::SdkConfig;
use aws_types::region::Region;
use serde_json::{Value, json};
use tracing::debug;

use sas_core::ports::{Credentials, RemoteCall, RemoteError, RemoteRequest};
use sas_domain::machine::{LAMBDA_AGENT, ServiceAnswer};

/// Calls the AWS services for their agents, and every other service through `others`.
pub struct AwsTasks {
    lambda: lambda::Lambda,
    apis: json_api::JsonApis,
    s3: s3::S3,
    sns: sns::Sns,
    /// Bounds its calls by their timeout itself (`HttpRemote` does): a call to it is
    /// not timed twice.
    others: Arc<dyn RemoteCall>,
}

impl AwsTasks {
    /// The services through the SDK configured by `sdk`, each at the endpoint the
    /// environment (`lookup`) names for it where it names one; requests to the JSON
    /// APIs signed by `signer`.
    #[must_use]
    pub fn new(
        sdk: &SdkConfig,
        lookup: impl Fn(&str) -> Option<String>,
        signer: Arc<dyn Credentials>,
        others: Arc<dyn RemoteCall>,
    ) -> Self {
        Self {
            lambda: lambda::Lambda::new(sdk, endpoint(&lookup, "LAMBDA")),
            apis: json_api::JsonApis::new(sdk, &lookup, Arc::clone(&signer)),
            s3: s3::S3::new(sdk, &lookup, signer),
            sns: sns::Sns::new(sdk, endpoint(&lookup, "SNS")),
            others,
        }
    }
}

#[async_trait]
impl RemoteCall for AwsTasks {
    async fn call(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        match request.service.as_str() {
            LAMBDA_AGENT => bounded(request, self.lambda.invoke(request)).await,
            sns::AGENT => bounded(request, self.sns.publish(request)).await,
            s3::AGENT => bounded(request, self.s3.call(request)).await,
            service => match self.apis.api(service) {
                Some(api) => bounded(request, self.apis.call(api, request)).await,
                None => self.others.call(request).await,
            },
        }
    }
}

/// `call`, bounded by the time left before the step's complete-by, after which
/// nothing may be sent. Boxed: an SDK's call is a future of kilobytes, which held in
/// place would make every call's future as large, a call to `others` too, and each
/// is copied whole as it is boxed (about 15 KB a call).
fn bounded<'a>(
    request: &'a RemoteRequest,
    call: impl Future<Output = Result<Value, RemoteError>> + Send + 'a,
) -> Pin<Box<dyn Future<Output = Result<Value, RemoteError>> + Send + 'a>> {
    Box::pin(async move {
        tokio::time::timeout(request.timeout, call)
            .await
            .unwrap_or_else(|_| {
                Err(RemoteError::Transient(format!(
                    "{} did not answer in time",
                    request.service
                )))
            })
    })
}

/// An AWS API, as Step Functions names it in an error (`DynamoDB`) and in a cause
/// (`AmazonDynamoDBv2`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Named {
    pub error_prefix: &'static str,
    pub label: &'static str,
}

/// What an AWS API said when it refused a call.
pub(crate) struct Refused<'a> {
    pub status: u16,
    /// The error's type in the API's model (`QueueDoesNotExist`).
    pub error_type: &'a str,
    /// Its code on the wire, in the API's query protocol's words where it has one
    /// (`AWS.SimpleQueueService.NonExistentQueue`).
    pub code: &'a str,
    pub message: &'a str,
    pub request_id: &'a str,
}

/// How a call an AWS API refused fails: again later when the API may take it (it
/// throttles, it fails), for good otherwise, with the error as Step Functions names
/// it, for the exception its SDK raises (`SQS.QueueDoesNotExistException`), and the
/// cause as it quotes the API's.
pub(crate) fn refusal(api: Named, refused: &Refused) -> RemoteError {
    let Refused {
        status,
        error_type,
        code,
        message,
        request_id,
    } = *refused;
    let throttled = [
        "Throttl",
        "ProvisionedThroughputExceeded",
        "RequestLimitExceeded",
    ]
    .iter()
    .any(|word| code.contains(word));
    if status == 429 || status >= 500 || throttled {
        return RemoteError::Transient(format!("{} answered {status} ({code})", api.error_prefix));
    }
    let cause = format!(
        "{message} (Service: {}; Status Code: {status}; Error Code: {code}; Request ID: {request_id}; Proxy: null)",
        api.label
    );
    let suffix = if error_type.ends_with("Exception") {
        ""
    } else {
        "Exception"
    };
    let error = format!("{}.{error_type}{suffix}", api.error_prefix);
    let failure = json!({"Error": error, "Cause": cause});
    RemoteError::Permanent(failure.to_string())
}

/// How a call an AWS SDK made fails ([`refusal`]); one it could not make (the service
/// was not reached) is tried again.
pub(crate) fn sdk_refusal<E: ProvideErrorMetadata + std::fmt::Debug>(
    api: Named,
    error: &SdkError<E, Response>,
) -> RemoteError {
    let SdkError::ServiceError(service) = error else {
        debug!(?error, service = api.error_prefix, "not reached");
        return RemoteError::Transient(format!("{} was not reached", api.error_prefix));
    };
    let code = error.code().unwrap_or("ServiceException");
    let request_id = service
        .raw()
        .headers()
        .get("x-amzn-RequestId")
        .unwrap_or_default();
    refusal(
        api,
        &Refused {
            status: service.raw().status().as_u16(),
            error_type: code,
            code,
            message: error.message().unwrap_or(code),
            request_id,
        },
    )
}

/// What a service's agent answers when the API took the call: its `body`, `status`
/// and `headers` ([`ServiceAnswer`]).
pub(crate) fn answered(
    body: Value,
    status: u16,
    headers: std::collections::BTreeMap<String, String>,
) -> Result<Value, RemoteError> {
    let answer = ServiceAnswer {
        body,
        status,
        headers,
        status_text: None,
    };
    serde_json::to_value(answer).map_err(|error| RemoteError::Unusable(error.to_string()))
}

/// The error of a request that does not read as its API's.
pub(crate) fn unreadable(what: &str, error: impl std::fmt::Display) -> RemoteError {
    RemoteError::Permanent(
        json!({"Error": "States.Runtime", "Cause": format!("{what}: {error}")}).to_string(),
    )
}

/// An SDK configuration for a process that is not a Lambda function (the local one):
/// the region and credentials from the environment when it has them (`AWS_REGION`,
/// `AWS_ACCESS_KEY_ID`, ...), else `us-east-1` and credentials no emulator checks.
#[must_use]
pub fn local_sdk(lookup: impl Fn(&str) -> Option<String>) -> SdkConfig {
    let region = lookup("AWS_REGION")
        .or_else(|| lookup("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|| "us-east-1".to_owned());
    let credentials = Keys::new(
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

/// Where a service is, as the AWS SDKs read it: `AWS_ENDPOINT_URL_<SERVICE>`, then
/// `AWS_ENDPOINT_URL`; `None` for the service itself.
fn endpoint(lookup: &impl Fn(&str) -> Option<String>, service: &str) -> Option<String> {
    lookup(&format!("AWS_ENDPOINT_URL_{service}")).or_else(|| lookup("AWS_ENDPOINT_URL"))
}
