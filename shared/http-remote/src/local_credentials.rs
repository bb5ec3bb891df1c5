//! The local process's credentials ([`LocalCredentials`]).

use async_trait::async_trait;

use sas_core::ports::{CredentialError, Credentials, Unsigned};
use sas_domain::services::{SecretRef, SigV4};

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
