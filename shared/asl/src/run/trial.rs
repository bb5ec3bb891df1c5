//! One state run on its own, as Step Functions' `TestState` runs it: entered with an
//! input, its work's answer given (mocked) rather than made, and left, retried or
//! caught as a visit of it in an execution would be, with what each stage made of its
//! input for a person to inspect.

use serde_json::{Map, Value, json};

use super::{Left, Recovery, Visit, Work, enter, leave, placed, recover, selected};
use crate::Failure;
use crate::definition::QueryLanguage;

/// What a state's work answers in a trial, in place of its call (or its branches, or
/// its items): a result, or an error.
#[derive(Clone, Debug, PartialEq)]
pub enum Mock {
    Result(Value),
    Error(Failure),
}

/// How a trial ended, in `TestState`'s words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `SUCCEEDED`: the state left with an output.
    Succeeded,
    /// `FAILED`: it raised an error nothing retries or catches.
    Failed,
    /// `RETRIABLE`: a retrier takes its error.
    Retriable,
    /// `CAUGHT_ERROR`: a catcher takes its error.
    CaughtError,
}

impl Outcome {
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::Retriable => "RETRIABLE",
            Self::CaughtError => "CAUGHT_ERROR",
        }
    }
}

/// A trial's end: its outcome, the state's output and next state where it left, its
/// error where it raised one, and what each stage made (`inspectionData`'s fields,
/// their values as JSON text).
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    pub outcome: Outcome,
    pub output: Option<Value>,
    pub next: Option<String>,
    pub failure: Option<Failure>,
    pub inspection: Map<String, Value>,
}

/// Why a state cannot be tried: its work is a call (or branches, or items) and no
/// mock answers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unmocked(pub &'static str);

/// Runs `visit`'s state once, its work answered by `mock`, after `retries` (each
/// retrier's count so far).
///
/// # Errors
/// [`Unmocked`] where the state asks for work that only a mock answers here.
pub fn try_state(visit: &Visit, mock: Option<Mock>, retries: &[u64]) -> Result<Trial, Unmocked> {
    let mut trial = Trial {
        outcome: Outcome::Succeeded,
        output: None,
        next: None,
        failure: None,
        inspection: Map::new(),
    };
    trial.inspect("input", visit.input);
    if visit.state.language == QueryLanguage::JsonPath
        && let Ok(effective) = visit.effective_input()
    {
        trial.inspect("afterInputPath", &effective);
    }
    let work = match enter(visit) {
        Ok(work) => work,
        Err(failure) => return Ok(trial.failed(failure)),
    };
    let (arguments, answer) = match work {
        Work::Done(left) => return Ok(trial.left(visit, left, Outcome::Succeeded)),
        Work::Fail(failure) => return Ok(trial.failed(failure)),
        Work::Wait { result, .. } => (None, Mock::Result(result)),
        Work::Call { arguments, .. } | Work::Branches { input: arguments } => (
            Some(arguments),
            mock.ok_or(Unmocked(visit.state.kind.type_name()))?,
        ),
        Work::Items { .. } | Work::Read { .. } => {
            (None, mock.ok_or(Unmocked(visit.state.kind.type_name()))?)
        }
    };
    if let Some(arguments) = &arguments {
        let stage = match visit.state.language {
            QueryLanguage::JsonPath => "afterParameters",
            QueryLanguage::Jsonata => "afterArguments",
        };
        trial.inspect(stage, arguments);
    }
    match answer {
        Mock::Result(result) => {
            trial.inspect("result", &result);
            if visit.state.language == QueryLanguage::JsonPath {
                trial.inspect_placing(visit, &result);
            }
            Ok(match leave(visit, result) {
                Ok(left) => trial.left(visit, left, Outcome::Succeeded),
                Err(failure) => trial.failed(failure),
            })
        }
        Mock::Error(failure) => Ok(match recover(visit, failure.clone(), retries) {
            Recovery::Retry {
                retrier,
                delay_seconds,
                ..
            } => {
                trial.inspection.insert(
                    "errorDetails".into(),
                    // Whole seconds, as Step Functions' integer field holds them.
                    json!({"retryIndex": retrier, "retryBackoffIntervalSeconds": delay_seconds.round() as u64}),
                );
                trial.outcome = Outcome::Retriable;
                trial.failure = Some(failure);
                trial
            }
            Recovery::Caught { left, catcher } => {
                trial
                    .inspection
                    .insert("errorDetails".into(), json!({"catchIndex": catcher}));
                trial.failure = Some(failure);
                trial.left(visit, left, Outcome::CaughtError)
            }
            Recovery::Raise(failure) => trial.failed(failure),
        }),
    }
}

