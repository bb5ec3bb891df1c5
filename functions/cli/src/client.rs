//! The API as the command line reaches it: over HTTP, with a bearer token or a
//! SigV4 signature when the deployment asks for one.

use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use aws_credential_types::Credentials as Keys;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_types::SdkConfig;
use sas_core::ports::{Credentials, Unsigned};
use sas_credentials::AwsCredentials;
use sas_domain::services::SigV4;
use serde_json::Value;

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
        let url = format!("{}{path}", self.base);
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut request = self
            .http
            .request(reqwest::Method::from_bytes(method.as_bytes())?, &url)
            .header("content-type", "application/json")
            .body(body.clone());
        match &self.auth {
            Auth::None => {}
            Auth::Bearer(token) => request = request.bearer_auth(token),
            Auth::SigV4 { signer, region } => {
                let signing = SigV4 {
                    service: "execute-api".into(),
                    region: region.clone(),
                };
                let unsigned = Unsigned {
                    method,
                    url: &url,
                    headers: &[("content-type", "application/json")],
                    body: body.as_bytes(),
                };
                for (name, value) in signer.sign(&signing, unsigned).await? {
                    request = request.header(name, value);
                }
            }
        }
        let response = request
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
