//! Task tokens: `SendTaskSuccess`, `SendTaskFailure` and `SendTaskHeartbeat`, each a
//! use of the project's callback token, which is its own capability.

use serde::Deserialize;
use serde_json::{Value, json};

use sas_core::app::{ActionError, App};
use sas_domain::decide::{CallbackOutcome, Refused};

use super::{SfnError, body};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TokenRequest {
    task_token: Option<String>,
    output: Option<String>,
    error: Option<String>,
    cause: Option<String>,
}

/// The token's use that `operation` asks for.
pub(super) async fn send(app: &App, operation: &str, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: TokenRequest = body(bytes)?;
    let token = request
        .task_token
        .ok_or_else(|| SfnError::invalid("taskToken", "Member must not be null"))?;
    let used = match operation {
        // A wait without a heartbeat setting takes one as Step Functions does: as
        // nothing.
        "SendTaskHeartbeat" => match app.heartbeat(&token).await {
            Err(ActionError::Refused(Refused::NoHeartbeat(_))) => return Ok(json!({})),
            heartbeat => heartbeat,
        },
        "SendTaskSuccess" => {
            let text = request
                .output
                .ok_or_else(|| SfnError::invalid("output", "Member must not be null"))?;
            let output: Value = serde_json::from_str(&text)
                .map_err(|e| SfnError::new("InvalidOutput", format!("Invalid output: {e}")))?;
            app.use_callback(&token, CallbackOutcome::Output(output))
                .await
        }
        _ => {
            // The state's error and cause, as a Task's failure names them.
            let failure = json!({
                "Error": request.error.unwrap_or_default(),
                "Cause": request.cause.unwrap_or_default(),
            });
            let outcome = CallbackOutcome::Error(failure.to_string());
            app.use_callback(&token, outcome).await
        }
    };
    used.map(|_| json!({}))
        .map_err(|e| SfnError::from_api(e.into(), "InvalidToken"))
}
