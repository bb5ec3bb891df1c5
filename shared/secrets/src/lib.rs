//! The remote services' credentials on AWS: [`AwsSecrets`] reads a
//! `secretsmanager:` secret's string with `GetSecretValue` and an `ssm:` parameter
//! with `GetParameter` (decrypted), and an `env:` one from the environment.
//!
//! Implements `sas-core`'s `Secrets` port; only the agent function links it, and its
//! role may read exactly the secrets and parameters the template names.

use std::sync::OnceLock;

use async_trait::async_trait;
use aws_types::SdkConfig;
use sas_core::domain::services::SecretRef;
use sas_core::ports::{SecretError, Secrets};

/// Secrets Manager and Parameter Store, each client made at its first use.
pub struct AwsSecrets {
    sdk: SdkConfig,
    secrets_manager: OnceLock<aws_sdk_secretsmanager::Client>,
    ssm: OnceLock<aws_sdk_ssm::Client>,
}

impl AwsSecrets {
    /// Over the services `sdk` reaches.
    #[must_use]
    pub fn new(sdk: &SdkConfig) -> Self {
        Self {
            sdk: sdk.clone(),
            secrets_manager: OnceLock::new(),
            ssm: OnceLock::new(),
        }
    }
}

/// Why `secret` has no value: `cause`, or an answer without one.
fn failed(secret: &SecretRef, cause: impl Into<sas_core::ports::Cause>) -> SecretError {
    SecretError {
        secret: secret.clone(),
        cause: cause.into(),
    }
}

#[async_trait]
impl Secrets for AwsSecrets {
    async fn read(&self, secret: &SecretRef) -> Result<String, SecretError> {
        let value = match secret {
            SecretRef::SecretsManager(id) => {
                self.secrets_manager
                    .get_or_init(|| aws_sdk_secretsmanager::Client::new(&self.sdk))
                    .get_secret_value()
                    .secret_id(id)
                    .send()
                    .await
                    .map_err(|e| failed(secret, e))?
                    .secret_string
            }
            SecretRef::Ssm(name) => self
                .ssm
                .get_or_init(|| aws_sdk_ssm::Client::new(&self.sdk))
                .get_parameter()
                .name(name)
                .with_decryption(true)
                .send()
                .await
                .map_err(|e| failed(secret, e))?
                .parameter
                .and_then(|p| p.value),
            SecretRef::Env(name) => std::env::var(name).ok(),
        };
        value.ok_or_else(|| failed(secret, "it has no text value"))
    }
}
