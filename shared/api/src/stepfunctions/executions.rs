//! Executions: tasks started, described and stopped in Step Functions' shapes. An
//! execution's name is its task's id, so a name sent again with the same input is
//! the same execution, and with another input `ExecutionAlreadyExists`, as in Step
//! Functions.

use serde::Deserialize;
use serde_json::{Value, json};

use sas_core::app::{ActionError, App, SubmitError, Submitted};
use sas_domain::decide::Refused;
use sas_domain::ids::TaskId;
use sas_domain::machine::catalog::{Catalog, Qualifier};
use sas_domain::machine::{Status, execution_arn, is_redrivable, machine_arn, place};
use sas_domain::payload::PayloadRef;
use sas_domain::submission::Submission;
use sas_domain::task::{Order, Request, Task, TaskState};
use sas_domain::trace::TraceContext;

use super::{SfnError, body, machines, required, seconds};
use crate::error::ApiError;
use crate::scope::Scope;
use crate::{MAX_ANSWER_BYTES, MAX_WAIT};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartRequest {
    state_machine_arn: Option<String>,
    name: Option<String>,
    input: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecutionRequest {
    execution_arn: Option<String>,
    /// `StopExecution`'s.
    error: Option<String>,
    /// `StopExecution`'s.
    cause: Option<String>,
}

/// The project's `error` of an execution named by `arn`.
fn of_execution(error: ApiError) -> SfnError {
    SfnError::from_api(error, "ExecutionDoesNotExist")
}

/// `StartExecution`: a task of the machine, its id the execution's name (a new id
/// without one), its input the execution's.
pub(super) async fn start(
    app: &App,
    scope: Scope<'_>,
    bytes: &[u8],
    trace: Option<&TraceContext>,
) -> Result<Value, SfnError> {
    let (started, _) = started(app, scope, body(bytes)?, trace).await?;
    Ok(started)
}

/// `StartSyncExecution`: started as `StartExecution` starts it, then waited for, as
/// long as a request may wait ([`MAX_WAIT`]); one still running then is answered
/// `TIMED_OUT`, and goes on as a standard execution (`DescribeExecution` follows it).
pub(super) async fn start_sync(
    app: &App,
    scope: Scope<'_>,
    bytes: &[u8],
    trace: Option<&TraceContext>,
) -> Result<Value, SfnError> {
    let (started, id) = started(app, scope, body(bytes)?, trace).await?;
    let ended = app.wait_final(&id, MAX_WAIT).await;
    let found = match ended.map_err(|e| of_execution(e.into()))? {
        Some(task) if task.state.is_final() => app.task_with_order(&id).await,
        _ => Ok(None),
    };
    let Some((task, order)) = found.map_err(|e| of_execution(e.into()))? else {
        let mut timed_out = started;
        timed_out["status"] = json!(Status::TimedOut.as_str());
        return Ok(timed_out);
    };
    // Its answer names no version, as Step Functions' does not (the fields it has
    // beyond Step Functions', an alias and a redrive count, clients pass over).
    Ok(described(&task, &order, id.local(), &Catalog::default()))
}

/// An execution started: `StartExecution`'s answer, and its task's id.
async fn started(
    app: &App,
    scope: Scope<'_>,
    request: StartRequest,
    trace: Option<&TraceContext>,
) -> Result<(Value, TaskId), SfnError> {
    let arn = required(request.state_machine_arn, "stateMachineArn")?;
    let name = request
        .name
        .unwrap_or_else(|| TaskId::generate().as_str().to_owned());
    let workflow = machines::named(app, &arn, &name).await?.workflow;
    let alias = machines::name_in(&arn)?
        .1
        .and_then(|q| Qualifier::of(q).alias());
    let text = request.input.as_deref().unwrap_or("{}");
    let input: Value = serde_json::from_str(text).map_err(|e| {
        SfnError::new(
            "InvalidExecutionInput",
            format!("Invalid execution input: {e}"),
        )
    })?;
    let id = scope
        .id(&name)
        .ok()
        .filter(|id| !id.is_child())
        .ok_or_else(|| SfnError::new("InvalidName", format!("Invalid Name: '{name}'")))?;
    let submission = Submission {
        owner: scope.owner().cloned(),
        alias: alias.map(str::to_owned),
        trace: trace.cloned(),
        ..Submission::new(id.clone(), input)
    };
    let execution = execution_arn(&workflow.name, &name);
    let refused = |error: SubmitError| match error {
        SubmitError::Conflict(_) => SfnError::new(
            "ExecutionAlreadyExists",
            format!("Execution Already Exists: '{execution}'"),
        ),
        error => SfnError::from_api(error.into(), "StateMachineDoesNotExist"),
    };
    let started_at = if app.buffers_submissions() {
        app.accept_on(workflow, submission).await.map_err(refused)?;
        app.now()
    } else {
        let submitted = app.submit_on(workflow, submission).await;
        let (Submitted::Created(task) | Submitted::Replayed(task)) = submitted.map_err(refused)?;
        task.created_at
    };
    let started = json!({ "executionArn": execution, "startDate": seconds(started_at) });
    Ok((started, id))
}

/// The task an execution's ARN names (`arn:aws:states:REGION:ACCOUNT:execution:
/// MACHINE:NAME`), with its order, and its name.
pub(super) async fn named(
    app: &App,
    scope: Scope<'_>,
    arn: &str,
) -> Result<(Task, Order, String), SfnError> {
    read_named(app, scope, arn, false).await
}

/// [`named`], read whole, or as the store keeps it (`as_stored`: each value kept
/// apart as its reference).
async fn read_named(
    app: &App,
    scope: Scope<'_>,
    arn: &str,
    as_stored: bool,
) -> Result<(Task, Order, String), SfnError> {
    let invalid = || SfnError::new("InvalidArn", format!("Invalid Arn: '{arn}'"));
    let rest = arn.strip_prefix("arn:aws:states:").ok_or_else(invalid)?;
    let parts: Vec<&str> = rest.split(':').collect();
    let [region, account, "execution", machine, name] = parts.as_slice() else {
        return Err(invalid());
    };
    let missing = || {
        SfnError::new(
            "ExecutionDoesNotExist",
            format!("Execution Does Not Exist: '{arn}'"),
        )
    };
    if format!("{region}:{account}") != place() {
        return Err(missing());
    }
    let id = scope.id(name).map_err(|_| missing())?;
    let found = if as_stored {
        app.task_with_order_as_stored(&id).await
    } else {
        app.task_with_order(&id).await
    };
    let found = found.map_err(|e| of_execution(e.into()))?;
    match found {
        Some((task, order)) if *task.workflow.name == **machine => {
            Ok((task, order, (*name).to_owned()))
        }
        _ => Err(missing()),
    }
}

/// An execution's status: its machine's, or of a workflow's task, its state's.
pub(super) fn status(task: &Task) -> Status {
    if let Some(run) = &task.machine {
        return run.status;
    }
    match task.state {
        TaskState::Processed => Status::Succeeded,
        TaskState::Error if task.cancelled.is_some() => Status::Aborted,
        TaskState::Error => Status::Failed,
        _ => Status::Running,
    }
}

/// What `ListExecutions` and `DescribeExecution` both say of `task`, named `name`,
/// its machine's published versions in `catalog`.
pub(super) fn summary(task: &Task, name: &str, catalog: &Catalog) -> Value {
    let machine = &task.workflow.name;
    let status = status(task);
    let mut summary = json!({
        "executionArn": execution_arn(machine, name),
        "stateMachineArn": machine_arn(machine),
        "name": name,
        "status": status.as_str(),
        "startDate": seconds(task.created_at),
        "redriveCount": task.run.saturating_sub(1),
    });
    if status != Status::Running {
        summary["stopDate"] = seconds(task.updated_at);
    }
    if let Some(last) = task.resubmissions.last() {
        summary["redriveDate"] = seconds(last.request.at);
    }
    if let Some(version) = catalog.version_of_revision(task.workflow.version) {
        summary["stateMachineVersionArn"] = json!(machines::qualified_arn(machine, version.number));
    }
    if let Some(alias) = &task.alias {
        summary["stateMachineAliasArn"] = json!(machines::qualified_arn(machine, alias));
    }
    summary
}

/// `DescribeExecution`'s answer for `task`.
fn described(task: &Task, order: &Order, name: &str, catalog: &Catalog) -> Value {
    let mut described = summary(task, name, catalog);
    let status = status(task);
    described["input"] = json!(order.input.to_string());
    described["inputDetails"] = json!({"included": true});
    described["redriveStatus"] = json!(if is_redrivable(task) {
        "REDRIVABLE"
    } else {
        "NOT_REDRIVABLE"
    });
    let run = task.machine.as_deref();
    if let Some(output) = run.and_then(|run| run.output.as_deref()) {
        described["output"] = json!(output.to_string());
        described["outputDetails"] = json!({"included": true});
    }
    let error = run
        .and_then(|run| run.error.as_ref())
        .or(task.error.as_ref());
    if let Some(error) = error.filter(|_| status != Status::Succeeded) {
        described["error"] = json!(error);
    }
    if let Some(cause) = run.and_then(|run| run.cause.as_ref()) {
        described["cause"] = json!(cause);
    }
    within_an_answer(&mut described);
    described
}

/// `described` without its input, then its output, the larger first, while it is over
/// what an answer carries (a Lambda function answers at most 6 MB): each left out is
/// marked so (`"included": false`), as Step Functions' details say; the task's own view
/// names it by reference, and `GET /tasks/{id}/payloads/{sha256}` reads it.
fn within_an_answer(described: &mut Value) {
    let size = |field: &str| described[field].as_str().map_or(0, str::len);
    let mut fields = ["input", "output"];
    fields.sort_by_key(|field| std::cmp::Reverse(size(field)));
    for field in fields {
        if described.to_string().len() <= MAX_ANSWER_BYTES {
            return;
        }
        left_out(described, field);
    }
}

/// `described` without `field`, marked so in its details (`inputDetails`).
fn left_out(described: &mut Value, field: &str) {
    if let Some(object) = described.as_object_mut() {
        object.remove(field);
    }
    described[format!("{field}Details")] = json!({"included": false});
}

/// `DescribeExecution`, with the published version the execution runs on, where
/// its revision is one.
pub(super) async fn describe(app: &App, scope: Scope<'_>, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: ExecutionRequest = body(bytes)?;
    let arn = required(request.execution_arn, "executionArn")?;
    let (task, order, name) = read_named(app, scope, &arn, true).await?;
    let catalog = machines::kept_catalog(app, &task.workflow.name).await?;
    let mut described = described(&task, &order, &name, &catalog);
    // An input or output kept apart is read, it alone, where the answer carries it,
    // the smaller first; and left out where it cannot: no value is read to be left out.
    let output = task
        .machine
        .as_deref()
        .and_then(|run| run.output.as_deref());
    let mut apart: Vec<(&str, PayloadRef)> = [("input", Some(&*order.input)), ("output", output)]
        .into_iter()
        .filter_map(|(field, value)| Some((field, PayloadRef::in_value(value?)?)))
        .collect();
    apart.sort_by_key(|(_, reference)| reference.bytes);
    for (field, reference) in apart {
        let shown = described[field].as_str().map_or(0, str::len);
        let without = described.to_string().len().saturating_sub(shown) as u64;
        if without + reference.bytes > MAX_ANSWER_BYTES as u64 {
            left_out(&mut described, field);
            continue;
        }
        let value = (app.value_of(&task, &reference).await)
            .map_err(|error| SfnError::unavailable(&error))?;
        described[field] = json!(value.to_string());
    }
    within_an_answer(&mut described);
    Ok(described)
}

/// `DescribeStateMachineForExecution`: the definition the execution runs, the
/// version it started on.
pub(super) async fn machine_of(
    app: &App,
    scope: Scope<'_>,
    bytes: &[u8],
) -> Result<Value, SfnError> {
    let request: ExecutionRequest = body(bytes)?;
    let arn = required(request.execution_arn, "executionArn")?;
    let (task, _, _) = named(app, scope, &arn).await?;
    let workflow = machines::version_of(app, &task.workflow)
        .await?
        .ok_or_else(|| {
            SfnError::new(
                "StateMachineDoesNotExist",
                format!(
                    "State Machine Does Not Exist: '{}'",
                    machine_arn(&task.workflow.name)
                ),
            )
        })?;
    let kind = machines::machine_type(app, &workflow.name).await?;
    let mut described = machines::described(&workflow, None, kind);
    described["updateDate"] = seconds(task.created_at);
    Ok(described)
}

/// `StopExecution`: the task cancelled (a state machine's aborted, with the `error`
/// and `cause` given); one that has already ended answers when it did.
pub(super) async fn stop(app: &App, scope: Scope<'_>, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: ExecutionRequest = body(bytes)?;
    let arn = required(request.execution_arn, "executionArn")?;
    let (task, _, _) = named(app, scope, &arn).await?;
    let by = Request {
        by: scope.actor(),
        at: app.now(),
        batch: None,
    };
    let reason = (request.error, request.cause);
    match app.stop_execution(&task.id, by, reason).await {
        Ok(_) => Ok(json!({ "stopDate": seconds(app.now()) })),
        Err(ActionError::Refused(Refused::Ended(..))) => {
            Ok(json!({ "stopDate": seconds(task.updated_at) }))
        }
        Err(error) => Err(of_execution(error.into())),
    }
}

/// `RedriveExecution`: the execution runs again from the state where it stopped; one
/// that is running, succeeded, or is a branch of another is `ExecutionNotRedrivable`.
pub(super) async fn redrive(app: &App, scope: Scope<'_>, bytes: &[u8]) -> Result<Value, SfnError> {
    let request: ExecutionRequest = body(bytes)?;
    let arn = required(request.execution_arn, "executionArn")?;
    let (task, _, _) = named(app, scope, &arn).await?;
    let now = app.now();
    let redrive = Request {
        by: scope.actor(),
        at: now,
        batch: None,
    };
    match app.redrive_execution(&task.id, redrive).await {
        Ok(_) => Ok(json!({ "redriveDate": seconds(now) })),
        Err(ActionError::Refused(
            refused
            @ (Refused::NotRedrivable | Refused::NotInError(_) | Refused::RunByItsParent(_)),
        )) => Err(SfnError::new(
            "ExecutionNotRedrivable",
            format!("Execution is not redrivable: {refused}"),
        )),
        Err(error) => Err(of_execution(error.into())),
    }
}