impl Trial {
    /// A stage's value, kept as `inspectionData` writes it: JSON text.
    fn inspect(&mut self, stage: &str, value: &Value) {
        self.inspection
            .insert(stage.to_owned(), Value::String(crate::json_text(value)));
    }

    /// JSONPath's stages after the work: its result selected, then placed.
    fn inspect_placing(&mut self, visit: &Visit, result: &Value) {
        let scope = visit.scope();
        let Ok(selected) = selected(&scope, visit.state, result.clone()) else {
            return;
        };
        self.inspect("afterResultSelector", &selected);
        if let Ok(placed) = placed(visit, selected) {
            self.inspect("afterResultPath", &placed);
        }
    }

    /// The state left with `left`: its output, next state and variables.
    fn left(mut self, visit: &Visit, left: Left, outcome: Outcome) -> Self {
        let mut variables = visit.variables.clone();
        variables.extend(left.assigned);
        if !variables.is_empty() {
            self.inspect("variables", &Value::Object(variables));
        }
        self.outcome = outcome;
        self.output = Some(left.output);
        self.next = left.next;
        self
    }

    fn failed(mut self, failure: Failure) -> Self {
        self.outcome = Outcome::Failed;
        self.failure = Some(failure);
        self
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value, json};

    use super::{Mock, Outcome, Trial, Unmocked, try_state};
    use crate::definition::State;
    use crate::run::Visit;

    fn tried(state: Value, input: Value, mock: Option<Mock>) -> Result<Trial, Unmocked> {
        let state = State::alone("S", &state).expect("a state");
        let visit = Visit {
            state: &state,
            input: &input,
            context: &json!({}),
            variables: &Map::new(),
        };
        try_state(&visit, mock, &[])
    }

    #[test]
    fn a_wait_is_left_at_once_with_its_input() {
        let wait = json!({"Type": "Wait", "Seconds": 3600, "Next": "After"});
        let trial = tried(wait, json!({"n": 1}), None).expect("tried");
        assert_eq!(trial.outcome, Outcome::Succeeded);
        assert_eq!(trial.output, Some(json!({"n": 1})));
        assert_eq!(trial.next.as_deref(), Some("After"));
    }

    #[test]
    fn a_parallel_takes_its_branches_outputs_from_the_mock() {
        let branch = json!({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": true}}});
        let parallel =
            json!({"Type": "Parallel", "Branches": [branch], "ResultPath": "$.all", "End": true});
        let mock = Some(Mock::Result(json!([1, 2])));
        let trial = tried(parallel, json!({}), mock).expect("tried");
        assert_eq!(trial.output, Some(json!({"all": [1, 2]})));
        assert_eq!(trial.next, None);
    }

    #[test]
    fn a_map_with_no_mock_is_not_tried() {
        let processor = json!({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": true}}});
        let map = json!({"Type": "Map", "ItemProcessor": processor, "End": true});
        assert_eq!(
            tried(map, json!([1]), None),
            Err(Unmocked("Map")),
            "a Map's items are not run by a trial"
        );
    }

    #[test]
    fn an_error_nothing_takes_fails_the_state() {
        let task = json!({"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "End": true,
                          "Parameters": {"FunctionName": "f"}});
        let failure = crate::Failure::new("Boom", "it broke");
        let trial = tried(task, json!({}), Some(Mock::Error(failure.clone()))).expect("tried");
        assert_eq!(
            (trial.outcome, trial.failure),
            (Outcome::Failed, Some(failure))
        );
    }
}
