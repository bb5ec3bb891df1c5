//! A distributed Map's items read from an object in S3 (`ItemReader`): the request
//! its reader makes, and the object's text read as items (a JSON array, JSON Lines,
//! or CSV rows as objects of their columns' text), at most `MaxItems` of them.

use serde_json::{Map, Value};

use super::Visit;
use super::enter::{Work, bound_of, bounded, map_work};
use crate::definition::{InputType, QueryLanguage, StateKind};
use crate::{Failure, errors};

/// A reader's or a writer's `request` worked out on the state's `effective` input:
/// its `Parameters`, or its JSONata `Arguments`.
pub(super) fn request(visit: &Visit, effective: &Value, request: &Value) -> Result<Value, Failure> {
    let scope = visit.scope();
    match visit.state.language {
        QueryLanguage::JsonPath => scope.with_input(effective).template(request),
        QueryLanguage::Jsonata => scope.jsonata(request, "Arguments"),
    }
}

/// The work of the Map being visited once its reader read `text`: its items, each
/// child's input then worked out as for any Map.
pub fn items_read(visit: &Visit, text: &str) -> Result<Work, Failure> {
    let StateKind::Map(map) = &visit.state.kind else {
        return Err(Failure::runtime("items read for a state that is no Map"));
    };
    let Some(reader) = &map.item_reader else {
        return Err(Failure::runtime("items read for a Map without a reader"));
    };
    let effective = visit.effective_input()?;
    let mut items = parse(&reader.input_type, text).map_err(failed)?;
    if let Some(amount) = &reader.max_items {
        let scope = visit.scope();
        let at_effective = scope.with_input(&effective);
        let most = bounded(&at_effective, &bound_of(amount), "MaxItems", false)?;
        if let Some(most) = most.filter(|most| *most > 0.0) {
            items.truncate(most as usize);
        }
    }
    map_work(visit, &effective, map, items)
}

/// A reader's failure, as Step Functions names it.
fn failed(cause: String) -> Failure {
    Failure::new(errors::ITEM_READER_FAILED, cause)
}

/// The items in `text`, written as `input_type` says.
fn parse(input_type: &InputType, text: &str) -> Result<Vec<Value>, String> {
    match input_type {
        InputType::Json => match serde_json::from_str(text) {
            Ok(Value::Array(items)) => Ok(items),
            Ok(_) => Err("Attempting to map over non-iterable node.".to_owned()),
            Err(error) => Err(format!("the object is not JSON: {error}")),
        },
        InputType::JsonLines => text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(at, line)| {
                serde_json::from_str(line)
                    .map_err(|error| format!("line {} is not JSON: {error}", at + 1))
            })
            .collect(),
        InputType::Csv { headers, delimiter } => {
            let mut rows = csv::ReaderBuilder::new()
                .has_headers(headers.is_none())
                .delimiter(*delimiter)
                .flexible(true)
                .from_reader(text.as_bytes());
            let names: Vec<String> = match headers {
                Some(names) => names.clone(),
                None => (rows.headers())
                    .map_err(|error| format!("the CSV's header does not read: {error}"))?
                    .iter()
                    .map(str::to_owned)
                    .collect(),
            };
            rows.records()
                .map(|row| {
                    let row = row.map_err(|error| format!("a CSV row does not read: {error}"))?;
                    Ok(Value::Object(
                        names
                            .iter()
                            .zip(row.iter())
                            .map(|(name, value)| (name.clone(), Value::String(value.to_owned())))
                            .collect::<Map<_, _>>(),
                    ))
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_object_is_read_as_json_json_lines_or_csv() {
        assert_eq!(
            parse(&InputType::Json, "[1, {\"a\": 2}]"),
            Ok(vec![json!(1), json!({"a": 2})])
        );
        assert!(parse(&InputType::Json, "{\"a\": 1}").is_err());
        assert_eq!(
            parse(&InputType::JsonLines, "{\"a\":1}\n\n\"b\"\n"),
            Ok(vec![json!({"a": 1}), json!("b")])
        );
        assert!(
            parse(&InputType::JsonLines, "{\n}")
                .expect_err("refused")
                .contains("line 1")
        );
        let first_row = InputType::Csv {
            headers: None,
            delimiter: b',',
        };
        assert_eq!(
            parse(&first_row, "id,kg\no-1,2\n\"o,2\",3\n"),
            Ok(vec![
                json!({"id": "o-1", "kg": "2"}),
                json!({"id": "o,2", "kg": "3"})
            ])
        );
        let given = InputType::Csv {
            headers: Some(vec!["id".to_owned(), "kg".to_owned()]),
            delimiter: b'|',
        };
        assert_eq!(
            parse(&given, "o-1|2\n"),
            Ok(vec![json!({"id": "o-1", "kg": "2"})])
        );
    }
}
