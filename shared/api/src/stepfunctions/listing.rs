//! `ListExecutions`: a machine's executions (of one of its versions, or started
//! through one of its aliases), by status, page by page, from the store's listings
//! of tasks by state, and those that succeeded from its index of attributes (an
//! execution's `state_machine`).

use serde::Deserialize;
use serde_json::{Value, json};

use sas_core::app::{App, Listed};
use sas_core::ports::StoreError;
use sas_domain::machine::Status;
use sas_domain::machine::catalog::{Catalog, Qualifier};
use sas_domain::task::{Task, TaskState};
use sas_domain::workflow::STATE_MACHINE_ATTRIBUTE;

use super::catalog::{no_machine, page_size};
use super::executions::{status, summary};
use super::{SfnError, body, machines, required};
use crate::scope::Scope;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListRequest {
    state_machine_arn: Option<String>,
    map_run_arn: Option<String>,
    status_filter: Option<String>,
    redrive_filter: Option<String>,
    max_results: Option<usize>,
    next_token: Option<String>,
}

/// Which executions of a machine a listing keeps.
struct Wanted<'a> {
    machine: &'a str,
    qualifier: Option<Qualifier<'a>>,
    /// The published versions' revisions, for a version's listing.
    catalog: &'a Catalog,
    status: Option<Status>,
    /// `Some(true)`: redriven ones only; `Some(false)`: those never redriven.
    redriven: Option<bool>,
    /// Of an unscoped listing: an owner's task is named by its owner's scope, which
    /// an unscoped caller's ARNs cannot name, so it is not listed.
    unscoped: bool,
}

impl Wanted<'_> {
    fn keeps(&self, task: &Task) -> bool {
        let version = |number| {
            self.catalog
                .version(number)
                .is_some_and(|version| version.revision == task.workflow.version)
        };
        *task.workflow.name == *self.machine
            && task.is_execution()
            && !(self.unscoped && task.owner.is_some())
            && match self.qualifier {
                None => true,
                Some(Qualifier::Version(number)) => version(number),
                Some(Qualifier::Alias(alias)) => task.alias.as_deref() == Some(alias),
            }
            && self.status.is_none_or(|wanted| status(task) == wanted)
            && self.redriven.is_none_or(|wanted| (task.run > 1) == wanted)
    }
}

/// The status `statusFilter` names, if it names one, and the states whose tasks may
/// have it (every state without a filter; none for `PENDING_REDRIVE`, which no
/// execution here is: a redrive starts at once).
fn filtered(filter: Option<&str>) -> Result<(Option<Status>, &'static [TaskState]), SfnError> {
    let Some(text) = filter else {
        return Ok((None, &TaskState::ALL));
    };
    if text == "PENDING_REDRIVE" {
        return Ok((None, &[]));
    }
    let status: Status = serde_json::from_value(json!(text)).map_err(|_| {
        SfnError::invalid(
            "statusFilter",
            "Member must satisfy enum value set: [RUNNING, SUCCEEDED, FAILED, TIMED_OUT, ABORTED, PENDING_REDRIVE]",
        )
    })?;
    let states: &'static [TaskState] = match status {
        Status::Running => &[
            TaskState::Pending,
            TaskState::Processing,
            TaskState::Compensating,
        ],
        Status::Succeeded => &[TaskState::Processed],
        Status::Failed | Status::TimedOut | Status::Aborted => &[TaskState::Error],
    };
    Ok((Some(status), states))
}

/// Where a listing goes on: the state it lists (an index into the states listed)
/// and the store's cursor in it, written `INDEX:CURSOR`.
fn resumed(token: &str, states: usize) -> Result<(usize, Option<&str>), SfnError> {
    let (index, cursor) = token
        .split_once(':')
        .and_then(|(index, cursor)| Some((index.parse::<usize>().ok()?, cursor)))
        .filter(|(index, _)| *index < states)
        .ok_or_else(|| SfnError::invalid_token(token))?;
    Ok((index, (!cursor.is_empty()).then_some(cursor)))
}

/// `ListExecutions`: the executions of the machine (or of its version, or through
/// its alias) `stateMachineArn` names, state after state, each state's oldest
/// first; a page may hold fewer than `maxResults` and still have a `nextToken`.
pub(super) async fn list(app: &App, scope: Scope<'_>, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: ListRequest = body(bytes)?;
    if let Some(arn) = request.map_run_arn {
        return Err(SfnError::new(
            "ResourceNotFound",
            format!(
                "Map Run not found: '{arn}' (a distributed Map's items are child executions here, listed by their machine)"
            ),
        ));
    }
    let arn = required(request.state_machine_arn, "stateMachineArn")?;
    let (machine, qualifier) = machines::name_in(&arn)?;
    let qualifier = qualifier.map(Qualifier::of);
    let catalog = machines::kept_catalog(app, machine).await?;
    let found = match qualifier {
        None => (app.definition(machine).await)
            .map_err(|e| SfnError::unavailable(&e))?
            .is_some(),
        Some(Qualifier::Version(number)) => catalog.version(number).is_some(),
        Some(Qualifier::Alias(alias)) => catalog.alias(alias).is_some(),
    };
    if !found {
        return Err(no_machine(&arn));
    }
    let (status, states) = filtered(request.status_filter.as_deref())?;
    let redriven = match request.redrive_filter.as_deref() {
        None => None,
        Some("REDRIVEN") => Some(true),
        Some("NOT_REDRIVEN") => Some(false),
        Some(_) => {
            return Err(SfnError::invalid(
                "redriveFilter",
                "Member must satisfy enum value set: [REDRIVEN, NOT_REDRIVEN]",
            ));
        }
    };
    let limit = page_size(request.max_results)?;
    let (mut index, mut cursor) = match &request.next_token {
        Some(token) => resumed(token, states.len())?,
        None => (0, None),
    };
    let wanted = Wanted {
        machine,
        qualifier,
        catalog: &catalog,
        status,
        redriven,
        unscoped: scope.owner().is_none(),
    };
    let mut executions = Vec::new();
    let mut next = None;
    while let Some(&state) = states.get(index) {
        // Those that succeeded are not listed (they are many, and expire): they are
        // found by their machine's name, in the index of attributes.
        let listed = match state {
            TaskState::Processed => Listed::Attribute {
                name: STATE_MACHINE_ATTRIBUTE,
                value: machine,
                sealed_as: state,
            },
            state => Listed::State(state),
        };
        let keeps = |task: &Task| task.state == state && wanted.keeps(task);
        let listing = app
            .list_from(
                listed,
                limit - executions.len(),
                cursor,
                scope.owner(),
                Some(&keeps),
            )
            .await
            .map_err(|e| match e {
                StoreError::InvalidCursor(_) => {
                    SfnError::invalid_token(request.next_token.as_deref().unwrap_or_default())
                }
                e => SfnError::unavailable(&e),
            })?;
        executions
            .extend((listing.tasks().iter()).map(|task| summary(task, task.id.local(), &catalog)));
        let after = listing
            .cursor(listing.tasks().len())
            .map_err(|e| SfnError::unavailable(&e))?;
        match after {
            Some(after) => {
                next = Some(format!("{index}:{after}"));
                break;
            }
            None if index + 1 < states.len() && executions.len() == limit => {
                next = Some(format!("{}:", index + 1));
                break;
            }
            None => (index, cursor) = (index + 1, None),
        }
    }
    let mut answer = json!({ "executions": executions });
    if let Some(next) = next {
        answer["nextToken"] = json!(next);
    }
    Ok(answer)
}
