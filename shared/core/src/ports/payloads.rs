//! Where values too large for a record are kept ([`sas_domain::payload`]): each by its
//! JSON's SHA-256 within its scope ([`ValueScope`]: a task's, the messages', the
//! uploads'), written once and never changed.

use std::time::Duration;

use async_trait::async_trait;
use sas_domain::payload::ValueScope;

use super::Cause;

/// Why a stored value could not be written or read.
#[derive(Debug, thiserror::Error)]
#[error("the value store failed")]
pub struct PayloadError(#[source] pub Cause);

impl PayloadError {
    /// `sha256`, if it names a value ([`sas_domain::payload::is_sha256`]): what a
    /// store makes a file name or a key of.
    ///
    /// # Errors
    /// [`PayloadError`] for any other text.
    pub fn unless_hash(sha256: &str) -> Result<&str, Self> {
        if sas_domain::payload::is_sha256(sha256) {
            Ok(sha256)
        } else {
            Err(Self(format!("'{sha256}' is not a value's hash").into()))
        }
    }
}

/// The values stored apart, by their scope and the SHA-256 (hex) of their JSON. A
/// store may keep the scopes apart (S3, where a task's values are deleted with it) or
/// not (a directory, whose tasks are never deleted).
#[async_trait]
pub trait Payloads: Send + Sync {
    /// Stores `text` under `sha256` in `scope`, durably before it returns. Storing
    /// the same text again is harmless.
    ///
    /// # Errors
    /// [`PayloadError`] when the store cannot be reached or fails.
    async fn put(
        &self,
        scope: &ValueScope,
        sha256: &str,
        text: Vec<u8>,
    ) -> Result<(), PayloadError>;

    /// The text stored under `sha256` in `scope`, if there is one.
    ///
    /// # Errors
    /// [`PayloadError`] when the store cannot be reached or fails.
    async fn get(&self, scope: &ValueScope, sha256: &str) -> Result<Option<Vec<u8>>, PayloadError>;

    /// A request, good for `lasting`, by which a caller stores the `bytes` of text
    /// whose hash is `sha256` itself, straight into the store, among the uploads:
    /// `None` where the store takes no such request, and the value goes through the
    /// API.
    ///
    /// # Errors
    /// [`PayloadError`] when the request cannot be made.
    async fn upload_request(
        &self,
        sha256: &str,
        bytes: u64,
        lasting: Duration,
    ) -> Result<Option<UploadRequest>, PayloadError> {
        let _ = (sha256, bytes, lasting);
        Ok(None)
    }

    /// A URL, good for `lasting`, from which a caller reads the value `sha256` of
    /// `scope` straight from the store: `None` where the store has none, and the
    /// value is read through the API.
    ///
    /// # Errors
    /// [`PayloadError`] when the URL cannot be made.
    async fn download_url(
        &self,
        scope: &ValueScope,
        sha256: &str,
        lasting: Duration,
    ) -> Result<Option<String>, PayloadError> {
        let _ = (scope, sha256, lasting);
        Ok(None)
    }
}

/// A request a caller sends as it is, its body the value's text: a presigned URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadRequest {
    /// Its method: PUT.
    pub method: String,
    /// Its URL, with what authorizes it.
    pub url: String,
    /// The headers it must carry, as they were signed.
    pub headers: Vec<(String, String)>,
}
