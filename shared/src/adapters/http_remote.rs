//! Remote services over HTTP: a POST of the step's payload to the service's base
//! URL and the step's path, with the idempotency key in an `Idempotency-Key` header.

use std::collections::HashMap;
use std::sync::OnceLock;

use async_trait::async_trait;
use serde_json::Value;

use crate::ports::{RemoteCall, RemoteError, RemoteRequest};

/// The header that carries the idempotency key.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// Calls services by name, each at its base URL.
pub struct HttpRemote {
    /// Built at the first call: a function that makes none does not pay for its TLS set-up.
    client: OnceLock<reqwest::Client>,
    services: HashMap<String, String>,
    fallback: Option<String>,
}

impl HttpRemote {
    /// Services by name, to base URLs such as `https://account.example.com/v1`;
    /// a service not named is at `<fallback>/<service>`, when there is a fallback.
    #[must_use]
    pub fn new(services: HashMap<String, String>, fallback: Option<String>) -> Self {
        Self {
            client: OnceLock::new(),
            services,
            fallback,
        }
    }

    fn base(&self, service: &str) -> Option<String> {
        self.services.get(service).cloned().or_else(|| {
            let fallback = self.fallback.as_deref()?;
            Some(format!("{}/{service}", fallback.trim_end_matches('/')))
        })
    }
}

#[async_trait]
impl RemoteCall for HttpRemote {
    async fn call(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        let base = self.base(&request.service).ok_or_else(|| {
            RemoteError::Permanent(format!(
                "no URL configured for service '{}'",
                request.service
            ))
        })?;
        let url = format!("{}{}", base.trim_end_matches('/'), request.path);
        let client = match self.client.get() {
            Some(client) => client,
            None => {
                let built = reqwest::Client::builder().build().map_err(|e| {
                    RemoteError::Transient(format!("cannot build the HTTP client: {e}"))
                })?;
                self.client.get_or_init(|| built)
            }
        };
        let response = client
            .post(&url)
            .header(IDEMPOTENCY_KEY, &request.idempotency_key)
            .timeout(request.timeout)
            .json(&request.payload)
            .send()
            .await
            .map_err(|e| RemoteError::Transient(format!("{url}: {e}")))?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(body);
        }
        let message = format!("{url} answered {status}: {body}");
        if status.is_server_error() || status.as_u16() == 408 || status.as_u16() == 429 {
            Err(RemoteError::Transient(message))
        } else {
            Err(RemoteError::Permanent(message))
        }
    }
}
