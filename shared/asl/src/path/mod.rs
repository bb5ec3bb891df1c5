//! ASL's JSONPath, as Step Functions evaluates it (Jayway's semantics, not RFC 9535's):
//! a definite path (names and indexes only) selects one value, and selecting nothing is
//! an error; an indefinite one (`[*]`, `.*`, `[a:b]`, `[0,1]`, `[?(...)]`, `..`) selects
//! a JSON array of its matches, empty when nothing matches.
//!
//! `$` is the state's input, `$$` the context object, `$name` an ASL variable. Names
//! after a dot may hold any character but `.`, `[` and blanks (`$.a-b`); bracketed names
//! are taken as written (`$['a\"b']` is the key `a\"b`). Filters are RFC 9535 filter
//! expressions (`[?(@.a >= 5 && @.b == 'x')]`, evaluated by `serde_json_path`) and match
//! objects only; Step Functions does not support `$` inside a filter, and here it would
//! stand for the filtered value rather than the input.

mod eval;
mod parse;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::{Map, Value};

pub(crate) use eval::kind;
pub(crate) use parse::Quoting;
pub use parse::Root;
use parse::{Segment, Step};

use crate::Failure;
use crate::memo::{self, Memo};

/// Why a path selected no value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// A definite path selects nothing. Step Functions' cause depends on the field;
    /// [`explain`] gives Jayway's reason for the `Invalid path '...' : <reason>` form.
    #[error("the path selects nothing")]
    NoMatch,
    /// The path does not parse, or names a variable not in scope.
    #[error("{0}")]
    Invalid(String),
}

/// A parsed path, to parse a definition's paths once.
#[derive(Clone, Debug)]
pub struct Path {
    root: Root,
    segments: Vec<Segment>,
}

thread_local! {
    static PARSED: Memo<Path> = RefCell::default();
}

impl Path {
    pub fn parse(text: &str) -> Result<Self, String> {
        let (root, segments) = parse::parse(text)?;
        Ok(Self { root, segments })
    }

    /// `text` parsed, once a thread ([`memo`]).
    fn parsed(text: &str) -> Result<Rc<Self>, String> {
        memo::parsed(&PARSED, text, Self::parse)
    }

    pub fn root(&self) -> &Root {
        &self.root
    }

    /// Selects one value (Jayway's "definite" path): names and indexes only, or a
    /// last `['a','b']` that gathers those fields into one object.
    pub fn is_definite(&self) -> bool {
        let Some((last, init)) = self.segments.split_last() else {
            return true;
        };
        init.iter().all(single) && (single(last) || matches!(last.step, Step::Names(_)))
    }

    /// A reference path: names and indexes only, as `ResultPath` requires.
    pub fn is_reference(&self) -> bool {
        self.segments.iter().all(single)
    }

    /// The path's value: for a definite path the one value it selects, for an
    /// indefinite one the array of its matches. `Err(detail)` is Jayway's reason for
    /// selecting nothing.
    fn evaluate(
        &self,
        input: &Value,
        context: &Value,
        variables: &dyn Fn(&str) -> Option<Value>,
    ) -> Result<Result<Value, String>, PathError> {
        let variable;
        let root = match &self.root {
            Root::Input => input,
            Root::Context => context,
            Root::Variable(name) => {
                variable = variables(name).ok_or_else(|| {
                    PathError::Invalid(format!("The variable '{name}' is not defined"))
                })?;
                &variable
            }
        };
        Ok(if self.is_definite() {
            eval::definite(root, &self.segments)
        } else {
            Ok(eval::indefinite(root, &self.segments))
        })
    }

    pub fn select(
        &self,
        input: &Value,
        context: &Value,
        variables: &dyn Fn(&str) -> Option<Value>,
    ) -> Result<Value, PathError> {
        self.evaluate(input, context, variables)?
            .map_err(|_| PathError::NoMatch)
    }
}

fn single(segment: &Segment) -> bool {
    !segment.deep && matches!(segment.step, Step::Name(_) | Step::Index(_))
}

/// The value `path` selects: `$` from `input`, `$$` from `context`, `$name` from
/// `variables`.
pub fn select(
    path: &str,
    input: &Value,
    context: &Value,
    variables: &dyn Fn(&str) -> Option<Value>,
) -> Result<Value, PathError> {
    Path::parsed(path)
        .map_err(PathError::Invalid)?
        .select(input, context, variables)
}

/// Why `path` selects nothing, in Jayway's words as Step Functions quotes them after
/// `Invalid path '<path>' : ` (`Missing property in path $['a']`, `No results for path:
/// $['a']['b']`); `None` when it does select a value or cannot be evaluated.
pub fn explain(
    path: &str,
    input: &Value,
    context: &Value,
    variables: &dyn Fn(&str) -> Option<Value>,
) -> Option<String> {
    Path::parsed(path)
        .ok()?
        .evaluate(input, context, variables)
        .ok()?
        .err()
}

/// Whether `path` parses (a definition holding one that does not is refused).
pub fn is_valid(path: &str) -> bool {
    Path::parse(path).is_ok()
}

/// Whether `path` is a reference path: it parses, and holds names and indexes only.
pub fn is_reference_path(path: &str) -> bool {
    Path::parse(path).is_ok_and(|path| path.is_reference())
}

/// `ResultPath`: `value` placed into `target` at `path`. `$` replaces the whole;
/// `$.a.b` sets the field, creating the objects missing on the way; an index sets an
/// item the array already has. A step through a value of another kind is
/// `States.Runtime`.
pub fn place(target: Value, path: &str, value: Value) -> Result<Value, Failure> {
    let invalid = |reason: &str| Failure::runtime(format!("Invalid path '{path}' : {reason}"));
    let parsed = Path::parsed(path).map_err(|reason| invalid(&reason))?;
    if parsed.root != Root::Input || !parsed.is_reference() {
        return Err(invalid(
            "ResultPath must be a reference path into the input",
        ));
    }
    let Some((last, init)) = parsed.segments.split_last() else {
        return Ok(value);
    };
    let mut target = target;
    let mut current = &mut target;
    for segment in init {
        current = match (&segment.step, current) {
            (Step::Name(name), Value::Object(fields)) => fields
                .entry(name.clone())
                .or_insert_with(|| Value::Object(Map::new())),
            (Step::Index(index), Value::Array(items)) => {
                let at = eval::position(*index, items.len());
                at.and_then(|at| items.get_mut(at))
                    .ok_or_else(|| invalid(&format!("no item [{index}]")))?
            }
            (step, found) => return Err(invalid(&cannot_step(step, found))),
        };
    }
    match (&last.step, current) {
        (Step::Name(name), Value::Object(fields)) => {
            fields.insert(name.clone(), value);
        }
        (Step::Index(index), Value::Array(items)) => {
            let at = eval::position(*index, items.len());
            let item = at
                .and_then(|at| items.get_mut(at))
                .ok_or_else(|| invalid(&format!("no item [{index}]")))?;
            *item = value;
        }
        (step, found) => return Err(invalid(&cannot_step(step, found))),
    }
    Ok(target)
}

fn cannot_step(step: &Step, found: &Value) -> String {
    let want = match step {
        Step::Index(index) => format!("an array for [{index}]"),
        Step::Name(name) => format!("an object for '{name}'"),
        _ => "a name or an index".to_owned(),
    };
    format!("expected {want} but found {}", eval::kind(found))
}

/// A JSONPath field's value: a path, or `null` (which selects nothing: `{}`, or for
/// `ResultPath` the input kept and the result dropped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    Path(String),
    Nothing,
}
