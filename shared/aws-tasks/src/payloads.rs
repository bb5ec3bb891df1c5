//! The values stored apart ([`Payloads`]) in the S3 bucket the stack creates, each an
//! object `payloads/<sha256>`: written with a signed PUT whose body S3 checks against
//! its hash, read whole with a GET. Reached on AWS, or by path at the endpoint the
//! environment names (`AWS_ENDPOINT_URL_S3`, then `AWS_ENDPOINT_URL`).

use std::sync::Arc;

use async_trait::async_trait;
use aws_types::SdkConfig;

use sas_core::ports::{Credentials, PayloadError, Payloads};

use crate::s3::EMPTY_SHA256;
use crate::signed::{Client, Signed};
use crate::{Named, endpoint};

const NAMED: Named = Named {
    error_prefix: "S3",
    label: "Amazon S3",
};

/// Where the values stored apart live in their bucket.
pub const PREFIX: &str = "payloads/";

/// A bucket of values.
pub struct S3Payloads {
    bucket: String,
    endpoint: Option<String>,
    region: String,
    signer: Arc<dyn Credentials>,
    client: Client,
}

impl S3Payloads {
    /// The values in `bucket`, reached at the endpoint `lookup` names for S3, else
    /// the one `sdk` names, else S3's own; requests signed by `signer`.
    #[must_use]
    pub fn new(
        sdk: &SdkConfig,
        lookup: impl Fn(&str) -> Option<String>,
        signer: Arc<dyn Credentials>,
        bucket: String,
    ) -> Self {
        Self {
            bucket,
            endpoint: endpoint(&lookup, "S3").or_else(|| sdk.endpoint_url().map(str::to_owned)),
            region: sdk
                .region()
                .map_or_else(|| "us-east-1".to_owned(), ToString::to_string),
            signer,
            client: Client::default(),
        }
    }

    fn url(&self, sha256: &str) -> String {
        match &self.endpoint {
            Some(endpoint) => format!(
                "{}/{}/{PREFIX}{sha256}",
                endpoint.trim_end_matches('/'),
                self.bucket
            ),
            None => format!(
                "https://{}.s3.{}.amazonaws.com/{PREFIX}{sha256}",
                self.bucket, self.region
            ),
        }
    }

    async fn send(
        &self,
        method: &'static str,
        sha256: &str,
        content_sha256: &str,
        body: &[u8],
    ) -> Result<(u16, Vec<u8>), PayloadError> {
        let hex = sha256.len() == 64 && sha256.bytes().all(|byte| byte.is_ascii_hexdigit());
        if !hex {
            return Err(PayloadError(
                format!("'{sha256}' is not a value's hash").into(),
            ));
        }
        let signed = Signed {
            service: "s3",
            region: &self.region,
            named: NAMED,
        };
        let headers = [("x-amz-content-sha256", content_sha256)];
        let (status, _, answer) = signed
            .send(
                &self.signer,
                &self.client,
                method,
                &self.url(sha256),
                &headers,
                body,
            )
            .await
            .map_err(|error| PayloadError(error.into()))?;
        Ok((status, answer))
    }
}

/// S3's refusal, with its code.
fn refused(status: u16, answer: &[u8]) -> PayloadError {
    let text = String::from_utf8_lossy(answer);
    let code = crate::s3::element(&text, "Code").unwrap_or("UnknownError");
    PayloadError(format!("S3 answered {status} {code}").into())
}

#[async_trait]
impl Payloads for S3Payloads {
    async fn put(&self, sha256: &str, text: Vec<u8>) -> Result<(), PayloadError> {
        let content = sas_domain::payload::PayloadRef::of(&text).sha256;
        match self.send("PUT", sha256, &content, &text).await? {
            (200..=299, _) => Ok(()),
            (status, answer) => Err(refused(status, &answer)),
        }
    }

    async fn get(&self, sha256: &str) -> Result<Option<Vec<u8>>, PayloadError> {
        match self.send("GET", sha256, EMPTY_SHA256, &[]).await? {
            (200..=299, text) => Ok(Some(text)),
            (404, _) => Ok(None),
            (status, answer) => Err(refused(status, &answer)),
        }
    }
}
