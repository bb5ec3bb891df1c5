//! A Task that calls Lambda: the `Invoke` request it makes, and the answer as the Task's
//! result or error, shaped as Step Functions shapes them: the payload itself for a
//! function's ARN, the `Invoke` answer for `arn:aws:states:::lambda:invoke` (without
//! the HTTP metadata AWS adds), the function's `errorType` as the error and its payload
//! as the cause.

use serde_json::{Value, json};

use crate::definition::{Pattern, Resource, Target};
use crate::{Failure, errors};

/// The largest result a state may return (Step Functions' 256 KiB).
pub const RESULT_LIMIT_BYTES: usize = 256 * 1024;

/// A Lambda `Invoke` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The function's name, ARN or partial ARN, as `Invoke` takes it.
    pub function: String,
    /// The payload's bytes: a string payload is sent as its text, none as nothing.
    pub payload: Vec<u8>,
    /// `LogType: Tail`: the answer carries the end of the function's log.
    pub log_tail: bool,
}

/// What `Invoke` answered.
#[derive(Clone, Copy, Debug)]
pub struct Answer<'a> {
    pub payload: &'a [u8],
    /// `X-Amz-Function-Error`, set when the function failed.
    pub function_error: Option<&'a str>,
    /// `X-Amz-Log-Result`, with `LogType: Tail`.
    pub log_result: Option<&'a str>,
}

/// The `Invoke` request of a Task, from its target and arguments (`FunctionName`,
/// `Payload` and `LogType` for `lambda:invoke`).
pub fn request(target: &Target, arguments: &Value) -> Result<Request, Failure> {
    match target {
        Target::LambdaFunction { function } => Ok(Request {
            function: function.clone(),
            payload: crate::json_text(arguments).into_bytes(),
            log_tail: false,
        }),
        Target::LambdaInvoke => {
            let function = arguments
                .get("FunctionName")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    Failure::runtime("The field 'FunctionName' is required for lambda:invoke")
                })?;
            let payload = match arguments.get("Payload") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::String(text)) => text.clone().into_bytes(),
                Some(payload) => crate::json_text(payload).into_bytes(),
            };
            Ok(Request {
                function: function.to_owned(),
                payload,
                log_tail: arguments.get("LogType").and_then(Value::as_str) == Some("Tail"),
            })
        }
        _ => Err(Failure::runtime("not a Lambda task")),
    }
}

/// The result of a Task that called Lambda, from what `Invoke` answered.
pub fn task_result(target: &Target, resource: &str, answer: Answer) -> Result<Value, Failure> {
    let text = String::from_utf8_lossy(answer.payload);
    if answer.function_error.is_some() {
        let parsed = serde_json::from_str::<Value>(&text).ok();
        let error = parsed
            .as_ref()
            .and_then(|error| error.get("errorType").and_then(Value::as_str))
            .unwrap_or("Lambda.Unknown")
            .to_owned();
        // The service integration quotes the payload re-encoded; a function's ARN, as sent.
        let cause = match (target, parsed) {
            (Target::LambdaInvoke, Some(parsed)) => crate::json_text(&parsed),
            _ => text.into_owned(),
        };
        return Err(Failure::new(error, cause));
    }
    if answer.payload.len() > RESULT_LIMIT_BYTES {
        return Err(too_large(&Resource {
            arn: resource.to_owned(),
            target: target.clone(),
            pattern: Pattern::RequestResponse,
        }));
    }
    let payload = serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.into_owned()));
    if *target != Target::LambdaInvoke {
        return Ok(payload);
    }
    let mut result = json!({"ExecutedVersion": "$LATEST", "Payload": payload, "StatusCode": 200});
    if let Some(log_result) = answer.log_result {
        result["LogResult"] = json!(log_result);
    }
    Ok(result)
}

/// The error of a Task whose result is past the limit, as Step Functions words it.
pub fn too_large(resource: &Resource) -> Failure {
    let label = match resource.target {
        Target::LambdaInvoke => "lambda",
        _ => resource.arn.as_str(),
    };
    Failure::new(
        errors::DATA_LIMIT_EXCEEDED,
        format!(
            "The state/task '{label}' returned a result with a size exceeding the maximum number of bytes service limit."
        ),
    )
}

/// The error of a Task whose function does not exist, as Step Functions quotes
/// Lambda's 404: `arn` is the function's ARN.
pub fn not_found(arn: &str, request_id: &str) -> Failure {
    Failure::new(
        "Lambda.ResourceNotFoundException",
        format!(
            "Function not found: {arn}:$LATEST (Service: AWSLambda; Status Code: 404; Error Code: ResourceNotFoundException; Request ID: {request_id}; Proxy: null)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Answer, request, task_result};
    use crate::definition::Target;

    fn answer<'a>(payload: &'a [u8], function_error: Option<&'a str>) -> Answer<'a> {
        Answer {
            payload,
            function_error,
            log_result: None,
        }
    }

    #[test]
    fn the_service_integration_wraps_the_payload() {
        let result = task_result(&Target::LambdaInvoke, "r", answer(b"{\"a\":1}", None));
        assert_eq!(
            result,
            Ok(json!({"ExecutedVersion": "$LATEST", "Payload": {"a": 1}, "StatusCode": 200}))
        );
        let function = Target::LambdaFunction {
            function: "f".to_owned(),
        };
        assert_eq!(
            task_result(&function, "r", answer(b"\"x\"", None)),
            Ok(json!("x"))
        );
    }

    #[test]
    fn a_function_error_names_its_type() {
        let payload = br#"{"errorMessage": "boom", "errorType": "ValueError"}"#;
        let failure = task_result(
            &Target::LambdaInvoke,
            "r",
            answer(payload, Some("Unhandled")),
        )
        .expect_err("a function error");
        assert_eq!(failure.error, "ValueError");
        assert_eq!(
            failure.cause,
            r#"{"errorMessage":"boom","errorType":"ValueError"}"#
        );
    }

    #[test]
    fn a_result_past_the_limit_is_data_limit_exceeded() {
        let big = vec![b'a'; super::RESULT_LIMIT_BYTES + 1];
        let failure =
            task_result(&Target::LambdaInvoke, "r", answer(&big, None)).expect_err("too big");
        assert_eq!(failure.error, "States.DataLimitExceeded");
    }

    #[test]
    fn a_string_payload_is_sent_as_its_text() {
        let sent = request(
            &Target::LambdaInvoke,
            &json!({"FunctionName": "f", "Payload": "0"}),
        )
        .expect("a request");
        assert_eq!(sent.payload, b"0");
        let sent =
            request(&Target::LambdaInvoke, &json!({"FunctionName": "f"})).expect("a request");
        assert!(sent.payload.is_empty());
    }
}
