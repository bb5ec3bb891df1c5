//! A state's visit, in two halves around its work: [`enter`] takes the state's input and
//! says what work the state asks for (none, a call, a wait, branches, items); [`leave`]
//! takes the work's result and gives the state's output, where it goes next and the
//! variables it sets; [`recover`] says what an error becomes (a retry, a catcher, or
//! the state's failure). Each is a pure function: whoever runs the machine keeps the
//! durable record between them.

mod batch;
pub mod context;
mod enter;
mod reader;
mod rules;
mod scope;
pub mod trial;
pub mod writer;

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use crate::definition::{QueryLanguage, Selection, State, StateKind};
use crate::errors::{self, Catcher};
use crate::{Failure, path};

pub use batch::batches;
pub use enter::{Until, Work, enter, item_input};
pub use reader::items_read;
pub use scope::Scope;

/// A state being visited: the state, its raw input, the context object and the
/// variables in scope when it was entered.
pub struct Visit<'a> {
    pub state: &'a State,
    pub input: &'a Value,
    pub context: &'a Value,
    pub variables: &'a Map<String, Value>,
}

impl<'a> Visit<'a> {
    fn scope(&self) -> Scope<'a> {
        Scope::new(
            self.state.language,
            self.input,
            self.context,
            self.variables,
        )
    }

    /// The input the state works on: JSONPath's `InputPath` applied (JSONata has none).
    /// Without an `InputPath` it is the input itself, not a copy.
    fn effective_input(&self) -> Result<Cow<'a, Value>, Failure> {
        match &self.state.io.input_path {
            None => Ok(Cow::Borrowed(self.input)),
            Some(Selection::Nothing) => Ok(Cow::Owned(json!({}))),
            Some(Selection::Path(query)) => self
                .scope()
                .select_or_explain(query, "InputPath")
                .map(Cow::Owned),
        }
    }
}

/// What a state's visit ends with.
#[derive(Clone, Debug, PartialEq)]
pub struct Left {
    pub output: Value,
    /// The next state, or `None` where the machine ends (with `output`).
    pub next: Option<String>,
    /// Variables the state sets (`Assign`), to be merged into the scope.
    pub assigned: Map<String, Value>,
}

/// The state's output, next state and variables, from its work's `result`.
pub fn leave(visit: &Visit, result: Value) -> Result<Left, Failure> {
    let state = visit.state;
    let scope = visit.scope();
    let (output, assigned) = match state.language {
        QueryLanguage::JsonPath => {
            let result = selected(&scope, state, result)?;
            let assigned = assign(&scope.with_input(&result), state.assign.as_ref())?;
            let placed = placed(visit, result)?;
            (output_path(&scope, placed, state)?, assigned)
        }
        QueryLanguage::Jsonata => {
            let scope = Scope {
                result: Some(&result),
                ..scope
            };
            let output = match &state.io.output {
                Some(output) => scope.jsonata(output, "Output")?,
                None => result.clone(),
            };
            (output, assign(&scope, state.assign.as_ref())?)
        }
    };
    Ok(Left {
        output,
        next: state.next.clone(),
        assigned,
    })
}

/// JSONPath's `ResultSelector` applied to a work's `result`.
fn selected(scope: &Scope, state: &State, result: Value) -> Result<Value, Failure> {
    match &state.io.result_selector {
        Some(selector) => scope.with_input(&result).template(selector),
        None => Ok(result),
    }
}

/// JSONPath's `ResultPath`: the state's input with its (selected) `result` placed in
/// it, or the result alone.
fn placed(visit: &Visit, result: Value) -> Result<Value, Failure> {
    let state = visit.state;
    match (&state.kind, &state.io.result_path) {
        (StateKind::Wait(_) | StateKind::Succeed | StateKind::Choice { .. }, _) => Ok(result),
        (_, None) => Ok(result),
        (_, Some(Selection::Nothing)) => Ok(visit.input.clone()),
        (_, Some(Selection::Path(query))) => path::place(visit.input.clone(), query, result),
    }
}

