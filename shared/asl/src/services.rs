//! A Task that calls an AWS service's API action as Step Functions' optimized
//! integrations do (`arn:aws:states:::sqs:sendMessage`, `dynamodb:getItem`, ...): the
//! arguments are the API's own request (a message's body or an event's detail given
//! as JSON is sent as its text), the result is the API's answer with the HTTP
//! metadata Step Functions adds (`SdkHttpMetadata`, `SdkResponseMetadata`).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::Failure;
use crate::definition::{Action, Resource};
use crate::lambda::RESULT_LIMIT_BYTES;

/// The API request of a Task naming `action`, from its arguments: refused, as Step
/// Functions refuses one, when they are not an object or name a field the API has
/// not.
pub fn request(action: &Action, arguments: &Value) -> Result<Value, Failure> {
    crate::request_fields(arguments, action.resource, action.fields)?;
    let mut request = arguments.clone();
    for path in action.as_text {
        as_text(&mut request, &path.split('/').collect::<Vec<_>>());
    }
    Ok(request)
}

/// The value at `path` (`*` for each element of an array) written as its JSON text,
/// where it is not text already.
fn as_text(value: &mut Value, path: &[&str]) {
    match (path, value) {
        ([], value) if !value.is_string() => *value = Value::String(crate::json_text(value)),
        (["*", rest @ ..], Value::Array(items)) => {
            for item in items {
                as_text(item, rest);
            }
        }
        ([field, rest @ ..], Value::Object(fields)) => {
            if let Some(value) = fields.get_mut(*field) {
                as_text(value, rest);
            }
        }
        _ => {}
    }
}

/// What an API answered: its body and the HTTP answer's status and headers.
#[derive(Clone, Copy, Debug)]
pub struct Answer<'a> {
    pub body: &'a Value,
    pub status: u16,
    pub headers: &'a BTreeMap<String, String>,
}

/// The result of a Task that called an API action: the API's answer, with its HTTP
/// status, headers and request id as Step Functions adds them.
pub fn task_result(resource: &Resource, answer: Answer) -> Result<Value, Failure> {
    let mut result = match answer.body {
        Value::Object(fields) => fields.clone(),
        Value::Null => Map::new(),
        other => {
            return Err(Failure::runtime(format!(
                "{} answered {other}",
                resource.arn
            )));
        }
    };
    let request_id = answer
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("x-amzn-RequestId"))
        .map_or("", |(_, id)| id.as_str());
    let all: Map<String, Value> = answer
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), json!([value])))
        .collect();
    result.insert(
        "SdkHttpMetadata".to_owned(),
        json!({"AllHttpHeaders": all, "HttpHeaders": answer.headers, "HttpStatusCode": answer.status}),
    );
    result.insert(
        "SdkResponseMetadata".to_owned(),
        json!({"RequestId": request_id}),
    );
    let result = Value::Object(result);
    if crate::json_text(&result).len() > RESULT_LIMIT_BYTES {
        return Err(crate::lambda::too_large(resource));
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::{Answer, request, task_result};
    use crate::definition::{ACTIONS, Pattern, Resource, Target, action};

    #[test]
    fn every_action_is_found_by_its_resource_and_lists_its_fields_once() {
        for listed in ACTIONS {
            assert_eq!(action(listed.resource), Some(listed));
            let mut fields = listed.fields.to_vec();
            fields.sort_unstable();
            fields.dedup();
            assert_eq!(fields.len(), listed.fields.len(), "{}", listed.resource);
        }
        assert_eq!(action("sqs:receiveMessage"), None);
    }

    #[test]
    fn a_message_or_an_events_detail_given_as_json_is_sent_as_its_text() {
        let sqs = action("sqs:sendMessage").expect("listed");
        let sent = request(sqs, &json!({"QueueUrl": "q", "MessageBody": {"a": 1}}));
        assert_eq!(
            sent,
            Ok(json!({"QueueUrl": "q", "MessageBody": "{\"a\":1}"}))
        );
        let text = request(sqs, &json!({"QueueUrl": "q", "MessageBody": "as is"}));
        assert_eq!(text, Ok(json!({"QueueUrl": "q", "MessageBody": "as is"})));
        let events = action("events:putEvents").expect("listed");
        let sent = request(
            events,
            &json!({"Entries": [{"Detail": {"b": [2]}, "Source": "s"}, {"Detail": "{}"}]}),
        );
        assert_eq!(
            sent,
            Ok(json!({"Entries": [{"Detail": "{\"b\":[2]}", "Source": "s"}, {"Detail": "{}"}]}))
        );
    }

    #[test]
    fn a_field_the_api_has_not_is_refused_naming_it() {
        let get = action("dynamodb:getItem").expect("listed");
        let refused = request(get, &json!({"TableName": "t", "Kye": {}})).expect_err("refused");
        assert_eq!(refused.error, "States.Runtime");
        assert!(refused.cause.contains("'Kye'"), "{}", refused.cause);
        let refused = request(get, &json!([1])).expect_err("refused");
        assert!(refused.cause.contains("JSON object"), "{}", refused.cause);
    }

    #[test]
    fn the_result_is_the_answer_with_step_functions_http_metadata() {
        let headers = BTreeMap::from([
            (
                "Content-Type".to_owned(),
                "application/x-amz-json-1.0".to_owned(),
            ),
            ("x-amzn-RequestId".to_owned(), "r-1".to_owned()),
        ]);
        let body = json!({"Item": {"id": {"S": "a"}}});
        let resource = Resource {
            arn: "arn:aws:states:::dynamodb:getItem".to_owned(),
            target: Target::Service(action("dynamodb:getItem").expect("listed")),
            pattern: Pattern::RequestResponse,
        };
        let result = task_result(
            &resource,
            Answer {
                body: &body,
                status: 200,
                headers: &headers,
            },
        );
        assert_eq!(
            result,
            Ok(json!({
                "Item": {"id": {"S": "a"}},
                "SdkHttpMetadata": {
                    "AllHttpHeaders": {"Content-Type": ["application/x-amz-json-1.0"], "x-amzn-RequestId": ["r-1"]},
                    "HttpHeaders": {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": "r-1"},
                    "HttpStatusCode": 200
                },
                "SdkResponseMetadata": {"RequestId": "r-1"}
            }))
        );
    }
}
