//! The values a step names: an operation's path with values filled in when the
//! step is sent, and the fields it sends, from the input or earlier results.

use std::collections::{BTreeMap, HashSet};

use crate::messages::Method;
use crate::workflow::step::FieldType;
use serde_json::Value;

/// A service's operation: a method and a path, written `"PUT /drones"`, or `"/drones"`
/// for a POST. The path may name values of the input and of results, filled in when
/// the step is sent: `/packages/{results.create-package.id}/cancel`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The method.
    pub method: Method,
    /// The path, from '/', as written.
    pub path: String,
    /// The path's text and the values it names, in order.
    pub(crate) template: Vec<PathPart>,
}

/// A piece of a path template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PathPart {
    Text(String),
    Value(FieldSource),
}

impl Endpoint {
    /// A path with nothing to fill in.
    pub(crate) fn literal(method: Method, path: &str) -> Self {
        Self {
            method,
            path: path.to_owned(),
            template: vec![PathPart::Text(path.to_owned())],
        }
    }

    /// The values its path names.
    pub(crate) fn sources(&self) -> impl Iterator<Item = &FieldSource> {
        self.template.iter().filter_map(|part| match part {
            PathPart::Value(source) => Some(source),
            PathPart::Text(_) => None,
        })
    }

    /// The path with the values it names, each a string or a number, percent-encoded
    /// as a path segment.
    ///
    /// # Errors
    /// Naming the first value that is missing, or neither a string nor a number.
    pub fn fill(&self, input: &Value, results: &Results<'_>) -> Result<String, String> {
        const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
            .remove(b'-')
            .remove(b'_')
            .remove(b'.')
            .remove(b'~');
        let mut path = String::new();
        for part in &self.template {
            match part {
                PathPart::Text(text) => path.push_str(text),
                PathPart::Value(source) => {
                    let text = match source.value(input, results) {
                        Value::String(text) => text,
                        Value::Number(number) => number.to_string(),
                        Value::Null => return Err(format!("path: {{{source}}} has no value")),
                        _ => {
                            return Err(format!(
                                "path: {{{source}}} is neither a string nor a number"
                            ));
                        }
                    };
                    // A URL parser would move up a segment, or name the collection.
                    if matches!(text.as_str(), "" | "." | "..") {
                        return Err(format!(
                            "path: {{{source}}} is '{text}', which names no single resource"
                        ));
                    }
                    path.extend(percent_encoding::utf8_percent_encode(&text, SEGMENT));
                }
            }
        }
        Ok(path)
    }

    /// The operation `text` names, for the step of `scope`.
    pub(crate) fn parse(text: &str, scope: &Scope<'_>) -> Result<Self, String> {
        let (method, path) = match text.split_once(' ') {
            Some(("POST", path)) => (Method::Post, path),
            Some(("PUT", path)) => (Method::Put, path),
            Some(("PATCH", path)) => (Method::Patch, path),
            Some(("DELETE", path)) => (Method::Delete, path),
            Some((other, _)) => {
                return Err(format!(
                    "'{other}' is not a method (POST, PUT, PATCH or DELETE)"
                ));
            }
            None => (Method::Post, text),
        };
        if !path.starts_with('/') {
            return Err("must be a path starting with '/', after a method if any".into());
        }
        let mut template = Vec::new();
        let mut rest = path;
        while let Some(open) = rest.find('{') {
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| format!("'{}' has a '{{' without its '}}'", &rest[open..]))?;
            if open > 0 {
                template.push(PathPart::Text(rest[..open].to_owned()));
            }
            let name = &rest[open + 1..open + close];
            template.push(PathPart::Value(FieldSource::parse(name, scope)?));
            rest = &rest[open + close + 1..];
        }
        if rest.contains('}') {
            return Err(format!("'{rest}' has a '}}' without its '{{'"));
        }
        if !rest.is_empty() {
            template.push(PathPart::Text(rest.to_owned()));
        }
        Ok(Self {
            method,
            path: path.to_owned(),
            template,
        })
    }
}

impl std::fmt::Display for Endpoint {
    /// As a workflow file writes it: the path alone for a POST.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.method {
            Method::Post => f.write_str(&self.path),
            method => write!(f, "{} {}", method.as_str(), self.path),
        }
    }
}

