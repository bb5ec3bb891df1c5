//! `RepairExecution`, this engine's operation beside `RedriveExecution`: an
//! operator's repair of an execution, as `POST /operator/tasks/{id}/repair` makes it.
//! The execution runs again from the state where it stopped, or from `fromState` (a
//! state it entered), that state's input patched with `input`; `dryRun` answers what
//! would run again and changes nothing.

use serde::Deserialize;
use serde_json::{Value, json};

use sas_core::app::{ActionError, App};
use sas_domain::decide::Refused;
use sas_domain::task::Request;

use super::executions::named;
use super::{SfnError, body, required, seconds};
use crate::bodies::Patches;
use crate::scope::Scope;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RepairRequest {
    execution_arn: Option<String>,
    /// The patch of the state's input, as JSON text: a JSON Merge Patch (an object)
    /// or a JSON Patch (an array of operations).
    input: Option<String>,
    /// The state to run again from, rather than the one it stopped at.
    from_state: Option<String>,
    /// Why, kept in the execution's task and told with its notifications.
    reason: Option<String>,
    #[serde(default)]
    dry_run: bool,
}

/// `RepairExecution`: `{"redriveDate", "runAgain"}`, or for a dry run `{"runAgain"}`.
pub(super) async fn repair(app: &App, scope: Scope<'_>, bytes: &[u8]) -> Result<Value, SfnError> {
    let asked: RepairRequest = body(bytes)?;
    let arn = required(asked.execution_arn, "executionArn")?;
    let (task, _, _) = named(app, scope, &arn).await?;
    let input = (asked.input.as_deref())
        .map(serde_json::from_str::<Value>)
        .transpose()
        .map_err(|e| SfnError::invalid("input", &format!("JSON text of a patch: {e}")))?;
    let now = app.now();
    let request = Request {
        by: scope.actor(),
        at: now,
        batch: None,
    };
    let patches = Patches {
        input,
        from: asked.from_state,
        reason: asked.reason,
        ..Patches::default()
    };
    let repair = crate::operator::repair_of(request, patches)
        .map_err(|error| SfnError::from_api(error, "ExecutionDoesNotExist"))?;
    if asked.dry_run {
        let plan = app.plan_repair(&task.id, &repair).await.map_err(refused)?;
        return Ok(json!({ "runAgain": plan.run_again }));
    }
    let repaired = app.repair(&task.id, repair).await.map_err(refused)?;
    let note = (repaired.resubmissions.last()).and_then(|r| r.repair.as_ref());
    let run_again = note.map(|note| note.run_again.clone()).unwrap_or_default();
    Ok(json!({ "redriveDate": seconds(now), "runAgain": run_again }))
}

/// A repair refused, as Step Functions would name it.
fn refused(error: ActionError) -> SfnError {
    match error {
        ActionError::Refused(
            refused @ (Refused::NotRedrivable
            | Refused::NotRepairable(_)
            | Refused::StillRunning(_)
            | Refused::RunByItsParent(_)),
        ) => SfnError::new(
            "ExecutionNotRedrivable",
            format!("Execution is not redrivable: {refused}"),
        ),
        ActionError::Refused(Refused::NoSuchStep(state)) => SfnError::invalid(
            "fromState",
            &format!("a state of the machine, not '{state}'"),
        ),
        ActionError::Refused(Refused::Patch(field, why)) => {
            let field = if field == "from" {
                "fromState"
            } else {
                field.as_str()
            };
            SfnError::invalid(field, &why)
        }
        error => SfnError::from_api(error.into(), "ExecutionDoesNotExist"),
    }
}
