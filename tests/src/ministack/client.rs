//! Requests to MiniStack: a response, an IAM access key, and the client that signs
//! requests with SigV4 (the API's, and the AWS APIs the harness has no SDK crate for).

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use serde_json::Value;

use super::{ACCESS_KEY, REGION};

/// A response: its status and body.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body, as text.
    pub body: String,
}

impl Answer {
    /// The body as JSON (`null` when it is not JSON).
    #[must_use]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// An IAM access key: who signs a request.
#[derive(Debug, Clone)]
pub struct AccessKey {
    /// The key's id.
    pub id: String,
    /// Its secret.
    pub secret: String,
}

impl AccessKey {
    /// The emulator's account root.
    #[must_use]
    pub fn root() -> Self {
        Self {
            id: ACCESS_KEY.to_owned(),
            secret: ACCESS_KEY.to_owned(),
        }
    }
}

/// Sends HTTP requests to MiniStack, signed with SigV4 as the root when asked: the
/// operator's requests to the API, and the harness's calls of the AWS APIs it has no SDK
/// crate for (API Gateway, Lambda, CloudWatch and its logs), in their JSON protocols.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    endpoint: String,
}

impl Client {
    /// A client of the MiniStack at `endpoint`.
    #[must_use]
    pub fn new(endpoint: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            endpoint: endpoint.to_owned(),
        }
    }

    /// Sends a request to `url`; with `service`, signed for it.
    ///
    /// # Panics
    /// When the request cannot be signed or sent.
    pub async fn send(
        &self,
        method: &str,
        url: &str,
        service: Option<&str>,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Answer {
        let signer = service.map(|service| (service, AccessKey::root()));
        self.send_as(method, url, signer, headers, body).await
    }

    /// Sends a request to `url`; with a service and a key, signed for the service with
    /// the key.
    ///
    /// # Panics
    /// When the request cannot be signed or sent.
    pub async fn send_as(
        &self,
        method: &str,
        url: &str,
        signer: Option<(&str, AccessKey)>,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Answer {
        let method_name = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = self.http.request(method_name, url).body(body.to_vec());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some((service, key)) = signer {
            let identity: Identity =
                Credentials::new(key.id, key.secret, None, None, "ministack").into();
            let params = v4::SigningParams::builder()
                .identity(&identity)
                .region(REGION)
                .name(service)
                .time(SystemTime::now())
                .settings(SigningSettings::default())
                .build()
                .expect("signing parameters")
                .into();
            let signable = SignableRequest::new(
                method,
                url,
                headers.iter().copied(),
                SignableBody::Bytes(body),
            )
            .expect("a signable request");
            let (instructions, _) = sign(signable, &params).expect("signed").into_parts();
            for (name, value) in instructions.headers() {
                request = request.header(name, value);
            }
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        Answer {
            status: response.status().as_u16(),
            body: response.text().await.unwrap_or_default(),
        }
    }

    /// Calls a REST-JSON API (API Gateway, Lambda) as the root; panics unless it succeeds.
    ///
    /// # Panics
    /// When the call fails.
    pub async fn rest(&self, method: &str, service: &str, path: &str, body: &Value) -> Value {
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let url = format!("{}{path}", self.endpoint);
        let answer = self
            .send(
                method,
                &url,
                Some(service),
                &[("content-type", "application/json")],
                &body,
            )
            .await;
        assert!(
            (200..300).contains(&answer.status),
            "{method} {path} ({service}) answered {}: {}",
            answer.status,
            answer.body
        );
        answer.json()
    }

    /// Calls a JSON-RPC API (CloudWatch, CloudWatch Logs) as the root; panics unless it
    /// succeeds.
    ///
    /// # Panics
    /// When the call fails.
    pub async fn rpc(&self, service: &str, version: &str, target: &str, body: &Value) -> Value {
        let content_type = format!("application/x-amz-json-{version}");
        let answer = self
            .send(
                "POST",
                &format!("{}/", self.endpoint),
                Some(service),
                &[("content-type", &content_type), ("x-amz-target", target)],
                body.to_string().as_bytes(),
            )
            .await;
        assert!(
            (200..300).contains(&answer.status),
            "{target} answered {}: {}",
            answer.status,
            answer.body
        );
        answer.json()
    }
}
