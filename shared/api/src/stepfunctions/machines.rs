//! State machines: the workflows the deployment has, listed and described in Step
//! Functions' shapes, and found by their ARNs.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use sas_core::app::App;
use sas_domain::machine::{REGION_ACCOUNT, machine_arn};
use sas_domain::workflow::Workflow;

use super::{SfnError, body};

/// A machine's role, as Step Functions describes one: this engine runs every machine
/// with the functions' own roles, so it names none of the caller's.
fn role_arn(name: &str) -> String {
    let account = REGION_ACCOUNT.rsplit(':').next().unwrap_or_default();
    format!("arn:aws:iam::{account}:role/{name}")
}

/// When a machine was created, as Step Functions dates one: a definition shipped as a
/// file has no date of its own, so the epoch.
const CREATION_DATE: f64 = 0.0;

/// The state machine an ARN names: `arn:aws:states:REGION:ACCOUNT:stateMachine:NAME`,
/// with a `:VERSION` at its end for one of its versions.
pub(super) fn named(app: &App, arn: &str) -> Result<Arc<Workflow>, SfnError> {
    let invalid = || SfnError::new("InvalidArn", format!("Invalid Arn: '{arn}'"));
    let rest = arn.strip_prefix("arn:aws:states:").ok_or_else(invalid)?;
    let mut parts = rest.split(':');
    let (region, account) = (
        parts.next().ok_or_else(invalid)?,
        parts.next().ok_or_else(invalid)?,
    );
    if parts.next() != Some("stateMachine") {
        return Err(invalid());
    }
    let name = parts.next().filter(|n| !n.is_empty()).ok_or_else(invalid)?;
    let version = parts
        .next()
        .map(str::parse::<u32>)
        .transpose()
        .map_err(|_| invalid())?;
    if parts.next().is_some() {
        return Err(invalid());
    }
    let missing = || {
        SfnError::new(
            "StateMachineDoesNotExist",
            format!("State Machine Does Not Exist: '{arn}'"),
        )
    };
    if format!("{region}:{account}") != REGION_ACCOUNT {
        return Err(missing());
    }
    let workflows = app.workflows();
    match version {
        Some(version) => workflows.version(name, version),
        None => workflows.latest(name),
    }
    .ok_or_else(missing)
}

/// A state machine as `ListStateMachines` lists it.
fn listed(workflow: &Workflow) -> Value {
    json!({
        "stateMachineArn": machine_arn(&workflow.name),
        "name": workflow.name,
        "type": "STANDARD",
        "creationDate": CREATION_DATE,
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescribeRequest {
    state_machine_arn: Option<String>,
}

/// `ListStateMachines`: every state machine and workflow, its latest version, by name.
pub(super) fn list(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let _: Value = body(bytes)?;
    let mut names: Vec<Arc<Workflow>> = app.workflows().all();
    names.sort_by(|a, b| (&a.name, b.version).cmp(&(&b.name, a.version)));
    names.dedup_by(|later, first| later.name == first.name);
    let machines: Vec<Value> = names.iter().map(|w| listed(w)).collect();
    Ok(json!({ "stateMachines": machines }))
}

/// `DescribeStateMachine`.
pub(super) fn describe(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: DescribeRequest = body(bytes)?;
    let arn = request
        .state_machine_arn
        .ok_or_else(|| SfnError::invalid("stateMachineArn", "Member must not be null"))?;
    Ok(described(&*named(app, &arn)?))
}

/// A state machine as `DescribeStateMachine` describes it: its definition (a state
/// machine's as written, a workflow's as the project keeps it), its role, its type.
pub(super) fn described(workflow: &Workflow) -> Value {
    let mut described = listed(workflow);
    described["status"] = json!("ACTIVE");
    described["definition"] = json!(workflow.source);
    described["roleArn"] = json!(role_arn(&workflow.name));
    if workflow.machine.is_none() {
        described["description"] = json!(workflow.description);
    }
    described
}

#[derive(Deserialize)]
struct ValidateRequest {
    definition: Option<String>,
}

/// `ValidateStateMachineDefinition`: the definition checked as a state machine's file
/// is when it is loaded, its refusal a diagnostic naming where.
pub(super) fn validate(bytes: &[u8]) -> Result<Value, SfnError> {
    let request: ValidateRequest = body(bytes)?;
    let definition = request
        .definition
        .ok_or_else(|| SfnError::invalid("definition", "Member must not be null"))?;
    let code = match serde_json::from_str::<Value>(&definition) {
        Err(_) => "INVALID_JSON_DESCRIPTION",
        Ok(_) => "SCHEMA_VALIDATION_FAILED",
    };
    let diagnostics: Vec<Value> = Workflow::parse_stored("definition", "definition", &definition)
        .err()
        .into_iter()
        .map(|refused| {
            json!({"severity": "ERROR", "code": code, "message": refused.message,
                   "location": refused.field})
        })
        .collect();
    let result = if diagnostics.is_empty() { "OK" } else { "FAIL" };
    Ok(json!({"result": result, "diagnostics": diagnostics, "truncated": false}))
}
