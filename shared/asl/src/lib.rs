//! The Amazon States Language, pure: no clock, no I/O. A state machine's definition is
//! checked once ([`definition`]); each state's transition takes the state, its input,
//! the context object and the variables in scope, and says what happens next.

pub mod choice;
pub mod definition;
pub mod errors;
pub mod executions;
pub mod http;
pub mod intrinsics;
pub mod jsonata;
pub mod lambda;
mod memo;
pub mod path;
pub mod run;
pub mod services;

/// An error raised while a state runs, as Step Functions names it (`States.Runtime`,
/// `States.QueryEvaluationError`, a Lambda's `errorType`, ...) with its cause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub error: String,
    pub cause: String,
}

impl Failure {
    pub fn new(error: impl Into<String>, cause: impl Into<String>) -> Self {
        Self {
            error: error.into(),
            cause: cause.into(),
        }
    }

    /// `States.Runtime`: the state could not run as written (a path that selects
    /// nothing, a value of the wrong type).
    pub fn runtime(cause: impl Into<String>) -> Self {
        Self::new("States.Runtime", cause)
    }
}

/// `value`'s JSON text, written straight to bytes: `Value`'s `Display` (`to_string`)
/// goes through the formatter a piece at a time, at about twice the instructions.
///
/// # Panics
///
/// Never: a JSON value's keys are strings and its numbers finite.
pub(crate) fn json_text(value: &serde_json::Value) -> String {
    serde_json::to_string(value).expect("a JSON value serializes")
}

/// A Task's `arguments` as the request of `resource` (`sqs:sendMessage`) reads them:
/// an object of the fields `known` alone, else refused as Step Functions refuses them.
pub(crate) fn request_fields<'a>(
    arguments: &'a serde_json::Value,
    resource: &str,
    known: &[&str],
) -> Result<&'a serde_json::Map<String, serde_json::Value>, Failure> {
    let serde_json::Value::Object(fields) = arguments else {
        return Err(Failure::runtime(format!(
            "The arguments of {resource} must be a JSON object"
        )));
    };
    if let Some(field) = fields.keys().find(|f| !known.contains(&f.as_str())) {
        return Err(Failure::runtime(format!(
            "The field '{field}' is not supported by Step Functions for {resource}"
        )));
    }
    Ok(fields)
}

/// Why a definition is refused: where (a JSON pointer into the definition, such as
/// `/States/Wait/Timestamp`) and what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message} at {at}")]
pub struct Refusal {
    pub at: String,
    pub message: String,
}

impl Refusal {
    pub fn new(at: &str, message: impl Into<String>) -> Self {
        Self {
            at: if at.is_empty() {
                "/".to_owned()
            } else {
                at.to_owned()
            },
            message: message.into(),
        }
    }
}