fn output_path(scope: &Scope, value: Value, state: &State) -> Result<Value, Failure> {
    match &state.io.output_path {
        None => Ok(value),
        Some(Selection::Nothing) => Ok(json!({})),
        Some(Selection::Path(query)) => scope
            .with_input(&value)
            .select_or_explain(query, "OutputPath"),
    }
}

/// `Assign`'s values, evaluated in `scope` (the variables as they were before the
/// state: a state never sees its own assignments).
fn assign(scope: &Scope, assign: Option<&Value>) -> Result<Map<String, Value>, Failure> {
    match assign {
        None => Ok(Map::new()),
        Some(assign) => match scope.evaluate(assign, "Assign")? {
            Value::Object(assigned) => Ok(assigned),
            _ => Ok(Map::new()),
        },
    }
}

/// What an error raised by a state's work becomes.
#[derive(Clone, Debug, PartialEq)]
pub enum Recovery {
    /// Try the work again after `delay_seconds` (before jitter); `retrier` is the index
    /// of the retrier whose count goes up.
    Retry {
        retrier: usize,
        delay_seconds: f64,
        full_jitter: bool,
    },
    /// The catcher of index `catcher` takes it: the state ends this way.
    Caught { left: Left, catcher: usize },
    /// Nothing takes it: the state, and its machine, fail.
    Raise(Failure),
}

/// What `failure` becomes, given how many times each retrier has already retried.
pub fn recover(visit: &Visit, failure: Failure, retries: &[u64]) -> Recovery {
    let state = visit.state;
    if let Some((index, retrier)) = errors::retrier_for(&state.retry, &failure.error) {
        let done = retries.get(index).copied().unwrap_or(0);
        if done < retrier.max_attempts {
            return Recovery::Retry {
                retrier: index,
                delay_seconds: retrier.delay_seconds(done + 1),
                full_jitter: retrier.full_jitter,
            };
        }
    }
    match errors::catcher_for(&state.catch, &failure.error) {
        Some((index, catcher)) => match caught(visit, catcher, &failure) {
            Ok(left) => Recovery::Caught {
                left,
                catcher: index,
            },
            Err(failure) => Recovery::Raise(failure),
        },
        None => Recovery::Raise(failure),
    }
}

fn caught(visit: &Visit, catcher: &Catcher, failure: &Failure) -> Result<Left, Failure> {
    let error_output = json!({"Error": failure.error, "Cause": failure.cause});
    let scope = visit.scope();
    let (output, assigned) = match visit.state.language {
        QueryLanguage::JsonPath => {
            let assigned = assign(&scope.with_input(&error_output), catcher.assign.as_ref())?;
            let output = match &catcher.result_path {
                None => error_output,
                Some(Selection::Nothing) => visit.input.clone(),
                Some(Selection::Path(query)) => {
                    path::place(visit.input.clone(), query, error_output)?
                }
            };
            (output, assigned)
        }
        QueryLanguage::Jsonata => {
            let scope = Scope {
                error_output: Some(&error_output),
                ..scope
            };
            let output = match &catcher.output {
                Some(output) => scope.jsonata(output, "Output")?,
                None => error_output.clone(),
            };
            (output, assign(&scope, catcher.assign.as_ref())?)
        }
    };
    Ok(Left {
        output,
        next: Some(catcher.next.clone()),
        assigned,
    })
}

/// The cause Step Functions gives an error the state itself raised (a path that
/// selects nothing, an expression that fails): the state's name and the history event
/// that entered it.
pub fn locate(failure: Failure, state: &str, entered_event: u64) -> Failure {
    if failure.error == errors::RUNTIME || failure.error == errors::QUERY_EVALUATION_ERROR {
        Failure::new(
            failure.error,
            format!(
                "An error occurred while executing the state '{state}' (entered at the event id #{entered_event}). {}",
                failure.cause
            ),
        )
    } else {
        failure
    }
}
