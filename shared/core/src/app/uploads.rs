//! Values given by reference: a caller uploads a large value once
//! ([`App::upload`]), then names it (`{"$payload": {"sha256": ..., "bytes": ...}}`)
//! as a task's input, where a body could not carry it (API Gateway takes 10 MB, a
//! Lambda function's request 6 MB).

use std::sync::Arc;

use serde_json::Value;

use sas_domain::limits::MAX_VALUE;
use sas_domain::payload::PayloadRef;

use super::{App, SubmitError};
use crate::offload::{store_apart, stored};
use crate::ports::{PayloadError, Payloads};

/// Why a value could not be uploaded.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The body is not JSON.
    #[error("the value is not JSON: {0}")]
    NotJson(String),
    /// The body is over [`MAX_VALUE`].
    #[error("the value has {0} bytes, over the {MAX_VALUE} a value may have")]
    TooLarge(usize),
    /// This deployment keeps no values apart.
    #[error("this deployment keeps no values apart; give the value inline")]
    NoStore,
    /// The value store failed.
    #[error(transparent)]
    Failed(#[from] PayloadError),
}

impl App {
    /// Stores the JSON `text` apart, to be named by the reference returned.
    ///
    /// # Errors
    /// [`UploadError`] for text that is not JSON or is too large, or a store that
    /// is not there or fails.
    pub async fn upload(&self, text: Vec<u8>) -> Result<PayloadRef, UploadError> {
        let payloads = self.payloads.as_ref().ok_or(UploadError::NoStore)?;
        if text.len() > MAX_VALUE {
            return Err(UploadError::TooLarge(text.len()));
        }
        if let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(&text) {
            return Err(UploadError::NotJson(error.to_string()));
        }
        Ok(store_apart(&**payloads, text).await?)
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
        let text = (stored(&**payloads, &reference).await)
            .map_err(unavailable)?
            .ok_or_else(unknown)?;
        serde_json::from_slice(&text).map_err(|_| unknown())
    }
}

fn unavailable(error: PayloadError) -> SubmitError {
    SubmitError::Store(crate::ports::StoreError::Unavailable(error.into()))
}
