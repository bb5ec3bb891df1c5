//! How the API shows tasks, workflows and callers: the answers' types, from which
//! the OpenAPI document's schemas are generated.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use sas_core::app::BulkReport;
use sas_core::ports::DeadLetter;
use sas_domain::callback::Token;
use sas_domain::ids::{Owner, QueueName};
use sas_domain::machine::Status;
use sas_domain::messages::Outcome;
use sas_domain::task::{
    Actor, Children, EarlierInput, Order, RepairNote, Request, Step, StepState, Task, TaskState,
    Waiting, WorkflowRef,
};

use sas_domain::kinds::{KindView, Summary};
use sas_domain::workflow::{Branch, StepDefinition, Workflow};

use crate::ApiResponse;
use crate::history::{EventView, time};

/// Who a [`TaskView`] is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// The task's owner: its id as the owner named it.
    Owner,
    /// An operator: its full id, and its owner.
    Operator,
}

/// A task as the API shows it: its state and steps, times in RFC 3339.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TaskView<'a> {
    /// The task's id: as its owner named it, or in full on the operator's routes.
    id: &'a str,
    /// Who submitted it (on the operator's routes, when callers are authenticated).
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<&'a Owner>,
    /// Bumped by every change.
    version: u64,
    /// The workflow and the version it runs.
    workflow: &'a WorkflowRef,
    /// The pattern's ProcessState.
    state: TaskState,
    /// The scheduler that holds it, while one does.
    locked_by: Option<&'a str>,
    /// When its current step (or its pickup) must be done by.
    complete_by: Option<String>,
    /// Leases expired in the current run, all steps together.
    failure_count: u32,
    /// 1, and one more at each resubmission.
    run: u32,
    /// Why it failed, or that it was cancelled. Of a state machine's execution, its
    /// error as Step Functions names it (`States.TaskFailed`, a Fail state's `Error`).
    error: Option<&'a str>,
    /// Of a state machine's execution: where it is, in Step Functions' words
    /// (`RUNNING`, `SUCCEEDED`, `FAILED`, `TIMED_OUT`, `ABORTED`).
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status>,
    /// Of a state machine's execution that succeeded: its output.
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<&'a Value>,
    /// Of a state machine's execution that failed: its cause, as Step Functions gives
    /// it.
    #[serde(skip_serializing_if = "Option::is_none")]
    cause: Option<&'a str>,
    /// In Error: steps whose effect may be in place and that nothing undoes (no
    /// compensation). A person decides what became of them; a resubmission without
    /// an edit calls them again under the same idempotency keys.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    not_undone: &'a [String],
    /// Its workflow's search attributes, by name, as its input and its steps' results
    /// have them.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    attributes: &'a BTreeMap<String, Value>,
    /// The caller's queue for status messages.
    notify: Option<&'a QueueName>,
    /// The request to stop it, if one came.
    #[serde(skip_serializing_if = "Option::is_none")]
    cancelled: Option<RequestView<'a>>,
    /// The request to pause it, while it is paused: it starts no new step until it
    /// is resumed.
    #[serde(skip_serializing_if = "Option::is_none")]
    paused: Option<RequestView<'a>>,
    /// When it may start, if its submission said: it is Pending until then.
    #[serde(skip_serializing_if = "Option::is_none")]
    start_at: Option<String>,
    /// Where its calls wait for a limited service, which goes first: 1 (first) to 5.
    priority: u8,
    /// The resubmissions that started each run after the first.
    resubmissions: Vec<ResubmissionView<'a>>,
    /// When later submissions for its id with a different request were refused
    /// (buffered ingestion: too late for a 409).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    refused_submissions: Vec<String>,
    /// Its current input (when one task is read).
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<&'a Value>,
    /// The inputs edited resubmissions replaced (when one task is read).
    #[serde(skip_serializing_if = "Option::is_none")]
    earlier_inputs: Option<&'a [EarlierInput]>,
    /// What happened to it, oldest first: its last events (when one task is read).
    #[serde(skip_serializing_if = "Option::is_none")]
    history: Option<Vec<EventView>>,
    /// When it was submitted.
    created_at: Option<String>,
    /// When it last changed.
    updated_at: Option<String>,
    /// Of a child task: the parent's step that started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: Option<ParentView<'a>>,
    /// Its steps, in workflow order.
    steps: Vec<StepView<'a>>,
}

