//! A state machine's `arn:aws:states:::http:invoke` Task: its endpoint is a URL of one
//! of the deployment's services (it starts with the service's base URL), called with
//! that service's headers and credential (or SigV4), and the Task's method, headers,
//! query and body; an endpoint of no service is refused (`States.Permissions`), so a
//! Task reaches nothing the deployment has not named. Every status is an answer the machine judges (its
//! result, or `States.Http.StatusCode.NNN`, which its `Retry` may take); only a call
//! not made is tried again.

use std::borrow::Cow;

use http::Uri;
use serde_json::{Value, json};
use tracing::warn;
use url::Url;

use sas_core::ports::{RemoteError, RemoteRequest};
use sas_domain::limits::MAX_STEP_OUTPUT;
use sas_domain::machine::{HttpRequest, ServiceAnswer};
use sas_domain::services::Service;

use crate::HttpRemote;
use crate::answer::{Answer, BodyError};
use crate::request::Outgoing;

impl HttpRemote {
    /// The service the Task's endpoint is at, its URL with the Task's query, and what
    /// the call sends.
    pub(crate) fn http_invoke(
        &self,
        request: &RemoteRequest,
    ) -> Result<(&str, Cow<'_, Service>, Uri, Outgoing), RemoteError> {
        let asked: HttpRequest =
            serde_json::from_str(request.payload.as_str()).map_err(|error| {
                refused("States.Runtime", &format!("http:invoke's request: {error}"))
            })?;
        let found = (self.directory.serving(&asked.endpoint))
            .and_then(|(name, _)| Some((name, self.service(name)?)));
        let Some((name, service)) = found else {
            // As Step Functions names a call its role may not make.
            return Err(refused(
                "States.Permissions",
                "the ApiEndpoint is at none of the deployment's services",
            ));
        };
        let mut url = Url::parse(&asked.endpoint)
            .map_err(|error| refused("States.Runtime", &format!("the ApiEndpoint: {error}")))?;
        if !asked.query.is_empty() {
            url.query_pairs_mut().extend_pairs(&asked.query);
        }
        let uri = Uri::try_from(url.as_str())
            .map_err(|error| refused("States.Runtime", &format!("the ApiEndpoint: {error}")))?;
        let method = http::Method::from_bytes(asked.method.as_bytes())
            .map_err(|error| refused("States.Runtime", &error.to_string()))?;
        let outgoing = Outgoing {
            method,
            headers: asked.headers.into_iter().collect(),
            body: asked.body.unwrap_or_default().into(),
        };
        Ok((name, service, uri, outgoing))
    }
}

/// A call refused before it is made, with the error the Task fails with.
fn refused(error: &str, cause: &str) -> RemoteError {
    RemoteError::Permanent(json!({"Error": error, "Cause": cause}).to_string())
}

/// The answer, whatever its status: its status, reason, headers and body's text.
pub(crate) fn read_answer(request: &RemoteRequest, answer: Answer) -> Result<Value, RemoteError> {
    let status = answer.status;
    let headers = answer
        .headers
        .iter()
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (name.as_str().to_owned(), value)
        })
        .collect();
    let bytes = match answer.body {
        Ok(bytes) => bytes,
        Err(BodyError::TooLarge) => {
            return Err(RemoteError::Unusable(format!(
                "the API answered {status} with a body over the {MAX_STEP_OUTPUT} bytes a step's output may have"
            )));
        }
        Err(BodyError::Read(error)) => {
            warn!(service = %request.service, %error, "answer cut off");
            return Err(RemoteError::Transient(format!(
                "the API answered {status} and its body was cut off"
            )));
        }
    };
    let answer = ServiceAnswer {
        body: Value::String(String::from_utf8_lossy(&bytes).into_owned()),
        status: status.as_u16(),
        headers,
        status_text: status.canonical_reason().map(str::to_owned),
    };
    serde_json::to_value(answer).map_err(|error| RemoteError::Unusable(error.to_string()))
}
