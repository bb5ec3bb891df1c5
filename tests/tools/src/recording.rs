//! The requests moto recorded (`MOTO_RECORDER_FILEPATH`, between the
//! `/moto-api/recorder/start-recording` and `stop-recording` calls), each named by its
//! service and operation.

use base64::Engine as _;
use serde_json::Value;

/// One recorded request.
pub struct Recorded {
    /// `dynamodb:Query`, `sqs:SendMessageBatch`, `sns:Publish`, `s3:PutObject`,
    /// `s3:GetObject` (the values kept apart), `other:<url>`.
    pub operation: String,
    /// Its JSON body (DynamoDB's and SQS's), or `Null`.
    pub request: Value,
    /// The bytes of its body.
    pub bytes: usize,
}

/// The requests of a recording, in the order moto received them.
///
/// # Panics
/// When the recording is not moto's: one JSON record a line.
#[must_use]
pub fn requests(recording: &str) -> Vec<Recorded> {
    // One JSON record a line, but for records of concurrent requests moto writes on
    // one line: read as a stream of values.
    serde_json::Deserializer::from_str(recording)
        .into_iter::<Value>()
        .map(|line| recorded(&line.expect("a recorded request")))
        .collect()
}

fn recorded(line: &Value) -> Recorded {
    let headers = &line["headers"];
    let body = line["body"].as_str().unwrap_or_default();
    let body = if line["body_encoded"].as_bool() == Some(true) {
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(body)
                .unwrap_or_default(),
        )
        .unwrap_or_default()
    } else {
        body.to_owned()
    };
    let target = headers["X-Amz-Target"]
        .as_str()
        .or_else(|| headers["x-amz-target"].as_str())
        .unwrap_or_default();
    let operation = if let Some(operation) = target.strip_prefix("DynamoDB_20120810.") {
        format!("dynamodb:{operation}")
    } else if let Some(operation) = target.strip_prefix("AmazonSQS.") {
        format!("sqs:{operation}")
    } else if let Some(action) = body.split('&').find_map(|p| p.strip_prefix("Action=")) {
        format!("sns:{action}")
    } else if line["url"]
        .as_str()
        .is_some_and(|url| url.contains("/payloads/"))
    {
        match line["method"].as_str() {
            Some("PUT") => "s3:PutObject".to_owned(),
            _ => "s3:GetObject".to_owned(),
        }
    } else {
        format!("other:{}", line["url"])
    };
    Recorded {
        operation,
        request: serde_json::from_str(&body).unwrap_or(Value::Null),
        bytes: body.len(),
    }
}
