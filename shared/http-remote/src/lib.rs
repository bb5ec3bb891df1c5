//! Remote services over HTTP: a POST of the step's payload to the service's base
//! URL and the step's path, with the idempotency key in an `Idempotency-Key` header,
//! the service's headers, and its credential: a secret read through the
//! [`Credentials`] port, kept for [`SECRET_TTL`], and read again when the service
//! answers 401 (it was rotated), the call then made once more with the new value;
//! or, for an AWS-hosted API, a SigV4 signature made through the same port. A
//! secret's value is never logged nor put in an error.
//!
//! What a service answers is read as the step's output only when it is a 2xx with
//! a JSON body (or none) within [`MAX_STEP_OUTPUT`]; a redirect is not followed (a
//! POST turned into a GET would mark a step done that never ran). The errors say
//! what happened in words a caller may see; the URLs and the bodies go to the log.
//!
//! Implements `sas-core`'s [`RemoteCall`] port with reqwest; depends on nothing else
//! of the project's, and only the agent function and the local process link it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use serde_json::Value;
use tracing::{info, warn};

use sas_core::ports::{
    Chain, CredentialError, Credentials, RemoteCall, RemoteError, RemoteRequest, Unsigned,
};
use sas_domain::limits::MAX_STEP_OUTPUT;
use sas_domain::messages::Method;
use sas_domain::services::{Credential, SecretRef, Service, SigV4};

/// The payload's media type.
const JSON: &str = "application/json";

/// The header that carries the idempotency key.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// URLs kept parsed at most: a workflow's steps call a few, but a path made from a
/// task's input would be a new one at every call.
const PARSED_URLS: usize = 1024;

/// How much of a body a log line quotes.
const LOGGED_BODY: usize = 512;

/// How long a secret read is used before it is read again.
pub const SECRET_TTL: Duration = Duration::from_secs(300);

/// Calls services by name, each at its base URL.
pub struct HttpRemote {
    /// Built at the first call, once however many calls come at once (the root
    /// certificates' load is a cold start's largest CPU cost): a function that makes
    /// no call does not pay for its TLS set-up.
    client: Mutex<Option<reqwest::Client>>,
    services: HashMap<String, Service>,
    fallback: Option<String>,
    credentials: Arc<dyn Credentials>,
    /// Secrets read, with when.
    cached: Mutex<HashMap<SecretRef, (String, Instant)>>,
    /// The URLs called, parsed: parsing the text again at every call was a tenth of
    /// the call's instructions.
    urls: Mutex<HashMap<String, reqwest::Url>>,
}

/// The local process's credentials: secrets from its environment (`env:` ones only),
/// and no identity to sign with.
pub struct LocalCredentials;

#[async_trait]
impl Credentials for LocalCredentials {
    async fn secret(&self, secret: &SecretRef) -> Result<String, CredentialError> {
        match secret {
            SecretRef::Env(name) => std::env::var(name)
                .map_err(|_| CredentialError::new(secret, "the variable is not set")),
            SecretRef::SecretsManager(_) | SecretRef::Ssm(_) => Err(CredentialError::new(
                secret,
                "only env: secrets are read by this process",
            )),
        }
    }

    async fn sign(
        &self,
        signing: &SigV4,
        _: Unsigned<'_>,
    ) -> Result<Vec<(String, String)>, CredentialError> {
        Err(CredentialError::new(
            format!("SigV4 for {}", signing.service),
            "this process has no AWS identity to sign with",
        ))
    }
}

/// Why a body could not be read whole.
enum BodyError {
    /// Longer than the limit.
    TooLarge,
    /// The connection failed while reading it.
    Read(reqwest::Error),
}

