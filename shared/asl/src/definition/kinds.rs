//! Reading each kind of state's own fields, and a Task's resource.

use serde_json::{Value, json};

use super::check::{Reader, check_expression, check_template, machine};
use super::{
    Amount, Batcher, InputType, ItemReader, Items, MapState, Pattern, QueryLanguage, Resource,
    Selection, StateKind, Target, Task, WaitFor,
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
        item_reader: item_reader(read, distributed)?,
        item_batcher: batcher(read, distributed)?,
        result_writer: read.fields.get("ResultWriter").cloned(),
    })
}

/// An object within a state's definition: its fields, and where it is.
type Part<'a> = (&'a serde_json::Map<String, Value>, String);

/// A distributed Map's `field` (`ItemReader`, `ItemBatcher`), where it has one: an
/// object of the fields `known` alone, and where it is in the definition.
fn distributed_part<'a>(
    read: &Reader<'a>,
    field: &str,
    distributed: bool,
    known: &[&str],
) -> Result<Option<Part<'a>>, Refusal> {
    let Some(part) = read.fields.get(field) else {
        return Ok(None);
    };
    let Value::Object(fields) = part else {
        return Err(read.refuse(field, format!("{field} must be an object")));
    };
    if !distributed {
        return Err(read.refuse(
            field,
            format!("{field} is only supported in a DISTRIBUTED Map"),
        ));
    }
    let at = read.at(field);
    if let Some(name) = fields.keys().find(|f| !known.contains(&f.as_str())) {
        return Err(Refusal::new(
            &format!("{at}/{name}"),
            format!("Field '{name}' is not supported"),
        ));
    }
    Ok(Some((fields, at)))
}

/// A distributed Map's `ItemReader`: its resource, request and `ReaderConfig`.
fn item_reader(read: &Reader, distributed: bool) -> Result<Option<ItemReader>, Refusal> {
    let known = ["Resource", "Parameters", "Arguments", "ReaderConfig"];
    let Some((fields, at)) = distributed_part(read, "ItemReader", distributed, &known)? else {
        return Ok(None);
    };
    let reader = Reader {
        fields,
        at: &at,
        language: read.language,
    };
    let Some(resource) = reader.string("Resource")? else {
        return Err(Refusal::new(&at, "ItemReader must have a Resource"));
    };
    let request_field = match read.language {
        QueryLanguage::JsonPath => "Parameters",
        QueryLanguage::Jsonata => "Arguments",
    };
    let request = reader.template(request_field)?.unwrap_or_else(|| json!({}));
    let config_at = reader.at("ReaderConfig");
    let empty = serde_json::Map::new();
    let config = match fields.get("ReaderConfig") {
        None => &empty,
        Some(Value::Object(config)) => config,
        Some(_) => return Err(Refusal::new(&config_at, "ReaderConfig must be an object")),
    };
    let config = Reader {
        fields: config,
        at: &config_at,
        language: read.language,
    };
    let input_type = match config.string("InputType")?.as_deref() {
        None | Some("JSON") => InputType::Json,
        Some("JSONL") => InputType::JsonLines,
        Some("CSV") => {
            let headers = match config.string("CSVHeaderLocation")?.as_deref() {
                None | Some("FIRST_ROW") => None,
                Some("GIVEN") => match config.fields.get("CSVHeaders") {
                    Some(Value::Array(names)) => Some(
                        names
                            .iter()
                            .map(|name| name.as_str().map(str::to_owned))
                            .collect::<Option<Vec<_>>>()
                            .ok_or_else(|| {
                                config.refuse("CSVHeaders", "CSVHeaders must be a list of strings")
                            })?,
                    ),
                    _ => {
                        return Err(config.refuse(
                            "CSVHeaders",
                            "CSVHeaders must be given with CSVHeaderLocation GIVEN",
                        ));
                    }
                },
                Some(other) => {
                    return Err(config.refuse(
                        "CSVHeaderLocation",
                        format!("'{other}' is not a CSVHeaderLocation"),
                    ));
                }
            };
            let delimiter = match config.string("CSVDelimiter")?.as_deref() {
                None | Some("COMMA") => b',',
                Some("PIPE") => b'|',
                Some("SEMICOLON") => b';',
                Some("SPACE") => b' ',
                Some("TAB") => b'\t',
                Some(other) => {
                    return Err(
                        config.refuse("CSVDelimiter", format!("'{other}' is not a CSVDelimiter"))
                    );
                }
            };
            InputType::Csv { headers, delimiter }
        }
        Some(other) => {
            return Err(config.refuse("InputType", format!("'{other}' is not an InputType")));
        }
    };
    Ok(Some(ItemReader {
        resource,
        request,
        input_type,
        max_items: config.amount("MaxItems", Some("MaxItemsPath"))?,
    }))
}

/// A Map's `ItemBatcher`: a distributed Map's only, with a batch's size bounded.
fn batcher(read: &Reader, distributed: bool) -> Result<Option<Batcher>, Refusal> {
    let known = [
        "MaxItemsPerBatch",
        "MaxItemsPerBatchPath",
        "MaxInputBytesPerBatch",
        "MaxInputBytesPerBatchPath",
        "BatchInput",
    ];
    let Some((fields, at)) = distributed_part(read, "ItemBatcher", distributed, &known)? else {
        return Ok(None);
    };
    let batch = Reader {
        fields,
        at: &at,
        language: read.language,
    };
    let batcher = Batcher {
        max_items: batch.amount("MaxItemsPerBatch", Some("MaxItemsPerBatchPath"))?,
        max_bytes: batch.amount("MaxInputBytesPerBatch", Some("MaxInputBytesPerBatchPath"))?,
        batch_input: batch.template("BatchInput")?,
    };
    if batcher.max_items.is_none() && batcher.max_bytes.is_none() {
        return Err(Refusal::new(
            &at,
            "ItemBatcher must have MaxItemsPerBatch or MaxInputBytesPerBatch",
        ));
    }
    Ok(Some(batcher))
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
