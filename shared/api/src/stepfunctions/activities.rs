//! Activities: created, described, listed and deleted, and polled by their workers
//! (`GetActivityTask`), each poll given a visit of a Task on the activity that no
//! other worker has taken ([`App::poll_activity`]), ended with its task token by
//! `SendTaskSuccess` or `SendTaskFailure` and kept alive by `SendTaskHeartbeat`.

use serde::Deserialize;
use serde_json::{Value, json};

use sas_core::app::App;
use sas_core::ports::Registration;
use sas_domain::machine::activities::activity_arn;

use super::machines::ArnKind;
use super::{SfnError, body, seconds};
use crate::tasks::MAX_WAIT;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ActivityRequest {
    name: Option<String>,
    activity_arn: Option<String>,
    worker_name: Option<String>,
}

/// Whether `name` is one Step Functions gives an activity: 1 to 80 letters, digits,
/// `-` and `_`.
fn is_activity_name(name: &str) -> bool {
    (1..=80).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The activity named in the request's `activityArn`.
fn named(request: &ActivityRequest) -> Result<&str, SfnError> {
    let arn = request
        .activity_arn
        .as_deref()
        .ok_or_else(|| SfnError::invalid("activityArn", "Member must not be null"))?;
    ArnKind::Activity.plain_name_in(arn)
}

/// An activity as Step Functions lists and describes one.
fn described(activity: &Registration) -> Value {
    json!({
        "activityArn": activity_arn(&activity.name),
        "name": activity.name,
        "creationDate": seconds(activity.created_at),
    })
}

/// The activity named in `request`, registered: `ActivityDoesNotExist` if not.
async fn registered(app: &App, request: &ActivityRequest) -> Result<Registration, SfnError> {
    let name = named(request)?;
    let found = app.activity(name).await;
    found
        .map_err(|e| SfnError::unavailable(&e))?
        .ok_or_else(|| {
            let arn = activity_arn(name);
            SfnError::new(
                "ActivityDoesNotExist",
                format!("Activity Does Not Exist: '{arn}'"),
            )
        })
}

/// `CreateActivity`: the activity, registered now or before (the call is idempotent).
pub(super) async fn create(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: ActivityRequest = body(bytes)?;
    let name = request
        .name
        .ok_or_else(|| SfnError::invalid("name", "Member must not be null"))?;
    if !is_activity_name(&name) {
        return Err(SfnError::new(
            "InvalidName",
            format!("Invalid Name: '{name}'"),
        ));
    }
    let activity = app
        .create_activity(&name)
        .await
        .map_err(|e| SfnError::unavailable(&e))?;
    let described = described(&activity);
    Ok(json!({
        "activityArn": described["activityArn"],
        "creationDate": described["creationDate"],
    }))
}

/// `DescribeActivity`.
pub(super) async fn describe(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: ActivityRequest = body(bytes)?;
    Ok(described(&registered(app, &request).await?))
}

/// `ListActivities`: every activity registered, by name, in one page.
pub(super) async fn list(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let _: Value = body(bytes)?;
    let activities = app
        .activities()
        .await
        .map_err(|e| SfnError::unavailable(&e))?;
    let listed: Vec<Value> = activities.iter().map(described).collect();
    Ok(json!({ "activities": listed }))
}

/// `DeleteActivity`: the visits offered or taken on it stay as they are, and one not
/// registered is deleted already.
pub(super) async fn delete(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: ActivityRequest = body(bytes)?;
    let name = named(&request)?;
    app.delete_activity(name)
        .await
        .map_err(|e| SfnError::unavailable(&e))?;
    Ok(json!({}))
}

/// `GetActivityTask`: a visit offered on the activity, taken for the worker, as soon
/// as there is one within the wait an API call may hold (20 s, under API Gateway's
/// limit); `{}` after it, and the worker polls again.
pub(super) async fn get_task(app: &App, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: ActivityRequest = body(bytes)?;
    let activity = registered(app, &request).await?;
    let worker = request.worker_name.as_deref().unwrap_or_default();
    let polled = app.poll_activity(&activity.name, worker, MAX_WAIT).await;
    match polled.map_err(|e| SfnError::unavailable(&e))? {
        Some(given) => Ok(json!({"taskToken": given.token, "input": given.input})),
        None => Ok(json!({})),
    }
}