impl HttpRemote {
    /// Services by name (base URLs such as `https://account.example.com/v1`, with
    /// their headers, and credentials from `credentials`); a service not named, or
    /// named without a URL, is at `<fallback>/<service>`, when there is a fallback.
    #[must_use]
    pub fn new(
        services: HashMap<String, Service>,
        fallback: Option<String>,
        credentials: Arc<dyn Credentials>,
    ) -> Self {
        Self {
            client: Mutex::new(None),
            services,
            fallback,
            credentials,
            cached: Mutex::new(HashMap::new()),
            urls: Mutex::new(HashMap::new()),
        }
    }

    /// `path` at the service's base URL `base`, parsed once while fewer than
    /// [`PARSED_URLS`] are kept.
    fn url(&self, service: &str, base: &str, path: &str) -> Result<reqwest::Url, RemoteError> {
        let text = format!("{}{path}", base.trim_end_matches('/'));
        let mut urls = self.urls.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(url) = urls.get(&text) {
            return Ok(url.clone());
        }
        let url = reqwest::Url::parse(&text).map_err(|error| {
            warn!(service, %error, "a service's URL does not parse");
            RemoteError::Transient(format!("service '{service}' failed the request"))
        })?;
        if urls.len() < PARSED_URLS {
            urls.insert(text, url.clone());
        }
        Ok(url)
    }

