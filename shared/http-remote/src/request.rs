//! A call's HTTP request: the step's payload with the service's headers, its
//! credential and its signature, sent by a client built at the first call.

use std::sync::PoisonError;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Uri};
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tracing::warn;

use sas_core::ports::{Chain, RemoteError, RemoteRequest, Unsigned};
use sas_domain::limits::MAX_STEP_OUTPUT;
use sas_domain::messages::Method;
use sas_domain::services::{Service, SigV4};
use sas_domain::trace::TraceContext;

use crate::HttpRemote;
use crate::answer::{Answer, read_body};

/// The payload's media type.
const JSON: &str = "application/json";

/// The header that names it.
const CONTENT_TYPE: &str = "content-type";

/// The header that carries the idempotency key.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// How long a connection to a service is kept open while no call uses it.
const IDLE_CONNECTION: Duration = Duration::from_secs(90);

/// The client the calls share: hyper's, pooling its connections by host, over TLS
/// where a URL asks for it.
pub(crate) type Client =
    hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// What a call sends: its method, headers beside the service's, and body.
pub(crate) struct Outgoing {
    pub method: http::Method,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Outgoing {
    /// A step's call: its payload, as JSON.
    pub(crate) fn of(request: &RemoteRequest) -> Self {
        Self {
            method: http_method(request.method),
            headers: vec![(CONTENT_TYPE.to_owned(), JSON.to_owned())],
            body: Bytes::copy_from_slice(request.payload.as_str().as_bytes()),
        }
    }

    /// Its own headers, as text.
    fn header_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        (self.headers.iter()).map(|(name, value)| (name.as_str(), value.as_str()))
    }
}

/// Why a request could not be sent, in words without its URL.
enum Failure {
    /// A header's name or value is not valid HTTP.
    Header,
    /// No connection could be made.
    Connect(hyper_util::client::legacy::Error),
    /// The request failed before the answer's status and headers came (a body cut
    /// off after them is the answer's own, [`crate::answer::BodyError`]).
    Request(hyper_util::client::legacy::Error),
    /// The service's own timeout passed first.
    Timeout,
}

impl Failure {
    /// The call's error, in words without its URL; logged with its cause.
    fn into_error(self, request: &RemoteRequest) -> RemoteError {
        let (name, key) = (request.service.as_str(), &request.idempotency_key);
        let said = match &self {
            Self::Header => "has a header that is not valid HTTP",
            Self::Connect(_) => "could not be reached",
            Self::Request(_) => "failed the request",
            Self::Timeout => "did not answer in time",
        };
        match &self {
            Self::Connect(error) | Self::Request(error) => {
                warn!(service = name, %key, error = %Chain(error), "remote call failed");
            }
            Self::Header | Self::Timeout => {
                warn!(service = name, %key, "remote call failed: {said}");
            }
        }
        match self {
            Self::Header => RemoteError::Permanent(format!("the call of service '{name}' {said}")),
            _ => RemoteError::Transient(format!("service '{name}' {said}")),
        }
    }
}

