//! The remote services' credentials: secrets and SigV4 signatures.

use async_trait::async_trait;

use sas_domain::services::{SecretRef, SigV4};

use super::Cause;

/// Why a credential could not be had: its text names it (a secret by its reference),
/// never a value.
#[derive(Debug, thiserror::Error)]
#[error("{what} could not be had")]
pub struct CredentialError {
    /// Which: `secretsmanager:prod/key`, `SigV4 for execute-api`...
    pub what: String,
    /// What went wrong.
    #[source]
    pub cause: Cause,
}

impl CredentialError {
    /// `what` could not be had, because of `cause`.
    pub fn new(what: impl ToString, cause: impl Into<Cause>) -> Self {
        Self {
            what: what.to_string(),
            cause: cause.into(),
        }
    }
}

/// A request to sign: what SigV4 signs of it.
#[derive(Debug, Clone, Copy)]
pub struct Unsigned<'a> {
    /// GET, POST...
    pub method: &'a str,
    /// The whole URL.
    pub url: &'a str,
    /// The headers to sign beside `host`.
    pub headers: &'a [(&'a str, &'a str)],
    /// The body.
    pub body: &'a [u8],
}

/// The remote services' credentials: secrets, and signatures made with the process's
/// own identity.
#[async_trait]
pub trait Credentials: Send + Sync {
    /// The secret's current value.
    ///
    /// # Errors
    /// [`CredentialError`] when it cannot be read.
    async fn secret(&self, secret: &SecretRef) -> Result<String, CredentialError>;

    /// The headers that sign `request` with SigV4 as `signing` says.
    ///
    /// # Errors
    /// [`CredentialError`] when there is no identity to sign with.
    async fn sign(
        &self,
        signing: &SigV4,
        request: Unsigned<'_>,
    ) -> Result<Vec<(String, String)>, CredentialError>;
}
