//! How a fuzz target runs, and the values it is fed.
//!
//! A target is a proptest strategy and a property. In the suite each runs its
//! `SAS_FUZZ_CASES` cases (its own default otherwise): a bounded time. With
//! `SAS_FUZZ_SECONDS` set it is a campaign: rounds of fresh seeds for that long,
//! its figures printed (`fuzz <target>: <cases> cases in <s> s, nothing found`). A
//! failure is shrunk to its smallest input and reported with it; nothing is written
//! into the source tree.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::Value;

/// Runs `property` over values of `strategy`, as the module says.
///
/// # Panics
/// When the property fails, with the smallest input found that fails it.
pub fn fuzz<S>(
    target: &str,
    cases: u32,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: Debug,
{
    let setting = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let cases = setting("SAS_FUZZ_CASES").map_or(cases, |n| u32::try_from(n).unwrap_or(u32::MAX));
    let campaign = setting("SAS_FUZZ_SECONDS").map(Duration::from_secs);
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let started = Instant::now();
    let mut ran = 0_u64;
    loop {
        let mut runner = TestRunner::new(config.clone());
        if let Err(failure) = runner.run(&strategy, &property) {
            panic!("fuzz {target}: {failure}");
        }
        ran += u64::from(cases);
        if campaign.is_none_or(|budget| started.elapsed() >= budget) {
            break;
        }
    }
    eprintln!(
        "fuzz {target}: {ran} cases in {:.1} s, nothing found",
        started.elapsed().as_secs_f64()
    );
}

/// JSON of any shape, a few levels deep, with the numbers and texts that break
/// parsers: huge and negative numbers, fractions, empty and multi-byte text.
pub fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        "[0-9T:.+-Z]{0,30}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,10}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// One change to a JSON document, at a place chosen by `at` among its values: the
/// value replaced, its key removed, or text and numbers pushed to their edges.
#[derive(Debug, Clone)]
pub enum Change {
    Replace(Value),
    Remove,
    Stretch,
}

/// Changes to make, each at a place (an index among the document's values, taken
/// modulo their number).
pub fn changes() -> impl Strategy<Value = Vec<(usize, Change)>> {
    let change = prop_oneof![
        3 => any_json().prop_map(Change::Replace),
        1 => Just(Change::Remove),
        1 => Just(Change::Stretch),
    ];
    prop::collection::vec((any::<usize>(), change), 1..4)
}

/// `document` with `changes` made.
#[must_use]
pub fn changed(mut document: Value, changes: &[(usize, Change)]) -> Value {
    for (at, change) in changes {
        let places = count(&document);
        change_at(&mut document, at % places, change);
    }
    document
}

/// The values in `value`, itself included.
fn count(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(count).sum(),
        Value::Object(fields) => fields.values().map(count).sum(),
        _ => 0,
    }
}

/// Makes `change` at the `at`th value of `value` (depth first, itself first).
/// Returns whether it was made; a removal of the document itself replaces it by null.
fn change_at(value: &mut Value, at: usize, change: &Change) -> bool {
    if at == 0 {
        *value = match change {
            Change::Replace(new) => new.clone(),
            Change::Remove => Value::Null,
            Change::Stretch => stretched(value),
        };
        return true;
    }
    let mut at = at - 1;
    let children: Vec<(Option<String>, usize)> = match value {
        Value::Array(items) => items.iter().map(|v| (None, count(v))).collect(),
        Value::Object(fields) => fields
            .iter()
            .map(|(k, v)| (Some(k.clone()), count(v)))
            .collect(),
        _ => return false,
    };
    for (index, (key, size)) in children.into_iter().enumerate() {
        if at < size {
            if at == 0 && matches!(change, Change::Remove) {
                match (value, key) {
                    (Value::Object(fields), Some(key)) => {
                        fields.remove(&key);
                    }
                    (Value::Array(items), _) => {
                        items.remove(index);
                    }
                    _ => {}
                }
                return true;
            }
            let child = match value {
                Value::Array(items) => &mut items[index],
                Value::Object(fields) => fields.values_mut().nth(index).expect("a field"),
                _ => return false,
            };
            return change_at(child, at, change);
        }
        at -= size;
    }
    false
}

/// A value pushed to an edge of its kind: text long and multi-byte, a number
/// huge or negative, a container emptied.
fn stretched(value: &Value) -> Value {
    match value {
        Value::String(text) => {
            Value::from(format!("{}€{}", text.repeat(40), "\u{10FFFF}".repeat(3)))
        }
        Value::Number(n) if n.is_u64() => Value::from(u64::MAX),
        Value::Number(n) if n.is_i64() => Value::from(i64::MIN),
        Value::Number(_) => Value::from(-1.0e308),
        Value::Array(_) => Value::Array(Vec::new()),
        Value::Object(_) => Value::Object(serde_json::Map::new()),
        Value::Bool(b) => Value::from(u8::from(*b)),
        Value::Null => Value::from(""),
    }
}
