//! A service's credential's secret: read through the
//! [`Credentials`](sas_core::ports::Credentials) port, kept for [`SECRET_TTL`], read
//! again when the service refuses it.

use std::sync::PoisonError;
use std::time::{Duration, Instant};

use tracing::warn;

use sas_core::ports::{Chain, RemoteError};
use sas_domain::services::Credential;

use crate::HttpRemote;

/// How long a secret read is used before it is read again.
pub const SECRET_TTL: Duration = Duration::from_secs(300);

impl HttpRemote {
    /// The credential's secret: as read within [`SECRET_TTL`], or afresh when `fresh`.
    pub(crate) async fn secret(
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
}
