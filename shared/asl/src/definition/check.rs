//! Reading a definition and refusing what Step Functions refuses.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::{
    Amount, Bound, Io, QueryLanguage, Selection, State, StateKind, StateMachine, Text, fields,
    kinds,
};
use crate::{Refusal, intrinsics, jsonata, path};

/// Reads a machine (or a branch, or an item processor) at `at`, inheriting the query
/// language of the machine around it.
/// Step Functions keeps a state's name unique in the whole machine, its branches and
/// item processors included.
pub(super) fn unique_names(machine: &StateMachine) -> Result<(), Refusal> {
    let mut seen = std::collections::HashSet::new();
    for (at, state) in machine.all_states() {
        if !seen.insert(state.name.as_str()) {
            return Err(Refusal::new(
                &at,
                format!("DUPLICATE_STATE_NAME: Duplicate State name: {}", state.name),
            ));
        }
    }
    Ok(())
}

pub(super) fn machine(
    value: &Value,
    at: &str,
    outer: Option<QueryLanguage>,
) -> Result<StateMachine, Refusal> {
    let Some(fields) = value.as_object() else {
        return Err(Refusal::new(at, "a state machine must be a JSON object"));
    };
    let query_language = match fields.get("QueryLanguage") {
        None => outer.unwrap_or(QueryLanguage::JsonPath),
        Some(value) => language(value, &format!("{at}/QueryLanguage"))?,
    };
    let Some(Value::String(start_at)) = fields.get("StartAt") else {
        return Err(Refusal::new(
            at,
            "StartAt is required and must be a state's name",
        ));
    };
    let Some(Value::Object(raw_states)) = fields.get("States") else {
        return Err(Refusal::new(at, "States is required and must be an object"));
    };
    let timeout_seconds =
        match fields.get("TimeoutSeconds") {
            None => None,
            Some(value) => Some(value.as_u64().filter(|seconds| *seconds > 0).ok_or_else(
                || {
                    Refusal::new(
                        &format!("{at}/TimeoutSeconds"),
                        "TimeoutSeconds must be a positive integer",
                    )
                },
            )?),
        };
    for key in fields.keys() {
        if !matches!(
            key.as_str(),
            "StartAt"
                | "States"
                | "Comment"
                | "Version"
                | "TimeoutSeconds"
                | "QueryLanguage"
                | "ProcessorConfig"
        ) {
            return Err(Refusal::new(
                at,
                format!("the field '{key}' is not supported"),
            ));
        }
    }
    let mut states = BTreeMap::new();
    for (name, value) in raw_states {
        let at = format!("{at}/States/{name}");
        if name.is_empty() || name.chars().count() > 80 {
            return Err(Refusal::new(
                &at,
                "a state's name must have 1 to 80 characters",
            ));
        }
        states.insert(name.clone(), state(name, value, &at, query_language)?);
    }
    if !states.contains_key(start_at) {
        return Err(Refusal::new(
            &format!("{at}/StartAt"),
            format!("MISSING_TRANSITION_TARGET: StartAt names '{start_at}', which is not a state"),
        ));
    }
    for state in states.values() {
        for target in targets(state) {
            if !states.contains_key(target) {
                return Err(Refusal::new(
                    &format!("{at}/States/{}", state.name),
                    format!("MISSING_TRANSITION_TARGET: Missing 'Next' target: {target}"),
                ));
            }
        }
    }
    unreachable_states(&states, start_at, at)?;
    Ok(StateMachine {
        start_at: start_at.clone(),
        states,
        query_language,
        timeout_seconds,
    })
}

/// Every state a state may go to.
fn targets(state: &State) -> Vec<&str> {
    let mut targets: Vec<&str> = state.next.iter().map(String::as_str).collect();
    if let StateKind::Choice { choices, default } = &state.kind {
        targets.extend(choices.iter().filter_map(|rule| rule.next.as_deref()));
        targets.extend(default.as_deref());
    }
    targets.extend(state.catch.iter().map(|catcher| catcher.next.as_str()));
    targets
}

fn unreachable_states(
    states: &BTreeMap<String, State>,
    start_at: &str,
    at: &str,
) -> Result<(), Refusal> {
    let mut reached = BTreeSet::from([start_at]);
    let mut queue = vec![start_at];
    while let Some(name) = queue.pop() {
        for target in states.get(name).map(targets).unwrap_or_default() {
            if reached.insert(target) {
                queue.push(target);
            }
        }
    }
    match states.keys().find(|name| !reached.contains(name.as_str())) {
        Some(name) => Err(Refusal::new(
            &format!("{at}/States/{name}"),
            format!("MISSING_TRANSITION_TARGET: State '{name}' is not reachable"),
        )),
        None => Ok(()),
    }
}

fn language(value: &Value, at: &str) -> Result<QueryLanguage, Refusal> {
    match value.as_str() {
        Some("JSONPath") => Ok(QueryLanguage::JsonPath),
        Some("JSONata") => Ok(QueryLanguage::Jsonata),
        _ => Err(Refusal::new(
            at,
            "QueryLanguage must be JSONPath or JSONata",
        )),
    }
}

