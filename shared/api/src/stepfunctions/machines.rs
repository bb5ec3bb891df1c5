//! State machines: the workflows the deployment has, listed and described in Step
//! Functions' shapes, and found by their ARNs.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use sas_core::app::{App, TaskError};
use sas_domain::machine::{account, machine_arn, place};
use sas_domain::task::WorkflowRef;
use sas_domain::time::Timestamp;
use sas_domain::workflow::Workflow;

use super::{SfnError, body, seconds};

/// A machine's role, as Step Functions describes one: this engine runs every machine
/// with the functions' own roles, so it names none of the caller's.
fn role_arn(name: &str) -> String {
    format!("arn:aws:iam::{}:role/{name}", account())
}

/// When a machine shipped as a file was created, as Step Functions dates one: it has
/// no date of its own, so the epoch.
const SHIPPED_CREATION_DATE: f64 = 0.0;

/// The state machine an ARN names: `arn:aws:states:REGION:ACCOUNT:stateMachine:NAME`,
/// with a `:VERSION` at its end for one of its versions.
pub(super) async fn named(app: &App, arn: &str) -> Result<Arc<Workflow>, SfnError> {
    let (name, version) = name_in(arn)?;
    let missing = || {
        SfnError::new(
            "StateMachineDoesNotExist",
            format!("State Machine Does Not Exist: '{arn}'"),
        )
    };
    let found = match version {
        Some(version) => {
            let reference = WorkflowRef {
                name: name.to_owned(),
                version,
            };
            version_of(app, &reference).await?
        }
        None => (app.definition(name).await).map_err(|e| SfnError::unavailable(&e))?,
    };
    found.ok_or_else(missing)
}

/// The definition of `reference`'s version, shipped or stored, if there is one.
pub(super) async fn version_of(
    app: &App,
    reference: &WorkflowRef,
) -> Result<Option<Arc<Workflow>>, SfnError> {
    match app.workflow(reference).await {
        Ok(workflow) => Ok(Some(workflow)),
        Err(TaskError::UnknownWorkflow(..)) => Ok(None),
        Err(error) => Err(SfnError::unavailable(&error)),
    }
}

/// The name (and version) in a state machine's ARN of this engine's region and
/// account: `InvalidArn` for another kind of text, `StateMachineDoesNotExist`
/// for another place's.
pub(super) fn name_in(arn: &str) -> Result<(&str, Option<u32>), SfnError> {
    let (name, version) = ArnKind::StateMachine.name_in(arn)?;
    let version = version
        .map(str::parse::<u32>)
        .transpose()
        .map_err(|_| invalid_arn(arn))?;
    Ok((name, version))
}

/// `InvalidArn`, for `arn`.
pub(super) fn invalid_arn(arn: &str) -> SfnError {
    SfnError::new("InvalidArn", format!("Invalid Arn: '{arn}'"))
}

/// What an ARN of Step Functions names.
#[derive(Clone, Copy)]
pub(super) enum ArnKind {
    StateMachine,
    Activity,
}

impl ArnKind {
    /// The name (and the qualifier after it) in an ARN of this kind in this engine's
    /// region and account: `arn:aws:states:REGION:ACCOUNT:KIND:NAME[:QUALIFIER]`.
    /// `InvalidArn` for another kind of text; `StateMachineDoesNotExist` (or
    /// `ActivityDoesNotExist`) for another place's.
    pub(super) fn name_in(self, arn: &str) -> Result<(&str, Option<&str>), SfnError> {
        let (kind, missing, what) = match self {
            Self::StateMachine => ("stateMachine", "StateMachineDoesNotExist", "State Machine"),
            Self::Activity => ("activity", "ActivityDoesNotExist", "Activity"),
        };
        let rest = arn
            .strip_prefix("arn:aws:states:")
            .ok_or_else(|| invalid_arn(arn))?;
        let (region, account, name, qualifier) = match rest.split(':').collect::<Vec<_>>()[..] {
            [region, account, found, name] if found == kind => (region, account, name, None),
            [region, account, found, name, qualifier] if found == kind => {
                (region, account, name, Some(qualifier))
            }
            _ => return Err(invalid_arn(arn)),
        };
        if name.is_empty() {
            return Err(invalid_arn(arn));
        }
        if format!("{region}:{account}") != place() {
            return Err(SfnError::new(
                missing,
                format!("{what} Does Not Exist: '{arn}'"),
            ));
        }
        Ok((name, qualifier))
    }
}

/// A state machine as `ListStateMachines` lists it, `created` at run time or shipped.
fn listed(workflow: &Workflow, created: Option<Timestamp>) -> Value {
    json!({
        "stateMachineArn": machine_arn(&workflow.name),
        "name": workflow.name,
        "type": "STANDARD",
        "creationDate": created.map_or(json!(SHIPPED_CREATION_DATE), seconds),
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescribeRequest {
    state_machine_arn: Option<String>,
}

/// `ListStateMachines`: every state machine and workflow, shipped or registered at
/// run time, at its latest version, by name.
pub(super) async fn list(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let _: Value = body(bytes)?;
    let registrations = app.registered_definitions().await;
    let registered = registrations.map_err(|e| SfnError::unavailable(&e))?;
    let mut shipped: Vec<Arc<Workflow>> = app.workflows().all();
    shipped.retain(|w| !app.is_registered(&w.name));
    shipped.sort_by(|a, b| (&a.name, b.version).cmp(&(&b.name, a.version)));
    shipped.dedup_by(|later, first| later.name == first.name);
    let mut machines: Vec<(String, Value)> = shipped
        .iter()
        .map(|w| (w.name.clone(), listed(w, None)))
        .collect();
    machines
        .extend((registered.iter()).map(|(r, w)| (w.name.clone(), listed(w, Some(r.created_at)))));
    machines.sort_by(|a, b| a.0.cmp(&b.0));
    let machines: Vec<Value> = machines.into_iter().map(|(_, m)| m).collect();
    Ok(json!({ "stateMachines": machines }))
}

/// `DescribeStateMachine`.
pub(super) async fn describe(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: DescribeRequest = body(bytes)?;
    let arn = request
        .state_machine_arn
        .ok_or_else(|| SfnError::invalid("stateMachineArn", "Member must not be null"))?;
    let workflow = named(app, &arn).await?;
    let registration =
        (app.registration(&workflow.name).await).map_err(|e| SfnError::unavailable(&e))?;
    Ok(described(&workflow, registration.map(|r| r.created_at)))
}

/// A state machine as `DescribeStateMachine` describes it: its definition (a state
/// machine's as written, a workflow's as the project keeps it), its role, its type.
pub(super) fn described(workflow: &Workflow, created: Option<Timestamp>) -> Value {
    let mut described = listed(workflow, created);
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
