//! State machines created, updated and deleted at run time
//! ([`App::register_definition`]): a definition in either language, kept in the
//! state store at a version per change, which executions then keep.

use serde::Deserialize;
use serde_json::{Value, json};

use sas_core::app::{App, Catalogued, DefineError};
use sas_domain::machine::machine_arn;

use super::catalog::{self, Tag, no_machine, tag_map, unqualified};
use super::{SfnError, body, required, seconds};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DefinitionRequest {
    name: Option<String>,
    state_machine_arn: Option<String>,
    definition: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    /// Whether the definition is published as a version too.
    #[serde(default)]
    publish: bool,
    version_description: Option<String>,
    /// `CreateStateMachine`'s.
    #[serde(default)]
    tags: Vec<Tag>,
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
/// same machine). An `EXPRESS` machine runs as a standard one, and is described as
/// `EXPRESS`.
pub(super) async fn create(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: DefinitionRequest = body(bytes)?;
    let name = required(request.name, "name")?;
    let definition = required(request.definition, "definition")?;
    if let Some(kind) = (request.kind.as_deref()).filter(|k| *k != "STANDARD" && *k != "EXPRESS") {
        return Err(SfnError::invalid(
            "type",
            &format!("'{kind}': Member must satisfy enum value set: [STANDARD, EXPRESS]"),
        ));
    }
    let (registration, _) = (app.register_definition(&name, &definition, false).await)
        .map_err(|e| refused(e, &name))?;
    let express = request.kind.as_deref() == Some("EXPRESS");
    if express || !request.tags.is_empty() {
        let tags = tag_map(request.tags);
        let kept = app
            .change_catalog(Catalogued::Machine(&name), |catalog, _| {
                catalog.express |= express;
                catalog.tag(tags.clone())
            })
            .await;
        kept.map_err(|e| catalog::refused(e, no_machine(&machine_arn(&name)), "TooManyTags"))?;
    }
    let mut created = json!({
        "stateMachineArn": machine_arn(&name),
        "creationDate": seconds(registration.created_at),
    });
    if request.publish {
        catalog::publish_into(app, &name, request.version_description, &mut created).await?;
    }
    Ok(created)
}

/// `UpdateStateMachine`: its definition's next version, on which new executions
/// start; those running keep theirs.
pub(super) async fn update(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: DefinitionRequest = body(bytes)?;
    let arn = required(request.state_machine_arn, "stateMachineArn")?;
    let name = unqualified(&arn)?;
    let updated = match request.definition {
        Some(definition) => (app.register_definition(name, &definition, true).await)
            .map(|(registration, _)| registration),
        None => match app.registration(name).await {
            Ok(Some(registration)) => Ok(registration),
            Ok(None) => Err(DefineError::NotFound(name.to_owned())),
            Err(error) => Err(error.into()),
        },
    };
    let registration = updated.map_err(|e| refused(e, name))?;
    let mut answer = json!({
        "updateDate": seconds(registration.updated_at),
        "revisionId": registration.version.to_string(),
    });
    if request.publish {
        catalog::publish_into(app, name, request.version_description, &mut answer).await?;
    }
    Ok(answer)
}

/// `DeleteStateMachine`: no new execution starts on it; those running finish.
pub(super) async fn delete(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: DefinitionRequest = body(bytes)?;
    let arn = required(request.state_machine_arn, "stateMachineArn")?;
    let name = unqualified(&arn)?;
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
