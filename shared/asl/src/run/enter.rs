//! Entering a state: its input read as the state says, and the work it asks for.

use chrono::{DateTime, FixedOffset};
use serde_json::{Value, json};

use super::{Left, Visit, leave, rules};
use crate::choice::{self, ChoiceRule};
use crate::definition::{Amount, Bound, Items, MapState, QueryLanguage, StateKind, Text, WaitFor};
use crate::{Failure, errors};

/// The work a state asks for when it is entered.
#[derive(Clone, Debug, PartialEq)]
pub enum Work {
    /// Nothing to wait for (Pass, Choice, Succeed): the visit is over.
    Done(Left),
    /// A Fail state: the machine fails with this.
    Fail(Failure),
    /// A Task: call its resource with `arguments`; `leave` takes the answer.
    Call {
        arguments: Value,
        timeout_seconds: Option<u64>,
        heartbeat_seconds: Option<u64>,
    },
    /// A Wait: `leave` with `result` once `until` has come.
    Wait { until: Until, result: Value },
    /// A Parallel: run every branch on `input`; `leave` takes their outputs in order.
    Branches { input: Value },
    /// A distributed Map's `ItemReader`: read the object `request` names (an S3
    /// `GetObject`); [`super::items_read`] then gives the Map's items.
    Read { request: Value },
    /// A Map: run the item processor on each item ([`item_input`] gives its input);
    /// `leave` takes their outputs in order.
    Items {
        items: Vec<Value>,
        max_concurrency: u64,
        tolerated_count: Option<u64>,
        tolerated_percentage: Option<f64>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Until {
    Seconds(u64),
    At(DateTime<FixedOffset>),
}

/// Enters the state: what it asks for.
pub fn enter(visit: &Visit) -> Result<Work, Failure> {
    let state = visit.state;
    let scope = visit.scope();
    let jsonata = state.language == QueryLanguage::Jsonata;
    let effective = visit.effective_input()?;
    let arguments = || arguments_of(visit, &effective);
    match &state.kind {
        StateKind::Pass { result } => {
            let result = match result {
                Some(result) => result.clone(),
                None => arguments()?,
            };
            Ok(Work::Done(leave(visit, result)?))
        }
        StateKind::Succeed => Ok(Work::Done(Left {
            next: None,
            ..leave(visit, Value::clone(&effective))?
        })),
        StateKind::Choice { choices, default } => {
            choose(visit, &effective, choices, default.as_deref())
        }
        StateKind::Fail { error, cause } => {
            let text = |text: &Option<Text>, field: &str| -> Result<String, Failure> {
                Ok(match text {
                    None => String::new(),
                    Some(Text::Literal(text)) => text.clone(),
                    Some(Text::Path(query)) => as_text(scope.dynamic(query, field)?),
                    Some(Text::Jsonata(expression)) => {
                        as_text(scope.expression(expression, field)?)
                    }
                })
            };
            Ok(Work::Fail(Failure::new(
                text(error, "ErrorPath")?,
                text(cause, "CausePath")?,
            )))
        }
        StateKind::Task(task) => Ok(Work::Call {
            arguments: arguments()?,
            timeout_seconds: seconds(visit, task.timeout.as_ref(), "TimeoutSeconds")?,
            heartbeat_seconds: seconds(visit, task.heartbeat.as_ref(), "HeartbeatSeconds")?,
        }),
        StateKind::Wait(wait) => Ok(Work::Wait {
            until: until(visit, wait)?,
            result: Value::clone(&effective),
        }),
        StateKind::Parallel { .. } => Ok(Work::Branches {
            input: arguments()?,
        }),
        StateKind::Map(map) => match &map.item_reader {
            Some(reader) => Ok(Work::Read {
                request: super::reader::request(visit, &effective, &reader.request)?,
            }),
            None => items(visit, &effective, map, jsonata),
        },
    }
}

/// The arguments a Task, a Parallel or a Pass works on: JSONPath's `Parameters`
/// applied to its `effective` input, or JSONata's `Arguments`, or the input as it is.
fn arguments_of(visit: &Visit, effective: &Value) -> Result<Value, Failure> {
    let state = visit.state;
    let scope = visit.scope();
    match (&state.io.parameters, &state.io.arguments) {
        (Some(parameters), _) => scope.with_input(effective).template(parameters),
        (None, Some(arguments)) => scope.jsonata(arguments, "Arguments"),
        (None, None) => Ok(effective.clone()),
    }
}

fn as_text(value: Value) -> String {
    match value {
        Value::String(text) => text,
        other => crate::json_text(&other),
    }
}

fn choose(
    visit: &Visit,
    effective: &Value,
    choices: &[ChoiceRule],
    default: Option<&str>,
) -> Result<Work, Failure> {
    let scope = visit.scope();
    let at_effective = scope.with_input(effective);
    let chosen = choices
        .iter()
        .map(|rule| rules::holds(rule, &at_effective).map(|holds| holds.then_some(rule)))
        .find_map(Result::transpose)
        .transpose()?;
    let (next, assign, output) = match (chosen, default) {
        (Some(rule), _) => (
            rule.next.clone(),
            rule.assign.as_ref(),
            rule.output.as_ref(),
        ),
        (None, Some(default)) => (Some(default.to_owned()), None, None),
        (None, None) => {
            return Err(Failure::new(
                "States.NoChoiceMatched",
                format!("No Matches! for the state '{}'", visit.state.name),
            ));
        }
    };
    let assign = assign.or(visit.state.assign.as_ref());
    let output = output.or(visit.state.io.output.as_ref());
    let assigned = super::assign(&at_effective, assign)?;
    let output = match (visit.state.language, output) {
        (QueryLanguage::Jsonata, Some(output)) => scope.jsonata(output, "Output")?,
        (QueryLanguage::Jsonata, None) => visit.input.clone(),
        (QueryLanguage::JsonPath, _) => super::output_path(&scope, effective.clone(), visit.state)?,
    };
    Ok(Work::Done(Left {
        output,
        next,
        assigned,
    }))
}

/// A number of seconds from a literal, a path or an expression.
fn seconds(visit: &Visit, amount: Option<&Amount>, field: &str) -> Result<Option<u64>, Failure> {
    let scope = visit.scope();
    let value = match amount {
        None => return Ok(None),
        Some(Amount::Fixed(seconds)) => return Ok(Some(*seconds)),
        Some(Amount::Path(query)) => scope.select(query, &format!("{field}Path"))?,
        Some(Amount::Jsonata(expression)) => scope.expression(expression, field)?,
    };
    match value.as_u64() {
        Some(seconds) => Ok(Some(seconds)),
        None => Err(Failure::runtime(format!(
            "The {field} field refers to value \"{value}\" which is not a valid integer"
        ))),
    }
}

fn until(visit: &Visit, wait: &WaitFor) -> Result<Until, Failure> {
    let scope = visit.scope();
    let timestamp = |text: &Value, failure: &dyn Fn(&str) -> Failure| match text
        .as_str()
        .and_then(choice::timestamp)
    {
        Some(at) => Ok(Until::At(at)),
        None => Err(failure(&as_text(text.clone()))),
    };
    match wait {
        WaitFor::Seconds(Amount::Path(query)) => {
            let value = scope.select(query, "SecondsPath")?;
            match (value.as_i64(), value.as_f64()) {
                (Some(seconds), _) if seconds >= 0 => Ok(Until::Seconds(seconds.unsigned_abs())),
                (Some(_), _) => Err(Failure::runtime(format!(
                    "The SecondsPath parameter references a negative value: {query} == {value}"
                ))),
                _ => Err(Failure::runtime(format!(
                    "The SecondsPath parameter cannot be parsed as a long value: {query} == {value}"
                ))),
            }
        }
        WaitFor::Seconds(amount) => Ok(Until::Seconds(
            seconds(visit, Some(amount), "Seconds")?.unwrap_or(0),
        )),
        WaitFor::Timestamp(text) => timestamp(&Value::String(text.clone()), &|text| {
            Failure::runtime(format!(
                "The Timestamp field is not a valid timestamp: {text}"
            ))
        }),
        WaitFor::TimestampPath(query) => {
            let value = scope.select(query, "TimestampPath")?;
            timestamp(&value, &|text| {
                Failure::runtime(format!(
                    "The TimestampPath parameter does not reference a valid ISO-8601 extended offset date-time format string: {query} == {text}"
                ))
            })
        }
        WaitFor::TimestampJsonata(expression) => {
            let value = scope.expression(expression, "Timestamp")?;
            timestamp(&value, &|text| {
                Failure::new(
                    errors::QUERY_EVALUATION_ERROR,
                    format!(
                        "The Timestamp field cannot be parsed as an ISO-8601 extended offset date-time format string: {text}"
                    ),
                )
            })
        }
    }
}

fn items(visit: &Visit, effective: &Value, map: &MapState, jsonata: bool) -> Result<Work, Failure> {
    let scope = visit.scope();
    let at_effective = scope.with_input(effective);
    let items = match &map.items {
        Items::Path(query) => at_effective.select(query, "ItemsPath")?,
        Items::Value(value) if jsonata => {
            let items = scope.jsonata(value, "Items")?;
            if !items.is_array() {
                let expression = value
                    .as_str()
                    .and_then(crate::jsonata::expression)
                    .unwrap_or_default();
                return Err(Failure::new(
                    errors::QUERY_EVALUATION_ERROR,
                    format!(
                        "The JSONata expression '{expression}' specified for the field 'Items' returned an unexpected result type. Expected 'array', but was '{}' for value: {items}",
                        crate::path::kind(&items)
                    ),
                ));
            }
            items
        }
        Items::Value(value) => value.clone(),
    };
    let Value::Array(items) = items else {
        return Err(Failure::new(
            errors::QUERY_EVALUATION_ERROR,
            format!("Map state input must be an array but was: {items}"),
        ));
    };
    map_work(visit, effective, map, items)
}

/// A Map's work on `items`: its concurrency and tolerance worked out on its
/// `effective` input.
pub(super) fn map_work(
    visit: &Visit,
    effective: &Value,
    map: &MapState,
    items: Vec<Value>,
) -> Result<Work, Failure> {
    let scope = visit.scope();
    let at_effective = scope.with_input(effective);
    let max_concurrency = match &map.max_concurrency {
        None => 0,
        Some(Amount::Fixed(limit)) => *limit,
        Some(amount) => bounded(&at_effective, &bound_of(amount), "MaxConcurrency", false)?
            .unwrap_or(0.0) as u64,
    };
    let tolerated_count = match &map.tolerated_failure_count {
        None => None,
        Some(bound) => {
            let count =
                bounded(&at_effective, bound, "ToleratedFailureCount", false)?.unwrap_or(0.0);
            if count < 0.0 {
                return Err(Failure::runtime(
                    "ToleratedFailureCount cannot be negative.",
                ));
            }
            Some(count as u64)
        }
    };
    let tolerated_percentage = match &map.tolerated_failure_percentage {
        None => None,
        Some(bound) => {
            let percentage =
                bounded(&at_effective, bound, "ToleratedFailurePercentage", true)?.unwrap_or(0.0);
            if !(0.0..=100.0).contains(&percentage) {
                return Err(Failure::runtime(
                    "ToleratedFailurePercentage must be between 0 and 100.",
                ));
            }
            Some(percentage)
        }
    };
    Ok(Work::Items {
        items,
        max_concurrency,
        tolerated_count,
        tolerated_percentage,
    })
}

pub(super) fn bound_of(amount: &Amount) -> Bound {
    match amount {
        Amount::Fixed(value) => Bound::Fixed(*value as f64),
        Amount::Path(query) => Bound::Path(query.clone()),
        Amount::Jsonata(expression) => Bound::Jsonata(expression.clone()),
    }
}

/// A Map's numeric setting from a literal, a path (`...Path`) or an expression.
pub(super) fn bounded(
    scope: &super::Scope,
    bound: &Bound,
    field: &str,
    float: bool,
) -> Result<Option<f64>, Failure> {
    let (value, query) = match bound {
        Bound::Fixed(value) => return Ok(Some(*value)),
        Bound::Path(query) => (
            scope.select(query, &format!("{field}Path"))?,
            query.as_str(),
        ),
        Bound::Jsonata(expression) => (scope.expression(expression, field)?, expression.as_str()),
    };
    // A path may name the number as text ("1").
    let number = match &value {
        Value::String(text) if float => text.parse::<f64>().ok(),
        Value::String(text) => text.parse::<i64>().ok().map(|n| n as f64),
        value if float => value.as_f64(),
        value => value.as_i64().map(|n| n as f64),
    };
    match number {
        Some(number) => Ok(Some(number)),
        None => Err(Failure::runtime(format!(
            "The {field}Path field refers to value \"{}\" which is not a valid {}: {query}",
            as_text(value),
            if float { "float" } else { "integer" }
        ))),
    }
}

/// The input of a Map's item at `index`: its `ItemSelector` (or a JSONPath Map's
/// `Parameters`) applied with `$$.Map.Item` in the context, or the item itself.
pub fn item_input(
    visit: &Visit,
    map: &MapState,
    index: usize,
    item: &Value,
) -> Result<Value, Failure> {
    let Some(selector) = map
        .item_selector
        .as_ref()
        .or(visit.state.io.parameters.as_ref())
    else {
        return Ok(item.clone());
    };
    let mut context = visit.context.clone();
    context["Map"] = json!({"Item": {"Index": index, "Value": item}});
    let effective = visit.effective_input()?;
    let scope = super::Scope::new(visit.state.language, &effective, &context, visit.variables);
    scope.evaluate(selector, "ItemSelector")
}