    /// The service `name`: as set, or at the fallback when it is not, or is set
    /// without a URL (a mock service with a limit, say).
    fn service(&self, name: &str) -> Option<Cow<'_, Service>> {
        let set = self.services.get(name);
        if let Some(service) = set.filter(|s| !s.url.is_empty()) {
            return Some(Cow::Borrowed(service));
        }
        let fallback = self.fallback.as_deref()?;
        let url = format!("{}/{name}", fallback.trim_end_matches('/'));
        Some(Cow::Owned(match set {
            Some(service) => Service {
                url,
                ..service.clone()
            },
            None => Service::at(url),
        }))
    }

    /// The credential's secret: as read within [`SECRET_TTL`], or afresh when `fresh`.
    async fn secret(
        &self,
        service: &str,
        credential: &Credential,
        fresh: bool,
    ) -> Result<String, RemoteError> {
        let reference = &credential.secret;
        if !fresh {
            let cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((value, _)) = cached
                .get(reference)
                .filter(|(_, at)| at.elapsed() < SECRET_TTL)
            {
                return Ok(value.clone());
            }
        }
        // A secret written from a file often ends with a newline, which no header may hold.
        let value = self
            .credentials
            .secret(reference)
            .await
            .map(|v| v.trim().to_owned())
            .map_err(|error| {
                warn!(service, error = %Chain(&error), "a service's credential could not be read");
                RemoteError::Transient(format!(
                    "service '{service}': its credential could not be read"
                ))
            })?;
        self.cached
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(reference.clone(), (value.clone(), Instant::now()));
        Ok(value)
    }

    /// Sends the request, with the service's headers, `secret` in its credential's
    /// header, and signed when the service asks for SigV4.
    async fn send(
        &self,
        request: &RemoteRequest,
        service: &Service,
        url: &reqwest::Url,
        secret: Option<&str>,
    ) -> Result<reqwest::Response, RemoteError> {
        let name = request.service.as_str();
        let method = http_method(request.method);
        let body = request.payload.as_str().as_bytes().to_vec();
        let timeout = service
            .timeout
            .map_or(request.timeout, |t| t.min(request.timeout));
        let mut builder = self
            .client()?
            .request(method.clone(), url.clone())
            .header(reqwest::header::CONTENT_TYPE, JSON)
            .header(IDEMPOTENCY_KEY, &request.idempotency_key)
            .timeout(timeout);
        for (header, value) in &service.headers {
            builder = builder.header(header, value);
        }
        if let (Some(credential), Some(secret)) = (&service.credential, secret) {
            builder = builder.header(&credential.header, credential.header_value(secret));
        }
        if let Some(signing) = &service.sigv4 {
            let unsigned = Unsigned {
                method: method.as_str(),
                url: url.as_str(),
                headers: &[("content-type", JSON)],
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

/// Reads a body, up to `limit` bytes.
async fn read_body(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, BodyError> {
    let declared = response.content_length().unwrap_or(0);
    if usize::try_from(declared).map_or(true, |n| n > limit) {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| BodyError::Read(e.without_url()))?
    {
        if body.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The start of a body, for a log line.
fn quoted(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(LOGGED_BODY)]).into_owned()
}

/// The wait a `Retry-After` header asks for: delay-seconds, or an HTTP date (a date
/// past is no wait).
fn retry_after(headers: &reqwest::header::HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
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

#[async_trait]
impl RemoteCall for HttpRemote {
    /// The call's timeout bounds all of it: its credential's reads and a second send
    /// after a 401 included. The agent gives it the time left before the step's
    /// complete-by, after which nothing may be sent.
    async fn call(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        tokio::time::timeout(request.timeout, self.call_within(request))
            .await
            .unwrap_or_else(|_| {
                Err(RemoteError::Transient(format!(
                    "service '{}' did not answer in time",
                    request.service
                )))
            })
    }
}

impl HttpRemote {
    async fn call_within(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        let service = request.service.as_str();
        let settings = self.service(service).ok_or_else(|| {
            RemoteError::Permanent(format!("no URL configured for service '{service}'"))
        })?;
        let url = self.url(service, &settings.url, &request.path)?;
        let secret = match &settings.credential {
            Some(credential) => Some(self.secret(service, credential, false).await?),
            None => None,
        };
        let mut response = self
            .send(request, &settings, &url, secret.as_deref())
            .await?;
        if let (reqwest::StatusCode::UNAUTHORIZED, Some(credential), Some(used)) =
            (response.status(), &settings.credential, &secret)
        {
            let current = self.secret(service, credential, true).await?;
            if current != *used {
                info!(
                    service,
                    "the credential was refused and has changed: calling with the new one"
                );
                response = self.send(request, &settings, &url, Some(&current)).await?;
            }
        }
        let status = response.status();
        let asked_wait = retry_after(response.headers(), SystemTime::now());
        let body = match read_body(response, MAX_STEP_OUTPUT).await {
            Ok(body) => body,
            Err(BodyError::TooLarge) if status.is_success() => {
                warn!(service, key = %request.idempotency_key, %status, "answer over the size of a step's output");
                return Err(RemoteError::Unusable(format!(
                    "service '{service}' answered {status} with a body over the \
                     {MAX_STEP_OUTPUT} bytes a step's output may have"
                )));
            }
            Err(BodyError::TooLarge) => Vec::new(),
            Err(BodyError::Read(error)) => {
                warn!(service, key = %request.idempotency_key, %status, %error, "answer cut off");
                return Err(RemoteError::Transient(format!(
                    "service '{service}' answered {status} and its body was cut off"
                )));
            }
        };
        if status.is_success() {
            if body.is_empty() {
                return Ok(Value::Null);
            }
            // The service did it; what it said cannot be kept: the step is undone.
            return serde_json::from_slice(&body).map_err(|error| {
                warn!(service, key = %request.idempotency_key, %status, %error, body = %quoted(&body), "answer not JSON");
                RemoteError::Unusable(format!(
                    "service '{service}' answered {status} with a body that is not JSON"
                ))
            });
        }
        warn!(service, key = %request.idempotency_key, %status, body = %quoted(&body), "remote service refused");
        if status.is_redirection() {
            return Err(RemoteError::Permanent(format!(
                "service '{service}' answered {status}: redirects are not followed \
                 (is its URL out of date?)"
            )));
        }
        let reason = format!("service '{service}' answered {status}");
        match (status.as_u16(), asked_wait) {
            (429 | 503, Some(wait)) => Err(RemoteError::RetryAfter { reason, wait }),
            // 409: what the Idempotency-Key draft has a service answer while an earlier
            // attempt with the same key is still at work there. Not a refusal: that
            // attempt may take effect, and a step failed for good would not be undone.
            (408 | 409 | 429 | 500..=599, _) => Err(RemoteError::Transient(reason)),
            _ => Err(RemoteError::Permanent(reason)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sas_domain::messages::Payload;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A server on 127.0.0.1 that answers every request with `answer` (raw HTTP)
    /// and counts the requests it got.
    async fn serve(answer: Vec<u8>) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&hits);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut request = vec![0; 65_536];
                let _ = socket.read(&mut request).await;
                let _ = socket.write_all(&answer).await;
                let _ = socket.shutdown().await;
            }
        });
        (url, hits)
    }

    fn answer(status: &str, headers: &str, body: &[u8]) -> Vec<u8> {
        let mut raw = format!(
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n",
            body.len()
        )
        .into_bytes();
        raw.extend_from_slice(body);
        raw
    }

    /// A call of `svc`'s `/op` with `body`, as the agent makes it.
    fn request(method: Method, body: &serde_json::Value) -> RemoteRequest {
        RemoteRequest {
            service: "svc".into(),
            method,
            path: "/op".into(),
            idempotency_key: "t/1/step".into(),
            payload: Payload::of(body).expect("JSON"),
            timeout: Duration::from_secs(5),
        }
    }

    async fn call(url: &str) -> Result<Value, RemoteError> {
        call_with(url, Method::Post).await
    }

    async fn call_with(url: &str, method: Method) -> Result<Value, RemoteError> {
        let remote = HttpRemote::new(
            HashMap::from([("svc".to_owned(), Service::at(url))]),
            None,
            Arc::new(LocalCredentials),
        );
        remote
            .call(&request(method, &serde_json::json!({"a": 1})))
            .await
    }

    /// A secret store holding one value, which a test may change, counting its reads.
    #[derive(Default)]
    struct Vault {
        value: Mutex<String>,
        reads: std::sync::atomic::AtomicUsize,
    }

    #[async_trait]
    impl Credentials for Vault {
        async fn secret(&self, _: &SecretRef) -> Result<String, CredentialError> {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(self.value.lock().expect("lock").clone())
        }

        /// "Signs" with the secret as the key, and says what it was given to sign.
        async fn sign(
            &self,
            signing: &SigV4,
            request: Unsigned<'_>,
        ) -> Result<Vec<(String, String)>, CredentialError> {
            let signed = format!(
                "{} {} {} {}",
                signing.service,
                signing.region,
                request.method,
                String::from_utf8_lossy(request.body)
            );
            let key = self.value.lock().expect("lock").clone();
            Ok(vec![
                ("x-api-key".into(), key),
                ("x-tenant".into(), "acme".into()),
                ("x-signed".into(), signed),
            ])
        }
    }

    /// A server that answers 200 `{}` to a request carrying `X-Api-Key: <key>` and
    /// `X-Tenant: acme`, and 401 to others; the key it takes may change. It keeps the
    /// requests' heads.
    async fn guarded(key: &str) -> (String, Arc<Mutex<String>>, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let key = Arc::new(Mutex::new(key.to_owned()));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (taken, seen) = (Arc::clone(&key), Arc::clone(&heads));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut request = vec![0; 65_536];
                let n = socket.read(&mut request).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&request[..n]).to_lowercase();
                let wanted = format!("x-api-key: {}\r\n", taken.lock().expect("lock"));
                let ok = head.contains(&wanted) && head.contains("x-tenant: acme\r\n");
                seen.lock().expect("lock").push(head);
                let reply = if ok {
                    answer("200 OK", "content-type: application/json\r\n", b"{}")
                } else {
                    answer("401 Unauthorized", "", b"")
                };
                let _ = socket.write_all(&reply).await;
                let _ = socket.shutdown().await;
            }
        });
        (url, key, heads)
    }

    #[tokio::test]
    async fn a_credential_is_read_once_sent_in_its_header_and_read_again_after_a_401() {
        let (url, key, heads) = guarded("key-1").await;
        let vault = Arc::new(Vault::default());
        *vault.value.lock().expect("lock") = "key-1".into();
        let services = sas_domain::services::parse(&format!(
            r#"{{"svc": {{"url": "{url}", "headers": {{"X-Tenant": "acme"}},
                "credential": {{"secret": "secretsmanager:svc-key", "header": "X-Api-Key"}}}}}}"#
        ))
        .expect("services");
        let remote = HttpRemote::new(services, None, Arc::clone(&vault) as Arc<dyn Credentials>);
        let request = request(Method::Post, &serde_json::json!({}));
        let reads = || vault.reads.load(std::sync::atomic::Ordering::SeqCst);
        for _ in 0..2 {
            assert_eq!(
                remote.call(&request).await.expect("taken"),
                serde_json::json!({})
            );
        }
        assert_eq!(reads(), 1, "read once, then kept");

        // Rotated: the service takes only the new key, the store has it.
        *key.lock().expect("lock") = "key-2".into();
        *vault.value.lock().expect("lock") = "key-2".into();
        assert_eq!(
            remote.call(&request).await.expect("taken"),
            serde_json::json!({})
        );
        assert_eq!(reads(), 2, "read again after the 401");
        let sent = heads.lock().expect("lock").clone();
        assert_eq!(sent.len(), 4, "the refused call and its repeat: {sent:?}");
        assert!(
            sent[3].contains("x-api-key: key-2") && sent[3].contains("idempotency-key: t/1/step")
        );

        // Refused with the store's current value: a 401, for good, and nothing more sent.
        *key.lock().expect("lock") = "key-3".into();
        let refused = remote.call(&request).await.expect_err("refused");
        assert!(
            matches!(&refused, RemoteError::Permanent(reason) if reason.contains("401") && !reason.contains("key-2")),
            "{refused:?}"
        );
        assert_eq!(heads.lock().expect("lock").len(), 5);
    }

    /// A secret store that answers its first read and never another.
    struct StallingAfterFirst(std::sync::atomic::AtomicBool);

    #[async_trait]
    impl Credentials for StallingAfterFirst {
        async fn secret(&self, _: &SecretRef) -> Result<String, CredentialError> {
            if self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            Ok("key-1".into())
        }

        async fn sign(
            &self,
            _: &SigV4,
            _: Unsigned<'_>,
        ) -> Result<Vec<(String, String)>, CredentialError> {
            unreachable!("no service here is signed")
        }
    }

    /// Refused with a 401, the call reads its credential again, and that read hangs:
    /// the call still ends within its timeout, the time the agent had left before
    /// the step's complete-by, and sends nothing after it.
    #[tokio::test]
    async fn a_call_ends_within_its_timeout_whatever_it_waits_for_after_a_401() {
        let (url, _, heads) = guarded("another-key").await;
        let services = sas_domain::services::parse(&format!(
            r#"{{"svc": {{"url": "{url}", "headers": {{"X-Tenant": "acme"}},
                "credential": {{"secret": "secretsmanager:svc-key", "header": "X-Api-Key"}}}}}}"#
        ))
        .expect("services");
        let credentials = Arc::new(StallingAfterFirst(std::sync::atomic::AtomicBool::new(
            false,
        )));
        let remote = HttpRemote::new(services, None, credentials);
        let request = RemoteRequest {
            timeout: Duration::from_millis(300),
            ..request(Method::Post, &serde_json::json!({}))
        };
        // Far longer than the call's timeout: reached only if the call outlives it.
        let ended = tokio::time::timeout(Duration::from_secs(10), remote.call(&request))
            .await
            .expect("the call ended within its timeout");
        assert!(
            matches!(&ended, Err(RemoteError::Transient(reason)) if reason.contains("did not answer in time")),
            "{ended:?}"
        );
        assert_eq!(
            heads.lock().expect("lock").len(),
            1,
            "only the refused call was sent"
        );
    }

    #[tokio::test]
    async fn a_credential_that_cannot_be_read_is_transient_and_names_no_value() {
        let services = sas_domain::services::parse(
            r#"{"svc": {"url": "http://127.0.0.1:9", "credential": {"secret": "env:SAS_TEST_UNSET_SECRET"}}}"#,
        )
        .expect("services");
        let remote = HttpRemote::new(services, None, Arc::new(LocalCredentials));
        let error = remote
            .call(&request(Method::Post, &serde_json::json!({})))
            .await
            .expect_err("no secret");
        assert!(
            matches!(&error, RemoteError::Transient(reason) if reason.contains("credential")),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn a_sigv4_service_is_called_with_the_headers_its_signature_gives_over_the_body_sent() {
        let (url, _, heads) = guarded("key-1").await;
        let vault = Arc::new(Vault::default());
        *vault.value.lock().expect("lock") = "key-1".into();
        let services = sas_domain::services::parse(&format!(
            r#"{{"svc": {{"url": "{url}", "sigv4": {{"service": "execute-api", "region": "eu-west-1"}}}}}}"#
        ))
        .expect("services");
        let remote = HttpRemote::new(services, None, Arc::clone(&vault) as Arc<dyn Credentials>);
        let answer = remote
            .call(&request(Method::Put, &serde_json::json!({"a": 1})))
            .await;
        assert_eq!(answer.expect("taken"), serde_json::json!({}));
        let sent = heads.lock().expect("lock").clone();
        assert_eq!(sent.len(), 1);
        assert!(
            sent[0].contains(r#"x-signed: execute-api eu-west-1 put {"a":1}"#)
                && sent[0].ends_with(r#"{"a":1}"#),
            "the body signed is the body sent: {}",
            sent[0]
        );

        let local = HttpRemote::new(
            sas_domain::services::parse(&format!(
                r#"{{"svc": {{"url": "{url}", "sigv4": {{"service": "execute-api", "region": "r"}}}}}}"#
            ))
            .expect("services"),
            None,
            Arc::new(LocalCredentials),
        );
        let refused = local
            .call(&request(Method::Post, &serde_json::json!({})))
            .await
            .expect_err("no identity to sign with");
        assert!(
            matches!(&refused, RemoteError::Transient(reason) if reason.contains("could not be signed")),
            "{refused:?}"
        );
        assert_eq!(
            heads.lock().expect("lock").len(),
            1,
            "nothing sent unsigned"
        );
    }

    /// A JSON string whose text has exactly `bytes` bytes.
    fn json_of(bytes: usize) -> Vec<u8> {
        format!("\"{}\"", "x".repeat(bytes - 2)).into_bytes()
    }

    #[test]
    fn urls_are_kept_parsed_up_to_a_bound_and_one_that_does_not_parse_is_not_named() {
        let remote = HttpRemote::new(HashMap::new(), None, Arc::new(LocalCredentials));
        for i in 0..PARSED_URLS + 5 {
            let url = remote
                .url("svc", "http://127.0.0.1:9/base/", &format!("/orders/{i}"))
                .expect("parses");
            assert_eq!(url.as_str(), format!("http://127.0.0.1:9/base/orders/{i}"));
        }
        assert_eq!(remote.urls.lock().expect("lock").len(), PARSED_URLS);
        let kept = remote
            .url("svc", "http://127.0.0.1:9/base", "/orders/0")
            .expect("kept");
        assert_eq!(kept.path(), "/base/orders/0");
        let refused = remote
            .url("svc", "http://[::1", "/secret-path")
            .expect_err("not a URL");
        assert!(
            matches!(&refused, RemoteError::Transient(m) if m == "service 'svc' failed the request")
        );
    }

    #[tokio::test]
    async fn a_step_is_called_with_its_method() {
        for method in [Method::Post, Method::Put, Method::Patch, Method::Delete] {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
            let url = format!("http://{}", listener.local_addr().expect("address"));
            let seen = tokio::spawn(async move {
                let (mut socket, _) = listener.accept().await.expect("a request");
                let mut request = vec![0; 65_536];
                let read = socket.read(&mut request).await.expect("read");
                let _ = socket.write_all(&answer("204 No Content", "", b"")).await;
                String::from_utf8_lossy(&request[..read]).into_owned()
            });
            assert_eq!(call_with(&url, method).await.expect("called"), Value::Null);
            let request = seen.await.expect("served");
            assert!(
                request.starts_with(&format!("{} /op HTTP/1.1", method.as_str())),
                "{request}"
            );
        }
    }

    #[tokio::test]
    async fn a_429_or_503_with_retry_after_asks_for_its_wait_and_others_do_not() {
        for status in ["429 Too Many Requests", "503 Service Unavailable"] {
            let (url, _) = serve(answer(status, "retry-after: 7\r\n", b"")).await;
            assert!(
                matches!(call(&url).await, Err(RemoteError::RetryAfter { wait, .. }) if wait == Duration::from_secs(7)),
                "{status} with delay-seconds"
            );
        }
        let in_a_minute = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(60));
        let (url, _) = serve(answer(
            "503 Service Unavailable",
            &format!("retry-after: {in_a_minute}\r\n"),
            b"",
        ))
        .await;
        assert!(
            matches!(call(&url).await, Err(RemoteError::RetryAfter { wait, .. })
                if (Duration::from_secs(58)..=Duration::from_secs(60)).contains(&wait)),
            "an HTTP date a minute ahead"
        );
        let (url, _) = serve(answer("429 Too Many Requests", "", b"")).await;
        assert!(
            matches!(call(&url).await, Err(RemoteError::Transient(_))),
            "no Retry-After: the backoff alone"
        );
        let (url, _) = serve(answer(
            "500 Internal Server Error",
            "retry-after: 7\r\n",
            b"",
        ))
        .await;
        assert!(
            matches!(call(&url).await, Err(RemoteError::Transient(_))),
            "only 429 and 503 ask for a wait"
        );
        let (url, _) = serve(answer(
            "429 Too Many Requests",
            "retry-after: soon\r\n",
            b"",
        ))
        .await;
        assert!(
            matches!(call(&url).await, Err(RemoteError::Transient(_))),
            "a Retry-After that is neither seconds nor a date is ignored"
        );
    }

    /// A 409 is the service still at work on an earlier attempt with the same
    /// Idempotency-Key: tried again, as that attempt may take effect; other 4xx, such
    /// as the draft's 422 for a key sent with another body, are refusals.
    #[tokio::test]
    async fn a_409_is_transient_and_other_4xx_are_refusals() {
        let (url, _) = serve(answer("409 Conflict", "", b"")).await;
        let conflict = call(&url).await;
        assert!(
            matches!(conflict, Err(RemoteError::Transient(_))),
            "{conflict:?}"
        );
        for status in [
            "400 Bad Request",
            "404 Not Found",
            "422 Unprocessable Content",
        ] {
            let (url, _) = serve(answer(status, "", b"")).await;
            let refused = call(&url).await;
            assert!(
                matches!(refused, Err(RemoteError::Permanent(_))),
                "{status}: {refused:?}"
            );
        }
    }

    #[tokio::test]
    async fn an_answer_is_an_output_only_when_it_is_json_within_the_limit() {
        let (url, _) = serve(answer("200 OK", "", &json_of(MAX_STEP_OUTPUT))).await;
        let output = call(&url).await.expect("at the limit");
        assert_eq!(output.as_str().map(str::len), Some(MAX_STEP_OUTPUT - 2));

        let (url, _) = serve(answer("200 OK", "", &json_of(MAX_STEP_OUTPUT + 1))).await;
        assert!(
            matches!(call(&url).await, Err(RemoteError::Unusable(e)) if e.contains("65536 bytes")),
            "one byte over"
        );

        let (url, _) = serve(answer("204 No Content", "", b"")).await;
        assert_eq!(call(&url).await.expect("no body"), Value::Null);

        let (url, _) = serve(answer("200 OK", "", b"<html>welcome</html>")).await;
        let error = call(&url).await.expect_err("not JSON");
        assert_eq!(
            error,
            RemoteError::Unusable(
                "service 'svc' answered 200 OK with a body that is not JSON".into()
            ),
            "done, but its answer cannot be kept: undone"
        );
    }

    #[tokio::test]
    async fn a_cut_off_body_is_transient_and_a_redirect_is_not_followed() {
        let mut cut = answer("200 OK", "", b"{\"id\": 1}");
        let declared = b"content-length: 9";
        let at = cut
            .windows(declared.len())
            .position(|w| w == declared)
            .expect("header");
        cut.splice(
            at..at + declared.len(),
            b"content-length: 90".iter().copied(),
        );
        let (url, _) = serve(cut).await;
        assert!(
            matches!(call(&url).await, Err(RemoteError::Transient(e)) if e.contains("cut off"))
        );

        let (elsewhere, hits) = serve(answer("200 OK", "", b"{}")).await;
        let (url, _) = serve(answer(
            "307 Temporary Redirect",
            &format!("location: {elsewhere}/op\r\n"),
            b"",
        ))
        .await;
        let error = call(&url).await.expect_err("a redirect");
        assert!(
            matches!(&error, RemoteError::Permanent(e) if e.contains("redirects are not followed"))
        );
        assert_eq!(
            hits.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "never followed"
        );
    }

    /// Log lines, as a subscriber writes them.
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Logs {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("logs").extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
        type Writer = Self;
        fn make_writer(&'a self) -> Self {
            self.clone()
        }
    }

    /// A step's path holds input values (a customer's id, say), and a service's URL
    /// may be internal: the agent's log lines name the service and the call's key,
    /// never either.
    #[tokio::test]
    async fn log_lines_name_the_service_and_the_key_never_the_url_nor_the_path() {
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .finish();
        let _logging = tracing::subscriber::set_default(subscriber);
        let (refusing, _) = serve(answer("400 Bad Request", "", b"no")).await;
        let closed = TcpListener::bind("127.0.0.1:0").await.expect("bound");
        let unreachable = format!("http://{}", closed.local_addr().expect("address"));
        drop(closed);
        for url in [&refusing, &unreachable] {
            let remote = HttpRemote::new(
                HashMap::from([("svc".to_owned(), Service::at(url.as_str()))]),
                None,
                Arc::new(LocalCredentials),
            );
            let mut call = request(Method::Post, &serde_json::json!({}));
            call.path = "/customers/c-private-42/check".into();
            remote.call(&call).await.expect_err("failed");
        }
        let written = String::from_utf8(logs.0.lock().expect("logs").clone()).expect("text");
        assert!(written.contains("t/1/step"), "the key: {written}");
        for private in ["c-private-42", "127.0.0.1", "http://"] {
            assert!(!written.contains(private), "{private} logged: {written}");
        }
    }

    #[tokio::test]
    async fn errors_name_the_service_never_its_url_nor_its_body() {
        let (url, _) = serve(answer(
            "404 Not Found",
            "",
            b"{\"detail\": \"no route /internal/admin on 10.0.3.7\"}",
        ))
        .await;
        let error = call(&url).await.expect_err("refused").to_string();
        assert_eq!(error, "permanent: service 'svc' answered 404 Not Found");

        let (url, _) = serve(answer(
            "503 Service Unavailable",
            "",
            b"db down at 10.0.3.7",
        ))
        .await;
        assert_eq!(
            call(&url).await,
            Err(RemoteError::Transient(
                "service 'svc' answered 503 Service Unavailable".into()
            ))
        );

        let closed = TcpListener::bind("127.0.0.1:0").await.expect("bound");
        let url = format!("http://{}", closed.local_addr().expect("address"));
        drop(closed);
        let error = call(&url)
            .await
            .expect_err("refused connection")
            .to_string();
        assert!(!error.contains("127.0.0.1"), "{error}");
        assert_eq!(error, "transient: service 'svc' could not be reached");
    }
}
