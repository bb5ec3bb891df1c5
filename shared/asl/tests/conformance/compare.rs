//! A case's expected result against what the run gave, as the suite's README says to
//! compare them: patterns for values AWS generated, ignored and optional fields, causes
//! given as JSON compared parsed, and `<...>` placeholders (values the recording
//! replaced) matching any text.

use regex::Regex;
use serde_json::{Map, Value};

/// How a run's result stands against the case.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Everything matches but the words of the cause.
    CauseWords(String),
    Fail(String),
}

pub struct Rules<'a> {
    pub patterns: Map<String, Value>,
    pub ignore: Vec<&'a str>,
    pub optional: Vec<&'a str>,
}

impl<'a> Rules<'a> {
    pub fn of(case: &'a Value) -> Self {
        let list = |name: &str| -> Vec<&'a str> {
            case.get(name)
                .and_then(Value::as_array)
                .map(|items| items.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default()
        };
        Rules {
            patterns: case
                .get("patterns")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            ignore: list("ignore"),
            optional: list("optional"),
        }
    }

    /// Where `expected` and `actual` differ under `pointer`, if anywhere.
    pub fn difference(
        &self,
        pointer: &str,
        expected: &Value,
        actual: Option<&Value>,
    ) -> Option<String> {
        let Some(actual) = actual else {
            if self.optional.contains(&pointer) {
                return None;
            }
            return Some(format!("{pointer}: missing, expected {expected}"));
        };
        if self.ignore.contains(&pointer) {
            return None;
        }
        if let Some(pattern) = self.patterns.get(pointer).and_then(Value::as_str) {
            let text = match actual {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            return match Regex::new(pattern) {
                Ok(regex) if regex.is_match(&text) => None,
                _ => Some(format!("{pointer}: {text:?} does not match /{pattern}/")),
            };
        }
        match (expected, actual) {
            (Value::Object(expected), Value::Object(actual)) => {
                for (key, value) in expected {
                    let inner = format!("{pointer}/{}", escape(key));
                    if let Some(difference) = self.difference(&inner, value, actual.get(key)) {
                        return Some(difference);
                    }
                }
                actual
                    .keys()
                    .find(|key| !expected.contains_key(*key))
                    .map(|key| format!("{pointer}: unexpected field {key:?}"))
            }
            (Value::Array(expected), Value::Array(actual)) => {
                if expected.len() != actual.len() {
                    return Some(format!(
                        "{pointer}: {} items, expected {}",
                        actual.len(),
                        expected.len()
                    ));
                }
                expected
                    .iter()
                    .zip(actual)
                    .enumerate()
                    .find_map(|(index, (expected, actual))| {
                        self.difference(&format!("{pointer}/{index}"), expected, Some(actual))
                    })
            }
            (Value::String(expected), Value::String(actual)) if placeholders(expected, actual) => {
                None
            }
            (Value::Number(expected), Value::Number(actual))
                if expected.as_f64() == actual.as_f64() =>
            {
                None
            }
            (expected, actual) if expected == actual => None,
            (expected, actual) => Some(format!("{pointer}: {actual}, expected {expected}")),
        }
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Whether `actual` is `expected` with each `<...>` placeholder standing for any text.
fn placeholders(expected: &str, actual: &str) -> bool {
    if !expected.contains('<') {
        return expected == actual;
    }
    let placeholder = Regex::new(r"<[A-Za-z_]+[A-Za-z0-9_:\-]*>").expect("a valid pattern");
    let mut pattern = String::from("^");
    let mut last = 0;
    for found in placeholder.find_iter(expected) {
        pattern.push_str(&regex::escape(&expected[last..found.start()]));
        pattern.push_str("[\\s\\S]*?");
        last = found.end();
    }
    pattern.push_str(&regex::escape(&expected[last..]));
    pattern.push('$');
    Regex::new(&pattern).is_ok_and(|regex| regex.is_match(actual))
}

/// A cause as the case keeps it: JSON text parsed, other text as is, none as `null`.
pub fn cause_value(cause: &str) -> Value {
    if cause.is_empty() {
        return Value::Null;
    }
    match serde_json::from_str::<Value>(cause) {
        Ok(parsed @ (Value::Object(_) | Value::Array(_))) => parsed,
        _ => Value::String(cause.to_owned()),
    }
}