/// A step as the API shows it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StepView<'a> {
    /// The step's name in the workflow.
    name: &'a str,
    /// Where it is.
    state: StepState,
    /// Times it (or its compensation) was sent to its agent.
    attempt: u32,
    /// Times its complete-by passed in this run.
    failure_count: u32,
    /// Times its compensation's complete-by passed.
    compensation_failure_count: u32,
    /// When its current attempt must be done by.
    complete_by: Option<String>,
    /// When its current attempt was sent.
    started_at: Option<String>,
    /// When it reached its state.
    finished_at: Option<String>,
    /// What the remote service answered.
    output: Option<&'a Value>,
    /// Why it or its compensation failed.
    error: Option<&'a str>,
    /// When it is sent again, while it waits for its retry beside other branches.
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_at: Option<String>,
    /// The branches of parallel steps it is in, outermost first (in the view of one
    /// task; empty for a step of the workflow's main line).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    within: &'a [Branch],
    /// Of a step that starts child tasks: how many, where they are, and where to list
    /// them (`GET /tasks/{id}/children?step=<name>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    children: Option<&'a Children>,
    /// Of a running step that waits: for its timer, its callback or its service's
    /// slots, and until when (or since when).
    #[serde(skip_serializing_if = "Option::is_none")]
    waiting: Option<WaitingView>,
    /// Of a step whose callback came while its call was still out: what the callback
    /// said. The step ends so once the call is settled (answered, or its lease over).
    #[serde(skip_serializing_if = "Option::is_none")]
    called_back: Option<&'a Outcome>,
    /// How long its last call waited for its service's slots, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    waited_ms: Option<u64>,
}

/// What a running step waits for.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WaitingView {
    /// `timer`, `callback` or `slot` (its service's limit: its call waits its turn).
    #[serde(rename = "for")]
    waits_for: &'static str,
    /// When the wait ends: the timer's instant, or the callback's timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    until: Option<String>,
    /// Since when a call waits for its slots.
    #[serde(skip_serializing_if = "Option::is_none")]
    since: Option<String>,
    /// Of a callback: the token that ends it (`POST /callbacks/{token}`), or its
    /// owner's route without it (`POST /tasks/{id}/steps/{step}/complete`).
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<String>,
}

impl WaitingView {
    fn of(task: &Task, index: usize, step: &Step) -> Option<Self> {
        match step.waiting? {
            Waiting::Timer => Some(Self {
                waits_for: "timer",
                until: Some(time(step.complete_by)?),
                since: None,
                token: None,
            }),
            Waiting::Callback { until, after_call } => Some(Self {
                waits_for: "callback",
                until: Some(until.to_rfc3339()),
                since: None,
                token: Token::issue(task, index, after_call),
            }),
            Waiting::Slot { since } => Some(Self {
                waits_for: "slot",
                until: None,
                since: Some(since.to_rfc3339()),
                token: None,
            }),
        }
    }
}

/// What the holder of a callback's token is told: the step, and where it is now.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CallbackView<'a> {
    /// The step the token is for.
    step: &'a str,
    /// Where it is now: Processed once its output is taken, Error (or Compensated,
    /// or Processing while it waits on) otherwise.
    state: StepState,
    /// While it waits on: when its next heartbeat is due, or its timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    complete_by: Option<String>,
}

impl<'a> CallbackView<'a> {
    /// The view of the step of `task` that `token` is for (the task it names).
    #[must_use]
    pub fn of(task: &'a Task, token: &str) -> Option<Self> {
        let step = task.steps.get(Token::parse(token)?.step)?;
        Some(Self {
            step: &step.name,
            state: step.state,
            complete_by: step.waiting.and(time(step.complete_by)),
        })
    }
}

