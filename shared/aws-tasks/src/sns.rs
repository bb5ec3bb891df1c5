//! SNS's `Publish`, for `sns:publish`: its request read from the Task's (the API's own
//! fields) and sent through the AWS SDK, since SNS speaks its query protocol; its
//! answer the Task's result, as the JSON APIs' are ([`ServiceAnswer`]).

use std::collections::{BTreeMap, HashMap};

use aws_sdk_sns::primitives::Blob;
use aws_sdk_sns::types::MessageAttributeValue;
use aws_types::SdkConfig;
use aws_types::request_id::RequestId as _;
use base64::Engine as _;
use serde_json::{Map, Value, json};

use sas_core::ports::{RemoteError, RemoteRequest};

use crate::{Named, answered, sdk_refusal, unreadable};

/// The agent that publishes, the service of `sns:publish`.
pub(crate) const AGENT: &str = "sns";

const SNS: Named = Named {
    error_prefix: "SNS",
    label: "AmazonSNS",
};

pub(crate) struct Sns(aws_sdk_sns::Client);

impl Sns {
    /// SNS through the SDK configured by `sdk`, at `endpoint` when one is given.
    pub(crate) fn new(sdk: &SdkConfig, endpoint: Option<String>) -> Self {
        let mut config = aws_sdk_sns::config::Builder::from(sdk);
        if endpoint.is_some() {
            config.set_endpoint_url(endpoint);
        }
        Self(aws_sdk_sns::Client::from_conf(config.build()))
    }

    pub(crate) async fn publish(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        let fields: Map<String, Value> = serde_json::from_str(request.payload.as_str())
            .map_err(|error| unreadable("a Publish request is a JSON object", error))?;
        let text = |name: &str| -> Result<Option<String>, RemoteError> {
            match fields.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(text)) => Ok(Some(text.clone())),
                Some(_) => Err(unreadable(
                    "Publish",
                    format!("the field '{name}' must be text"),
                )),
            }
        };
        let attributes = match fields.get("MessageAttributes") {
            None | Some(Value::Null) => None,
            Some(attributes) => Some(message_attributes(attributes)?),
        };
        let output = self
            .0
            .publish()
            .set_topic_arn(text("TopicArn")?)
            .set_target_arn(text("TargetArn")?)
            .set_phone_number(text("PhoneNumber")?)
            .set_message(text("Message")?)
            .set_subject(text("Subject")?)
            .set_message_structure(text("MessageStructure")?)
            .set_message_deduplication_id(text("MessageDeduplicationId")?)
            .set_message_group_id(text("MessageGroupId")?)
            .set_message_attributes(attributes)
            .send()
            .await
            .map_err(|error| sdk_refusal(SNS, &error))?;
        let mut body = json!({"MessageId": output.message_id()});
        if let Some(sequence) = output.sequence_number() {
            body["SequenceNumber"] = json!(sequence);
        }
        let request_id = output.request_id().unwrap_or_default().to_owned();
        let headers = BTreeMap::from([("x-amzn-RequestId".to_owned(), request_id)]);
        answered(body, 200, headers)
    }
}

/// `MessageAttributes` as the API takes them: each a `DataType` with a `StringValue`
/// or a `BinaryValue` (base64).
fn message_attributes(
    attributes: &Value,
) -> Result<HashMap<String, MessageAttributeValue>, RemoteError> {
    let refused = |why: String| unreadable("Publish's MessageAttributes", why);
    let Value::Object(attributes) = attributes else {
        return Err(refused("not an object".to_owned()));
    };
    attributes
        .iter()
        .map(|(name, attribute)| {
            let text = |field: &str| attribute.get(field).and_then(Value::as_str);
            let binary = text("BinaryValue")
                .map(|encoded| base64::engine::general_purpose::STANDARD.decode(encoded))
                .transpose()
                .map_err(|error| refused(format!("'{name}': {error}")))?;
            let value = MessageAttributeValue::builder()
                .set_data_type(text("DataType").map(str::to_owned))
                .set_string_value(text("StringValue").map(str::to_owned))
                .set_binary_value(binary.map(Blob::new))
                .build()
                .map_err(|error| refused(format!("'{name}': {error}")))?;
            Ok((name.clone(), value))
        })
        .collect()
}
