//! What Step Functions keeps beside a state machine ([`Catalog`]): its published
//! versions (`PublishStateMachineVersion`, `ListStateMachineVersions`,
//! `DeleteStateMachineVersion`, and `publish` on a create or an update), and the tags
//! of machines and activities (`TagResource`, `UntagResource`,
//! `ListTagsForResource`). An execution started on a version runs on the revision it
//! names; the aliases that route between versions are in [`super::aliases`].
//!
//! [`Catalog`]: sas_domain::machine::catalog::Catalog

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use sas_core::app::{App, CatalogFailure, Catalogued};
use sas_core::ports::StoreError;
use sas_domain::machine::catalog::{Catalog, CatalogError, PublishedVersion};
use sas_domain::machine::machine_arn;

use super::machines::{ArnKind, invalid_arn, name_in, qualified_arn};
use super::{SfnError, body, required, seconds};

/// A tag as the API writes one.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub(super) struct Tag {
    key: String,
    #[serde(default)]
    value: String,
}

/// `tags` as a catalog keeps them.
pub(super) fn tag_map(tags: Vec<Tag>) -> BTreeMap<String, String> {
    tags.into_iter().map(|tag| (tag.key, tag.value)).collect()
}

/// A catalog's refusal as Step Functions names it: `missing` where the machine (or
/// resource) is not there, `full` where a quota would be passed.
pub(super) fn refused(error: CatalogFailure, missing: SfnError, full: &'static str) -> SfnError {
    match error {
        CatalogFailure::Missing => missing,
        CatalogFailure::Refused(CatalogError::NotFound(message)) => {
            SfnError::new("ResourceNotFound", message)
        }
        CatalogFailure::Refused(CatalogError::Conflict(message)) => {
            SfnError::new("ConflictException", message)
        }
        CatalogFailure::Refused(CatalogError::Invalid(message)) => {
            SfnError::new("ValidationException", message)
        }
        CatalogFailure::Refused(CatalogError::Full(message)) => SfnError::new(full, message),
        CatalogFailure::Store(StoreError::Conflict) => SfnError::new(
            "ConflictException",
            "the resource was changed by other requests meanwhile: try again",
        ),
        CatalogFailure::Store(error) => SfnError::unavailable(&error),
    }
}

/// `StateMachineDoesNotExist`, for `arn`.
pub(super) fn no_machine(arn: &str) -> SfnError {
    SfnError::new(
        "StateMachineDoesNotExist",
        format!("State Machine Does Not Exist: '{arn}'"),
    )
}

/// The machine an ARN names without a version or alias.
pub(super) fn unqualified(arn: &str) -> Result<&str, SfnError> {
    ArnKind::StateMachine.plain_name_in(arn)
}

/// Publishes the machine `name`'s current revision (`expected`, where the caller
/// names the one it read) as a version, or gives the latest version where it is
/// that revision's.
async fn publish(
    app: &App,
    name: &str,
    expected: Option<u32>,
    description: Option<String>,
) -> Result<PublishedVersion, SfnError> {
    let published = app
        .change_catalog(Catalogued::Machine(name), |catalog, now| {
            catalog.publish(now.revision, expected, now.at, description.clone())
        })
        .await;
    published.map_err(|e| {
        refused(
            e,
            no_machine(&machine_arn(name)),
            "ServiceQuotaExceededException",
        )
    })
}

/// Publishes the machine `name`'s current revision, as a create or an update with
/// `publish` asks, its version's ARN added to the operation's `answer`.
pub(super) async fn publish_into(
    app: &App,
    name: &str,
    description: Option<String>,
    answer: &mut Value,
) -> Result<(), SfnError> {
    let version = publish(app, name, None, description).await?;
    answer["stateMachineVersionArn"] = json!(qualified_arn(name, version.number));
    Ok(())
}