/// Where a field a step sends comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldSource {
    /// A field of the task's input: `input.<field>`.
    Input(String),
    /// A value in a step's result (an earlier step's, or the step's own, which its
    /// compensation has): `results.<step>.<field>[.<field>...]`.
    Result {
        /// The step.
        step: String,
        /// The fields to follow in its result.
        path: Vec<String>,
    },
    /// A map's item, or a value in it, in the input of the item's child:
    /// `item[.<field>...]`.
    Item(Vec<String>),
}

/// The outputs of a task's steps that have one, by step name, borrowed from the task.
pub type Results<'a> = std::collections::BTreeMap<&'a str, &'a Value>;

/// What a step's values may name: the workflow's input fields, the results of the
/// step itself and of the steps before it, and, in a map's child input, the item.
pub(crate) struct Scope<'a> {
    pub(crate) step: &'a str,
    pub(crate) input: &'a BTreeMap<String, FieldType>,
    pub(crate) earlier: &'a HashSet<String>,
    pub(crate) item: bool,
}

impl FieldSource {
    /// The source `text` names, for the step of `scope`.
    pub(crate) fn parse(text: &str, scope: &Scope<'_>) -> Result<Self, String> {
        let Scope {
            step,
            input,
            earlier,
            item,
        } = scope;
        let parts: Vec<&str> = text.split('.').collect();
        match parts.as_slice() {
            ["item", path @ ..] if *item && !path.contains(&"") => {
                Ok(Self::Item(path.iter().map(|p| (*p).to_owned()).collect()))
            }
            ["input", field] if input.contains_key(*field) => Ok(Self::Input((*field).to_owned())),
            ["input", field] => Err(format!(
                "'{text}': the input has no field '{field}' (it declares: {})",
                input.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
            ["results", source, path @ ..] if !path.is_empty() && !path.contains(&"") => {
                if *source == *step || earlier.contains(*source) {
                    Ok(Self::Result {
                        step: (*source).to_owned(),
                        path: path.iter().map(|p| (*p).to_owned()).collect(),
                    })
                } else {
                    Err(format!(
                        "'{text}': '{source}' is not this step or a step before it"
                    ))
                }
            }
            _ if *item => Err(format!(
                "'{text}': must be item, item.<field>, input.<field> or results.<step>.<field>"
            )),
            _ => Err(format!(
                "'{text}': must be input.<field> or results.<step>.<field>"
            )),
        }
    }

    /// The step whose result it names, if it names one.
    #[must_use]
    pub fn result_step(&self) -> Option<&str> {
        match self {
            Self::Result { step, .. } => Some(step),
            Self::Input(_) | Self::Item(_) => None,
        }
    }

    /// The value it names, given the task's input and the steps' results; null when
    /// a result has no such value.
    #[must_use]
    pub fn value(&self, input: &Value, results: &Results<'_>) -> Value {
        self.value_for_item(input, results, None)
    }

    /// The value it names in the task's input or the steps' results, borrowed (a
    /// map's items, read at every child's end); `None` when there is none, or it
    /// names an item.
    #[must_use]
    pub fn lookup<'v>(&self, input: &'v Value, results: &Results<'v>) -> Option<&'v Value> {
        let (start, path) = match self {
            Self::Input(field) => return input.get(field),
            Self::Result { step, path } => (results.get(step.as_str()).copied(), path),
            Self::Item(_) => return None,
        };
        path.iter()
            .try_fold(start?, |value, field| value.get(field))
    }

    /// The value it names, given the task's input, the steps' results and the map's
    /// `item` whose child's input it is (if any); null when there is no such value.
    #[must_use]
    pub fn value_for_item(
        &self,
        input: &Value,
        results: &Results<'_>,
        item: Option<&Value>,
    ) -> Value {
        let follow = |start: Option<&Value>, path: &[String]| {
            path.iter()
                .try_fold(start, |value, field| Some(value?.get(field)))
                .flatten()
                .cloned()
                .unwrap_or(Value::Null)
        };
        match self {
            Self::Input(field) => input.get(field).cloned().unwrap_or(Value::Null),
            Self::Result { step, path } => follow(results.get(step.as_str()).copied(), path),
            Self::Item(path) => follow(item, path),
        }
    }
}

impl std::fmt::Display for FieldSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Input(field) => write!(f, "input.{field}"),
            Self::Result { step, path } => write!(f, "results.{step}.{}", path.join(".")),
            Self::Item(path) if path.is_empty() => f.write_str("item"),
            Self::Item(path) => write!(f, "item.{}", path.join(".")),
        }
    }
}