/// The fields of one state, read with what they need.
pub(super) struct Reader<'a> {
    pub(super) fields: &'a Map<String, Value>,
    pub(super) at: &'a str,
    pub(super) language: QueryLanguage,
}

impl Reader<'_> {
    pub(super) fn at(&self, field: &str) -> String {
        format!("{}/{field}", self.at)
    }

    pub(super) fn refuse(&self, field: &str, message: impl Into<String>) -> Refusal {
        Refusal::new(&self.at(field), message)
    }

    pub(super) fn string(&self, field: &str) -> Result<Option<String>, Refusal> {
        match self.fields.get(field) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(self.refuse(field, format!("{field} must be a string"))),
        }
    }

    /// A JSONPath field (`InputPath`, `ResultPath`, ...): a valid path or `null`.
    pub(super) fn selection(
        &self,
        field: &str,
        reference: bool,
    ) -> Result<Option<Selection>, Refusal> {
        match self.fields.get(field) {
            None => Ok(None),
            Some(Value::Null) => Ok(Some(Selection::Nothing)),
            Some(Value::String(query))
                if path::is_valid(query) && (!reference || path::is_reference_path(query)) =>
            {
                Ok(Some(Selection::Path(query.clone())))
            }
            Some(_) => Err(self.refuse(field, format!("{field} must be a valid JSONPath or null"))),
        }
    }

    pub(super) fn path(&self, field: &str) -> Result<Option<String>, Refusal> {
        match self.string(field)? {
            Some(query) if !path::is_valid(query.as_str()) => {
                Err(self.refuse(field, format!("{field} must be a valid JSONPath")))
            }
            other => Ok(other),
        }
    }

    /// A payload template: JSONPath's `.$` keys hold a valid path or intrinsic;
    /// JSONata's `{% %}` strings parse.
    pub(super) fn template(&self, field: &str) -> Result<Option<Value>, Refusal> {
        match self.fields.get(field) {
            None => Ok(None),
            Some(value) => {
                check_template(value, &self.at(field), self.language)?;
                Ok(Some(value.clone()))
            }
        }
    }

    /// A number of seconds: literal, or `...Path`, or a JSONata expression.
    pub(super) fn amount(
        &self,
        field: &str,
        path_field: Option<&str>,
    ) -> Result<Option<Amount>, Refusal> {
        if let Some(query) = path_field
            .map(|path_field| self.path(path_field))
            .transpose()?
            .flatten()
        {
            if self.fields.contains_key(field) {
                return Err(self.refuse(field, format!("{field} and {field}Path are exclusive")));
            }
            return Ok(Some(Amount::Path(query)));
        }
        match self.fields.get(field) {
            None => Ok(None),
            Some(Value::String(text)) if self.language == QueryLanguage::Jsonata => {
                match jsonata::expression(text) {
                    Some(expression) => {
                        check_expression(expression, &self.at(field))?;
                        Ok(Some(Amount::Jsonata(expression.to_owned())))
                    }
                    None => Err(self.refuse(
                        field,
                        format!("{field} must be a number or a JSONata expression"),
                    )),
                }
            }
            Some(value) => match value.as_u64() {
                Some(seconds) => Ok(Some(Amount::Fixed(seconds))),
                None => Err(self.refuse(field, format!("{field} must be a non-negative integer"))),
            },
        }
    }

    pub(super) fn bound(&self, field: &str) -> Result<Option<Bound>, Refusal> {
        let path_field = format!("{field}Path");
        if let Some(query) = self.path(&path_field)? {
            return Ok(Some(Bound::Path(query)));
        }
        match self.fields.get(field) {
            None => Ok(None),
            Some(Value::String(text)) => match jsonata::expression(text) {
                Some(expression) => Ok(Some(Bound::Jsonata(expression.to_owned()))),
                None => Err(self.refuse(field, format!("{field} must be a number"))),
            },
            Some(value) => value
                .as_f64()
                .map(|number| Some(Bound::Fixed(number)))
                .ok_or_else(|| self.refuse(field, format!("{field} must be a number"))),
        }
    }

    /// A Fail state's `Error` or `Cause`: literal, JSONata, or its `Path` form, which
    /// takes a path or an intrinsic function (`States.Format(...)`), as in Step
    /// Functions.
    pub(super) fn text(&self, field: &str) -> Result<Option<Text>, Refusal> {
        let dynamic = format!("{field}Path");
        if let Some(query) = self.string(&dynamic)? {
            let fits = if intrinsics::is_intrinsic(&query) {
                intrinsics::parse(&query).is_ok()
            } else {
                path::is_valid(&query)
            };
            if !fits {
                let message = format!("{dynamic} must be a valid JSONPath or intrinsic function");
                return Err(self.refuse(&dynamic, message));
            }
            return Ok(Some(Text::Path(query)));
        }
        Ok(self
            .string(field)?
            .map(|text| match jsonata::expression(&text) {
                Some(expression) if self.language == QueryLanguage::Jsonata => {
                    Text::Jsonata(expression.to_owned())
                }
                _ => Text::Literal(text),
            }))
    }
}

