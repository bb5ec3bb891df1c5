//! Reading each kind of state's own fields, and a Task's resource.

use serde_json::Value;

use super::check::{Reader, check_expression, check_template, machine};
use super::{
    Amount, Items, MapState, Pattern, QueryLanguage, Resource, Selection, StateKind, Target, Task,
    WaitFor, distributed,
};
use crate::errors::{self, Catcher, Retrier};
use crate::{Refusal, choice, jsonata, path};

pub(super) fn kind(read: &Reader, type_name: &str) -> Result<StateKind, Refusal> {
    Ok(match type_name {
        "Pass" => StateKind::Pass {
            result: read.fields.get("Result").cloned(),
        },
        "Succeed" => StateKind::Succeed,
        "Fail" => StateKind::Fail {
            error: read.text("Error")?,
            cause: read.text("Cause")?,
        },
        "Choice" => {
            let Some(Value::Array(rules)) = read.fields.get("Choices") else {
                return Err(read.refuse("Choices", "Choices must be a non-empty list"));
            };
            if rules.is_empty() {
                return Err(read.refuse("Choices", "Choices must be a non-empty list"));
            }
            let choices = rules
                .iter()
                .enumerate()
                .map(|(index, rule)| {
                    choice::parse(rule, &read.at(&format!("Choices/{index}")), true)
                })
                .collect::<Result<_, _>>()?;
            StateKind::Choice {
                choices,
                default: read.string("Default")?,
            }
        }
        "Wait" => StateKind::Wait(wait(read)?),
        "Task" => StateKind::Task(task(read)?),
        "Parallel" => {
            let Some(Value::Array(branches)) = read.fields.get("Branches") else {
                return Err(read.refuse("Branches", "Branches must be a non-empty list"));
            };
            let branches = branches
                .iter()
                .enumerate()
                .map(|(index, branch)| {
                    machine(
                        branch,
                        &read.at(&format!("Branches/{index}")),
                        Some(read.language),
                    )
                })
                .collect::<Result<_, _>>()?;
            StateKind::Parallel { branches }
        }
        _ => StateKind::Map(Box::new(map(read)?)),
    })
}

fn wait(read: &Reader) -> Result<WaitFor, Refusal> {
    let given: Vec<&str> = ["Seconds", "SecondsPath", "Timestamp", "TimestampPath"]
        .into_iter()
        .filter(|field| read.fields.contains_key(*field))
        .collect();
    if given.len() != 1 {
        return Err(Refusal::new(
            read.at,
            "a Wait state takes exactly one of Seconds, SecondsPath, Timestamp, TimestampPath",
        ));
    }
    Ok(match given[0] {
        "Seconds" | "SecondsPath" => WaitFor::Seconds(
            read.amount("Seconds", Some("SecondsPath"))?
                .unwrap_or(Amount::Fixed(0)),
        ),
        "TimestampPath" => WaitFor::TimestampPath(read.path("TimestampPath")?.unwrap_or_default()),
        _ => {
            let text = read.string("Timestamp")?.unwrap_or_default();
            match jsonata::expression(&text) {
                Some(expression) if read.language == QueryLanguage::Jsonata => {
                    check_expression(expression, &read.at("Timestamp"))?;
                    WaitFor::TimestampJsonata(expression.to_owned())
                }
                _ if choice::timestamp(&text).is_some() => WaitFor::Timestamp(text),
                _ => {
                    return Err(read.refuse(
                        "Timestamp",
                        "SCHEMA_VALIDATION_FAILED: String does not match RFC3339 timestamp",
                    ));
                }
            }
        }
    })
}

fn task(read: &Reader) -> Result<Task, Refusal> {
    let Some(arn) = read.string("Resource")? else {
        return Err(read.refuse("Resource", "a Task must have a Resource"));
    };
    Ok(Task {
        resource: resource(&arn).ok_or_else(|| {
            read.refuse("Resource", format!("the resource '{arn}' is not supported"))
        })?,
        timeout: read.amount("TimeoutSeconds", Some("TimeoutSecondsPath"))?,
        heartbeat: read.amount("HeartbeatSeconds", Some("HeartbeatSecondsPath"))?,
    })
}

/// What a Task's `Resource` ARN names, or `None` for one this engine cannot call.
pub fn resource(arn: &str) -> Option<Resource> {
    let ["arn", _partition, service, _region, _account, rest] =
        arn.splitn(6, ':').collect::<Vec<_>>()[..]
    else {
        return None;
    };
    let resource = |target, pattern| {
        Some(Resource {
            arn: arn.to_owned(),
            target,
            pattern,
        })
    };
    match (service, rest.split_once(':')) {
        ("lambda", Some(("function", name))) => {
            let function = name.split(':').next().unwrap_or(name).to_owned();
            resource(
                Target::LambdaFunction { function },
                Pattern::RequestResponse,
            )
        }
        ("states", Some(("activity", name))) => resource(
            Target::Activity {
                name: name.to_owned(),
            },
            Pattern::RequestResponse,
        ),
        ("states", Some(_)) => {
            let (action, pattern) = match rest.split_once('.') {
                None => (rest, Pattern::RequestResponse),
                Some((action, "waitForTaskToken")) => (action, Pattern::WaitForTaskToken),
                Some((action, "sync")) => (action, Pattern::Sync),
                Some((action, "sync:2")) => (action, Pattern::Sync2),
                Some(_) => return None,
            };
            let target = match action {
                "lambda:invoke" => Target::LambdaInvoke,
                "http:invoke" => Target::HttpInvoke,
                "states:startExecution" => Target::StartExecution,
                action => {
                    let action = super::action(action)?;
                    if (pattern == Pattern::WaitForTaskToken && !action.waits_for_token)
                        || matches!(pattern, Pattern::Sync | Pattern::Sync2)
                    {
                        return None;
                    }
                    Target::Service(action)
                }
            };
            resource(target, pattern)
        }
        _ => None,
    }
}

