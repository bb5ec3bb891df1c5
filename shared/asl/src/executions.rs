//! A Task that starts an execution of a state machine
//! (`arn:aws:states:::states:startExecution`, `.sync`, `.sync:2`): its request read,
//! and its result shaped as Step Functions shapes it: `StartExecution`'s answer, or,
//! waited for, `DescribeExecution`'s (the output as text with `.sync`, as JSON with
//! `.sync:2`), a child that did not succeed failing the Task with `States.TaskFailed`
//! and that description as the cause.

use serde_json::{Map, Value, json};

use crate::definition::Pattern;
use crate::{Failure, errors};

/// The fields `StartExecution`'s request may have.
const FIELDS: [&str; 4] = ["StateMachineArn", "Input", "Name", "TraceHeader"];

/// What a Task asks to start.
#[derive(Clone, Debug, PartialEq)]
pub struct Start {
    /// The state machine's name, from its ARN.
    pub machine: String,
    /// The version's number or the alias's name after it, if the ARN has one.
    pub qualifier: Option<String>,
    /// The execution's input (`{}` where none is given).
    pub input: Value,
}

/// The execution a Task's arguments ask for: refused, as Step Functions refuses it,
/// when they name a field `StartExecution` has not, an ARN that is no state
/// machine's, or an input that is no JSON.
pub fn request(arguments: &Value) -> Result<Start, Failure> {
    let fields = crate::request_fields(arguments, "states:startExecution", &FIELDS)?;
    let arn = fields.get("StateMachineArn").and_then(Value::as_str);
    let (machine, qualifier) = arn.and_then(machine_in).ok_or_else(|| {
        Failure::new(
            "StepFunctions.InvalidArnException",
            format!("Invalid Arn: '{}'", arn.unwrap_or_default()),
        )
    })?;
    let input = match fields.get("Input") {
        None => json!({}),
        Some(Value::String(text)) => serde_json::from_str(text).map_err(|error| {
            Failure::new(
                "StepFunctions.InvalidExecutionInputException",
                format!("Invalid State Machine Execution Input: '{error}'"),
            )
        })?,
        Some(input) => input.clone(),
    };
    Ok(Start {
        machine: machine.to_owned(),
        qualifier: qualifier.map(str::to_owned),
        input,
    })
}

/// The name, and the version or alias after it, in a state machine's ARN:
/// `arn:aws:states:REGION:ACCOUNT:stateMachine:NAME[:VERSION or ALIAS]`.
fn machine_in(arn: &str) -> Option<(&str, Option<&str>)> {
    let mut parts = arn.split(':');
    let fixed = [Some("arn"), None, Some("states"), None, None];
    for expected in fixed {
        let part = parts.next()?;
        if expected.is_some_and(|expected| expected != part) {
            return None;
        }
    }
    if parts.next()? != "stateMachine" {
        return None;
    }
    let name = parts.next().filter(|name| !name.is_empty())?;
    let qualifier = parts.next().filter(|qualifier| !qualifier.is_empty());
    parts.next().is_none().then_some((name, qualifier))
}

/// An execution a Task started, as `DescribeExecution` tells of it.
#[derive(Clone, Debug)]
pub struct Described<'a> {
    pub execution_arn: &'a str,
    pub machine_arn: &'a str,
    pub name: &'a str,
    pub input: &'a Value,
    /// `RUNNING`, `SUCCEEDED`, `FAILED`, `TIMED_OUT` or `ABORTED`.
    pub status: &'a str,
    pub output: Option<&'a Value>,
    pub error: Option<&'a str>,
    pub cause: Option<&'a str>,
    /// Milliseconds since the epoch.
    pub start_date: i64,
    pub stop_date: Option<i64>,
}

/// The result of a Task that started `described` without waiting for its end:
/// `StartExecution`'s answer.
pub fn started(described: &Described) -> Value {
    json!({
        "ExecutionArn": described.execution_arn,
        "StartDate": described.start_date,
    })
}

