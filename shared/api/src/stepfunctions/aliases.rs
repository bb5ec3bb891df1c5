//! A state machine's aliases: `CreateStateMachineAlias`, `DescribeStateMachineAlias`,
//! `UpdateStateMachineAlias`, `ListStateMachineAliases`, `DeleteStateMachineAlias`.
//! An alias routes each execution started through its ARN
//! (`…:stateMachine:NAME:ALIAS`) to one of its versions, by weight, drawn from the
//! execution's name: a start sent again goes the same way.

use serde::Deserialize;
use serde_json::{Value, json};

use sas_core::app::{App, Catalogued};
use sas_domain::machine::catalog::{Alias, Route};

use super::catalog::{machine_catalog, no_machine, no_resource, page, refused, version_in};
use super::machines::{invalid_arn, name_in, qualified_arn};
use super::{SfnError, body, required, seconds};

/// An alias's route as the API writes one.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RouteRequest {
    state_machine_version_arn: String,
    weight: u8,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AliasRequest {
    name: Option<String>,
    description: Option<String>,
    routing_configuration: Option<Vec<RouteRequest>>,
    state_machine_alias_arn: Option<String>,
    state_machine_arn: Option<String>,
    max_results: Option<usize>,
    next_token: Option<String>,
}

/// A quota's error for aliases.
const FULL: &str = "ServiceQuotaExceededException";

/// The machine `routes` name (one for all) and the routes as a catalog keeps them.
fn routes(routes: Vec<RouteRequest>) -> Result<(String, Vec<Route>), SfnError> {
    let mut machine: Option<String> = None;
    let mut kept = Vec::with_capacity(routes.len());
    for route in routes {
        let (name, number) = version_in(&route.state_machine_version_arn)?;
        if machine.as_deref().is_some_and(|m| m != name) {
            return Err(SfnError::new(
                "ValidationException",
                "an alias routes to versions of one state machine",
            ));
        }
        machine = Some(name.to_owned());
        kept.push(Route {
            version: number,
            weight: route.weight,
        });
    }
    let machine = machine.ok_or_else(|| {
        SfnError::invalid(
            "routingConfiguration",
            "Member must have length greater than or equal to 1",
        )
    })?;
    Ok((machine, kept))
}

/// The machine and alias an alias's ARN names.
fn alias_in(arn: &str) -> Result<(&str, &str), SfnError> {
    match name_in(arn)? {
        (name, Some(alias)) if alias.parse::<u32>().is_err() => Ok((name, alias)),
        _ => Err(invalid_arn(arn)),
    }
}

/// `alias` as `DescribeStateMachineAlias` describes it.
fn described(machine: &str, alias: &Alias) -> Value {
    let routes: Vec<Value> = (alias.routes.iter())
        .map(|route| {
            json!({
                "stateMachineVersionArn": qualified_arn(machine, route.version),
                "weight": route.weight,
            })
        })
        .collect();
    let mut described = json!({
        "stateMachineAliasArn": qualified_arn(machine, &alias.name),
        "name": alias.name,
        "routingConfiguration": routes,
        "creationDate": seconds(alias.created_at),
        "updateDate": seconds(alias.updated_at),
    });
    if let Some(description) = &alias.description {
        described["description"] = json!(description);
    }
    described
}

/// `CreateStateMachineAlias`: the alias, created now, or as it is where the same
/// request created it before.
pub(super) async fn create(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: AliasRequest = body(bytes)?;
    let name = required(request.name, "name")?;
    let given = request.routing_configuration.unwrap_or_default();
    let (machine, routes) = routes(given)?;
    let description = request.description;
    let created = app
        .change_catalog(Catalogued::Machine(&machine), |catalog, now| {
            catalog.create_alias(&name, description.clone(), routes.clone(), now.at)
        })
        .await;
    let missing = no_machine(&sas_domain::machine::machine_arn(&machine));
    let alias = created.map_err(|e| refused(e, missing, FULL))?;
    Ok(json!({
        "stateMachineAliasArn": qualified_arn(&machine, &alias.name),
        "creationDate": seconds(alias.created_at),
    }))
}

/// `DescribeStateMachineAlias`.
pub(super) async fn describe(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: AliasRequest = body(bytes)?;
    let arn = required(request.state_machine_alias_arn, "stateMachineAliasArn")?;
    let (machine, name) = alias_in(&arn)?;
    let catalog = (app.catalog(Catalogued::Machine(machine)).await)
        .map_err(|e| refused(e, no_resource(&arn), FULL))?;
    let alias = catalog.alias(name).ok_or_else(|| no_resource(&arn))?;
    Ok(described(machine, alias))
}

/// `UpdateStateMachineAlias`: its description, its routes, or both.
pub(super) async fn update(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: AliasRequest = body(bytes)?;
    let arn = required(request.state_machine_alias_arn, "stateMachineAliasArn")?;
    let (machine, name) = alias_in(&arn)?;
    let routes = match request.routing_configuration {
        Some(given) => {
            let (routed, routes) = routes(given)?;
            if routed != machine {
                return Err(SfnError::new(
                    "ValidationException",
                    "an alias routes to versions of its own state machine",
                ));
            }
            Some(routes)
        }
        None => None,
    };
    let description = request.description;
    let updated = app
        .change_catalog(Catalogued::Machine(machine), |catalog, now| {
            catalog.update_alias(name, description.clone(), routes.clone(), now.at)
        })
        .await;
    let alias = updated.map_err(|e| refused(e, no_resource(&arn), FULL))?;
    Ok(json!({ "updateDate": seconds(alias.updated_at) }))
}

/// `ListStateMachineAliases`: by name, `maxResults` at a time.
pub(super) async fn list(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: AliasRequest = body(bytes)?;
    let arn = required(request.state_machine_arn, "stateMachineArn")?;
    let (machine, catalog) = machine_catalog(app, &arn).await?;
    let aliases: Vec<Value> = (catalog.aliases.iter())
        .map(|alias| {
            json!({
                "stateMachineAliasArn": qualified_arn(machine, &alias.name),
                "creationDate": seconds(alias.created_at),
            })
        })
        .collect();
    page(
        "stateMachineAliases",
        aliases,
        request.max_results,
        request.next_token,
    )
}

/// `DeleteStateMachineAlias`: its executions keep the versions they started on.
pub(super) async fn delete(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: AliasRequest = body(bytes)?;
    let arn = required(request.state_machine_alias_arn, "stateMachineAliasArn")?;
    let (machine, name) = alias_in(&arn)?;
    let deleted = app
        .change_catalog(Catalogued::Machine(machine), |catalog, _| {
            catalog.delete_alias(name)
        })
        .await;
    deleted.map_err(|e| refused(e, no_resource(&arn), FULL))?;
    Ok(json!({}))
}
