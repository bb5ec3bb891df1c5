//! The AWS SDK's configuration, from what Lambda puts in the environment, and its
//! clients, each built at its first use.

use aws_smithy_http_client::tls;
use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_types::SdkConfig;

use crate::config::ConfigError;

/// An AWS SDK client built at its first use. Building one compiles the service's
/// endpoint rules, a fraction of a millisecond each: a function pays at start-up for
/// none, and later only for the clients it calls.
pub type SdkClient<C> = std::sync::LazyLock<C, Box<dyn FnOnce() -> C + Send>>;

/// The client `make` builds from `sdk`, built at its first use.
pub fn sdk_client<C: 'static>(sdk: &SdkConfig, make: fn(&SdkConfig) -> C) -> SdkClient<C> {
    let sdk = sdk.clone();
    std::sync::LazyLock::new(Box::new(move || make(&sdk)))
}

/// The SDK's configuration from what Lambda puts in the environment, `lookup` giving
/// a variable's value by name: the region (`AWS_REGION`), the credentials
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), and, when set,
/// `AWS_ENDPOINT_URL` (an emulator) and `AWS_MAX_ATTEMPTS`; everything else is the
/// clients' defaults, and TLS is set up at the first request. Built here rather than by
/// aws-config's loader, whose provider chains, profile files and STS client cost every
/// cold start 0.1 to 0.3 ms, 105 KB of it data for the loader to relocate
/// (`bench/HISTORY.md`, "Cold start"), to read what Lambda always sets in the environment.
///
/// # Errors
/// [`ConfigError`] naming the first variable missing or invalid.
pub fn sdk_config(lookup: impl Fn(&str) -> Option<String>) -> Result<SdkConfig, ConfigError> {
    use aws_sdk_sqs::config::retry::RetryConfig;
    use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region, SharedCredentialsProvider};

    let required = |name: &'static str| lookup(name).ok_or(ConfigError::Missing(name));
    let credentials = Credentials::new(
        required("AWS_ACCESS_KEY_ID")?,
        required("AWS_SECRET_ACCESS_KEY")?,
        lookup("AWS_SESSION_TOKEN"),
        None,
        "environment",
    );
    let mut retry = RetryConfig::standard();
    if let Some(value) = lookup("AWS_MAX_ATTEMPTS") {
        let attempts = value
            .parse()
            .ok()
            .filter(|&n: &u32| n >= 1)
            .ok_or_else(|| {
                ConfigError::Invalid("AWS_MAX_ATTEMPTS", format!("{value}: must be 1 or more"))
            })?;
        retry = retry.with_max_attempts(attempts);
    }
    let https = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::AwsLc,
        ))
        .build_https();
    let mut sdk = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(required("AWS_REGION")?))
        .credentials_provider(SharedCredentialsProvider::new(credentials))
        .retry_config(retry)
        .http_client(SharedHttpClient::new(TlsAtFirstRequest(https)));
    sdk.set_endpoint_url(lookup("AWS_ENDPOINT_URL"));
    Ok(sdk.build())
}

/// The SDK's HTTPS client, less its check at client construction, which loads and
/// parses the system's root certificates: a few milliseconds of every cold start,
/// paid instead by the first request (which opens a connection anyway).
#[derive(Debug)]
struct TlsAtFirstRequest(SharedHttpClient);

impl HttpClient for TlsAtFirstRequest {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        self.0.http_connector(settings, components)
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        self.0.connector_metadata()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::tests::lookup;

    #[tokio::test]
    async fn the_sdk_configuration_is_what_lambda_sets_and_names_what_is_missing() {
        use aws_sdk_sqs::config::ProvideCredentials;

        let lambda = [
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", "token"),
        ];
        let sdk = sdk_config(lookup(&lambda)).expect("complete");
        assert_eq!(
            sdk.region().map(ToString::to_string).as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(
            (
                sdk.endpoint_url(),
                sdk.retry_config().map(|r| r.max_attempts())
            ),
            (None, Some(3))
        );
        let credentials = sdk
            .credentials_provider()
            .expect("credentials")
            .provide_credentials()
            .await
            .expect("credentials");
        assert_eq!(
            (credentials.access_key_id(), credentials.session_token()),
            ("AKID", Some("token"))
        );

        let emulator = [
            lambda.as_slice(),
            &[
                ("AWS_ENDPOINT_URL", "http://127.0.0.1:4566"),
                ("AWS_MAX_ATTEMPTS", "5"),
            ],
        ]
        .concat();
        let sdk = sdk_config(lookup(&emulator)).expect("complete");
        assert_eq!(
            (
                sdk.endpoint_url(),
                sdk.retry_config().map(|r| r.max_attempts())
            ),
            (Some("http://127.0.0.1:4566"), Some(5))
        );

        let no_region = [lambda.as_slice(), &[("AWS_REGION", "")]].concat();
        let missing = sdk_config(lookup(&no_region)).expect_err("missing");
        assert_eq!(
            missing.to_string(),
            "environment variable AWS_REGION is not set"
        );
        let no_attempts = [lambda.as_slice(), &[("AWS_MAX_ATTEMPTS", "0")]].concat();
        let invalid = sdk_config(lookup(&no_attempts)).expect_err("invalid");
        assert_eq!(
            invalid.to_string(),
            "environment variable AWS_MAX_ATTEMPTS is invalid: 0: must be 1 or more"
        );
    }
}
