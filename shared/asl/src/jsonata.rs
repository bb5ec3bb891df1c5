//! JSONata as Step Functions pins it: JSONata 2.0 (the `jsonata-core` crate, which passes
//! JSONata's reference suite), `$states` and the state machine's variables bound, the
//! functions Step Functions adds (`$partition`, `$range`, `$hash`, `$random` with a
//! seed, `$uuid`, `$parse`), and `$eval` refused.

use jsonata_core::evaluator::{Context, Evaluator, EvaluatorError, EvaluatorOptions};
use jsonata_core::value::JValue;
use serde_json::{Map, Value};

use crate::intrinsics;

/// An evaluation stops past this time or depth: no expression can hold a scheduler.
const TIME_LIMIT_MS: u64 = 2_000;
const STACK_LIMIT: usize = 2_000;

/// The expression inside `{% ... %}`, if `text` is one.
pub fn expression(text: &str) -> Option<&str> {
    let inner = text.strip_prefix("{%")?.strip_suffix("%}")?;
    Some(inner.trim())
}

/// Whether an expression parses (checked when the definition is registered).
pub fn check(expression: &str) -> Result<(), String> {
    jsonata_core::parser::parse(expression)
        .map(|_| ())
        .map_err(|error| error.to_string())
}

/// Why an evaluation gave no value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The expression threw (its JSONata error code and message).
    Threw(String),
    /// The result is a function or another value JSON cannot hold.
    Unsupported,
}

/// Evaluates `expression` with `$states` and the variables bound. `Ok(None)` is
/// JSONata's undefined.
pub fn evaluate(
    expression: &str,
    states: &Value,
    variables: &Map<String, Value>,
) -> Result<Option<Value>, Problem> {
    let ast = jsonata_core::parser::parse(expression)
        .map_err(|error| Problem::Threw(error.to_string()))?;
    let options = EvaluatorOptions {
        timeout_ms: Some(TIME_LIMIT_MS),
        max_stack_depth: Some(STACK_LIMIT),
        ..EvaluatorOptions::default()
    };
    let mut context = Context::new();
    for (name, value) in variables {
        context.bind(name.clone(), JValue::from(value.clone()));
    }
    context.bind("states".to_owned(), JValue::from(states.clone()));
    let mut evaluator = Evaluator::with_options(context, options);
    add_functions(&mut evaluator).map_err(|error| Problem::Threw(message(&error)))?;
    let result = evaluator
        .evaluate(&ast, &JValue::Null)
        .map_err(|error| Problem::Threw(message(&error)))?;
    to_json(result)
}

/// An error as JSONata's reference implementation words it, which Step Functions
/// quotes: `jsonata-core` adds the function's name to T1006.
fn message(error: &EvaluatorError) -> String {
    let message = error.message();
    match message.split_once(": $") {
        Some((head, _)) if head.starts_with("T1006") => head.to_owned(),
        _ => message.to_owned(),
    }
}

/// A JSONata value as JSON: undefined is `None`; a function cannot be held.
fn to_json(value: JValue) -> Result<Option<Value>, Problem> {
    if value.is_undefined() {
        return Ok(None);
    }
    if value.is_function() || value.is_regex() {
        return Err(Problem::Unsupported);
    }
    let text = value.to_json_string().map_err(|_| Problem::Unsupported)?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|_| Problem::Unsupported)
}

fn from_json(value: Value) -> JValue {
    JValue::from(value)
}

fn json_args(args: &[JValue]) -> Result<Vec<Value>, EvaluatorError> {
    args.iter()
        .map(|arg| match to_json(arg.clone()) {
            Ok(Some(value)) => Ok(value),
            Ok(None) => Ok(Value::Null),
            Err(_) => Err(EvaluatorError::TypeError(
                "T0410: Argument is not a JSON value".to_owned(),
            )),
        })
        .collect()
}

/// Runs one of Step Functions' added functions through the intrinsic of the same
/// meaning, so that `$hash` and `States.Hash` cannot disagree.
fn through_intrinsic(name: &'static str, args: &[JValue]) -> Result<JValue, EvaluatorError> {
    let args = json_args(args)?;
    intrinsics::call(name, args)
        .map(from_json)
        .map_err(|failure| EvaluatorError::EvaluationError(failure.cause))
}

fn add_functions(evaluator: &mut Evaluator) -> Result<(), EvaluatorError> {
    evaluator.register_fn("partition", |args: &[JValue]| {
        through_intrinsic("States.ArrayPartition", args)
    })?;
    // A sequence, as JSONata's own ranges are: one item comes out as the item.
    evaluator.register_fn("range", |args: &[JValue]| {
        let range = through_intrinsic("States.ArrayRange", args)?;
        Ok(match range.as_array() {
            Some(items) => JValue::sequence(items.clone()),
            None => range,
        })
    })?;
    evaluator.register_fn("hash", |args: &[JValue]| {
        through_intrinsic("States.Hash", args)
    })?;
    evaluator.register_fn("uuid", |args: &[JValue]| {
        through_intrinsic("States.UUID", args)
    })?;
    evaluator.register_fn("parse", |args: &[JValue]| {
        through_intrinsic("States.StringToJson", args)
    })?;
    evaluator.register_fn_override("random", |args: &[JValue]| {
        let seed = json_args(args)?.first().and_then(Value::as_u64);
        Ok(JValue::from_f64(intrinsics::random_unit(seed)))
    })?;
    evaluator.register_fn_override("eval", |_args: &[JValue]| {
        Err(EvaluatorError::ReferenceError(
            "T1006: Attempted to invoke a non-function".to_owned(),
        ))
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::{Problem, evaluate, expression};

    fn run(text: &str, states: serde_json::Value) -> Result<Option<serde_json::Value>, Problem> {
        evaluate(text, &states, &Map::new())
    }

    #[test]
    fn reads_states_and_variables() {
        let mut variables = Map::new();
        variables.insert("count".to_owned(), json!(2));
        let states = json!({"input": {"n": 3}});
        assert_eq!(
            evaluate("$states.input.n * $count", &states, &variables),
            Ok(Some(json!(6)))
        );
    }

    #[test]
    fn undefined_is_none_and_a_function_is_refused() {
        assert_eq!(run("$nothing", json!({})), Ok(None));
        assert_eq!(
            run("function($x){$x}", json!({})),
            Err(Problem::Unsupported)
        );
    }

    #[test]
    fn eval_is_refused() {
        assert!(matches!(
            run("$eval('1 + 1')", json!({})),
            Err(Problem::Threw(_))
        ));
    }

    #[test]
    fn expressions_are_found_only_inside_their_marks() {
        assert_eq!(expression("{% 1 + 2 %}"), Some("1 + 2"));
        assert_eq!(expression("1 + 2"), None);
    }
}
