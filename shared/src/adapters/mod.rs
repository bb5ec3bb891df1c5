//! Adapters of the ports.

#[cfg(feature = "aws")]
pub mod dynamodb;
pub mod embedded;
pub mod http_remote;
#[cfg(any(test, feature = "test-util"))]
pub mod memory;
#[cfg(feature = "aws")]
pub mod sns;
#[cfg(feature = "aws")]
pub mod sqs;

/// An AWS SDK client built at its first use. Building one compiles the service's
/// endpoint rules, a fraction of a millisecond each: a function pays at start-up for
/// none, and later only for the clients it calls.
#[cfg(feature = "aws")]
type SdkClient<C> = std::sync::LazyLock<C, Box<dyn FnOnce() -> C + Send>>;

/// The client `make` builds from `sdk`, built at its first use.
#[cfg(feature = "aws")]
fn sdk_client<C: 'static>(
    sdk: &aws_types::SdkConfig,
    make: fn(&aws_types::SdkConfig) -> C,
) -> SdkClient<C> {
    let sdk = sdk.clone();
    std::sync::LazyLock::new(Box::new(move || make(&sdk)))
}