impl HttpRemote {
    /// Sends `outgoing` for `request`, with the service's headers, `secret` in its
    /// credential's header, and signed when the service asks for SigV4; reads what the
    /// service answers, its body up to a step output's limit.
    pub(crate) async fn send(
        &self,
        request: &RemoteRequest,
        outgoing: &Outgoing,
        service: &Service,
        uri: &Uri,
        secret: Option<&str>,
    ) -> Result<Answer, RemoteError> {
        let mut headers: Vec<(&str, &str)> = vec![(IDEMPOTENCY_KEY, &request.idempotency_key)];
        headers.extend(outgoing.header_pairs());
        // The service's spans join the task's trace, under this attempt's span.
        let trace: Vec<_> = request
            .trace
            .iter()
            .flat_map(TraceContext::headers)
            .collect();
        headers.extend(trace.iter().map(|(h, v)| (*h, v.as_str())));
        headers.extend(
            service
                .headers
                .iter()
                .map(|(h, v)| (h.as_str(), v.as_str())),
        );
        let credential = match (&service.credential, secret) {
            (Some(credential), Some(secret)) => {
                Some((credential.header.as_str(), credential.header_value(secret)))
            }
            _ => None,
        };
        headers.extend(credential.as_ref().map(|(h, v)| (*h, v.as_str())));
        let signature = match &service.sigv4 {
            Some(signing) => self.signature(request, outgoing, signing, uri).await?,
            None => Vec::new(),
        };
        headers.extend(signature.iter().map(|(h, v)| (h.as_str(), v.as_str())));
        let client = self.client()?;
        let sent = exchange(&client, outgoing, uri, &headers);
        // The call's own timeout bounds every request it sends (`HttpRemote::call`); a
        // service's shorter one bounds each request here. A timer at the same deadline
        // would be one more registered and cancelled at every call.
        let answer = match service.timeout.filter(|t| *t < request.timeout) {
            Some(timeout) => tokio::time::timeout(timeout, sent)
                .await
                .unwrap_or(Err(Failure::Timeout)),
            None => sent.await,
        };
        answer.map_err(|failure| failure.into_error(request))
    }

    /// The SigV4 signature of the call, as headers.
    async fn signature(
        &self,
        request: &RemoteRequest,
        outgoing: &Outgoing,
        signing: &SigV4,
        uri: &Uri,
    ) -> Result<Vec<(String, String)>, RemoteError> {
        let name = request.service.as_str();
        let signed: Vec<(&str, &str)> = outgoing.header_pairs().collect();
        let url = uri.to_string();
        let unsigned = Unsigned {
            method: outgoing.method.as_str(),
            url: &url,
            headers: &signed,
            body: &outgoing.body,
        };
        self.credentials
            .sign(signing, unsigned)
            .await
            .map_err(|error| {
                warn!(service = name, error = %Chain(&error), "a call could not be signed");
                RemoteError::Transient(format!("service '{name}': its call could not be signed"))
            })
    }

    /// The client, built at the first call (reading the system's root certificates).
    fn client(&self) -> Result<Client, RemoteError> {
        let mut client = self.client.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(client) = &*client {
            return Ok(client.clone());
        }
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        // A call's request is written whole at once: nothing to gain from Nagle's
        // wait, which held the next small write back under load.
        http.set_nodelay(true);
        let connector = HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| RemoteError::Transient(format!("cannot build the HTTP client: {e}")))?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let built = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(IDLE_CONNECTION)
            .build(connector);
        *client = Some(built.clone());
        Ok(built)
    }
}

/// One request and its answer, the body read up to a step output's limit.
async fn exchange(
    client: &Client,
    outgoing: &Outgoing,
    uri: &Uri,
    headers: &[(&str, &str)],
) -> Result<Answer, Failure> {
    let mut built = http::Request::builder()
        .method(outgoing.method.clone())
        .uri(uri.clone());
    for (header, value) in headers {
        let header = HeaderName::try_from(*header).map_err(|_| Failure::Header)?;
        let value = HeaderValue::try_from(*value).map_err(|_| Failure::Header)?;
        built = built.header(header, value);
    }
    let built = (built.body(Full::new(outgoing.body.clone()))).map_err(|_| Failure::Header)?;
    let response = client.request(built).await.map_err(|error| {
        if error.is_connect() {
            Failure::Connect(error)
        } else {
            Failure::Request(error)
        }
    })?;
    let (parts, body) = response.into_parts();
    Ok(Answer {
        status: parts.status,
        headers: parts.headers,
        body: read_body(body, MAX_STEP_OUTPUT).await,
    })
}

fn http_method(method: Method) -> http::Method {
    match method {
        Method::Post => http::Method::POST,
        Method::Put => http::Method::PUT,
        Method::Patch => http::Method::PATCH,
        Method::Delete => http::Method::DELETE,
    }
}
