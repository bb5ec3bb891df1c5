//! State machines created, updated and deleted at run time
//! ([`App::register_definition`]): a definition in either language, kept in the
//! state store at a version per change, which executions then keep.

use serde::Deserialize;
use serde_json::{Value, json};

use sas_core::app::{App, DefineError};
use sas_domain::machine::machine_arn;

use super::{SfnError, body, machines, seconds};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DefinitionRequest {
    name: Option<String>,
    state_machine_arn: Option<String>,
    definition: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

/// `field`'s value, which the operation requires.
fn required(value: Option<String>, field: &str) -> Result<String, SfnError> {
    value.ok_or_else(|| SfnError::invalid(field, "Member must not be null"))
}

/// A refusal of `name`'s definition, as Step Functions names it.
fn refused(error: DefineError, name: &str) -> SfnError {
    match error {
        DefineError::Invalid(refusal) if refusal.field == "name" => {
            SfnError::new("InvalidName", format!("Invalid Name: '{name}'"))
        }
        DefineError::Invalid(refusal) => SfnError::new(
            "InvalidDefinition",
            format!(
                "Invalid State Machine Definition: '{}: {}'",
                refusal.field, refusal.message
            ),
        ),
        DefineError::Exists(_) => SfnError::new(
            "StateMachineAlreadyExists",
            format!("State Machine Already Exists: '{}'", machine_arn(name)),
        ),
        DefineError::NotFound(_) => SfnError::new(
            "StateMachineDoesNotExist",
            format!("State Machine Does Not Exist: '{}'", machine_arn(name)),
        ),
        DefineError::Store(sas_core::ports::StoreError::Conflict) => SfnError::new(
            "ConflictException",
            format!("'{name}' was changed by another request meanwhile: read it again"),
        ),
        DefineError::Store(error) => SfnError::unavailable(&error),
    }
}

/// `CreateStateMachine`: `definition` registered as `name` (the same again is the
/// same machine). An `EXPRESS` machine runs as a standard one.
pub(super) async fn create(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: DefinitionRequest = body(bytes)?;
    let name = required(request.name, "name")?;
    let definition = required(request.definition, "definition")?;
    if let Some(kind) = request.kind.filter(|k| k != "STANDARD" && k != "EXPRESS") {
        return Err(SfnError::invalid(
            "type",
            &format!("'{kind}': Member must satisfy enum value set: [STANDARD, EXPRESS]"),
        ));
    }
    let (registration, _) = (app.register_definition(&name, &definition, false).await)
        .map_err(|e| refused(e, &name))?;
    Ok(json!({
        "stateMachineArn": machine_arn(&name),
        "creationDate": seconds(registration.created_at),
    }))
}

/// `UpdateStateMachine`: its definition's next version, on which new executions
/// start; those running keep theirs.
pub(super) async fn update(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: DefinitionRequest = body(bytes)?;
    let arn = required(request.state_machine_arn, "stateMachineArn")?;
    let (name, _) = machines::name_in(&arn)?;
    let updated = match request.definition {
        Some(definition) => app.register_definition(name, &definition, true).await,
        None => match app.registration(name).await {
            Ok(Some(registration)) => {
                return Ok(json!({"updateDate": seconds(registration.updated_at)}));
            }
            Ok(None) => Err(DefineError::NotFound(name.to_owned())),
            Err(error) => Err(error.into()),
        },
    };
    let (registration, _) = updated.map_err(|e| refused(e, name))?;
    Ok(json!({ "updateDate": seconds(registration.updated_at) }))
}

/// `DeleteStateMachine`: no new execution starts on it; those running finish.
pub(super) async fn delete(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: DefinitionRequest = body(bytes)?;
    let arn = required(request.state_machine_arn, "stateMachineArn")?;
    let (name, _) = machines::name_in(&arn)?;
    if !app.is_registered(name) && app.workflows().latest(name).is_some() {
        return Err(SfnError::new(
            "ValidationException",
            format!("'{name}' is shipped with the deployment: it goes with its file"),
        ));
    }
    app.delete_definition(name)
        .await
        .map_err(|e| refused(e, name))?;
    Ok(json!({}))
}