/// The step of a parent task that started a child task.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ParentView<'a> {
    /// The parent's id, as the task's ids are shown.
    task_id: &'a str,
    /// The step's name.
    step: Option<&'a str>,
    /// The item the child is for, from 0.
    item: u32,
}

/// Who asked for an action on a task, and when.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RequestView<'a> {
    /// The task's owner, or an operator.
    by: Actor,
    /// When.
    at: String,
    /// The bulk action that took the task, if one did: an operator's name for it,
    /// shown to operators only.
    #[serde(skip_serializing_if = "Option::is_none")]
    batch: Option<&'a str>,
}

impl<'a> RequestView<'a> {
    fn of(request: &'a Request, view: View) -> Self {
        Self {
            by: request.by,
            at: request.at.to_rfc3339(),
            batch: request.batch.as_deref().filter(|_| view == View::Operator),
        }
    }
}

/// A resubmission, and the run it started.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ResubmissionView<'a> {
    /// The run it started.
    run: u32,
    /// Who asked, and when.
    #[serde(flatten)]
    request: RequestView<'a>,
    /// Whether the run has a new input.
    edited: bool,
    /// Of a repair: why, its patches, the step it ran from, the steps it ran again.
    #[serde(skip_serializing_if = "Option::is_none")]
    repair: Option<&'a RepairNote>,
}

impl<'a> TaskView<'a> {
    /// The view of `task`, for `view`.
    #[must_use]
    pub fn of(task: &'a Task, view: View) -> Self {
        let (id, owner) = match view {
            View::Owner => (task.id.local(), None),
            View::Operator => (task.id.as_str(), task.owner.as_ref()),
        };
        Self {
            id,
            owner,
            version: task.version,
            workflow: &task.workflow,
            state: task.state,
            locked_by: task.locked_by.as_deref(),
            complete_by: time(task.complete_by),
            failure_count: task.failure_count,
            run: task.run,
            error: task.error.as_deref(),
            status: task.machine.as_ref().map(|run| run.status),
            output: task.machine.as_ref().and_then(|run| run.output.as_deref()),
            cause: task.machine.as_ref().and_then(|run| run.cause.as_deref()),
            not_undone: &task.not_undone,
            attributes: &task.attributes,
            notify: task.notify.as_ref(),
            cancelled: task.cancelled.as_ref().map(|r| RequestView::of(r, view)),
            paused: task.paused.as_ref().map(|r| RequestView::of(r, view)),
            start_at: time(task.start_at),
            priority: task.priority,
            resubmissions: task
                .resubmissions
                .iter()
                .map(|r| ResubmissionView {
                    run: r.run,
                    request: RequestView::of(&r.request, view),
                    edited: r.edited,
                    repair: r.repair.as_ref(),
                })
                .collect(),
            refused_submissions: task.refused.iter().map(|r| r.at.to_rfc3339()).collect(),
            input: None,
            earlier_inputs: None,
            history: None,
            created_at: time(Some(task.created_at)),
            updated_at: time(Some(task.updated_at)),
            steps: task
                .steps
                .iter()
                .enumerate()
                .map(|(index, s)| StepView {
                    name: &s.name,
                    state: s.state,
                    attempt: s.attempt,
                    failure_count: s.failure_count,
                    compensation_failure_count: s.compensation_failure_count,
                    complete_by: time(s.complete_by),
                    started_at: time(s.started_at),
                    finished_at: time(s.finished_at),
                    output: s.output.as_deref(),
                    error: s.error.as_deref(),
                    retry_at: time(s.retry_at),
                    within: &[],
                    children: s.children.as_ref(),
                    waiting: WaitingView::of(task, index, s),
                    called_back: s.called_back.as_ref(),
                    waited_ms: s.waited_ms,
                })
                .collect(),
            parent: task.parent.as_ref().map(|link| {
                let parent = match view {
                    View::Owner => link.task.local(),
                    View::Operator => link.task.as_str(),
                };
                // The step's name is the id's, after the parent's.
                let step = task.id.as_str()[link.task.as_str().len()..]
                    .split(sas_domain::ids::CHILD_SEPARATOR)
                    .nth(1);
                ParentView {
                    task_id: parent,
                    step,
                    item: link.item,
                }
            }),
        }
    }

