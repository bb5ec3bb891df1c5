//! A parsed path applied to a value, as Jayway applies it for Step Functions.

use serde_json::{Map, Value};
use serde_json_path::JsonPath;

use super::parse::{Segment, Step};

/// A definite path's one value, or Jayway's reason for finding none (Step Functions
/// quotes it: "Missing property in path $['a']", "No results for path: $['a']['b']").
pub(super) fn definite(root: &Value, segments: &[Segment]) -> Result<Value, String> {
    let mut current = root;
    for (at, segment) in segments.iter().enumerate() {
        let leaf = at + 1 == segments.len();
        let no_results = || format!("No results for path: {}", normalized(segments));
        // The path up to here, in the messages only: made when one is.
        let trail = || normalized(&segments[..at]);
        match &segment.step {
            Step::Name(name) => {
                let Value::Object(fields) = current else {
                    return Err(not_an_object(&quoted(name), &trail(), current));
                };
                current = match fields.get(name) {
                    Some(value) => value,
                    None if leaf => return Err(no_results()),
                    None => {
                        let trail = normalized(&segments[..=at]);
                        return Err(format!("Missing property in path {trail}"));
                    }
                };
            }
            Step::Names(names) => {
                let Value::Object(fields) = current else {
                    return Err(not_an_object(&quoted_list(names), &trail(), current));
                };
                return Ok(merged(fields, names));
            }
            Step::Index(index) => {
                let items = match current {
                    Value::Array(items) => items,
                    Value::Null => return Err(format!("The path {} is null", trail())),
                    other => {
                        return Err(format!(
                            "Filter: [{index}] can only be applied to arrays. Current context is: {other}"
                        ));
                    }
                };
                current = position(*index, items.len())
                    .and_then(|at| items.get(at))
                    .ok_or_else(no_results)?;
            }
            _ => return Err(no_results()),
        }
    }
    Ok(current.clone())
}

/// An indefinite path's matches, as one array (empty when nothing matches).
pub(super) fn indefinite(root: &Value, segments: &[Segment]) -> Value {
    let mut nodes = vec![root];
    for (at, segment) in segments.iter().enumerate() {
        if let (true, false, Step::Names(names)) =
            (at + 1 == segments.len(), segment.deep, &segment.step)
        {
            // Jayway's merge: each object's named fields, as one object.
            let merged = nodes.iter().filter_map(|node| match node {
                Value::Object(fields) => Some(self::merged(fields, names)),
                _ => None,
            });
            return Value::Array(merged.collect());
        }
        let mut next = Vec::new();
        for node in nodes {
            if !segment.deep {
                apply(&segment.step, node, &mut next);
            } else if let Step::Filter(query) = &segment.step {
                // A deep filter tests every object below once, not each array's items
                // and then the items again.
                for below in descendants(node) {
                    if below.is_object() && accepts(query, below) {
                        next.push(below);
                    }
                }
            } else {
                for below in descendants(node) {
                    apply(&segment.step, below, &mut next);
                }
            }
        }
        nodes = next;
    }
    Value::Array(nodes.into_iter().cloned().collect())
}

/// Jayway's normal form of a path (`$['a'][0]`), as its messages show it.
fn normalized(segments: &[Segment]) -> String {
    let mut text = String::from("$");
    for segment in segments {
        match &segment.step {
            Step::Name(name) => text.push_str(&quoted(name)),
            Step::Names(names) => text.push_str(&quoted_list(names)),
            Step::Index(index) => text.push_str(&format!("[{index}]")),
            _ => text.push_str("[*]"),
        }
    }
    text
}

fn quoted(name: &str) -> String {
    format!("['{name}']")
}

fn quoted_list(names: &[String]) -> String {
    let names: Vec<String> = names.iter().map(|name| format!("'{name}'")).collect();
    format!("[{}]", names.join(","))
}

fn not_an_object(property: &str, trail: &str, found: &Value) -> String {
    format!(
        "Expected to find an object with property {property} in path {trail} but found '{}'",
        kind(found)
    )
}

/// A JSON value's kind, for messages that should not quote the value.
pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The named fields an object has (missing ones left out).
fn merged(fields: &Map<String, Value>, names: &[String]) -> Value {
    let picked = names
        .iter()
        .filter_map(|name| Some((name.clone(), fields.get(name)?.clone())));
    Value::Object(picked.collect())
}

/// An index into `len` items (negative counts from the end), if there is such an item.
pub(super) fn position(index: i64, len: usize) -> Option<usize> {
    let len = i64::try_from(len).ok()?;
    let at = if index < 0 { len + index } else { index };
    usize::try_from(at).ok().filter(|_| at < len)
}

/// One step applied to one node, its matches pushed to `out`.
fn apply<'a>(step: &Step, node: &'a Value, out: &mut Vec<&'a Value>) {
    match (step, node) {
        (Step::Name(name), Value::Object(fields)) => out.extend(fields.get(name)),
        (Step::Names(names), Value::Object(fields)) => {
            out.extend(names.iter().filter_map(|name| fields.get(name)));
        }
        (Step::Index(index), Value::Array(items)) => {
            out.extend(position(*index, items.len()).and_then(|at| items.get(at)));
        }
        (Step::Indexes(indexes), Value::Array(items)) => out.extend(
            indexes
                .iter()
                .filter_map(|index| items.get(position(*index, items.len())?)),
        ),
        (Step::Wildcard, Value::Array(items)) => out.extend(items),
        (Step::Wildcard, Value::Object(fields)) => out.extend(fields.values()),
        (Step::Slice(from, to), Value::Array(items)) => {
            let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
            let clamp = |bound: i64| {
                let at = if bound < 0 {
                    len.saturating_add(bound)
                } else {
                    bound
                };
                usize::try_from(at.clamp(0, len)).unwrap_or(0)
            };
            let from = from.map_or(0, clamp);
            let to = to.map_or(items.len(), clamp);
            out.extend(items.get(from..to.max(from)).unwrap_or_default());
        }
        // Step Functions' filters match objects only (its documentation: "@ does not
        // match scalar values").
        (Step::Filter(query), Value::Array(_)) => {
            out.extend(
                query
                    .query(node)
                    .all()
                    .into_iter()
                    .filter(|v| v.is_object()),
            );
        }
        (Step::Filter(query), Value::Object(_)) if accepts(query, node) => out.push(node),
        _ => {}
    }
}

/// Whether a filter (`$[?...]`) accepts this one value as `@`.
fn accepts(query: &JsonPath, value: &Value) -> bool {
    let alone = Value::Array(vec![value.clone()]);
    !query.query(&alone).is_empty()
}

/// A value and every value below it, parents before children, in document order.
fn descendants(root: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(value) = stack.pop() {
        out.push(value);
        match value {
            Value::Array(items) => stack.extend(items.iter().rev()),
            Value::Object(fields) => stack.extend(fields.values().rev()),
            _ => {}
        }
    }
    out
}
