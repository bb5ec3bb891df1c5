//! A call's HTTP request: the step's payload with the service's headers, its
//! credential and its signature, sent by a client built at the first call.

use std::sync::PoisonError;

use tracing::warn;

use sas_core::ports::{Chain, RemoteError, RemoteRequest, Unsigned};
use sas_domain::messages::Method;
use sas_domain::services::Service;
use sas_domain::trace::TraceContext;

use crate::HttpRemote;

/// The payload's media type.
const JSON: &str = "application/json";

/// The header that names it.
const CONTENT_TYPE: &str = "content-type";

/// The header that carries the idempotency key.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// What a call sends: its method, headers beside the service's, and body.
pub(crate) struct Outgoing {
    pub method: reqwest::Method,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Outgoing {
    /// A step's call: its payload, as JSON.
    pub(crate) fn of(request: &RemoteRequest) -> Self {
        Self {
            method: http_method(request.method),
            headers: vec![(CONTENT_TYPE.to_owned(), JSON.to_owned())],
            body: request.payload.as_str().as_bytes().to_vec(),
        }
    }
}

impl HttpRemote {
    /// Sends `outgoing` for `request`, with the service's headers, `secret` in its
    /// credential's header, and signed when the service asks for SigV4.
    pub(crate) async fn send(
        &self,
        request: &RemoteRequest,
        outgoing: &Outgoing,
        service: &Service,
        url: &reqwest::Url,
        secret: Option<&str>,
    ) -> Result<reqwest::Response, RemoteError> {
        let name = request.service.as_str();
        let method = outgoing.method.clone();
        let body = outgoing.body.clone();
        let mut builder = self
            .client()?
            .request(method.clone(), url.clone())
            .header(IDEMPOTENCY_KEY, &request.idempotency_key);
        // The call's own timeout bounds every request it sends (`HttpRemote::call`); a
        // service's shorter one bounds each request here. A timer at the same deadline
        // would be one more registered and cancelled at every call.
        if let Some(timeout) = service.timeout.filter(|t| *t < request.timeout) {
            builder = builder.timeout(timeout);
        }
        for (header, value) in &outgoing.headers {
            builder = builder.header(header, value);
        }
        // The service's spans join the task's trace, under this attempt's span.
        for (header, value) in request.trace.iter().flat_map(TraceContext::headers) {
            builder = builder.header(header, value);
        }
        for (header, value) in &service.headers {
            builder = builder.header(header, value);
        }
        if let (Some(credential), Some(secret)) = (&service.credential, secret) {
            builder = builder.header(&credential.header, credential.header_value(secret));
        }
        if let Some(signing) = &service.sigv4 {
            let signed: Vec<(&str, &str)> = (outgoing.headers.iter())
                .map(|(name, value)| (name.as_str(), value.as_str()))
                .collect();
            let unsigned = Unsigned {
                method: method.as_str(),
                url: url.as_str(),
                headers: &signed,
                body: &body,
            };
            let signature = self
                .credentials
                .sign(signing, unsigned)
                .await
                .map_err(|error| {
                    warn!(service = name, error = %Chain(&error), "a call could not be signed");
                    RemoteError::Transient(format!(
                        "service '{name}': its call could not be signed"
                    ))
                })?;
            for (header, value) in signature {
                builder = builder.header(header, value);
            }
        }
        let builder = builder.body(body);
        builder.send().await.map_err(|error| {
            let error = error.without_url();
            warn!(service = name, key = %request.idempotency_key, %error, "remote call failed");
            RemoteError::Transient(format!("service '{name}' {}", failure(&error)))
        })
    }

    fn client(&self) -> Result<reqwest::Client, RemoteError> {
        let mut client = self.client.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(client) = &*client {
            return Ok(client.clone());
        }
        let built = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| RemoteError::Transient(format!("cannot build the HTTP client: {e}")))?;
        *client = Some(built.clone());
        Ok(built)
    }
}

fn http_method(method: Method) -> reqwest::Method {
    match method {
        Method::Post => reqwest::Method::POST,
        Method::Put => reqwest::Method::PUT,
        Method::Patch => reqwest::Method::PATCH,
        Method::Delete => reqwest::Method::DELETE,
    }
}

/// What a failed request was, in words without its URL.
fn failure(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        "did not answer in time"
    } else if error.is_connect() {
        "could not be reached"
    } else {
        "failed the request"
    }
}
