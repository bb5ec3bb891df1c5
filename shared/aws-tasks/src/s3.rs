//! S3's `GetObject`, for a distributed Map's `ItemReader`: the object's text is the
//! answer's body. A signed GET of its own (S3 speaks XML, and its SDK is heavy), at
//! the bucket's host on AWS, or by path at an endpoint the environment names.

use std::sync::Arc;

use aws_types::SdkConfig;
use serde::Deserialize;
use serde_json::{Value, json};

use sas_core::ports::{Credentials, RemoteError, RemoteRequest};
use sas_domain::machine::ServiceAnswer;

use crate::json_api::refused;
use crate::signed::{Client, Signed};
use crate::{Named, endpoint, unreadable};

/// The agent that reads objects.
pub(crate) const AGENT: &str = sas_domain::machine::S3_AGENT;

const NAMED: Named = Named {
    error_prefix: "S3",
    label: "Amazon S3",
};

/// SHA-256 of an empty body, which S3 wants named in every signed request.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// `GetObject`'s request, as a Task's reader gives it.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GetObject {
    bucket: String,
    key: String,
    #[serde(default)]
    version_id: Option<String>,
}

pub(crate) struct S3 {
    /// The endpoint the environment names, reached by path; S3 itself otherwise.
    endpoint: Option<String>,
    region: String,
    signer: Arc<dyn Credentials>,
    client: Client,
}

impl S3 {
    pub(crate) fn new(
        sdk: &SdkConfig,
        lookup: &impl Fn(&str) -> Option<String>,
        signer: Arc<dyn Credentials>,
    ) -> Self {
        Self {
            endpoint: endpoint(lookup, "S3"),
            region: sdk
                .region()
                .map_or_else(|| "us-east-1".to_owned(), ToString::to_string),
            signer,
            client: Client::default(),
        }
    }

    /// Reads the object `request` names: its text, with the answer's status and
    /// headers.
    pub(crate) async fn get_object(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        let asked: GetObject = serde_json::from_str(request.payload.as_str())
            .map_err(|error| unreadable("s3:getObject's request", error))?;
        let key = encoded(&asked.key);
        let mut url = match &self.endpoint {
            Some(endpoint) => format!("{}/{}/{key}", endpoint.trim_end_matches('/'), asked.bucket),
            None => format!(
                "https://{}.s3.{}.amazonaws.com/{key}",
                asked.bucket, self.region
            ),
        };
        if let Some(version) = &asked.version_id {
            url = format!("{url}?versionId={}", encoded(version));
        }
        let signed = Signed {
            service: "s3",
            region: &self.region,
            named: NAMED,
        };
        let headers = [("x-amz-content-sha256", EMPTY_SHA256)];
        let (status, headers, bytes) = signed
            .send(&self.signer, &self.client, "GET", &url, &headers, &[])
            .await?;
        if !(200..300).contains(&status) {
            let text = String::from_utf8_lossy(&bytes);
            let code = element(&text, "Code").unwrap_or("UnknownError");
            let message = element(&text, "Message").unwrap_or(code);
            let body = json!({"__type": code, "message": message});
            return Err(refused(NAMED, status, &headers, &body));
        }
        let text = String::from_utf8(bytes).map_err(|_| {
            RemoteError::Unusable("S3 answered an object that is not UTF-8 text".to_owned())
        })?;
        let answer = ServiceAnswer {
            body: Value::String(text),
            status,
            headers,
            status_text: None,
        };
        serde_json::to_value(answer).map_err(|error| RemoteError::Unusable(error.to_string()))
    }
}

/// The text of the first `<name>` element of an S3 error's XML.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let start = xml.find(&format!("<{name}>"))? + name.len() + 2;
    let end = xml[start..].find(&format!("</{name}>"))?;
    Some(&xml[start..start + end])
}

/// `text` percent-encoded for a URL's path as SigV4 signs it (`/` kept).
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                char::from(byte).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_encoded_as_sigv4_signs_it_and_an_error_read_from_its_xml() {
        assert_eq!(encoded("in/2026 12/ä+b.csv"), "in/2026%2012/%C3%A4%2Bb.csv");
        let xml = "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>";
        assert_eq!(element(xml, "Code"), Some("NoSuchKey"));
        assert_eq!(
            element(xml, "Message"),
            Some("The specified key does not exist.")
        );
        assert_eq!(element(xml, "RequestId"), None);
    }
}
