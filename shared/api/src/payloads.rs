//! `POST /payloads`: a large value uploaded once, then named by reference as a task's
//! input (`{"$payload": {"sha256": ..., "bytes": ...}}`, the answer as given).

use schemars::JsonSchema;
use serde::Serialize;

use sas_core::app::{App, UploadError};
use sas_domain::limits::MAX_VALUE;
use sas_domain::payload::PayloadRef;

use crate::ApiResponse;
use crate::error::{ApiError, ErrorCode};

/// An uploaded value's reference: give it as a task's input.
#[derive(Debug, Serialize, JsonSchema)]
pub struct UploadedView {
    /// The value's JSON's SHA-256 (hex) and size.
    #[serde(rename = "$payload")]
    payload: PayloadRef,
}

/// The body of the one route that takes a value of any size: its own.
#[must_use]
pub fn body_limit(path: &str) -> usize {
    if path.trim_end_matches('/') == "/payloads" {
        MAX_VALUE
    } else {
        crate::MAX_REQUEST_BYTES
    }
}

pub(crate) async fn upload(app: &App, body: &[u8]) -> Result<ApiResponse, ApiError> {
    let payload = app.upload(body.to_vec()).await?;
    Ok(ApiResponse::ok(201, &UploadedView { payload }))
}

impl From<UploadError> for ApiError {
    fn from(error: UploadError) -> Self {
        match error {
            UploadError::NotJson(_) => Self::new(ErrorCode::InvalidJson, error.to_string()),
            UploadError::TooLarge(_) => Self::new(ErrorCode::BodyTooLarge, error.to_string()),
            UploadError::NoStore => Self::new(ErrorCode::NotFound, error.to_string()),
            UploadError::Failed(e) => Self::unavailable(&e),
        }
    }
}
