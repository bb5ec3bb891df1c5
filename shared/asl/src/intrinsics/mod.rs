//! ASL's intrinsic functions, as payload templates use them
//! (`"key.$": "States.Format('{}', $.x)"`): parsed when the definition is registered,
//! evaluated when the state runs.
//!
//! Arguments are string literals in single quotes (escapes `\'`, `\{`, `\}`, `\\`, no
//! others), numbers, `true`, `false`, `null`, paths (`$.x`, `$$.x`, `$name.x`) and
//! nested calls, up to [`MAX_NESTING`] deep. A function refusing its arguments is
//! `States.Runtime` with the cause `Invalid arguments in States.<Name>`, as Step
//! Functions reports it (the ASL specification's `States.IntrinsicFailure` is not what
//! the service raises).

mod functions;
mod parse;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::Value;

pub use parse::parse;

use crate::memo::{self, Memo};
use crate::{Failure, path};

thread_local! {
    static PARSED: Memo<Call> = RefCell::default();
}

/// `text` parsed as [`parse`] does, once a thread.
///
/// # Errors
/// Why it does not parse.
pub(crate) fn parsed(text: &str) -> Result<Rc<Call>, String> {
    memo::parsed(&PARSED, text, parse)
}

/// How deeply calls may nest: Step Functions allows 10 intrinsic functions in a field.
pub const MAX_NESTING: usize = 10;

/// An intrinsic function, by its ASL name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Function {
    Format,
    StringToJson,
    JsonToString,
    Array,
    ArrayPartition,
    ArrayContains,
    ArrayRange,
    ArrayGetItem,
    ArrayLength,
    ArrayUnique,
    Base64Encode,
    Base64Decode,
    Hash,
    JsonMerge,
    MathRandom,
    MathAdd,
    StringSplit,
    Uuid,
}

impl Function {
    const ALL: [Self; 18] = [
        Self::Format,
        Self::StringToJson,
        Self::JsonToString,
        Self::Array,
        Self::ArrayPartition,
        Self::ArrayContains,
        Self::ArrayRange,
        Self::ArrayGetItem,
        Self::ArrayLength,
        Self::ArrayUnique,
        Self::Base64Encode,
        Self::Base64Decode,
        Self::Hash,
        Self::JsonMerge,
        Self::MathRandom,
        Self::MathAdd,
        Self::StringSplit,
        Self::Uuid,
    ];

    /// The name a definition calls it by (`States.Format`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Format => "States.Format",
            Self::StringToJson => "States.StringToJson",
            Self::JsonToString => "States.JsonToString",
            Self::Array => "States.Array",
            Self::ArrayPartition => "States.ArrayPartition",
            Self::ArrayContains => "States.ArrayContains",
            Self::ArrayRange => "States.ArrayRange",
            Self::ArrayGetItem => "States.ArrayGetItem",
            Self::ArrayLength => "States.ArrayLength",
            Self::ArrayUnique => "States.ArrayUnique",
            Self::Base64Encode => "States.Base64Encode",
            Self::Base64Decode => "States.Base64Decode",
            Self::Hash => "States.Hash",
            Self::JsonMerge => "States.JsonMerge",
            Self::MathRandom => "States.MathRandom",
            Self::MathAdd => "States.MathAdd",
            Self::StringSplit => "States.StringSplit",
            Self::Uuid => "States.UUID",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|function| function.name() == name)
    }

    /// The fewest and the most arguments it takes (`None`: no most).
    fn arity(self) -> (usize, Option<usize>) {
        match self {
            Self::Format => (1, None),
            Self::Array => (0, None),
            Self::Uuid => (0, Some(0)),
            Self::MathRandom => (2, Some(3)),
            Self::ArrayRange | Self::JsonMerge => (3, Some(3)),
            Self::ArrayPartition
            | Self::ArrayContains
            | Self::ArrayGetItem
            | Self::Hash
            | Self::MathAdd
            | Self::StringSplit => (2, Some(2)),
            Self::StringToJson
            | Self::JsonToString
            | Self::ArrayLength
            | Self::ArrayUnique
            | Self::Base64Encode
            | Self::Base64Decode => (1, Some(1)),
        }
    }
}

/// A parsed call: a function and its arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    function: Function,
    args: Vec<Arg>,
}

impl Call {
    pub fn function(&self) -> Function {
        self.function
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Arg {
    /// A quoted string: its text as written between the quotes (escapes and all, which
    /// `States.Format` needs to tell `\{}` from a placeholder) and its value.
    Text {
        raw: String,
        value: String,
    },
    /// A number, `true`, `false` or `null`.
    Literal(Value),
    Path(String),
    Call(Call),
}

/// Whether a `.$` field's text is an intrinsic function call rather than a path.
pub fn is_intrinsic(text: &str) -> bool {
    text.starts_with("States.")
}

/// The call's value: its arguments evaluated (paths against `input`, `context` and
/// `variables`, as [`path::select`] reads them), then the function run on them.
pub fn evaluate(
    call: &Call,
    input: &Value,
    context: &Value,
    variables: &dyn Fn(&str) -> Option<Value>,
) -> Result<Value, Failure> {
    let args = call
        .args
        .iter()
        .map(|arg| match arg {
            Arg::Text { value, .. } => Ok(Value::String(value.clone())),
            Arg::Literal(value) => Ok(value.clone()),
            Arg::Path(query) => {
                path::select(query, input, context, variables).map_err(|error| match error {
                    path::PathError::NoMatch => Failure::runtime(format!(
                        "The JSONPath '{query}' could not be found in the input '{input}'"
                    )),
                    path::PathError::Invalid(reason) => {
                        Failure::runtime(format!("Invalid path '{query}' : {reason}"))
                    }
                })
            }
            Arg::Call(inner) => evaluate(inner, input, context, variables),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let literal_template = match call.args.first() {
        Some(Arg::Text { raw, .. }) => Some(raw.as_str()),
        _ => None,
    };
    functions::run(call.function, &args, literal_template)
}

/// Runs the function named `name` (`States.Hash`) on values already evaluated: for
/// JSONata's functions of the same meaning (`$hash`, `$partition`, ...).
pub fn call(name: &str, args: Vec<Value>) -> Result<Value, Failure> {
    let function = Function::from_name(name)
        .ok_or_else(|| Failure::runtime(format!("{name} is not an intrinsic function")))?;
    functions::run(function, &args, None)
}

/// A random number in [0, 1): the same for the same seed, as JSONata's `$random(seed)`
/// in Step Functions.
pub fn random_unit(seed: Option<u64>) -> f64 {
    match seed {
        Some(seed) => fastrand::Rng::with_seed(seed).f64(),
        None => fastrand::f64(),
    }
}
