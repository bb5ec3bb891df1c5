//! Adapters of the ports.

#[cfg(feature = "aws")]
pub mod dynamodb;
pub mod embedded;
pub mod http_remote;
#[cfg(feature = "aws")]
pub mod sns;
#[cfg(feature = "aws")]
pub mod sqs;
