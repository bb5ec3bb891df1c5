//! Remote services over HTTP: a POST of the step's payload to the service's base
//! URL and the step's path, with the idempotency key in an `Idempotency-Key` header,
//! the service's headers, and its credential: a secret read through the
//! [`Credentials`] port, kept for [`SECRET_TTL`], and read again when the service
//! answers 401 (it was rotated), the call then made once more with the new value;
//! or, for an AWS-hosted API, a SigV4 signature made through the same port. A
//! secret's value is never logged nor put in an error.
//!
//! What a service answers is read as the step's output only when it is a 2xx with
//! a JSON body (or none) within
//! [`MAX_STEP_OUTPUT`](sas_domain::limits::MAX_STEP_OUTPUT); a redirect is not
//! followed (a POST turned into a GET would mark a step done that never ran). The
//! errors say what happened in words a caller may see; the URLs and the bodies go to
//! the log.
//!
//! Implements `sas-core`'s [`RemoteCall`] port with hyper's client; depends on nothing else
//! of the project's, and only the agent function and the local process link it.
//!
//! Here: [`HttpRemote`] and the services it calls; `request` (a call's request,
//! its credential and signature, sent), `secrets` (a credential's secret, kept for
//! a while), `answer` (what a service's answer makes of the call), `invoke` (a state
//! machine's `http:invoke` Task, at the service its endpoint is of) and
//! `local_credentials` (the local process's [`Credentials`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use async_trait::async_trait;
use http::{StatusCode, Uri};
use serde_json::Value;
use tracing::{info, warn};
use url::Url;

use sas_core::ports::{Credentials, RemoteCall, RemoteError, RemoteRequest};
use sas_domain::services::{Directory, SecretRef, Service};

mod answer;
mod invoke;
mod local_credentials;
mod request;
mod secrets;
#[cfg(test)]
mod tests;

pub use local_credentials::LocalCredentials;
pub use request::IDEMPOTENCY_KEY;
pub use secrets::SECRET_TTL;

use answer::read_answer;
use request::Outgoing;
use sas_domain::machine::HTTP_AGENT;

/// URLs kept parsed at most: a workflow's steps call a few, but a path made from a
/// task's input would be a new one at every call.
const PARSED_URLS: usize = 1024;

/// Calls services by name, each at its base URL.
pub struct HttpRemote {
    /// Built at the first call, once however many calls come at once (the root
    /// certificates' load is a cold start's largest CPU cost): a function that makes
    /// no call does not pay for its TLS set-up.
    client: Mutex<Option<request::Client>>,
    directory: Directory,
    credentials: Arc<dyn Credentials>,
    /// Secrets read, with when.
    cached: Mutex<foldhash::HashMap<SecretRef, (String, Instant)>>,
    /// The URLs called, parsed: parsing the text again at every call was a tenth of
    /// the call's instructions.
    urls: Mutex<foldhash::HashMap<String, Uri>>,
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
            directory: Directory { services, fallback },
            credentials,
            cached: Mutex::new(foldhash::HashMap::default()),
            urls: Mutex::new(foldhash::HashMap::default()),
        }
    }

    /// `path` at the service's base URL `base`, parsed once while fewer than
    /// [`PARSED_URLS`] are kept.
    fn url(&self, service: &str, base: &str, path: &str) -> Result<Uri, RemoteError> {
        let text = format!("{}{path}", base.trim_end_matches('/'));
        let mut urls = self.urls.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(url) = urls.get(&text) {
            return Ok(url.clone());
        }
        // Parsed as a URL (which escapes what a path made from a task's input may
        // hold), then as the request's URI.
        let url = Url::parse(&text)
            .map_err(|error| error.to_string())
            .and_then(|url| Uri::try_from(url.as_str()).map_err(|error| error.to_string()))
            .map_err(|error| {
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
    pub(crate) fn service(&self, name: &str) -> Option<Cow<'_, Service>> {
        let set = self.directory.services.get(name);
        if let Some(service) = set.filter(|s| !s.url.is_empty()) {
            return Some(Cow::Borrowed(service));
        }
        let service = set.cloned().unwrap_or_else(|| Service::at(""));
        let url = service.base_url(name, self.directory.fallback.as_deref())?;
        Some(Cow::Owned(Service { url, ..service }))
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
        let invoked = request.service == HTTP_AGENT;
        let (service, settings, url, outgoing) = if invoked {
            self.http_invoke(request)?
        } else {
            let service = request.service.as_str();
            let settings = self.service(service).ok_or_else(|| {
                RemoteError::Permanent(format!("no URL configured for service '{service}'"))
            })?;
            let url = self.url(service, &settings.url, &request.path)?;
            (service, settings, url, Outgoing::of(request))
        };
        let secret = match &settings.credential {
            Some(credential) => Some(self.secret(service, credential, false).await?),
            None => None,
        };
        let mut answer = self
            .send(request, &outgoing, &settings, &url, secret.as_deref())
            .await?;
        if let (StatusCode::UNAUTHORIZED, Some(credential), Some(used)) =
            (answer.status, &settings.credential, &secret)
        {
            let current = self.secret(service, credential, true).await?;
            if current != *used {
                info!(
                    service,
                    "the credential was refused and has changed: calling with the new one"
                );
                answer = (self.send(request, &outgoing, &settings, &url, Some(&current))).await?;
            }
        }
        if invoked {
            return invoke::read_answer(request, answer);
        }
        read_answer(request, answer)
    }
}
