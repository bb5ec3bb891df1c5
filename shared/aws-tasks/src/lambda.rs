//! Lambda's `Invoke`, for the [`LAMBDA_AGENT`](sas_domain::machine::LAMBDA_AGENT): a
//! Task asks for one ([`InvokeRequest`]), and the AWS SDK makes it. A function's own
//! error is an answer like any other ([`InvokeAnswer`]): the scheduler shapes it as
//! Step Functions does.

use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::LogType;
use aws_types::SdkConfig;
use serde_json::Value;

use sas_core::ports::{RemoteError, RemoteRequest};
use sas_domain::machine::{InvokeAnswer, InvokeRequest};

use crate::{Named, sdk_refusal, unreadable};

const LAMBDA: Named = Named {
    error_prefix: "Lambda",
    label: "AWSLambda",
};

pub(crate) struct Lambda(aws_sdk_lambda::Client);

impl Lambda {
    /// Lambda through the SDK configured by `sdk`, at `endpoint` when one is given
    /// (an emulator, a local stand-in). The SDK tries each call once and watches no
    /// stream's pace: the agent tries a call again, with backoff and jitter, within
    /// its step's lease and behind its circuit breaker, and bounds its time.
    pub(crate) fn new(sdk: &SdkConfig, endpoint: Option<String>) -> Self {
        use aws_sdk_lambda::config::StalledStreamProtectionConfig;
        use aws_sdk_lambda::config::retry::RetryConfig;

        let mut config = aws_sdk_lambda::config::Builder::from(sdk)
            .retry_config(RetryConfig::disabled())
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled());
        // Without an endpoint of its own, Lambda's is the SDK configuration's
        // (`AWS_ENDPOINT_URL`): setting none would clear it.
        if endpoint.is_some() {
            config.set_endpoint_url(endpoint);
        }
        Self(aws_sdk_lambda::Client::from_conf(config.build()))
    }

    pub(crate) async fn invoke(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        let invoke: InvokeRequest = serde_json::from_str(request.payload.as_str())
            .map_err(|error| unreadable("not an Invoke request", error))?;
        let mut call = self.0.invoke().function_name(&invoke.function);
        if !invoke.payload.is_empty() {
            call = call.payload(Blob::new(invoke.payload.into_bytes()));
        }
        if invoke.log_tail {
            call = call.log_type(LogType::Tail);
        }
        let answer = call
            .send()
            .await
            .map_err(|error| sdk_refusal(LAMBDA, &error))?;
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
