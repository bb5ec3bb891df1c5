//! The API as the command line reaches it: over HTTP, with a bearer token or a
//! SigV4 signature when the deployment asks for one.

use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use aws_credential_types::Credentials as Keys;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_types::SdkConfig;
use sas_core::ports::{Credentials, Unsigned};
use sas_credentials::AwsCredentials;
use sas_domain::payload::PayloadRef;
use sas_domain::services::SigV4;
use serde_json::{Value, json};

/// How requests prove who sends them.
pub enum Auth {
    /// They do not: the local server, or a deployment with `AuthMode=NONE`.
    None,
    /// `Authorization: Bearer <token>` (`AuthMode=JWT`, or sas-local with tokens).
    Bearer(String),
    /// Signed with SigV4 for `execute-api` in a region (`AuthMode=IAM`).
    SigV4 {
        /// Signs with the keys from the environment.
        signer: Arc<AwsCredentials>,
        /// Where the API is.
        region: String,
    },
}

impl Auth {
    /// SigV4 with the keys in the environment (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`).
    ///
    /// # Errors
    /// When the keys are not set.
    pub fn sigv4(region: String) -> anyhow::Result<Self> {
        let variable = |name: &str| {
            std::env::var(name).with_context(|| {
                format!("--sigv4 signs with the keys in the environment: {name} is not set")
            })
        };
        let keys = Keys::new(
            variable("AWS_ACCESS_KEY_ID")?,
            variable("AWS_SECRET_ACCESS_KEY")?,
            std::env::var("AWS_SESSION_TOKEN").ok(),
            None,
            "environment",
        );
        let sdk = SdkConfig::builder()
            .credentials_provider(SharedCredentialsProvider::new(keys))
            .build();
        Ok(Self::SigV4 {
            signer: Arc::new(AwsCredentials::new(&sdk)),
            region,
        })
    }
}

/// The API at one base URL.
pub struct Api {
    http: reqwest::Client,
    base: String,
    auth: Auth,
}

impl Api {
    /// The API at `base` (`http://127.0.0.1:8080`, or a deployment's URL).
    #[must_use]
    pub fn new(base: &str, auth: Auth) -> Self {
        Self {
            http: reqwest::Client::new(),
            base: base.trim_end_matches('/').to_owned(),
            auth,
        }
    }

    /// Sends a request; the answer's JSON when it succeeds.
    ///
    /// # Errors
    /// When the API cannot be reached, or answers an error (named as the API names it).
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let body = body.map(Value::to_string).unwrap_or_default();
        let json = [("content-type".to_owned(), "application/json".to_owned())];
        self.send(method, path, &json, body.into_bytes()).await
    }

    /// Uploads `text`, a value's JSON, by the request `POST /payloads/uploads`
    /// answers (on AWS a presigned S3 URL, locally a path on the API); the reference
    /// that names it as a task's input.
    ///
    /// # Errors
    /// When the request cannot be had, or the value is refused where it is put.
    pub async fn upload(&self, text: Vec<u8>) -> anyhow::Result<Value> {
        let named = json!(PayloadRef::of(&text));
        let request = self.call("POST", "/payloads/uploads", Some(&named)).await?;
        let url = request["url"]
            .as_str()
            .context("the upload request has no url")?;
        let headers: Vec<(String, String)> = (request["headers"].as_object())
            .into_iter()
            .flatten()
            .filter_map(|(name, value)| Some((name.clone(), value.as_str()?.to_owned())))
            .collect();
        let method = request["method"].as_str().unwrap_or("PUT");
        if url.starts_with('/') {
            self.send(method, url, &headers, text).await?;
        } else {
            let mut put = self
                .http
                .request(reqwest::Method::from_bytes(method.as_bytes())?, url);
            for (name, value) in &headers {
                put = put.header(name, value);
            }
            let answer = put
                .body(text)
                .send()
                .await
                .context("cannot reach the value store")?;
            let status = answer.status();
            if !status.is_success() {
                let text = answer.text().await.unwrap_or_default();
                bail!("the value store refused the value: {status} {text:.300}");
            }
        }
        Ok(json!({ "$payload": request["$payload"] }))
    }

    /// Sends `body` with `headers` to `path` on the API, authenticated as this client
    /// is; the answer's JSON when it succeeds.
    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(String, String)],
        body: Vec<u8>,
    ) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut request = self
            .http
            .request(reqwest::Method::from_bytes(method.as_bytes())?, &url);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        match &self.auth {
            Auth::None => {}
            Auth::Bearer(token) => request = request.bearer_auth(token),
            Auth::SigV4 { signer, region } => {
                let signing = SigV4 {
                    service: "execute-api".into(),
                    region: region.clone(),
                };
                let named: Vec<(&str, &str)> = (headers.iter())
                    .map(|(name, value)| (name.as_str(), value.as_str()))
                    .collect();
                let unsigned = Unsigned {
                    method,
                    url: &url,
                    headers: &named,
                    body: &body,
                };
                for (name, value) in signer.sign(&signing, unsigned).await? {
                    request = request.header(name, value);
                }
            }
        }
        let response = request
            .body(body)
            .send()
            .await
            .with_context(|| format!("cannot reach the API at {}", self.base))?;
        let status = response.status();
        let text = response.text().await?;
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status.is_success() {
            return Ok(answer);
        }
        match answer["error"]["message"].as_str() {
            Some(message) => bail!(
                "{} {}: {message}",
                status.as_u16(),
                answer["error"]["code"].as_str().unwrap_or_default()
            ),
            None => Err(anyhow!("{method} {path}: {status}")),
        }
    }
}
