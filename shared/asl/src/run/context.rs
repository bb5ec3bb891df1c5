//! The context object (`$$` in JSONPath, `$states.context` in JSONata): what the
//! execution, the state machine and the state are, as Step Functions shows them.

use serde_json::{Value, json};

/// The execution's part of the context object: the same for every state it visits.
#[derive(Clone, Debug)]
pub struct Execution {
    /// `arn:aws:states:REGION:ACCOUNT:execution:MACHINE:NAME`.
    pub id: String,
    pub name: String,
    pub input: Value,
    pub role_arn: String,
    /// RFC 3339, with milliseconds.
    pub start_time: String,
    pub redrive_count: u64,
    /// `arn:aws:states:REGION:ACCOUNT:stateMachine:MACHINE`.
    pub machine_id: String,
    pub machine_name: String,
}

/// Where a visit stands: the state, when it was entered, and what only some states
/// have (a retry count where the state retries, a Map's item, a task token).
#[derive(Clone, Debug, Default)]
pub struct Position<'a> {
    pub state: &'a str,
    pub entered_time: &'a str,
    pub retry_count: Option<u64>,
    pub item: Option<(usize, &'a Value)>,
    pub task_token: Option<&'a str>,
}

/// The context object of one visit.
pub fn context(execution: &Execution, position: &Position) -> Value {
    let mut state = json!({"Name": position.state, "EnteredTime": position.entered_time});
    if let Some(retry_count) = position.retry_count {
        state["RetryCount"] = json!(retry_count);
    }
    let mut context = json!({
        "Execution": {
            "Id": execution.id,
            "Input": execution.input,
            "Name": execution.name,
            "RoleArn": execution.role_arn,
            "StartTime": execution.start_time,
            "RedriveCount": execution.redrive_count,
        },
        "StateMachine": {"Id": execution.machine_id, "Name": execution.machine_name},
        "State": state,
    });
    if let Some((index, value)) = position.item {
        context["Map"] = json!({"Item": {"Index": index, "Value": value}});
    }
    if let Some(token) = position.task_token {
        context["Task"] = json!({"Token": token});
    }
    context
}