/// The result of a `.sync` (`pattern`) Task whose execution ended as `described`: its
/// description, or `States.TaskFailed` with it as the cause where it did not succeed.
pub fn ended(pattern: Pattern, described: &Described) -> Result<Value, Failure> {
    // `.sync:2` gives the input and output as JSON, `.sync` as their text.
    let data = |value: &Value| match pattern {
        Pattern::Sync2 => value.clone(),
        _ => Value::String(crate::json_text(value)),
    };
    let mut fields = Map::new();
    let mut put = |name: &str, value: Value| {
        fields.insert(name.to_owned(), value);
    };
    put("ExecutionArn", json!(described.execution_arn));
    put("Input", data(described.input));
    put("InputDetails", json!({"Included": true}));
    put("Name", json!(described.name));
    if let Some(output) = described.output {
        put("Output", data(output));
        put("OutputDetails", json!({"Included": true}));
    }
    if let Some(error) = described.error {
        put("Error", json!(error));
    }
    if let Some(cause) = described.cause {
        put("Cause", json!(cause));
    }
    let succeeded = described.status == "SUCCEEDED";
    put("RedriveCount", json!(0));
    if succeeded {
        put("RedriveStatus", json!("NOT_REDRIVABLE"));
        put(
            "RedriveStatusReason",
            json!("Execution is SUCCEEDED and cannot be redriven"),
        );
    } else {
        put("RedriveStatus", json!("REDRIVABLE"));
    }
    put("StartDate", json!(described.start_date));
    put("StateMachineArn", json!(described.machine_arn));
    put("Status", json!(described.status));
    if let Some(stop) = described.stop_date {
        put("StopDate", json!(stop));
    }
    let description = Value::Object(fields);
    if succeeded {
        Ok(description)
    } else {
        Err(Failure::new(errors::TASK_FAILED, description.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_its_machine_and_reads_its_input() {
        let start = request(&json!({
            "StateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:Child:live",
            "Input": "{\"a\": 1}",
            "Name": "first"
        }))
        .expect("a request");
        assert_eq!(
            (start.machine.as_str(), start.qualifier.as_deref()),
            ("Child", Some("live"))
        );
        assert_eq!(start.input, json!({"a": 1}));
        let start = request(&json!({
            "StateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:Child",
            "Input": {"b": [2]}
        }))
        .expect("a request");
        assert_eq!((start.input, start.qualifier), (json!({"b": [2]}), None));
        let plain = json!({"StateMachineArn": "arn:aws:states:eu-west-1:1:stateMachine:C"});
        assert_eq!(request(&plain).expect("a request").input, json!({}));
    }

    #[test]
    fn a_request_is_refused_as_step_functions_refuses_it() {
        let error = |arguments: Value| request(&arguments).expect_err("refused").error;
        let arn = "arn:aws:states:us-east-1:1:stateMachine:C";
        assert_eq!(
            error(json!({"StateMachineArn": arn, "Extra": 1})),
            errors::RUNTIME
        );
        for bad in [
            "arn:aws:lambda:us-east-1:1:function:C",
            "arn:aws:states:us-east-1:1:stateMachine:",
            "arn:aws:states:us-east-1:1:stateMachine:C:1:2",
            "C",
        ] {
            assert_eq!(
                error(json!({"StateMachineArn": bad})),
                "StepFunctions.InvalidArnException",
                "{bad}"
            );
        }
        assert_eq!(
            error(json!({"StateMachineArn": arn, "Input": "{not json"})),
            "StepFunctions.InvalidExecutionInputException"
        );
        assert_eq!(error(json!([arn])), errors::RUNTIME);
    }

    fn described<'a>(
        status: &'a str,
        input: &'a Value,
        output: Option<&'a Value>,
    ) -> Described<'a> {
        Described {
            execution_arn: "arn:aws:states:us-east-1:000000000000:execution:Child:run-1",
            machine_arn: "arn:aws:states:us-east-1:000000000000:stateMachine:Child",
            name: "run-1",
            input,
            status,
            output,
            error: (status != "SUCCEEDED").then_some("Oops"),
            cause: (status != "SUCCEEDED").then_some("it broke"),
            start_date: 1_700_000_000_000,
            stop_date: Some(1_700_000_001_500),
        }
    }

    #[test]
    fn a_sync_result_gives_the_output_as_text_and_sync_2_as_json() {
        let (input, output) = (json!({"n": 1}), json!({"total": 2}));
        let done = described("SUCCEEDED", &input, Some(&output));
        let text = ended(Pattern::Sync, &done).expect("succeeded");
        assert_eq!(text["Output"], json!("{\"total\":2}"));
        assert_eq!(text["Input"], json!("{\"n\":1}"));
        assert_eq!(text["Status"], json!("SUCCEEDED"));
        assert_eq!(text["StopDate"], json!(1_700_000_001_500_i64));
        let parsed = ended(Pattern::Sync2, &done).expect("succeeded");
        assert_eq!(parsed["Output"], output);
        assert_eq!(parsed["Input"], input);
        assert_eq!(
            started(&done),
            json!({"ExecutionArn": done.execution_arn, "StartDate": 1_700_000_000_000_i64})
        );
    }

    #[test]
    fn a_child_that_failed_fails_the_task_with_its_description() {
        let input = json!({});
        let failure = ended(Pattern::Sync, &described("FAILED", &input, None)).expect_err("failed");
        assert_eq!(failure.error, errors::TASK_FAILED);
        let cause: Value = serde_json::from_str(&failure.cause).expect("JSON");
        assert_eq!(cause["Status"], json!("FAILED"));
        assert_eq!(cause["Error"], json!("Oops"));
        assert_eq!(cause["Cause"], json!("it broke"));
        assert!(cause.get("Output").is_none());
    }
}
