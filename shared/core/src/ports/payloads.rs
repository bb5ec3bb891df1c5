//! Where values too large for a record are kept ([`sas_domain::payload`]): each by its
//! JSON's SHA-256, written once and never changed.

use async_trait::async_trait;

use super::Cause;

/// Why a stored value could not be written or read.
#[derive(Debug, thiserror::Error)]
#[error("the value store failed")]
pub struct PayloadError(#[source] pub Cause);

/// The values stored apart, by the SHA-256 (hex) of their JSON.
#[async_trait]
pub trait Payloads: Send + Sync {
    /// Stores `text` under `sha256`, durably before it returns. Storing the same
    /// text again is harmless.
    ///
    /// # Errors
    /// [`PayloadError`] when the store cannot be reached or fails.
    async fn put(&self, sha256: &str, text: Vec<u8>) -> Result<(), PayloadError>;

    /// The text stored under `sha256`, if there is one.
    ///
    /// # Errors
    /// [`PayloadError`] when the store cannot be reached or fails.
    async fn get(&self, sha256: &str) -> Result<Option<Vec<u8>>, PayloadError>;
}
