//! A request to an AWS API signed with SigV4 through the [`Credentials`] port, and
//! its answer read whole, within a step's output limit.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use tracing::warn;

use sas_core::ports::{Credentials, RemoteError, Unsigned};
use sas_domain::limits::MAX_STEP_OUTPUT;
use sas_domain::services::SigV4;

use crate::Named;

/// An HTTP client built at the first call: a function that makes none loads no
/// certificates.
#[derive(Default)]
pub(crate) struct Client(OnceLock<reqwest::Client>);

/// How a request to an API is signed, and how the API is named in errors.
pub(crate) struct Signed<'a> {
    /// The API's signing name (`dynamodb`, `s3`).
    pub service: &'a str,
    pub region: &'a str,
    pub named: Named,
}

impl Signed<'_> {
    /// Sends `method url` with `headers` and `body`, signed: the answer's status,
    /// headers and body, or why it was not had (not reached, or too large to keep).
    pub(crate) async fn send(
        &self,
        signer: &Arc<dyn Credentials>,
        client: &Client,
        method: &'static str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(u16, BTreeMap<String, String>, Vec<u8>), RemoteError> {
        let signing = SigV4 {
            service: self.service.to_owned(),
            region: self.region.to_owned(),
        };
        let unsigned = Unsigned {
            method,
            url,
            headers,
            body,
        };
        let signature = signer.sign(&signing, unsigned).await.map_err(|error| {
            warn!(service = self.service, %error, "a call could not be signed");
            RemoteError::Transient(format!("{}: the call could not be signed", self.service))
        })?;
        let client = client.0.get_or_init(reqwest::Client::new);
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|error| RemoteError::Permanent(error.to_string()))?;
        let mut sending = client.request(method, url).body(body.to_vec());
        let signed = signature
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()));
        for (name, value) in headers.iter().copied().chain(signed) {
            sending = sending.header(name, value);
        }
        let prefix = self.named.error_prefix;
        let not_reached = |error: reqwest::Error| {
            warn!(service = self.service, error = %error.without_url(), "not reached");
            RemoteError::Transient(format!("{prefix} was not reached"))
        };
        let response = sending.send().await.map_err(not_reached)?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_owned(), value)
            })
            .collect();
        let bytes = response.bytes().await.map_err(not_reached)?;
        if bytes.len() > MAX_STEP_OUTPUT {
            return Err(RemoteError::Unusable(format!(
                "{prefix} answered with {} bytes",
                bytes.len()
            )));
        }
        Ok((status, headers, bytes.to_vec()))
    }
}
