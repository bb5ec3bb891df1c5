//! The AWS APIs that speak JSON (the AWS JSON protocol): DynamoDB, SQS and
//! EventBridge. A Task's request is the API's own, sent as it is with its operation in
//! `X-Amz-Target` and signed with SigV4; what the API answers is the Task's result,
//! with the HTTP status and headers Step Functions adds to it ([`ServiceAnswer`]).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use aws_types::SdkConfig;
use serde_json::Value;
use tracing::warn;

use sas_core::ports::{Credentials, RemoteError, RemoteRequest, Unsigned};
use sas_domain::limits::MAX_STEP_OUTPUT;
use sas_domain::machine::ServiceAnswer;
use sas_domain::services::SigV4;

use crate::{Named, Refused, endpoint, refusal};

/// An AWS API that speaks JSON, and how it is reached.
pub(crate) struct JsonApi {
    /// Its agent's name, the service of the Task's resource (`dynamodb`).
    agent: &'static str,
    /// Its name in `AWS_ENDPOINT_URL_<NAME>`.
    environment: &'static str,
    /// Its signing name, and its host's first label on AWS.
    signing: &'static str,
    /// `1.0` or `1.1`, in its content type.
    version: &'static str,
    /// Before the operation in `X-Amz-Target`.
    target: &'static str,
    named: Named,
}

const APIS: [JsonApi; 3] = [
    JsonApi {
        agent: "dynamodb",
        environment: "DYNAMODB",
        signing: "dynamodb",
        version: "1.0",
        target: "DynamoDB_20120810",
        named: Named {
            error_prefix: "DynamoDB",
            label: "AmazonDynamoDBv2",
        },
    },
    JsonApi {
        agent: "sqs",
        environment: "SQS",
        signing: "sqs",
        version: "1.0",
        target: "AmazonSQS",
        named: Named {
            error_prefix: "SQS",
            label: "AmazonSQS",
        },
    },
    JsonApi {
        agent: "events",
        environment: "EVENTBRIDGE",
        signing: "events",
        version: "1.1",
        target: "AWSEvents",
        named: Named {
            error_prefix: "EventBridge",
            label: "AmazonEventBridge",
        },
    },
];

pub(crate) struct JsonApis {
    /// Each API's URL, in [`APIS`]' order.
    urls: Vec<String>,
    region: String,
    signer: Arc<dyn Credentials>,
    /// Built at the first call: a function that makes none loads no certificates.
    client: OnceLock<reqwest::Client>,
}

impl JsonApis {
    pub(crate) fn new(
        sdk: &SdkConfig,
        lookup: &impl Fn(&str) -> Option<String>,
        signer: Arc<dyn Credentials>,
    ) -> Self {
        let region = sdk
            .region()
            .map_or_else(|| "us-east-1".to_owned(), ToString::to_string);
        let urls = APIS
            .iter()
            .map(|api| {
                endpoint(lookup, api.environment)
                    .unwrap_or_else(|| format!("https://{}.{region}.amazonaws.com", api.signing))
            })
            .collect();
        Self {
            urls,
            region,
            signer,
            client: OnceLock::new(),
        }
    }

    /// The API whose agent is `agent`, if one is.
    pub(crate) fn api(&self, agent: &str) -> Option<usize> {
        APIS.iter().position(|api| api.agent == agent)
    }

    /// The operation `request.path` of the API `index`, with the request's payload.
    pub(crate) async fn call(
        &self,
        index: usize,
        request: &RemoteRequest,
    ) -> Result<Value, RemoteError> {
        let api = &APIS[index];
        let url = self.urls[index].as_str();
        let content_type = format!("application/x-amz-json-{}", api.version);
        let target = format!("{}.{}", api.target, request.path);
        let headers = [
            ("content-type", content_type.as_str()),
            ("x-amz-target", target.as_str()),
        ];
        let body = request.payload.as_str().as_bytes();
        let signing = SigV4 {
            service: api.signing.to_owned(),
            region: self.region.clone(),
        };
        let unsigned = Unsigned {
            method: "POST",
            url,
            headers: &headers,
            body,
        };
        let signature = self
            .signer
            .sign(&signing, unsigned)
            .await
            .map_err(|error| {
                warn!(service = api.agent, %error, "a call could not be signed");
                RemoteError::Transient(format!("{}: the call could not be signed", api.agent))
            })?;
        let client = self.client.get_or_init(reqwest::Client::new);
        let mut sending = client.post(url).body(body.to_vec());
        for (name, value) in headers.into_iter().chain(
            signature
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str())),
        ) {
            sending = sending.header(name, value);
        }
        let not_reached = |error: reqwest::Error| {
            warn!(service = api.agent, error = %error.without_url(), "not reached");
            RemoteError::Transient(format!("{} was not reached", api.named.error_prefix))
        };
        let response = sending.send().await.map_err(not_reached)?;
        let status = response.status().as_u16();
        let headers: BTreeMap<String, String> = response
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        let bytes = response.bytes().await.map_err(not_reached)?;
        if bytes.len() > MAX_STEP_OUTPUT {
            return Err(RemoteError::Unusable(format!(
                "{} answered with {} bytes",
                api.named.error_prefix,
                bytes.len()
            )));
        }
        let body = serde_json::from_slice::<Value>(&bytes);
        if !(200..300).contains(&status) {
            let body = body.unwrap_or(Value::Null);
            return Err(refused(api.named, status, &headers, &body));
        }
        let body = match body {
            Ok(body) => body,
            Err(_) if bytes.is_empty() => Value::Null,
            // It did it; what it said cannot be kept.
            Err(_) => {
                return Err(RemoteError::Unusable(format!(
                    "{} answered {status} with a body that is not JSON",
                    api.named.error_prefix
                )));
            }
        };
        let answer = ServiceAnswer {
            body,
            status,
            headers,
        };
        serde_json::to_value(answer).map_err(|error| RemoteError::Unusable(error.to_string()))
    }
}

/// The refusal an API answered with `status`: its type from the body's `__type`
/// (`com.amazonaws.dynamodb.v20120810#ResourceNotFoundException`), its code from the
/// query-compatible header SQS sends (`AWS.SimpleQueueService.NonExistentQueue`, as
/// its query protocol names it) or the same, its message from the body.
fn refused(
    api: Named,
    status: u16,
    headers: &BTreeMap<String, String>,
    body: &Value,
) -> RemoteError {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    };
    let typed = body.get("__type").and_then(Value::as_str).map(|name| {
        let name = name.rsplit('#').next().unwrap_or(name);
        name.split(':').next().unwrap_or(name)
    });
    let error_type = typed.unwrap_or("UnknownError");
    let code = header("x-amzn-query-error")
        .map_or(error_type, |value| value.split(';').next().unwrap_or(value));
    let message = ["message", "Message"]
        .iter()
        .find_map(|field| body.get(*field).and_then(Value::as_str))
        .unwrap_or(code);
    refusal(
        api,
        &Refused {
            status,
            error_type,
            code,
            message,
            request_id: header("x-amzn-RequestId").unwrap_or_default(),
        },
    )
}
