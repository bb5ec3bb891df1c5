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
