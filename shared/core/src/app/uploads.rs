//! Values given by reference: a caller uploads a large value once
//! ([`App::upload`]), then names it (`{"$payload": {"sha256": ..., "bytes": ...}}`)
//! as a task's input, where a body could not carry it (API Gateway takes 10 MB, a
//! Lambda function's request 6 MB). Past those, the caller puts the value straight
//! into the store, by a request the store signs ([`App::upload_request`]).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use sas_domain::ids::TaskId;
use sas_domain::limits::MAX_VALUE;
use sas_domain::payload::{PayloadRef, ValueScope};
use sas_domain::task::Task;

use super::{App, SubmitError};
use crate::offload::stored;
use crate::ports::{PayloadError, Payloads, UploadRequest};

/// How long a request to put or read a value straight in the store stays good.
pub const UPLOAD_REQUEST_LASTS: Duration = Duration::from_secs(15 * 60);

/// A value stored apart, as a caller reads it.
#[derive(Debug)]
pub enum StoredValue {
    /// Its JSON text.
    Text(Vec<u8>),
    /// A URL to read it from, good for [`UPLOAD_REQUEST_LASTS`].
    At(String),
}

/// Why a value could not be uploaded.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The body is not JSON.
    #[error("the value is not JSON: {0}")]
    NotJson(String),
    /// The body is over [`MAX_VALUE`].
    #[error("the value has {0} bytes, over the {MAX_VALUE} a value may have")]
    TooLarge(usize),
    /// The body's hash is not the one its caller named.
    #[error("the body's SHA-256 is {hashed}, not the {named} named")]
    NotNamed {
        /// The hash named.
        named: String,
        /// The body's.
        hashed: String,
    },
    /// This deployment keeps no values apart.
    #[error("this deployment keeps no values apart; give the value inline")]
    NoStore,
    /// The value store failed.
    #[error(transparent)]
    Failed(#[from] PayloadError),
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] crate::ports::StoreError),
}

impl App {
    /// Stores the JSON `text` apart, to be named by the reference returned.
    ///
    /// # Errors
    /// [`UploadError`] for text that is not JSON or is too large, or a store that
    /// is not there or fails.
    pub async fn upload(&self, text: Vec<u8>) -> Result<PayloadRef, UploadError> {
        let reference = PayloadRef::of(&text);
        self.keep(reference, text).await
    }

    /// [`App::upload`], of text its caller named by its hash: refused unless it has it.
    ///
    /// # Errors
    /// [`UploadError::NotNamed`], and those of [`App::upload`].
    pub async fn upload_named(
        &self,
        sha256: &str,
        text: Vec<u8>,
    ) -> Result<PayloadRef, UploadError> {
        let reference = PayloadRef::of(&text);
        if reference.sha256 != sha256 {
            let (named, hashed) = (sha256.to_owned(), reference.sha256);
            return Err(UploadError::NotNamed { named, hashed });
        }
        self.keep(reference, text).await
    }

    /// Stores `text`, which `reference` names, if it is JSON within [`MAX_VALUE`].
    async fn keep(&self, reference: PayloadRef, text: Vec<u8>) -> Result<PayloadRef, UploadError> {
        let payloads = self.value_store()?;
        if text.len() > MAX_VALUE {
            return Err(UploadError::TooLarge(text.len()));
        }
        if let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(&text) {
            return Err(UploadError::NotJson(error.to_string()));
        }
        payloads
            .put(&ValueScope::Upload, &reference.sha256, text)
            .await?;
        Ok(reference)
    }

    /// The request by which the caller puts the value `reference` names straight
    /// into the store, good for [`UPLOAD_REQUEST_LASTS`]; `None` where the value
    /// goes through [`App::upload_named`]. What was put is checked when a task names
    /// it: a value that is not JSON, or not the one named, is refused then.
    ///
    /// # Errors
    /// [`UploadError::TooLarge`], or a store that is not there or fails.
    pub async fn upload_request(
        &self,
        reference: &PayloadRef,
    ) -> Result<Option<UploadRequest>, UploadError> {
        let payloads = self.value_store()?;
        let bytes = usize::try_from(reference.bytes).unwrap_or(usize::MAX);
        if bytes > MAX_VALUE {
            return Err(UploadError::TooLarge(bytes));
        }
        let sha256 = PayloadError::unless_hash(&reference.sha256)?;
        let request = payloads.upload_request(sha256, reference.bytes, UPLOAD_REQUEST_LASTS);
        Ok(request.await?)
    }

    /// The value of task `id` stored apart under `sha256`, or where to read it;
    /// `None` when there is no such task or value (where the store gives URLs, the
    /// store answers the latter). The task's record is read as stored, its values
    /// left where they are.
    ///
    /// # Errors
    /// [`UploadError::NoStore`], or a store that fails.
    pub async fn stored_value(
        &self,
        id: &TaskId,
        sha256: &str,
    ) -> Result<Option<StoredValue>, UploadError> {
        let payloads = self.value_store()?;
        let sha256 = PayloadError::unless_hash(sha256)?;
        let Some(task) = self.store.task(id).await? else {
            return Ok(None);
        };
        let scope = ValueScope::of(&task);
        if let Some(url) = payloads
            .download_url(&scope, sha256, UPLOAD_REQUEST_LASTS)
            .await?
        {
            return Ok(Some(StoredValue::At(url)));
        }
        Ok(payloads.get(&scope, sha256).await?.map(StoredValue::Text))
    }

    /// The value `reference` names among `task`'s kept apart, read from the value
    /// store and checked against its hash.
    ///
    /// # Errors
    /// [`UploadError::Failed`] when the store fails or does not hold it as named;
    /// [`UploadError::NotJson`] for a value that is not JSON.
    pub async fn value_of(
        &self,
        task: &Task,
        reference: &PayloadRef,
    ) -> Result<Value, UploadError> {
        let payloads = self.value_store()?;
        let text = crate::offload::fetch(&**payloads, &ValueScope::of(task), reference).await?;
        serde_json::from_slice(&text).map_err(|e| UploadError::NotJson(e.to_string()))
    }

    fn value_store(&self) -> Result<&Arc<dyn Payloads>, UploadError> {
        self.payloads.as_ref().ok_or(UploadError::NoStore)
    }

    /// `input`, or the value it names where it is a reference to an uploaded one.
    ///
    /// # Errors
    /// [`SubmitError::UnknownValue`] for a reference to nothing uploaded here;
    /// [`SubmitError::Store`] when the value store fails.
    pub(super) async fn inline(&self, input: Value) -> Result<Value, SubmitError> {
        let Some(reference) = PayloadRef::in_value(&input) else {
            return Ok(input);
        };
        let unknown = || SubmitError::UnknownValue(reference.sha256.clone());
        let payloads: &Arc<dyn Payloads> = self.payloads.as_ref().ok_or_else(unknown)?;
        let text = (stored(&**payloads, &ValueScope::Upload, &reference).await)
            .map_err(unavailable)?
            .ok_or_else(unknown)?;
        serde_json::from_slice(&text).map_err(|_| unknown())
    }
}

fn unavailable(error: PayloadError) -> SubmitError {
    SubmitError::Store(crate::ports::StoreError::Unavailable(error.into()))
}