    /// The view of one task read with its order data: its inputs too, and, with its
    /// workflow's definition, the branches each step is in.
    #[must_use]
    pub fn with_order(
        task: &'a Task,
        order: &'a Order,
        workflow: Option<&'a Workflow>,
        view: View,
    ) -> Self {
        let mut view = Self {
            input: Some(&order.input),
            earlier_inputs: Some(&order.earlier),
            history: Some(task.history.iter().map(EventView::of).collect()),
            ..Self::of(task, view)
        };
        if let Some(workflow) = workflow.filter(|w| w.steps.len() == view.steps.len()) {
            for (step, definition) in view.steps.iter_mut().zip(&workflow.steps) {
                step.within = &definition.within;
            }
        }
        view
    }
}

/// A page of a listing.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PageView<'a> {
    /// The tasks.
    pub tasks: Vec<TaskView<'a>>,
    /// The cursor of the next page (`after=`), if there is one.
    pub next: Option<String>,
}

/// A page of the child tasks a step started, by item.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ChildrenView<'a> {
    /// The step.
    pub step: &'a str,
    /// How many children it has, and where they are.
    pub counts: &'a Children,
    /// The children, by item (a child whose creation is not yet known is left out).
    pub tasks: Vec<TaskView<'a>>,
    /// The cursor of the next page (`after=`): the last item of this one.
    pub next: Option<String>,
}

/// The workflows a caller may submit.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WorkflowsView {
    /// Each version of each, by name then version.
    pub workflows: Vec<WorkflowView>,
}

/// A workflow definition: its input and its steps.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WorkflowView {
    /// Its name.
    name: String,
    /// Its version.
    version: u32,
    /// What it does.
    description: String,
    /// The input's fields, and their JSON types.
    input: Value,
    /// Its steps, in order.
    steps: Vec<WorkflowStepView>,
}

/// A step of a workflow definition: where it sits, and what its kind has it do (a
/// call's service and settings, a child workflow's, a map's, a timer's or a wait's).
#[derive(Debug, Serialize, JsonSchema)]
pub struct WorkflowStepView {
    /// Its name.
    name: String,
    /// Its kind, what it does and what undoes it, in a few words.
    #[serde(flatten)]
    summary: Summary,
    /// Its kind's settings, as written.
    #[serde(flatten)]
    settings: KindView,
    /// The steps that must be Processed before it is sent, by position from 0.
    after: Vec<usize>,
    /// The branches of parallel steps it is in, outermost first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    within: Vec<Branch>,
    /// The conditions it runs under (CEL), outermost first: a parallel step's
    /// around it, then its own `when`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    when: Vec<String>,
}

impl WorkflowView {
    /// The view of `workflow`.
    #[must_use]
    pub fn of(w: &Workflow) -> Self {
        Self {
            name: w.name.clone(),
            version: w.version,
            description: w.description.clone(),
            input: serde_json::json!(w.input),
            steps: w.steps.iter().map(WorkflowStepView::of).collect(),
        }
    }
}

impl WorkflowStepView {
    fn of(s: &StepDefinition) -> Self {
        Self {
            name: s.name.clone(),
            summary: s.kind.summary(),
            settings: s.kind.view(),
            after: s.after.clone(),
            within: s.within.clone(),
            when: s
                .when
                .iter()
                .map(|guard| guard.condition.source().to_owned())
                .collect(),
        }
    }
}

