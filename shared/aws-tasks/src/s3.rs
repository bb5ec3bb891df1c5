//! S3 for a distributed Map: `GetObject` and `ListObjectsV2` for its `ItemReader`
//! (the object's text, or the listing's objects as a JSON array's text, is the
//! answer's body), and `PutObject` for its `ResultWriter` (the objects of its request
//! put in order). Signed requests of their own (S3 speaks XML, and its SDK
//! is heavy), at the bucket's host on AWS, or by path at an endpoint the environment
//! names.

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_types::SdkConfig;
use serde::Deserialize;
use serde_json::{Value, json};

use sas_core::ports::{Credentials, RemoteError, RemoteRequest};
use sas_domain::machine::{LIST_ITEMS, WRITE_RESULTS};

use crate::json_api::refused;
use crate::signed::{Client, Signed};
use crate::{Named, answered, endpoint, unreadable};

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

/// `ListObjectsV2`'s request, as a Task's reader gives it.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListObjects {
    bucket: String,
    #[serde(default)]
    prefix: Option<String>,
}

/// What a Map's writer asks: objects put in order, in one bucket.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct PutObjects {
    bucket: String,
    objects: Vec<Object>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Object {
    key: String,
    body: String,
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

    /// Makes the S3 call `request` asks for: a reader's, or a writer's.
    pub(crate) async fn call(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        match request.path.as_str() {
            WRITE_RESULTS => self.put_objects(request).await,
            LIST_ITEMS => self.list_objects(request).await,
            _ => self.get_object(request).await,
        }
    }

    /// Lists the objects under the request's prefix, page after page: each one's
    /// `{"Etag", "Key", "LastModified" (epoch seconds), "Size", "StorageClass"}`, as
    /// a Map's reader of a listing gives them, in a JSON array's text.
    async fn list_objects(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        let asked: ListObjects = serde_json::from_str(request.payload.as_str())
            .map_err(|error| unreadable("s3:listObjectsV2's request", error))?;
        let mut items = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut url = match &self.endpoint {
                Some(endpoint) => format!(
                    "{}/{}?list-type=2",
                    endpoint.trim_end_matches('/'),
                    asked.bucket
                ),
                None => format!(
                    "https://{}.s3.{}.amazonaws.com/?list-type=2",
                    asked.bucket, self.region
                ),
            };
            if let Some(prefix) = &asked.prefix {
                url = format!("{url}&prefix={}", query_encoded(prefix));
            }
            if let Some(token) = &after {
                url = format!("{url}&continuation-token={}", query_encoded(token));
            }
            let (status, headers, bytes) = self.send("GET", &url, EMPTY_SHA256, &[]).await?;
            let text = String::from_utf8_lossy(&bytes);
            let page = listing(&text).map_err(|error| {
                RemoteError::Unusable(format!("S3's listing does not read: {error}"))
            })?;
            items.extend(page.objects);
            after = page.next;
            if after.is_none() {
                return answered(Value::Array(items).to_string().into(), status, headers);
            }
        }
    }

    /// Reads the object `request` names: its text, with the answer's status and
    /// headers.
    async fn get_object(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        let asked: GetObject = serde_json::from_str(request.payload.as_str())
            .map_err(|error| unreadable("s3:getObject's request", error))?;
        let mut url = self.url(&asked.bucket, &asked.key);
        if let Some(version) = &asked.version_id {
            url = format!("{url}?versionId={}", encoded(version));
        }
        let (status, headers, bytes) = self.send("GET", &url, EMPTY_SHA256, &[]).await?;
        let text = String::from_utf8(bytes).map_err(|_| {
            RemoteError::Unusable("S3 answered an object that is not UTF-8 text".to_owned())
        })?;
        answered(Value::String(text), status, headers)
    }

    /// Puts the objects `request` names, in order (each put again is the same
    /// object): the keys put.
    async fn put_objects(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        let asked: PutObjects = serde_json::from_str(request.payload.as_str())
            .map_err(|error| unreadable("s3:putObject's request", error))?;
        let (mut status, mut headers) = (200, BTreeMap::new());
        for object in &asked.objects {
            let url = self.url(&asked.bucket, &object.key);
            let digest = sas_domain::sha256_hex(&object.body);
            (status, headers, _) = self
                .send("PUT", &url, &digest, object.body.as_bytes())
                .await?;
        }
        let keys: Vec<&str> = asked.objects.iter().map(|o| o.key.as_str()).collect();
        answered(json!({"Keys": keys}), status, headers)
    }

    /// Where the object `key` of `bucket` is.
    fn url(&self, bucket: &str, key: &str) -> String {
        let key = encoded(key);
        match &self.endpoint {
            Some(endpoint) => format!("{}/{bucket}/{key}", endpoint.trim_end_matches('/')),
            None => format!("https://{bucket}.s3.{}.amazonaws.com/{key}", self.region),
        }
    }

    /// Sends `method url` with `body` (of SHA-256 `digest`), signed: its answer, or
    /// S3's refusal as Step Functions names it.
    async fn send(
        &self,
        method: &'static str,
        url: &str,
        digest: &str,
        body: &[u8],
    ) -> Result<(u16, BTreeMap<String, String>, Vec<u8>), RemoteError> {
        let signed = Signed {
            service: "s3",
            region: &self.region,
            named: NAMED,
        };
        let headers = [("x-amz-content-sha256", digest)];
        let (status, headers, bytes) = signed
            .send(&self.signer, &self.client, method, url, &headers, body)
            .await?;
        if !(200..300).contains(&status) {
            let text = String::from_utf8_lossy(&bytes);
            let code = element(&text, "Code").unwrap_or("UnknownError");
            let message = element(&text, "Message").unwrap_or(code);
            let body = json!({"__type": code, "message": message});
            return Err(refused(NAMED, status, &headers, &body));
        }
        Ok((status, headers, bytes))
    }
}

