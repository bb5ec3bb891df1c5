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