/// `version`'s ARN and creation date, as the operations answer them.
fn version_answer(name: &str, version: &PublishedVersion) -> Value {
    json!({
        "stateMachineVersionArn": qualified_arn(name, version.number),
        "creationDate": seconds(version.created_at),
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VersionRequest {
    state_machine_arn: Option<String>,
    state_machine_version_arn: Option<String>,
    revision_id: Option<String>,
    description: Option<String>,
    max_results: Option<usize>,
    next_token: Option<String>,
}

/// The machine an unqualified ARN names, and its catalog (`StateMachineDoesNotExist`
/// where it is not there): what the listings of versions and aliases read.
pub(super) async fn machine_catalog<'a>(
    app: &App,
    arn: &'a str,
) -> Result<(&'a str, Catalog), SfnError> {
    let name = unqualified(arn)?;
    match app.catalog(Catalogued::Machine(name)).await {
        Ok(catalog) => Ok((name, catalog)),
        Err(CatalogFailure::Missing) => Err(no_machine(arn)),
        Err(error) => Err(SfnError::unavailable(&error)),
    }
}

/// `PublishStateMachineVersion`.
pub(super) async fn publish_version(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: VersionRequest = body(bytes)?;
    let arn = required(request.state_machine_arn, "stateMachineArn")?;
    let name = unqualified(&arn)?;
    // A revision this engine never gave is not the current one.
    let expected = (request.revision_id).map(|revision| revision.parse().unwrap_or(0));
    let version = publish(app, name, expected, request.description).await?;
    Ok(version_answer(name, &version))
}

/// `ListStateMachineVersions`: newest first, `maxResults` at a time.
pub(super) async fn list_versions(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: VersionRequest = body(bytes)?;
    let arn = required(request.state_machine_arn, "stateMachineArn")?;
    let (name, catalog) = machine_catalog(app, &arn).await?;
    let versions: Vec<Value> = (catalog.versions.iter().rev())
        .map(|version| version_answer(name, version))
        .collect();
    page(
        "stateMachineVersions",
        versions,
        request.max_results,
        request.next_token,
    )
}

/// `DeleteStateMachineVersion`: one that is not there is deleted already; one an
/// alias routes to is refused (`ConflictException`).
pub(super) async fn delete_version(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: VersionRequest = body(bytes)?;
    let arn = required(request.state_machine_version_arn, "stateMachineVersionArn")?;
    let (name, number) = version_in(&arn)?;
    let deleted = app
        .change_catalog(Catalogued::Machine(name), |catalog, _| {
            catalog.delete_version(number)
        })
        .await;
    match deleted {
        Ok(_) | Err(CatalogFailure::Missing) => Ok(json!({})),
        Err(error) => Err(refused(
            error,
            no_machine(&arn),
            "ServiceQuotaExceededException",
        )),
    }
}

/// An answer listing up to `max_results` (100 where not given, at most 1,000) of
/// `items` as `field`, from `next_token` (an earlier page's), with the token of the
/// page after, if any.
pub(super) fn page(
    field: &str,
    items: Vec<Value>,
    max_results: Option<usize>,
    next_token: Option<String>,
) -> Result<Value, SfnError> {
    let limit = page_size(max_results)?;
    let from = match next_token {
        Some(token) => token
            .parse::<usize>()
            .ok()
            .filter(|from| *from <= items.len())
            .ok_or_else(|| SfnError::invalid_token(&token))?,
        None => 0,
    };
    let to = (from + limit).min(items.len());
    let mut answer = json!({ field: items[from..to] });
    if to < items.len() {
        answer["nextToken"] = json!(to.to_string());
    }
    Ok(answer)
}

/// A page's size as a listing's `maxResults` asks it: 100 where not given (or 0),
/// at most 1,000.
pub(super) fn page_size(max_results: Option<usize>) -> Result<usize, SfnError> {
    match max_results {
        None | Some(0) => Ok(100),
        Some(limit @ 1..=1000) => Ok(limit),
        Some(_) => Err(SfnError::invalid(
            "maxResults",
            "Member must have value less than or equal to 1000",
        )),
    }
}

/// The machine and the version's number a version's ARN names.
pub(super) fn version_in(arn: &str) -> Result<(&str, u32), SfnError> {
    match name_in(arn)? {
        (name, Some(number)) => Ok((name, number.parse().map_err(|_| invalid_arn(arn))?)),
        (_, None) => Err(invalid_arn(arn)),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TagRequest {
    resource_arn: Option<String>,
    #[serde(default)]
    tags: Vec<Tag>,
    #[serde(default)]
    tag_keys: Vec<String>,
}

/// The machine or activity a tag request's `resourceArn` names.
fn tagged(arn: &str) -> Result<Catalogued<'_>, SfnError> {
    if let Ok((name, None)) = ArnKind::StateMachine.name_in(arn) {
        return Ok(Catalogued::Machine(name));
    }
    match ArnKind::Activity.name_in(arn) {
        Ok((name, None)) => Ok(Catalogued::Activity(name)),
        _ if arn.starts_with("arn:aws:states:") => Err(no_resource(arn)),
        _ => Err(invalid_arn(arn)),
    }
}

/// `ResourceNotFound`, for `arn`.
pub(super) fn no_resource(arn: &str) -> SfnError {
    SfnError::new("ResourceNotFound", format!("Resource not found: '{arn}'"))
}

/// `TagResource`, `UntagResource` and `ListTagsForResource`, by `operation`.
pub(super) async fn tags(app: &App, operation: &str, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: TagRequest = body(bytes)?;
    let arn = required(request.resource_arn, "resourceArn")?;
    let subject = tagged(&arn)?;
    let refused = |e| refused(e, no_resource(&arn), "TooManyTags");
    if operation == "ListTagsForResource" {
        let catalog = app.catalog(subject).await.map_err(refused)?;
        let listed: Vec<Tag> = (catalog.tags.into_iter())
            .map(|(key, value)| Tag { key, value })
            .collect();
        return Ok(json!({ "tags": listed }));
    }
    let (tags, keys) = (tag_map(request.tags), request.tag_keys);
    app.change_catalog(subject, |catalog, _| {
        if operation == "TagResource" {
            catalog.tag(tags.clone())
        } else {
            catalog.untag(&keys);
            Ok(())
        }
    })
    .await
    .map_err(refused)?;
    Ok(json!({}))
}
