//! The remote services' credentials on AWS: [`AwsCredentials`] reads a
//! `secretsmanager:` secret's string with `GetSecretValue`, an `ssm:` parameter with
//! `GetParameter` (decrypted) and an `env:` one from the environment, and signs a call
//! to an AWS-hosted API with SigV4 as the function's own role.
//!
//! Implements `sas-core`'s `Credentials` port; only the agent function links it, and
//! its role may read exactly the secrets and parameters, and call exactly the APIs,
//! the template names.

use std::sync::OnceLock;
use std::time::SystemTime;

use async_trait::async_trait;
use aws_credential_types::provider::ProvideCredentials as _;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use aws_types::SdkConfig;
use sas_core::ports::{Cause, CredentialError, Credentials, Unsigned};
use sas_domain::services::{SecretRef, SigV4};

/// Secrets Manager and Parameter Store, each client made at its first use, and the
/// SDK's credentials to sign with.
pub struct AwsCredentials {
    sdk: SdkConfig,
    secrets_manager: OnceLock<aws_sdk_secretsmanager::Client>,
    ssm: OnceLock<aws_sdk_ssm::Client>,
}

impl AwsCredentials {
    /// Over the services `sdk` reaches, with its credentials.
    #[must_use]
    pub fn new(sdk: &SdkConfig) -> Self {
        Self {
            sdk: sdk.clone(),
            secrets_manager: OnceLock::new(),
            ssm: OnceLock::new(),
        }
    }
}

#[async_trait]
impl Credentials for AwsCredentials {
    async fn secret(&self, secret: &SecretRef) -> Result<String, CredentialError> {
        let failed = |cause: Cause| CredentialError::new(secret, cause);
        let value = match secret {
            SecretRef::SecretsManager(id) => {
                self.secrets_manager
                    .get_or_init(|| aws_sdk_secretsmanager::Client::new(&self.sdk))
                    .get_secret_value()
                    .secret_id(id)
                    .send()
                    .await
                    .map_err(|e| failed(e.into()))?
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
                .map_err(|e| failed(e.into()))?
                .parameter
                .and_then(|p| p.value),
            SecretRef::Env(name) => std::env::var(name).ok(),
        };
        value.ok_or_else(|| failed("it has no text value".into()))
    }

    async fn sign(
        &self,
        signing: &SigV4,
        request: Unsigned<'_>,
    ) -> Result<Vec<(String, String)>, CredentialError> {
        let failed =
            |cause: Cause| CredentialError::new(format!("SigV4 for {}", signing.service), cause);
        let provider = self
            .sdk
            .credentials_provider()
            .ok_or_else(|| failed("the function has no AWS credentials".into()))?;
        let identity: Identity = provider
            .provide_credentials()
            .await
            .map_err(|e| failed(e.into()))?
            .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&signing.region)
            .name(&signing.service)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| failed(e.into()))?
            .into();
        let signable = SignableRequest::new(
            request.method,
            request.url,
            request.headers.iter().copied(),
            SignableBody::Bytes(request.body),
        )
        .map_err(|e| failed(e.into()))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| failed(e.into()))?
            .into_parts();
        Ok(instructions
            .headers()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_credential_types::Credentials as Keys;
    use aws_credential_types::provider::SharedCredentialsProvider;

    #[tokio::test]
    async fn a_call_is_signed_for_its_service_and_region_with_the_functions_keys() {
        let sdk = SdkConfig::builder()
            .credentials_provider(SharedCredentialsProvider::new(Keys::new(
                "AKIDEXAMPLE",
                "secret",
                Some("session".into()),
                None,
                "test",
            )))
            .build();
        let headers = AwsCredentials::new(&sdk)
            .sign(
                &SigV4 {
                    service: "execute-api".into(),
                    region: "eu-west-1".into(),
                },
                Unsigned {
                    method: "PUT",
                    url: "https://abc.execute-api.eu-west-1.amazonaws.com/drones/7",
                    headers: &[("content-type", "application/json")],
                    body: b"{}",
                },
            )
            .await
            .expect("signed");
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
                .unwrap_or_default()
        };
        let authorization = header("authorization");
        assert!(
            authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
                && authorization.contains("/eu-west-1/execute-api/aws4_request")
                && authorization.contains("SignedHeaders=content-type;host;"),
            "{authorization}"
        );
        assert_eq!(header("x-amz-security-token"), "session");
        assert!(!header("x-amz-date").is_empty());

        let without = AwsCredentials::new(&SdkConfig::builder().build())
            .sign(
                &SigV4 {
                    service: "execute-api".into(),
                    region: "eu-west-1".into(),
                },
                Unsigned {
                    method: "GET",
                    url: "https://a.example.com/",
                    headers: &[],
                    body: b"",
                },
            )
            .await
            .expect_err("no credentials");
        assert!(
            without.to_string().contains("SigV4 for execute-api"),
            "{without}"
        );
    }
}