pub(super) fn check_expression(expression: &str, at: &str) -> Result<(), Refusal> {
    jsonata::check(expression)
        .map_err(|error| Refusal::new(at, format!("the JSONata expression is invalid: {error}")))
}

pub(super) fn check_template(
    value: &Value,
    at: &str,
    language: QueryLanguage,
) -> Result<(), Refusal> {
    match value {
        Value::Object(fields) => {
            for (key, value) in fields {
                match (language, key.strip_suffix(".$"), value) {
                    (QueryLanguage::JsonPath, Some(_), Value::String(text)) => {
                        let fits = if intrinsics::is_intrinsic(text) {
                            intrinsics::parse(text).is_ok()
                        } else {
                            path::is_valid(text)
                        };
                        if !fits {
                            return Err(Refusal::new(
                                at,
                                format!(
                                    "SCHEMA_VALIDATION_FAILED: The value for the field '{key}' must be a valid JSONPath or a valid intrinsic function call"
                                ),
                            ));
                        }
                    }
                    _ => check_template(value, at, language)?,
                }
            }
            Ok(())
        }
        Value::Array(items) => items
            .iter()
            .try_for_each(|item| check_template(item, at, language)),
        Value::String(text) if language == QueryLanguage::Jsonata => {
            match jsonata::expression(text) {
                Some(expression) => check_expression(expression, at),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

pub(super) fn state(
    name: &str,
    value: &Value,
    at: &str,
    outer: QueryLanguage,
) -> Result<State, Refusal> {
    let Some(fields) = value.as_object() else {
        return Err(Refusal::new(at, "a state must be a JSON object"));
    };
    let language = match fields.get("QueryLanguage") {
        None => outer,
        Some(value) => {
            let own = language(value, &format!("{at}/QueryLanguage"))?;
            if outer == QueryLanguage::Jsonata && own == QueryLanguage::JsonPath {
                return Err(Refusal::new(
                    &format!("{at}/QueryLanguage"),
                    "a state may not use JSONPath in a JSONata state machine",
                ));
            }
            own
        }
    };
    let Some(Value::String(type_name)) = fields.get("Type") else {
        return Err(Refusal::new(at, "a state must have a Type"));
    };
    let Some(allowed) = fields::allowed(type_name, language) else {
        return Err(Refusal::new(
            &format!("{at}/Type"),
            format!("unknown state type '{type_name}'"),
        ));
    };
    if let Some(field) = fields
        .keys()
        .find(|field| !allowed.contains(&field.as_str()))
    {
        return Err(Refusal::new(
            &format!("{at}/{field}"),
            format!(
                "SCHEMA_VALIDATION_FAILED: The field '{field}' is not supported for a {type_name} state in {language:?}"
            ),
        ));
    }
    let read = Reader {
        fields,
        at,
        language,
    };
    let next = read.string("Next")?;
    let end = fields.get("End").and_then(Value::as_bool).unwrap_or(false);
    let kind = kinds::kind(&read, type_name)?;
    let flows = !matches!(
        kind,
        StateKind::Choice { .. } | StateKind::Succeed | StateKind::Fail { .. }
    );
    if flows && next.is_some() == end {
        return Err(Refusal::new(
            at,
            "a state must have either Next or End: true",
        ));
    }
    let io = Io {
        input_path: read.selection("InputPath", false)?,
        parameters: read.template("Parameters")?,
        result_selector: read.template("ResultSelector")?,
        result_path: read.selection("ResultPath", true)?,
        output_path: read.selection("OutputPath", false)?,
        arguments: read.template("Arguments")?,
        output: read.template("Output")?,
    };
    Ok(State {
        name: name.to_owned(),
        language,
        kind,
        next,
        io,
        assign: read.template("Assign")?,
        retry: kinds::retriers(&read)?,
        catch: kinds::catchers(&read)?,
        reads_context: reads_context(value),
    })
}

/// Whether any text in `value` (a key or a string) may read the context object:
/// JSONPath's `$$`, JSONata's `$states.context`, or `$states` taken whole.
fn reads_context(value: &Value) -> bool {
    let text_reads = |text: &str| {
        text.contains("$$")
            || text.match_indices("$states").any(|(at, _)| {
                let after = &text[at + "$states".len()..];
                !["input", "result", "errorOutput"].iter().any(|field| {
                    after
                        .strip_prefix('.')
                        .is_some_and(|rest| rest.starts_with(field))
                })
            })
    };
    match value {
        Value::String(text) => text_reads(text),
        Value::Array(items) => items.iter().any(reads_context),
        Value::Object(fields) => fields
            .iter()
            .any(|(key, value)| text_reads(key) || reads_context(value)),
        _ => false,
    }
}