/// Who the API takes the caller for.
#[derive(Debug, Serialize, JsonSchema)]
pub struct MeView {
    /// The principal its tasks belong to; null when the API authenticates no one.
    pub owner: Option<Owner>,
    /// Whether it may use the operator's routes.
    pub operator: bool,
    /// How its notification queues' names must end; null when the API
    /// authenticates no one.
    pub notify_queue_suffix: Option<String>,
}

/// What a bulk action did in one call.
#[derive(Debug, Serialize, JsonSchema)]
pub struct BulkView {
    /// The batch, as named in the request.
    pub batch: String,
    /// What it did.
    #[serde(flatten)]
    pub report: BulkReport,
}

/// The services the workflows call, and what limits their calls.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ServicesView {
    /// The key whose gates keyed limits show, as asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// By name.
    pub services: Vec<sas_core::app::ServiceReport>,
}

/// The dead-letter queues.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DeadLetterQueuesView {
    /// One for each of the pattern's queues.
    pub queues: Vec<DeadLetterQueueView>,
}

/// A dead-letter queue.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DeadLetterQueueView {
    /// The role of the queue whose messages it keeps: scheduler, agent-requests,
    /// agent-responses, or ingest (accepted submissions whose task was not created;
    /// drained in either ingestion mode).
    pub queue: &'static str,
    /// That queue's name.
    pub source: String,
    /// How many messages it holds (approximately, on SQS).
    pub messages: u64,
}

/// Messages of a dead-letter queue.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DeadLettersView {
    /// The role of the queue whose messages they were.
    pub queue: String,
    /// The messages (on SQS, a sample of a queue of more than a few tens).
    pub messages: Vec<DeadLetterView>,
}

/// A message that could not be handled.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DeadLetterView {
    /// Its id, to redrive it by.
    id: String,
    /// The task it is about, when its body names one.
    task_id: Option<String>,
    /// Its body: JSON when it is, else its text.
    body: Value,
}

impl DeadLetterView {
    /// The view of `message`.
    #[must_use]
    pub fn of(message: DeadLetter) -> Self {
        let body = serde_json::from_str(&message.body).unwrap_or(Value::String(message.body));
        // A buffered submission names its task inside the submission.
        let task_id = body
            .get("task_id")
            .or_else(|| body.pointer("/submission/id"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Self {
            id: message.id,
            task_id,
            body,
        }
    }
}

/// What a redrive did.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RedriveView {
    /// The role of the queue the messages went back to.
    pub queue: String,
    /// How many went back.
    pub redriven: usize,
}

/// A submission accepted in buffered ingestion, whose task is created shortly: until
/// then, reading it answers 404, or waits with `?wait=`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AcceptedView<'a> {
    /// The task's id, as the caller reads it.
    pub id: &'a str,
    /// The workflow and the version it will run.
    pub workflow: &'a WorkflowRef,
    /// `accepted`: queued, not yet created.
    pub status: &'static str,
    /// When it was accepted.
    pub accepted_at: String,
}

/// The answer to `POST /tasks/batch`: one result for each submission, in their order.
#[derive(Debug, Serialize, JsonSchema)]
pub struct BatchView {
    /// What each submission alone would have been answered.
    pub results: Vec<BatchResultView>,
}

/// One submission's answer in a batch: its status, Location and body as `POST
/// /tasks` would have answered it (202 with the task or its acceptance, or an error).
#[derive(Debug, Serialize, JsonSchema)]
pub struct BatchResultView {
    /// The HTTP status its own request would have had.
    pub status: u16,
    /// Where its task is read, when accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The body its own request would have had.
    pub body: Value,
}

impl BatchView {
    /// The answers, as they would have been sent one by one.
    #[must_use]
    pub fn of(answers: Vec<ApiResponse>) -> Self {
        let results = answers
            .into_iter()
            .map(|answer| BatchResultView {
                status: answer.status,
                location: answer.location,
                // The API writes its bodies as JSON (none is anything else).
                body: serde_json::from_str(&answer.body).unwrap_or(Value::Null),
            })
            .collect();
        Self { results }
    }
}
