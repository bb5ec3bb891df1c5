//! State machines: the workflows the deployment has, listed and described in Step
//! Functions' shapes, and found by their ARNs.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use sas_core::app::{App, CatalogFailure, Catalogued, TaskError};
use sas_domain::machine::catalog::{Catalog, PublishedVersion};
use sas_domain::machine::{account, machine_arn, place};
use sas_domain::task::WorkflowRef;
use sas_domain::time::Timestamp;
use sas_domain::workflow::Workflow;

use super::catalog::no_machine;
use super::{SfnError, body, required, seconds};

/// A machine's role, as Step Functions describes one: this engine runs every machine
/// with the functions' own roles, so it names none of the caller's.
fn role_arn(name: &str) -> String {
    format!("arn:aws:iam::{}:role/{name}", account())
}

/// When a machine shipped as a file was created, as Step Functions dates one: it has
/// no date of its own, so the epoch.
const SHIPPED_CREATION_DATE: f64 = 0.0;

/// A state machine an ARN names, at the definition it names.
pub(super) struct Named {
    /// The definition.
    pub(super) workflow: Arc<Workflow>,
    /// The published version the ARN names, or its alias routed to.
    pub(super) version: Option<PublishedVersion>,
}

/// The state machine an ARN names: `arn:aws:states:REGION:ACCOUNT:stateMachine:NAME`
/// at the version new executions start on, with `:N` at its end its published
/// version `N`, with `:ALIAS` the version its alias routes the execution named
/// `execution` to.
pub(super) async fn named(app: &App, arn: &str, execution: &str) -> Result<Named, SfnError> {
    let (name, qualifier) = name_in(arn)?;
    let missing = || no_machine(arn);
    let Some(qualifier) = qualifier else {
        let found = (app.definition(name).await).map_err(|e| SfnError::unavailable(&e))?;
        let workflow = found.ok_or_else(missing)?;
        return Ok(Named {
            workflow,
            version: None,
        });
    };
    let found = app.qualified_definition(name, qualifier, execution).await;
    let (workflow, version) = found
        .map_err(|e| SfnError::unavailable(&e))?
        .ok_or_else(missing)?;
    Ok(Named {
        workflow,
        version: Some(version),
    })
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

/// The name (and the version's number or the alias after it) in a state machine's
/// ARN of this engine's region and account: `InvalidArn` for another kind of text,
/// `StateMachineDoesNotExist` for another place's.
pub(super) fn name_in(arn: &str) -> Result<(&str, Option<&str>), SfnError> {
    ArnKind::StateMachine.name_in(arn)
}

/// The state machine `name`'s ARN with `qualifier` (a version's number, or an
/// alias's name) at its end.
pub(super) fn qualified_arn(name: &str, qualifier: impl std::fmt::Display) -> String {
    format!("{}:{qualifier}", machine_arn(name))
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
    /// The name in an ARN of this kind with nothing after it: `InvalidArn` for one
    /// with a version or an alias (or any other qualifier) after the name.
    pub(super) fn plain_name_in(self, arn: &str) -> Result<&str, SfnError> {
        match self.name_in(arn)? {
            (name, None) => Ok(name),
            (_, Some(_)) => Err(invalid_arn(arn)),
        }
    }

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

/// The machine `name`'s catalog: an empty one where the machine is not there (any
/// more: an execution outlives its machine).
pub(super) async fn kept_catalog(app: &App, name: &str) -> Result<Catalog, SfnError> {
    match app.catalog(Catalogued::Machine(name)).await {
        Ok(catalog) => Ok(catalog),
        Err(CatalogFailure::Missing) => Ok(Catalog::default()),
        Err(error) => Err(SfnError::unavailable(&error)),
    }
}

/// What a machine was created as: `EXPRESS` or `STANDARD` (it runs as standard).
pub(super) async fn machine_type(app: &App, name: &str) -> Result<&'static str, SfnError> {
    let express = kept_catalog(app, name).await?.express;
    Ok(if express { "EXPRESS" } else { "STANDARD" })
}

/// A state machine as `ListStateMachines` lists it, `created` at run time or shipped,
/// of `kind` (`machine_type`).
fn listed(workflow: &Workflow, created: Option<Timestamp>, kind: &str) -> Value {
    json!({
        "stateMachineArn": machine_arn(&workflow.name),
        "name": workflow.name,
        "type": kind,
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
        .map(|w| (w.name.clone(), listed(w, None, "STANDARD")))
        .collect();
    for (registration, workflow) in &registered {
        let kind = machine_type(app, &workflow.name).await?;
        let created = Some(registration.created_at);
        machines.push((workflow.name.clone(), listed(workflow, created, kind)));
    }
    machines.sort_by(|a, b| a.0.cmp(&b.0));
    let machines: Vec<Value> = machines.into_iter().map(|(_, m)| m).collect();
    Ok(json!({ "stateMachines": machines }))
}

/// `DescribeStateMachine`: a machine at its current revision, or (its ARN ending
/// in `:N`) its published version `N`.
pub(super) async fn describe(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: DescribeRequest = body(bytes)?;
    let arn = required(request.state_machine_arn, "stateMachineArn")?;
    let named = named(app, &arn, "").await?;
    let workflow = &named.workflow;
    let registration =
        (app.registration(&workflow.name).await).map_err(|e| SfnError::unavailable(&e))?;
    let kind = machine_type(app, &workflow.name).await?;
    let mut described = described(workflow, registration.map(|r| r.created_at), kind);
    described["revisionId"] = json!(workflow.version.to_string());
    if let Some(version) = named.version {
        described["stateMachineArn"] = json!(qualified_arn(&workflow.name, version.number));
        described["creationDate"] = seconds(version.created_at);
        if let Some(description) = version.description {
            described["description"] = json!(description);
        }
    }
    Ok(described)
}

/// A state machine as `DescribeStateMachine` describes it: its definition (a state
/// machine's as written, a workflow's as the project keeps it), its role, its type.
pub(super) fn described(workflow: &Workflow, created: Option<Timestamp>, kind: &str) -> Value {
    let mut described = listed(workflow, created, kind);
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
