//! The AWS APIs that speak JSON (the AWS JSON protocol): DynamoDB, SQS and
//! EventBridge. A Task's request is the API's own, sent as it is with its operation in
//! `X-Amz-Target` and signed with SigV4; what the API answers is the Task's result,
//! with the HTTP status and headers Step Functions adds to it ([`ServiceAnswer`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_types::SdkConfig;
use serde_json::Value;

use sas_core::ports::{Credentials, RemoteError, RemoteRequest};

use crate::signed::{Client, Signed};
use crate::{Named, Refused, answered, endpoint, refusal};

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
    client: Client,
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
            client: Client::default(),
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
        let signed = Signed {
            service: api.signing,
            region: &self.region,
            named: api.named,
        };
        let (status, headers, bytes) = signed
            .send(&self.signer, &self.client, "POST", url, &headers, body)
            .await?;
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
        answered(body, status, headers)
    }
}

/// The refusal an API answered with `status`: its type from the body's `__type`
/// (`com.amazonaws.dynamodb.v20120810#ResourceNotFoundException`), its code from the
/// query-compatible header SQS sends (`AWS.SimpleQueueService.NonExistentQueue`, as
/// its query protocol names it) or the same, its message from the body.
pub(crate) fn refused(
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
