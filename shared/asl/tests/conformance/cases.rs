//! The conformance cases AWS Step Functions recorded (`../shared/asl-conformance`): read
//! where they lie, their Lambda functions played, and a run's result judged against the
//! one AWS gave, as the suite's README says: patterns for values AWS generated, ignored
//! and optional fields, causes given as JSON compared parsed, and `<...>` placeholders
//! (values the recording replaced) matching any text. Shared by the language's test
//! (in memory) and the engine's (`sas-local`), each of which includes this file.

use std::path::PathBuf;

use regex::Regex;
use serde_json::{Map, Value, json};

/// How an execution ended.
#[derive(Debug)]
pub enum Outcome {
    Succeeded(Value),
    /// Its error and cause (empty where there is none).
    Failed {
        error: String,
        cause: String,
    },
    TimedOut,
}

/// How a run's result stands against its case.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Everything matches but the words of the cause.
    CauseWords(String),
    Fail(String),
}

/// One recorded execution.
pub struct Case {
    pub value: Value,
}

impl Case {
    pub fn name(&self) -> &str {
        self.value["name"].as_str().unwrap_or_default()
    }

    /// `SUCCEEDED`, `FAILED`, `TIMED_OUT` or `INVALID_DEFINITION`.
    pub fn status(&self) -> &str {
        self.value["expect"]["status"].as_str().unwrap_or_default()
    }

    /// The Lambda functions it calls, by name, each with its `behaviour`.
    pub fn lambdas(&self) -> Map<String, Value> {
        self.value
            .get("lambdas")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    }

    /// A run's `outcome` against what AWS gave.
    pub fn judge(&self, outcome: &Outcome) -> Verdict {
        let expect = &self.value["expect"];
        let rules = Rules::of(&self.value);
        match (self.status(), outcome) {
            ("SUCCEEDED", Outcome::Succeeded(output)) => {
                match rules.difference("/output", &expect["output"], Some(output)) {
                    None => Verdict::Pass,
                    Some(difference) => Verdict::Fail(difference),
                }
            }
            ("FAILED", Outcome::Failed { error, cause }) => {
                let expected_error = expect
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if expected_error != error {
                    return Verdict::Fail(format!("error {error:?}, expected {expected_error:?}"));
                }
                let expected_cause = expect.get("cause").cloned().unwrap_or(Value::Null);
                match rules.difference("/cause", &expected_cause, Some(&cause_value(cause))) {
                    None => Verdict::Pass,
                    Some(difference) => Verdict::CauseWords(difference),
                }
            }
            ("TIMED_OUT", Outcome::TimedOut) => Verdict::Pass,
            (expected, outcome) => Verdict::Fail(format!("{outcome:?}, expected {expected}")),
        }
    }
}

/// The directory of the cases: `SAS_ASL_CONFORMANCE`, or `../shared/asl-conformance/cases`
/// beside the repository.
fn cases_dir() -> PathBuf {
    match std::env::var_os("SAS_ASL_CONFORMANCE") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/asl-conformance/cases"
        )),
    }
}

/// Every case, in the order of their files' names; those whose name contains
/// `SAS_ASL_CASE` alone when it is set.
///
/// # Panics
/// When the cases cannot be read, saying where they were looked for.
pub fn read_all() -> Vec<Case> {
    let dir = cases_dir();
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|error| {
        panic!(
            "the conformance cases are read from {} ({error}); they live beside the repository in \
             ../shared/asl-conformance, or set SAS_ASL_CONFORMANCE to their directory",
            dir.display()
        )
    });
    let only = std::env::var("SAS_ASL_CASE").ok();
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "json")
        })
        .filter(|path| {
            only.as_ref()
                .is_none_or(|only| path.to_string_lossy().contains(only.as_str()))
        })
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no cases in {}", dir.display());
    paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).expect("a readable case");
            Case {
                value: serde_json::from_str(&text).expect("a case in JSON"),
            }
        })
        .collect()
}

/// Prints each failure with its difference, the cases that differ only in a cause's
/// words, and `N passed, M failed`; the share that passed, in percent (100 when only
/// some were asked for, which a share does not judge).
pub fn report(verdicts: &[(String, Verdict)]) -> f64 {
    let mut passed = 0;
    let mut cause_words = 0;
    for (name, verdict) in verdicts {
        match verdict {
            Verdict::Pass => passed += 1,
            Verdict::CauseWords(difference) => {
                cause_words += 1;
                println!("CAUSE WORDS {name}\n    {difference}");
            }
            Verdict::Fail(difference) => println!("FAILED {name}\n    {difference}"),
        }
    }
    let total = verdicts.len();
    println!(
        "{passed} passed, {} failed ({cause_words} of the failures differ only in the words of a cause), of {total} cases",
        total - passed
    );
    if std::env::var_os("SAS_ASL_CASE").is_some() {
        return 100.0;
    }
    passed as f64 * 100.0 / total.max(1) as f64
}

/// What a played function answers to `event`: its payload's text, and its
/// `X-Amz-Function-Error`.
pub fn played(behaviour: &Value, event: &[u8]) -> (String, Option<&'static str>) {
    if let Some(fails) = behaviour.get("fails") {
        let error = json!({
            "errorMessage": fails.get("errorMessage"),
            "errorType": fails.get("errorType"),
            "requestId": "00000000-0000-4000-8000-000000000000",
            "stackTrace": fails.get("stackTrace"),
        });
        return (python_json(&error), Some("Unhandled"));
    }
    if let Some(text) = behaviour.get("returns_text") {
        return match text {
            Value::String(text) => (text.clone(), None),
            repeat => {
                let piece = repeat.get("repeat").and_then(Value::as_str).unwrap_or("a");
                let times = repeat.get("times").and_then(Value::as_u64).unwrap_or(0);
                (format!("\"{}\"", piece.repeat(times as usize)), None)
            }
        };
    }
    if let Some(value) = behaviour.get("returns_json") {
        return (value.to_string(), None);
    }
    match event {
        [] => ("{}".to_owned(), None),
        event => (String::from_utf8_lossy(event).into_owned(), None),
    }
}

/// JSON as Python's `json.dumps` writes it (`", "` and `": "` between items): the played
/// functions stand for Python functions, whose error payloads AWS quotes as they are.
fn python_json(value: &Value) -> String {
    match value {
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(python_json).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(key, value)| {
                    format!("{}: {}", Value::String(key.clone()), python_json(value))
                })
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
        other => other.to_string(),
    }
}

/// What a case ignores, leaves optional, or matches by pattern.
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