/// A page of a bucket's listing: its objects, and where the next page starts.
struct Page {
    objects: Vec<Value>,
    next: Option<String>,
}

/// The page of a listing `ListObjectsV2` answered in `xml`.
fn listing(xml: &str) -> Result<Page, aws_smithy_xml::decode::XmlDecodeError> {
    use aws_smithy_xml::decode::{Document, try_data};

    let mut document = Document::new(xml);
    let mut root = document.root_element()?;
    let (mut objects, mut truncated, mut next) = (Vec::new(), false, None);
    while let Some(mut tag) = root.next_tag() {
        match tag.start_el().local() {
            "Contents" => {
                let mut object = json!({});
                while let Some(mut field) = tag.next_tag() {
                    let name = field.start_el().local().to_owned();
                    let text = try_data(&mut field)?;
                    object[item_field(&name)] = match name.as_str() {
                        "Size" => text.parse::<u64>().map_or(Value::Null, Value::from),
                        "LastModified" => humantime::parse_rfc3339(&text)
                            .ok()
                            .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
                            .map_or(Value::Null, |since| since.as_secs().into()),
                        _ => Value::String(text.into_owned()),
                    };
                }
                objects.push(object);
            }
            "IsTruncated" => truncated = try_data(&mut tag)? == "true",
            "NextContinuationToken" => next = Some(try_data(&mut tag)?.into_owned()),
            _ => {}
        }
    }
    Ok(Page {
        objects,
        next: next.filter(|_| truncated),
    })
}

/// The name a Map's reader gives a listed object's field (`ETag` is `Etag`).
fn item_field(field: &str) -> &str {
    if field == "ETag" { "Etag" } else { field }
}

/// The text of the first `<name>` element of an S3 error's XML.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let start = xml.find(&format!("<{name}>"))? + name.len() + 2;
    let end = xml[start..].find(&format!("</{name}>"))?;
    Some(&xml[start..start + end])
}

/// `text` percent-encoded for a URL's path as SigV4 signs it (`/` kept).
fn encoded(text: &str) -> String {
    percent_encoded(text, true)
}

/// `text` percent-encoded for a query's value as SigV4 signs it (`/` too).
fn query_encoded(text: &str) -> String {
    percent_encoded(text, false)
}

fn percent_encoded(text: &str, keep_slash: bool) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            b'/' if keep_slash => "/".to_owned(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_is_read_as_a_maps_reader_gives_its_objects() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>parcels</Name><Prefix>in/</Prefix><KeyCount>2</KeyCount>
  <IsTruncated>true</IsTruncated><NextContinuationToken>1ueG/x==</NextContinuationToken>
  <Contents><Key>in/a&amp;b.json</Key><LastModified>2026-12-04T10:00:01.000Z</LastModified>
    <ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag><Size>34910</Size>
    <StorageClass>STANDARD</StorageClass></Contents>
  <Contents><Key>in/c.json</Key><Size>2</Size></Contents>
</ListBucketResult>"#;
        let page = listing(xml).expect("a listing");
        assert_eq!(
            page.objects[0],
            json!({"Key": "in/a&b.json", "LastModified": 1_796_378_401_u64,
                   "Etag": "\"9b2cf535f27731c974343645a3985328\"", "Size": 34910,
                   "StorageClass": "STANDARD"})
        );
        assert_eq!(page.objects[1], json!({"Key": "in/c.json", "Size": 2}));
        assert_eq!(page.next.as_deref(), Some("1ueG/x=="));
        assert_eq!(query_encoded("1ueG/x=="), "1ueG%2Fx%3D%3D");
        let last = listing("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>");
        assert!(last.expect("a listing").next.is_none());
    }

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
