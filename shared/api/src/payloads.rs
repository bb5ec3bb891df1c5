//! The routes of large values: uploaded once, then named by reference as a task's
//! input (`{"$payload": {"sha256": ..., "bytes": ...}}`, the answer as given).
//! `POST /payloads` takes the value as its body; past what a gateway and a function
//! take (10 and 6 MB on AWS), `POST /payloads/uploads` answers a request by which the
//! caller puts the value straight into the store: on AWS a presigned S3 URL, else
//! `PUT /payloads/{sha256}` on the API. `GET /tasks/{id}/payloads/{sha256}` reads a
//! task's value back, as its view names it where it would be too large to show whole:
//! on AWS by a redirection to a presigned S3 URL.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use sas_core::app::{App, StoredValue, UPLOAD_REQUEST_LASTS, UploadError};
use sas_core::ports::UploadRequest;
use sas_domain::ids::TaskId;
use sas_domain::limits::MAX_VALUE;
use sas_domain::payload::{PayloadRef, is_sha256};

use crate::ApiResponse;
use crate::bodies::parse_json;
use crate::error::{ApiError, ErrorCode};

/// An uploaded value's reference: give it as a task's input.
#[derive(Debug, Serialize, JsonSchema)]
pub struct UploadedView {
    /// The value's JSON's SHA-256 (hex) and size.
    #[serde(rename = "$payload")]
    payload: PayloadRef,
}

/// The value a caller will put by the request answered.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadRequestBody {
    /// The SHA-256 (hex, lowercase) of the value's JSON, as it will be sent.
    sha256: String,
    /// The size of the value's JSON, in bytes: at most 128 MiB.
    bytes: u64,
}

/// How to put a value: send its JSON as the body of this request, then give
/// `$payload` as a task's input.
#[derive(Debug, Serialize, JsonSchema)]
pub struct UploadRequestView {
    /// The value's reference, good once the request is made.
    #[serde(rename = "$payload")]
    payload: PayloadRef,
    /// The request's method.
    method: String,
    /// Where to send it: absolute (a presigned URL), or a path on this API.
    url: String,
    /// The headers to send with it, as they are.
    headers: BTreeMap<String, String>,
    /// How long the request stays good.
    expires_in_seconds: u64,
}

/// The body of the routes that take a value of any size: their own.
#[must_use]
pub fn body_limit(path: &str) -> usize {
    match path.trim_end_matches('/').strip_prefix("/payloads") {
        Some("") => MAX_VALUE,
        Some(named) if named.strip_prefix('/').is_some_and(is_sha256) => MAX_VALUE,
        _ => crate::MAX_REQUEST_BYTES,
    }
}

/// `POST /payloads`, and `PUT /payloads/{sha256}` where the path names the hash.
pub(crate) async fn upload(
    app: &App,
    named: Option<&str>,
    body: &[u8],
) -> Result<ApiResponse, ApiError> {
    let payload = match named {
        Some(sha256) => {
            app.upload_named(&hash(sha256, "sha256")?, body.to_vec())
                .await?
        }
        None => app.upload(body.to_vec()).await?,
    };
    Ok(ApiResponse::ok(201, &UploadedView { payload }))
}

/// `POST /payloads/uploads`.
pub(crate) async fn upload_request(app: &App, body: &[u8]) -> Result<ApiResponse, ApiError> {
    let body: UploadRequestBody = parse_json(body, false)?;
    if body.bytes > MAX_VALUE as u64 {
        let problem = format!("must be at most {MAX_VALUE}: a value's JSON has at most 128 MiB");
        return Err(ApiError::new(ErrorCode::InvalidField, problem).on("bytes"));
    }
    let payload = PayloadRef {
        sha256: hash(&body.sha256, "sha256")?,
        bytes: body.bytes,
    };
    let request = app.upload_request(&payload).await?;
    let UploadRequest {
        method,
        url,
        headers,
    } = request.unwrap_or_else(|| UploadRequest {
        method: "PUT".into(),
        url: format!("/payloads/{}", payload.sha256),
        headers: vec![("content-type".into(), "application/json".into())],
    });
    let view = UploadRequestView {
        payload,
        method,
        url,
        headers: headers.into_iter().collect(),
        expires_in_seconds: UPLOAD_REQUEST_LASTS.as_secs(),
    };
    Ok(ApiResponse::ok(201, &view))
}

/// `GET /tasks/{id}/payloads/{sha256}`: the value's JSON, or `303` to where to
/// read it.
pub(crate) async fn stored_value(
    app: &App,
    id: &TaskId,
    named: &str,
) -> Result<ApiResponse, ApiError> {
    let sha256 = hash(named, "sha256")?;
    let answer = |status, location, body| ApiResponse {
        status,
        location,
        body,
        page: None,
        content_type: None,
    };
    match app.stored_value(id, &sha256).await? {
        Some(StoredValue::At(url)) => {
            let body = sas_domain::to_json(&serde_json::json!({ "url": url }));
            Ok(answer(303, Some(url), body))
        }
        Some(StoredValue::Text(text)) => match String::from_utf8(text) {
            Ok(text) => Ok(answer(200, None, text)),
            Err(_) => Err(no_value(&sha256)),
        },
        None => Err(no_value(&sha256)),
    }
}

fn no_value(sha256: &str) -> ApiError {
    let problem = format!("no such task, or it keeps no value {sha256} apart");
    ApiError::new(ErrorCode::NotFound, problem)
}

/// `given`, lowercased, if it is a SHA-256 in hex; else an error on `field`.
fn hash(given: &str, field: &str) -> Result<String, ApiError> {
    let sha256 = given.to_ascii_lowercase();
    if is_sha256(&sha256) {
        Ok(sha256)
    } else {
        let problem = "must be a SHA-256 in hex: 64 of 0-9 and a-f";
        Err(ApiError::new(ErrorCode::InvalidField, problem).on(field))
    }
}

impl From<UploadError> for ApiError {
    fn from(error: UploadError) -> Self {
        match error {
            UploadError::NotJson(_) => Self::new(ErrorCode::InvalidJson, error.to_string()),
            UploadError::TooLarge(_) => Self::new(ErrorCode::BodyTooLarge, error.to_string()),
            UploadError::NotNamed { .. } => Self::new(ErrorCode::InvalidBody, error.to_string()),
            UploadError::NoStore => Self::new(ErrorCode::NotFound, error.to_string()),
            UploadError::Failed(e) => Self::unavailable(&e),
            UploadError::Store(e) => e.into(),
        }
    }
}