fn map(read: &Reader) -> Result<MapState, Refusal> {
    let (field, processor) = match (
        read.fields.get("ItemProcessor"),
        read.fields.get("Iterator"),
    ) {
        (Some(processor), None) => ("ItemProcessor", processor),
        (None, Some(iterator)) => ("Iterator", iterator),
        _ => {
            return Err(Refusal::new(
                read.at,
                "a Map state must have one ItemProcessor (or Iterator)",
            ));
        }
    };
    let distributed = processor
        .pointer("/ProcessorConfig/Mode")
        .and_then(Value::as_str)
        .is_some_and(|mode| mode == "DISTRIBUTED");
    let processor = machine(processor, &read.at(field), Some(read.language))?;
    let items = match (read.path("ItemsPath")?, read.fields.get("Items")) {
        (Some(query), _) => Items::Path(query),
        (None, Some(items)) => {
            check_template(items, &read.at("Items"), read.language)?;
            Items::Value(items.clone())
        }
        (None, None) => Items::Path("$".to_owned()),
    };
    Ok(MapState {
        processor,
        distributed,
        items,
        item_selector: read.template("ItemSelector")?,
        max_concurrency: read.amount("MaxConcurrency", Some("MaxConcurrencyPath"))?,
        tolerated_failure_percentage: read.bound("ToleratedFailurePercentage")?,
        tolerated_failure_count: read.bound("ToleratedFailureCount")?,
        item_reader: distributed::item_reader(read, distributed)?,
        item_batcher: distributed::batcher(read, distributed)?,
        result_writer: distributed::result_writer(read, distributed)?,
    })
}

fn list<'a>(read: &'a Reader, field: &str) -> Result<&'a [Value], Refusal> {
    match read.fields.get(field) {
        None => Ok(&[]),
        Some(Value::Array(entries)) => Ok(entries),
        Some(_) => Err(read.refuse(field, format!("{field} must be a list"))),
    }
}

pub(super) fn retriers(read: &Reader) -> Result<Vec<Retrier>, Refusal> {
    let entries = list(read, "Retry")?;
    entries
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            let at = read.at(&format!("Retry/{index}"));
            let number = |field: &str, default: f64| -> Result<f64, Refusal> {
                match entry.get(field) {
                    None => Ok(default),
                    Some(value) => {
                        value
                            .as_f64()
                            .filter(|number| *number >= 0.0)
                            .ok_or_else(|| {
                                Refusal::new(&at, format!("{field} must be a non-negative number"))
                            })
                    }
                }
            };
            let backoff_rate = number("BackoffRate", 2.0)?;
            if backoff_rate < 1.0 {
                return Err(Refusal::new(&at, "BackoffRate must be at least 1.0"));
            }
            Ok(Retrier {
                error_equals: errors::error_equals(
                    entry.get("ErrorEquals"),
                    &at,
                    index + 1 == entries.len(),
                )?,
                interval_seconds: number("IntervalSeconds", 1.0)? as u64,
                max_attempts: number("MaxAttempts", 3.0)? as u64,
                backoff_rate,
                max_delay_seconds: entry.get("MaxDelaySeconds").and_then(Value::as_u64),
                full_jitter: entry.get("JitterStrategy").and_then(Value::as_str) == Some("FULL"),
            })
        })
        .collect()
}

pub(super) fn catchers(read: &Reader) -> Result<Vec<Catcher>, Refusal> {
    let entries = list(read, "Catch")?;
    entries
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            let at = read.at(&format!("Catch/{index}"));
            let Some(Value::String(next)) = entry.get("Next") else {
                return Err(Refusal::new(&at, "a catcher must have Next"));
            };
            let result_path = match entry.get("ResultPath") {
                None => None,
                Some(Value::Null) => Some(Selection::Nothing),
                Some(Value::String(query)) if path::is_reference_path(query) => {
                    Some(Selection::Path(query.clone()))
                }
                Some(_) => {
                    return Err(Refusal::new(
                        &at,
                        "ResultPath must be a valid reference path or null",
                    ));
                }
            };
            Ok(Catcher {
                error_equals: errors::error_equals(
                    entry.get("ErrorEquals"),
                    &at,
                    index + 1 == entries.len(),
                )?,
                next: next.clone(),
                result_path,
                output: entry.get("Output").cloned(),
                assign: entry.get("Assign").cloned(),
            })
        })
        .collect()
}
