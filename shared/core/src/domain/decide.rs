//! The decisions of submission, scheduler, supervisor and operator: each reads a
//! task's state and returns its next state and the effects to perform after it is
//! written. Nothing here does I/O or reads a clock.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::ids::{Owner, QueueName, TaskId};
use super::limits;
use super::messages::{
    AgentRequest, AgentResponse, Alert, Notification, Operation, Outcome, Payload,
};
use super::task::{
    Answer, EarlierInput, Event, Happened, MAX_HISTORY, Order, Outbound, RefusedSubmission,
    Request, Resubmission, Step, StepState, Task, TaskState, WorkflowRef,
};
use super::workflow::{InputError, Results, Workflow};
use crate::time::Timestamp;

/// How long an alert may stay unpublished before the supervisor raises it again; then
/// as long as it has been waiting (the waits double), up to [`MAX_ALERT_REDELIVERY`].
pub const ALERT_REDELIVERY: Duration = Duration::from_secs(60);

/// The longest wait before an unpublished alert is raised again.
pub const MAX_ALERT_REDELIVERY: Duration = Duration::from_secs(3600);

/// Something to do once the new state is written.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Send a request to an agent. Must be sent: a lease covers its loss.
    Dispatch(AgentRequest),
    /// Ask a scheduler to pick the task up after `delay`. Must be sent: a lease covers its loss.
    Schedule {
        /// The task.
        task_id: TaskId,
        /// How long the message stays invisible.
        delay: Duration,
    },
    /// Tell the caller of a status change. Kept in the task's outbox until it is
    /// sent ([`notifications_sent`]): a lease covers its loss.
    Notify {
        /// The task, as stored.
        task_id: TaskId,
        /// The caller's queue, and what it is told.
        outbound: Outbound,
    },
    /// Alert an operator.
    Alert(Alert),
    /// Ask a scheduler to check the task's lease when it ends, `at`; best effort:
    /// the supervisor's sweep finds a lease whose deadline message was lost.
    Deadline {
        /// The task.
        task_id: TaskId,
        /// The lease's end.
        at: Timestamp,
    },
}

/// What a decision decided: logged, and counted in the `Decisions` metric under
/// its name ([`Verdict::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    /// A Run message for a task that is not Pending, or is claimed: ignored.
    NotWaitingForScheduler,
    /// The task is claimed and its first step sent.
    Claimed,
    /// A response of another run, step or attempt: ignored.
    StaleResponse,
    /// A step's result is recorded and the next move made.
    Recorded,
    /// An Error alert not known to be published is raised again.
    AlertedAgain,
    /// Notifications not known to be sent are sent again.
    NotifiedAgain,
    /// Notifications are known sent: the task keeps them no longer.
    NotificationsSent,
    /// Those notifications were known sent already.
    NotificationsClearedAlready,
    /// The lease has not expired: nothing to do.
    LeaseLive,
    /// A message of a live step or compensation is sent again.
    SentAgain,
    /// Past the failure threshold: the task is compensated and ends in Error.
    GaveUp,
    /// The task is retried from its step in flight.
    Retry,
    /// A deadline message for a lease that has since moved or ended: ignored.
    DeadlineSuperseded,
    /// A deadline message came before its lease's end: another is asked for.
    DeadlineMoved,
    /// The alert was marked published already.
    AlertClearedAlready,
    /// The alert is marked published.
    AlertPublished,
    /// An operator resubmitted a task in Error.
    Resubmitted,
    /// A task was asked to stop: it compensates once its running step is done.
    CancelRequested,
    /// A task asked to stop already: nothing more to do.
    CancelledAlready,
    /// A buffered submission that differs from the task's own, recorded on the task.
    SubmissionRefused,
    /// That submission again: recorded already.
    RefusedAlready,
}

impl Verdict {
    /// Its name in logs and metrics.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NotWaitingForScheduler => "not waiting for a scheduler",
            Self::Claimed => "claimed",
            Self::StaleResponse => "stale response",
            Self::Recorded => "recorded",
            Self::AlertedAgain => "alerted again",
            Self::NotifiedAgain => "notified again",
            Self::NotificationsSent => "notifications sent",
            Self::NotificationsClearedAlready => "notifications cleared already",
            Self::LeaseLive => "lease live",
            Self::SentAgain => "sent again",
            Self::GaveUp => "gave up",
            Self::Retry => "retry",
            Self::DeadlineSuperseded => "deadline superseded",
            Self::DeadlineMoved => "deadline moved",
            Self::AlertClearedAlready => "alert cleared already",
            Self::AlertPublished => "alert published",
            Self::Resubmitted => "resubmitted",
            Self::CancelRequested => "cancel requested",
            Self::CancelledAlready => "cancelled already",
            Self::SubmissionRefused => "submission refused",
            Self::RefusedAlready => "refused already",
        }
    }
}

/// A decision: the task's next state, if it changes, and the effects to perform
/// once that state is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The state to write, conditional on the version that was read.
    pub next: Option<Task>,
    /// The order data to write with it, in the same transaction, when it changes.
    pub order: Option<Order>,
    /// What to do after the write succeeds.
    pub effects: Vec<Effect>,
    /// What was decided, for logs and metrics.
    pub verdict: Verdict,
}

impl Decision {
    /// A decision that changes nothing.
    #[must_use]
    pub fn ignore(verdict: Verdict) -> Self {
        Self {
            next: None,
            order: None,
            effects: Vec::new(),
            verdict,
        }
    }
}

/// The body of a call to a step without a field mapping: the task, the step, the
/// input and the results so far (in the order of their names, as a JSON map has them).
#[derive(serde::Serialize)]
struct StepPayload<'a> {
    input: &'a Value,
    results: &'a Results<'a>,
    step: &'a str,
    task_id: &'a TaskId,
}

/// A task being changed: the copy to write and the effects it gathers.
struct Change {
    task: Task,
    effects: Vec<Effect>,
    now: Timestamp,
}

impl Change {
    fn of(task: &Task, now: Timestamp) -> Self {
        let mut task = task.clone();
        task.version += 1;
        task.updated_at = now;
        Self {
            task,
            effects: Vec::new(),
            now,
        }
    }

    /// The decision, with a deadline message for a lease the change takes: a task
    /// with notifications not known sent keeps a lease until they are.
    fn done(mut self, verdict: Verdict) -> Decision {
        if self.task.complete_by.is_none()
            && let Some(oldest) = self.task.outbox.first()
        {
            let since = oldest.notification.at;
            self.hold_for_delivery(since);
        }
        self.watch_lease();
        Decision {
            next: Some(self.task),
            order: None,
            effects: self.effects,
            verdict,
        }
    }

    /// Asks for a deadline message for the task's lease unless the message on its
    /// way watches it: one due later than now and no later than the lease's end, which
    /// comes early and follows the lease ([`on_deadline`]). So a task has one message
    /// at a time, and another only for a lease ending sooner, or once its message is
    /// spent (or lost: the supervisor found the lease expired).
    fn watch_lease(&mut self) {
        let Some(at) = self.task.complete_by else {
            return;
        };
        let watched = self
            .task
            .deadline
            .is_some_and(|due| due > self.now && due <= at);
        if !watched {
            self.task.deadline = Some(at);
            self.effects.push(Effect::Deadline {
                task_id: self.task.id.clone(),
                at,
            });
        }
    }

    /// Moves the task to `state`, telling the caller.
    fn set_state(&mut self, state: TaskState) {
        if self.task.state == state {
            return;
        }
        self.task.state = state;
        self.log(Happened::State { state });
        self.notify();
    }

    /// Adds `what` to the task's history, as of now.
    fn log(&mut self, what: Happened) {
        let history = &mut self.task.history;
        if history.len() >= MAX_HISTORY {
            history.remove(0);
        }
        history.push(Event { at: self.now, what });
    }

    /// Stops the run and undoes what it did, for `reason`, unless the task was
    /// stopped already (asked to cancel, say): the first reason is the task's error.
    /// A step waiting to be sent again (for a retry, or under the key it kept through
    /// a resubmission) may have its effect in place: it is undone as one that timed
    /// out.
    fn fail(&mut self, reason: String) {
        self.task.error.get_or_insert(reason);
        self.set_state(TaskState::Compensating);
        for step in &mut self.task.steps {
            if step.state == StepState::Pending && step.was_sent() {
                step.state = StepState::TimedOut;
                step.error = Some("stopped while waiting to be sent again".into());
                step.finished_at = Some(self.now);
            }
        }
    }

    /// Tells the caller the task's state, as this change writes it.
    fn notify(&mut self) {
        if let Some(queue) = self.task.notify.clone() {
            let error = self.task.error.clone();
            self.tell(queue, error);
        }
    }

    /// Tells `queue` the task's state as this change writes it, with `error`: the
    /// notification is written in the task's outbox with the change, and sent once
    /// it is written. A change tells a queue once, of the state it writes: one that
    /// passes through a state (Compensating on its way to Error, with nothing to undo)
    /// tells only where it ends, so that a version names one notification.
    fn tell(&mut self, queue: QueueName, error: Option<String>) {
        let outbound = Outbound {
            queue,
            notification: Notification {
                task_id: self.task.id.to_local(),
                state: self.task.state,
                version: self.task.version,
                error,
                at: self.now,
            },
        };
        let same = |other: &Outbound| {
            other.queue == outbound.queue
                && other.notification.version == outbound.notification.version
        };
        self.effects
            .retain(|effect| !matches!(effect, Effect::Notify { outbound, .. } if same(outbound)));
        let outbox = &mut self.task.outbox;
        outbox.retain(|other| !same(other));
        if outbox.len() >= MAX_OUTBOX {
            outbox.remove(0);
        }
        outbox.push(outbound.clone());
        self.effects.push(Effect::Notify {
            task_id: self.task.id.clone(),
            outbound,
        });
    }

    /// Sends again the notifications not known sent, but for those that could not be
    /// for [`MAX_NOTIFICATION_AGE`] (their queue gone, say), which are dropped.
    fn notify_again(&mut self) {
        let now = self.now;
        self.task
            .outbox
            .retain(|outbound| outbound.notification.at.until(now) < MAX_NOTIFICATION_AGE);
        for outbound in &self.task.outbox {
            self.effects.push(Effect::Notify {
                task_id: self.task.id.clone(),
                outbound: outbound.clone(),
            });
        }
    }

    /// Keeps a lease on a task with something to deliver since `since` (an alert, a
    /// notification), for the supervisor to deliver it again when the lease expires:
    /// after a minute, then after as long as it has waited, up to an hour.
    fn hold_for_delivery(&mut self, since: Timestamp) {
        let wait = since
            .until(self.now)
            .clamp(ALERT_REDELIVERY, MAX_ALERT_REDELIVERY);
        self.task.complete_by = Some(self.now.plus(wait));
    }

    /// Releases the task to wait for a scheduler after `delay`, with a lease that
    /// lets the supervisor send it again if nobody picks it up.
    fn release(&mut self, workflow: &Workflow, delay: Duration) {
        self.task.locked_by = None;
        self.task.complete_by = Some(self.now.plus(delay + workflow.pickup_timeout));
        self.effects.push(Effect::Schedule {
            task_id: self.task.id.clone(),
            delay,
        });
    }

    /// Runs the task on from where it is: the next step, the next compensation,
    /// or its end.
    fn advance(&mut self, workflow: &Workflow, order: &Order) {
        match self.task.state {
            TaskState::Processing | TaskState::Pending => {
                self.set_state(TaskState::Processing);
                match self
                    .task
                    .steps
                    .iter()
                    .position(|s| s.state != StepState::Processed)
                {
                    Some(index) => self.dispatch(workflow, order, index, Operation::Call),
                    None => self.finish(workflow, TaskState::Processed),
                }
            }
            TaskState::Compensating => {
                let undo = self.task.steps.iter().enumerate().rposition(|(i, s)| {
                    matches!(
                        s.state,
                        StepState::Processed | StepState::TimedOut | StepState::Unusable
                    ) && workflow.steps[i].compensation.is_some()
                });
                match undo {
                    Some(index) => self.dispatch(workflow, order, index, Operation::Compensate),
                    None => self.finish(workflow, TaskState::Error),
                }
            }
            TaskState::Processed | TaskState::Error => {}
        }
    }

    fn dispatch(&mut self, workflow: &Workflow, order: &Order, index: usize, operation: Operation) {
        let definition = &workflow.steps[index];
        let complete_by = self.now.plus(definition.complete_by);
        let results: Results<'_> = self
            .task
            .steps
            .iter()
            .filter_map(|s| Some((s.name.as_str(), s.output.as_deref()?)))
            .collect();
        let (endpoint, key_suffix) = match operation {
            Operation::Call => (Some(&definition.call), ""),
            Operation::Compensate => (definition.compensation.as_ref(), "/compensate"),
        };
        let payload = match &definition.fields {
            Some(fields) => Payload::of(&json!({
                "task_id": self.task.id,
                "step": definition.name,
                "fields": fields
                    .iter()
                    .map(|(name, source)| (name.clone(), source.value(&order.input, &results)))
                    .collect::<Map<String, Value>>(),
            })),
            None => Payload::of(&StepPayload {
                input: &order.input,
                results: &results,
                step: &definition.name,
                task_id: &self.task.id,
            }),
        };
        let request = endpoint
            .map(|e| e.fill(&order.input, &results))
            .transpose()
            .map(Option::unwrap_or_default)
            .and_then(|path| {
                let payload = payload.map_err(|e| format!("payload: {e}"))?;
                let mapped = definition.fields.as_ref().map(|_| payload.as_str());
                limits::request_refusal(&path, mapped).map_or(Ok((path, payload)), Err)
            });
        let (path, payload) = match request {
            Ok(request) => request,
            // The operation cannot be called as the workflow builds it: it fails, for
            // good, without a call.
            Err(error) => {
                self.record(index, operation, Outcome::Failed { error });
                self.advance(workflow, order);
                return;
            }
        };
        let task = &mut self.task;
        let step = &mut task.steps[index];
        step.state = match operation {
            Operation::Call => StepState::Processing,
            Operation::Compensate => {
                step.undoing = Some(step.state);
                StepState::Compensating
            }
        };
        step.attempt += 1;
        step.complete_by = Some(complete_by);
        step.started_at = Some(self.now);
        if step.key_run == 0 {
            step.key_run = task.run;
        }
        let (attempt, key_run) = (step.attempt, step.key_run);
        task.complete_by = Some(complete_by);
        self.effects.push(Effect::Dispatch(AgentRequest {
            task_id: task.id.clone(),
            run: task.run,
            step: index,
            step_name: definition.name.clone(),
            attempt: step.attempt,
            operation,
            agent: definition.agent.clone(),
            method: endpoint.map(|e| e.method).unwrap_or_default(),
            path,
            complete_by,
            idempotency_key: format!("{}/{key_run}/{}{key_suffix}", task.id, definition.name),
            retry: definition.retry.clone(),
            payload,
        }));
        self.log(Happened::Sent {
            step: index,
            operation,
            attempt,
            complete_by,
        });
    }

    fn finish(&mut self, workflow: &Workflow, state: TaskState) {
        self.task.locked_by = None;
        self.task.complete_by = None;
        if state == TaskState::Error {
            self.task.not_undone = self
                .task
                .steps
                .iter()
                .zip(&workflow.steps)
                .filter(|(step, definition)| left_in_place(step, definition))
                .map(|(step, _)| step.name.clone())
                .collect();
        }
        self.set_state(state);
        if state == TaskState::Error {
            let compensation_failed = self
                .task
                .steps
                .iter()
                .filter(|s| s.state == StepState::CompensationFailed)
                .map(|s| s.name.clone())
                .collect();
            self.raise(Alert {
                task_id: self.task.id.clone(),
                run: self.task.run,
                workflow: self.task.workflow.name.clone(),
                reason: self.task.error.clone().unwrap_or_default(),
                compensation_failed,
                not_undone: self.task.not_undone.clone(),
                at: self.now,
            });
        }
    }

    /// Alerts an operator, and keeps the alert in the task with a lease until it is
    /// published ([`alert_published`]); the supervisor raises it again
    /// ([`on_expired`]) if the lease expires first.
    fn raise(&mut self, alert: Alert) {
        self.hold_for_delivery(alert.at);
        self.task.pending_alert = Some(alert.clone());
        self.effects.push(Effect::Alert(alert));
    }
}

/// A submission, validated.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Submission {
    /// The task's identifier.
    pub id: TaskId,
    /// The input, checked against the workflow.
    pub input: Value,
    /// The caller's notification queue.
    pub notify: Option<QueueName>,
    /// Who submitted it, when the API authenticates its callers; `id` is then scoped
    /// to it ([`TaskId::scoped`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
}

impl Submission {
    /// A digest of what was asked, the same for the same request sent again.
    #[must_use]
    pub fn fingerprint(&self, workflow: &str) -> String {
        /// What is digested, written from borrows: its fields in their names' order,
        /// as the JSON map it was first written from had them, so that the digests
        /// of tasks already stored still match.
        #[derive(serde::Serialize)]
        struct Canonical<'a> {
            input: &'a Value,
            notify: &'a Option<QueueName>,
            workflow: &'a str,
        }
        let canonical = Canonical {
            input: &self.input,
            notify: &self.notify,
            workflow,
        };
        super::workflow::sha256_hex(&crate::to_json(&canonical))
    }
}

/// A new task for `submission`: its state, its order data, and the effects
/// (a message to the schedulers, the caller told it is Pending).
#[must_use]
pub fn submit(
    workflow: &Workflow,
    submission: Submission,
    now: Timestamp,
) -> (Task, Order, Vec<Effect>) {
    let task = Task {
        id: submission.id.clone(),
        version: 0,
        write_id: 0,
        workflow: WorkflowRef {
            name: workflow.name.clone(),
            version: workflow.version,
        },
        fingerprint: submission.fingerprint(&workflow.name),
        notify: submission.notify.clone(),
        owner: submission.owner.clone(),
        state: TaskState::Pending,
        locked_by: None,
        complete_by: None,
        deadline: None,
        failure_count: 0,
        run: 1,
        steps: workflow.steps.iter().map(|s| Step::new(&s.name)).collect(),
        error: None,
        pending_alert: None,
        outbox: Vec::new(),
        not_undone: Vec::new(),
        cancelled: None,
        resubmissions: Vec::new(),
        refused: Vec::new(),
        history: Vec::new(),
        created_at: now,
        updated_at: now,
    };
    let mut change = Change::of(&task, now);
    change.release(workflow, Duration::ZERO);
    change.log(Happened::State {
        state: TaskState::Pending,
    });
    change.notify();
    change.watch_lease();
    let order = Order {
        task_id: submission.id,
        input: submission.input,
        earlier: Vec::new(),
    };
    (change.task, order, change.effects)
}

/// A new task for a buffered submission, claimed by the scheduler that creates it:
/// [`submit`] and [`on_run`] in one write, so it needs no Run message, no pickup
/// lease and no claim of its own. The caller is told Pending, then Processing.
#[must_use]
pub fn submit_claimed(
    workflow: &Workflow,
    submission: Submission,
    instance: &str,
    now: Timestamp,
) -> (Task, Order, Vec<Effect>) {
    let (mut pending, order, submitted) = submit(workflow, submission, now);
    // The pickup lease's deadline message is not sent: the claim watches its own lease.
    pending.deadline = None;
    let claim = on_run(&pending, workflow, &order, instance, now);
    let told = submitted
        .into_iter()
        .filter(|effect| matches!(effect, Effect::Notify { .. }));
    let effects = told.chain(claim.effects).collect();
    (claim.next.unwrap_or(pending), order, effects)
}

/// Whether `stored` is the task `created` (as [`submit_claimed`] wrote it) has been
/// since, but for submissions refused on it ([`refuse_submission`]): a refusal moves
/// a task's version, not its work, so the messages of its creation are still due.
#[must_use]
pub fn unmoved_since_created(created: &Task, stored: &Task) -> bool {
    let mut work = stored.clone();
    work.history
        .retain(|event| !matches!(event.what, Happened::Refused));
    let refusals = stored.history.len() - work.history.len();
    if refusals > 0 {
        work.refused.clear();
        work.version = work.version.saturating_sub(refusals as u64);
        work.updated_at = created.updated_at;
        work.write_id = created.write_id;
    }
    work == *created
}

/// The scheduler, on a Run message: claims the task if it waits for a scheduler
/// and sends its next step (or compensation) to an agent.
#[must_use]
pub fn on_run(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    instance: &str,
    now: Timestamp,
) -> Decision {
    if task.locked_by.is_some()
        || !matches!(task.state, TaskState::Pending | TaskState::Compensating)
    {
        return Decision::ignore(Verdict::NotWaitingForScheduler);
    }
    let mut change = Change::of(task, now);
    change.task.locked_by = Some(instance.to_owned());
    change.advance(workflow, order);
    change.done(Verdict::Claimed)
}

/// The scheduler, on an agent's response: records the step's result and moves on.
/// A response for another run or attempt, or for a step no longer running, is stale.
#[must_use]
pub fn on_response(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    response: &AgentResponse,
    now: Timestamp,
) -> Decision {
    let expected = match response.operation {
        Operation::Call => StepState::Processing,
        Operation::Compensate => StepState::Compensating,
    };
    let current = task.steps.get(response.step).is_some_and(|step| {
        step.state == expected && step.attempt == response.attempt && task.run == response.run
    });
    if !current || task.locked_by.is_none() {
        return Decision::ignore(Verdict::StaleResponse);
    }
    let mut change = Change::of(task, now);
    // An answer too large to keep is refused here, whichever agent sent it, and an
    // error's text is cut to what a task keeps.
    let outcome = match (&response.outcome, response.operation) {
        (Outcome::Succeeded { output }, Operation::Call) => {
            limits::output_refusal(limits::json_size(output), task_data_size(order, task))
                .map_or_else(
                    || response.outcome.clone(),
                    |error| Outcome::Unusable { error },
                )
        }
        (Outcome::Succeeded { .. }, Operation::Compensate) => response.outcome.clone(),
        (Outcome::Failed { error }, _) => Outcome::Failed {
            error: limits::bounded_error(error.clone()),
        },
        (Outcome::Unusable { error }, _) => Outcome::Unusable {
            error: limits::bounded_error(error.clone()),
        },
    };
    change.record(response.step, response.operation, outcome);
    change.advance(workflow, order);
    change.done(Verdict::Recorded)
}

impl Change {
    /// Records how an operation of step `index` ended.
    fn record(&mut self, index: usize, operation: Operation, outcome: Outcome) {
        let answer = match &outcome {
            Outcome::Succeeded { .. } => Answer::Succeeded,
            Outcome::Failed { .. } => Answer::Failed,
            Outcome::Unusable { .. } => Answer::Unusable,
        };
        self.log(Happened::Answered {
            step: index,
            operation,
            attempt: self.task.steps[index].attempt,
            outcome: answer,
        });
        let step = &mut self.task.steps[index];
        step.finished_at = Some(self.now);
        step.complete_by = None;
        match (outcome, operation) {
            (Outcome::Succeeded { output }, Operation::Call) => {
                step.state = StepState::Processed;
                step.output = Some(Arc::new(output));
            }
            (Outcome::Unusable { error }, Operation::Call) => {
                step.state = StepState::Unusable;
                let reason = format!("step '{}': {error}", step.name);
                step.error = Some(error);
                self.fail(reason);
            }
            (Outcome::Succeeded { .. } | Outcome::Unusable { .. }, Operation::Compensate) => {
                step.state = StepState::Compensated;
            }
            (Outcome::Failed { error }, Operation::Call) => {
                step.state = StepState::Error;
                let reason = format!("step '{}' failed: {error}", step.name);
                step.error = Some(error);
                self.fail(reason);
            }
            (Outcome::Failed { error }, Operation::Compensate) => {
                step.state = StepState::CompensationFailed;
                step.error = Some(format!("compensation failed: {error}"));
            }
        }
    }
}

/// The supervisor, on a task whose lease has expired: sends it again if it was
/// waiting for a scheduler; otherwise counts a failure of its running step and
/// retries it, or past the step's threshold gives it up and compensates. A task
/// that has ended with its alert or notifications not known delivered has them
/// delivered again; a running one's notifications not known sent are sent again.
#[must_use]
pub fn on_expired(task: &Task, workflow: &Workflow, now: Timestamp) -> Decision {
    let expired = task.complete_by.is_some_and(|at| at <= now);
    if task.state.is_final() && expired {
        // The task ended and its alert or notifications were not known delivered:
        // they are again, after a new lease is taken for the next try.
        let mut change = Change::of(task, now);
        change.notify_again();
        return match &task.pending_alert {
            Some(alert) => {
                change.raise(alert.clone());
                change.done(Verdict::AlertedAgain)
            }
            None => {
                change.task.complete_by = None;
                change.done(Verdict::NotifiedAgain)
            }
        };
    }
    if task.state.is_final() || !expired {
        return Decision::ignore(Verdict::LeaseLive);
    }
    let mut change = Change::of(task, now);
    change.notify_again();
    let Some(index) = task.running_step().filter(|_| task.locked_by.is_some()) else {
        change.release(workflow, Duration::ZERO);
        return change.done(Verdict::SentAgain);
    };
    let supervision = &workflow.steps[index].supervision;
    change.task.failure_count += 1;
    let step = &mut change.task.steps[index];
    step.complete_by = None;
    let compensating = step.state == StepState::Compensating;
    let failures = if compensating {
        &mut step.compensation_failure_count
    } else {
        &mut step.failure_count
    };
    *failures += 1;
    let failures = *failures;
    let operation = if compensating {
        Operation::Compensate
    } else {
        Operation::Call
    };
    let attempt = step.attempt;
    // A call of a task asked to stop is not tried again: its effect may be in place,
    // so it is compensated as one that timed out for good.
    let stopping = change.task.cancelled.is_some() && !compensating;
    let delay = if failures == supervision.failure_threshold {
        supervision.extended_wait
    } else {
        supervision.retry_delay
    };
    let gave_up = failures > supervision.failure_threshold || stopping;
    change.log(Happened::Expired {
        step: index,
        operation,
        attempt,
        retry_at: (!gave_up).then(|| now.plus(delay)),
    });
    let step = &mut change.task.steps[index];
    if gave_up {
        let reason = format!("timed out {failures} times");
        step.finished_at = Some(now);
        if compensating {
            step.state = StepState::CompensationFailed;
            step.error = Some(format!("compensation {reason}"));
        } else {
            step.state = StepState::TimedOut;
            let task_reason = format!("step '{}' {reason}", step.name);
            step.error = Some(reason);
            change.fail(task_reason);
        }
        change.release(workflow, Duration::ZERO);
        return change.done(Verdict::GaveUp);
    }
    if compensating {
        step.state = step.undoing.unwrap_or(StepState::Processed);
    } else {
        step.state = StepState::Pending;
        change.set_state(TaskState::Pending);
    }
    change.release(workflow, delay);
    change.done(Verdict::Retry)
}

/// A scheduler, on the deadline message for a lease ending `at`: a message the task
/// no longer waits for (another watches its lease) is dropped. Otherwise it is spent:
/// the lease is acted on as the supervisor would ([`on_expired`]), and whatever lease
/// the task then has gets a message of its own (a message that came early, the lease
/// having moved on, is followed by one for the new end). A task without a lease ends
/// the chain.
#[must_use]
pub fn on_deadline(task: &Task, workflow: &Workflow, at: Timestamp, now: Timestamp) -> Decision {
    if task.deadline != Some(at) {
        return Decision::ignore(Verdict::DeadlineSuperseded);
    }
    let decision = on_expired(task, workflow, now);
    if decision.next.is_some() || task.complete_by.is_none() {
        return decision;
    }
    // The lease moved on: the next message, for its end.
    Change::of(task, now).done(Verdict::DeadlineMoved)
}

/// Once `alert` is published: the task keeps it no longer, nor the lease that
/// would have it raised again. Nothing to do when it was cleared already (a
/// duplicate publication, or the task resubmitted meanwhile).
#[must_use]
pub fn alert_published(task: &Task, alert: &Alert, now: Timestamp) -> Decision {
    if task.pending_alert.as_ref() != Some(alert) {
        return Decision::ignore(Verdict::AlertClearedAlready);
    }
    let mut change = Change::of(task, now);
    change.task.pending_alert = None;
    change.task.complete_by = None;
    change.done(Verdict::AlertPublished)
}

/// Once `sent` (queues and versions of notifications) are sent: the task keeps them
/// no longer, nor, once it has ended with nothing else to deliver, its lease.
#[must_use]
pub fn notifications_sent(task: &Task, sent: &[(QueueName, u64)], now: Timestamp) -> Decision {
    let is_sent = |outbound: &Outbound| {
        sent.iter().any(|(queue, version)| {
            *queue == outbound.queue && *version == outbound.notification.version
        })
    };
    if !task.outbox.iter().any(is_sent) {
        return Decision::ignore(Verdict::NotificationsClearedAlready);
    }
    let mut change = Change::of(task, now);
    change.task.outbox.retain(|outbound| !is_sent(outbound));
    if task.state.is_final() && task.pending_alert.is_none() {
        change.task.complete_by = None;
    }
    change.done(Verdict::NotificationsSent)
}

/// The bytes of the data an agent request carries: the input and the outputs kept.
fn task_data_size(order: &Order, task: &Task) -> usize {
    limits::json_size(&order.input)
        + task
            .steps
            .iter()
            .filter_map(|s| s.output.as_deref())
            .map(limits::json_size)
            .sum::<usize>()
}

/// How long a notification not known sent is sent again before it is dropped.
pub const MAX_NOTIFICATION_AGE: Duration = Duration::from_secs(24 * 3600);

/// The most notifications a task keeps unsent; past it, the oldest is dropped.
pub const MAX_OUTBOX: usize = 32;

/// Whether `step`'s effect may be in place with nothing to undo it: it has no
/// compensation (and is not read-only). A step whose compensation failed is left to
/// a person to undo by hand (the alert names it); this one, to decide on.
fn left_in_place(step: &Step, definition: &super::workflow::StepDefinition) -> bool {
    step.effect_may_be_in_place() && !definition.is_undone_on_failure()
}

/// What a task keeps of the submissions refused for its id, at most.
pub const MAX_REFUSED: usize = 16;

/// A submission buffered for its id, found to differ from the one the task was
/// created by: too late for a 409, it is refused on the task, which records it once,
/// and its caller and the task's are told.
#[must_use]
pub fn refuse_submission(
    task: &Task,
    submission: &Submission,
    workflow: &str,
    now: Timestamp,
) -> Decision {
    let fingerprint = submission.fingerprint(workflow);
    if task.refused.iter().any(|r| r.fingerprint == fingerprint) {
        return Decision::ignore(Verdict::RefusedAlready);
    }
    let mut change = Change::of(task, now);
    let refused = &mut change.task.refused;
    if refused.len() >= MAX_REFUSED {
        refused.remove(0);
    }
    refused.push(RefusedSubmission {
        at: now,
        fingerprint,
    });
    change.log(Happened::Refused);
    let error = format!(
        "another submission for task '{}' with a different request was refused: the task runs the one it was created with",
        task.id.local()
    );
    let queues = [task.notify.as_ref(), submission.notify.as_ref()];
    for (i, queue) in queues.iter().enumerate() {
        let Some(queue) = queue else { continue };
        if queues[..i].contains(&Some(*queue)) {
            continue;
        }
        change.tell((*queue).clone(), Some(error.clone()));
    }
    change.done(Verdict::SubmissionRefused)
}

/// Why an operator's or owner's action on a task was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A resubmission of a task not in Error.
    #[error("only a task in Error can be resubmitted; this one is {0:?}")]
    NotInError(TaskState),
    /// A cancellation of a task that has ended.
    #[error("the task is {0:?} already: only a task still running can be cancelled")]
    Ended(TaskState),
    /// A bulk action run again, on a task it has taken already.
    #[error("batch '{0}' took this task already")]
    TakenByBatch(String),
    /// An edited input that does not fit the task's workflow version.
    #[error(transparent)]
    Input(#[from] InputError),
    /// An edited input that would take the task's order data, earlier inputs
    /// included, over what a record may hold.
    #[error(
        "input: the task's inputs would take {0} bytes, over the {max} a task keeps; submit a new task",
        max = limits::MAX_ORDER
    )]
    InputsTooLarge(usize),
    /// An edited input that would leave the task no room for its steps' requests.
    #[error(
        "input: {0} bytes, over the {max} a task's input and results may take; submit a new task",
        max = limits::MAX_TASK_DATA
    )]
    InputTooLarge(usize),
    /// An edited input, while steps whose effect may be in place and that nothing
    /// undoes would be called again with it.
    #[error(
        "input: the task cannot run with another input while the effects of {} may be in place and cannot be undone; resubmit without an input (they are called again under the same idempotency keys), or submit a new task",
        .0.join(", ")
    )]
    EffectsInPlace(Vec<String>),
}

/// A resubmission: who asks, and the new input, if it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct Resubmit {
    /// Who asks, when, and in which bulk action.
    pub request: Request,
    /// The input the new run takes instead of the current one.
    pub input: Option<Value>,
}

/// Refused when `batch` (if any) has taken the task already.
fn check_batch(task: &Task, batch: Option<&String>) -> Result<(), Refused> {
    let taken = batch.is_some_and(|batch| {
        let by_batch = |request: &Request| request.batch.as_ref() == Some(batch);
        task.cancelled.as_ref().is_some_and(by_batch)
            || task.resubmissions.iter().any(|r| by_batch(&r.request))
    });
    match batch {
        Some(batch) if taken => Err(Refused::TakenByBatch(batch.clone())),
        _ => Ok(()),
    }
}

/// An operator (or the owner) restarts a task in Error in a new run.
///
/// With the same input, it runs from its first step not Processed, keeping the
/// Processed steps and their results. A step whose effect may be in place with
/// nothing to undo it (no compensation; it timed out, or its answer was unusable:
/// [`Task::not_undone`]) is called again under the idempotency key it had, so that
/// its service does not apply it twice; the others, their effects known absent or
/// undone (by a compensation, or by hand when it failed, as the alert asks), get
/// the new run's keys.
///
/// With a new input (checked against the task's workflow version; the one it
/// replaces is kept in the order data), it runs every step again from the first,
/// under the new run's keys: refused while a step is not undone, since calling it
/// again with another input would apply a second effect.
///
/// # Errors
/// [`Refused`] when the task is not in Error, the batch took it already, or the
/// new input does not fit or cannot be run.
pub fn resubmit(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    resubmit: Resubmit,
    now: Timestamp,
) -> Result<Decision, Refused> {
    if task.state != TaskState::Error {
        return Err(Refused::NotInError(task.state));
    }
    check_batch(task, resubmit.request.batch.as_ref())?;
    let edited = match resubmit.input {
        Some(input) => {
            workflow.validate_input(&input)?;
            let in_place: Vec<String> = task
                .steps
                .iter()
                .zip(&workflow.steps)
                .filter(|(step, definition)| left_in_place(step, definition))
                .map(|(step, _)| step.name.clone())
                .collect();
            if !in_place.is_empty() {
                return Err(Refused::EffectsInPlace(in_place));
            }
            let size = limits::json_size(&input);
            if size > limits::MAX_TASK_DATA {
                return Err(Refused::InputTooLarge(size));
            }
            let mut edited = order.clone();
            edited.earlier.push(EarlierInput {
                until_run: task.run,
                input: std::mem::replace(&mut edited.input, input),
            });
            let size = limits::json_size(&json!(edited));
            if size > limits::MAX_ORDER {
                return Err(Refused::InputsTooLarge(size));
            }
            Some(edited)
        }
        None => None,
    };
    let mut change = Change::of(task, now);
    change.task.run += 1;
    change.task.failure_count = 0;
    change.task.error = None;
    change.task.pending_alert = None;
    change.task.not_undone.clear();
    change.task.cancelled = None;
    let run = change.task.run;
    change.log(Happened::Resubmitted { run });
    change.task.resubmissions.push(Resubmission {
        run,
        request: resubmit.request,
        edited: edited.is_some(),
    });
    let plain = edited.is_none();
    for (step, definition) in change.task.steps.iter_mut().zip(&workflow.steps) {
        if plain && step.state == StepState::Processed {
            continue;
        }
        let keeps_key = plain && left_in_place(step, definition);
        // A step sent before keys were kept per step took the task's run's.
        let key_run = match keeps_key {
            true => Some(step.key_run)
                .filter(|&run| run > 0)
                .unwrap_or(task.run),
            false => 0,
        };
        *step = Step::new(&step.name);
        step.key_run = key_run;
    }
    change.set_state(TaskState::Pending);
    change.release(workflow, Duration::ZERO);
    let mut decision = change.done(Verdict::Resubmitted);
    decision.order = edited;
    Ok(decision)
}

/// The owner or an operator asks a task to stop: it is Compensating at once, and
/// once its running step (if any) is done, its done steps are compensated in reverse
/// (a call that succeeds is undone too; one whose lease ends is not tried again, but
/// undone as timed out); it ends in Error, its caller notified and an operator
/// alerted that it was cancelled. Asking again changes nothing.
///
/// # Errors
/// [`Refused`] when the task has ended (and was not cancelled), or the batch took
/// it already.
pub fn cancel(
    task: &Task,
    workflow: &Workflow,
    request: Request,
    now: Timestamp,
) -> Result<Decision, Refused> {
    check_batch(task, request.batch.as_ref())?;
    if task.cancelled.is_some() {
        return Ok(Decision::ignore(Verdict::CancelledAlready));
    }
    if task.state.is_final() {
        return Err(Refused::Ended(task.state));
    }
    let mut change = Change::of(task, now);
    change.fail(format!("cancelled by {}", request.by.as_str()));
    change.log(Happened::Cancelled { by: request.by });
    change.task.cancelled = Some(request);
    if task.running_step().is_none() && task.locked_by.is_none() {
        // Waiting for a scheduler (or a retry): one comes now to compensate.
        change.release(workflow, Duration::ZERO);
    }
    Ok(change.done(Verdict::CancelRequested))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::messages::Method;
    use crate::domain::workflow::Registry;

    fn drone() -> std::sync::Arc<Workflow> {
        Registry::built_in()
            .latest("drone-delivery")
            .expect("drone")
    }

    fn submission(notify: bool) -> Submission {
        Submission {
            owner: None,
            id: TaskId::parse("t1").expect("id"),
            input: json!({"customer_id": "c", "pickup": "a", "dropoff": "b", "weight_kg": 2.5}),
            notify: notify.then(|| QueueName::parse("mine").expect("queue")),
        }
    }

    fn dispatched(decision: &Decision) -> Vec<&AgentRequest> {
        decision
            .effects
            .iter()
            .filter_map(|e| match e {
                Effect::Dispatch(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    fn respond(request: &AgentRequest, outcome: Outcome) -> AgentResponse {
        AgentResponse {
            task_id: request.task_id.clone(),
            run: request.run,
            step: request.step,
            attempt: request.attempt,
            operation: request.operation,
            outcome,
        }
    }

    fn ok() -> Outcome {
        Outcome::Succeeded {
            output: json!({"ok": true}),
        }
    }

    #[test]
    fn a_task_created_claimed_is_submitted_and_claimed_in_one_write() {
        let workflow = drone();
        let now = Timestamp(0);
        let (pending, submitted_order, _) = submit(&workflow, submission(true), now);
        let run = on_run(&pending, &workflow, &submitted_order, "s1", now);
        let (task, order, effects) = submit_claimed(&workflow, submission(true), "s1", now);
        let claimed = run.next.expect("claimed");
        assert_eq!(task, claimed, "the same task as a submission then a Run");
        assert_eq!(order, submitted_order);
        assert_eq!(told(&effects), [TaskState::Pending, TaskState::Processing]);
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::Schedule { .. })),
            "no Run message"
        );
        let deadlines: Vec<_> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Deadline { at, .. } => Some(*at),
                _ => None,
            })
            .collect();
        assert_eq!(
            deadlines,
            [task.complete_by.expect("a lease")],
            "the first step's lease only"
        );
        assert_eq!(task.deadline, task.complete_by);
        let dispatched: Vec<_> = effects
            .iter()
            .filter(|e| matches!(e, Effect::Dispatch(_)))
            .collect();
        assert_eq!(dispatched.len(), 1, "the first step sent");
    }

    #[test]
    fn a_step_with_a_field_mapping_sends_only_those_fields_and_its_undo_its_own_result() {
        let text = r#"{"name":"mapped","version":1,
            "input":{"customer_id":"string","pickup":"string","dropoff":"string","weight_kg":"number"},
            "steps":[
              {"name":"quote","agent":"q","call":"/quote"},
              {"name":"book","agent":"b","call":"PUT /book","compensation":"DELETE /book",
               "fields":{"from":"input.pickup","quote":"results.quote.price","booking":"results.book.id"}},
              {"name":"pay","agent":"p","call":"/pay"}]}"#;
        let workflow = Workflow::parse("mapped.json", text).expect("valid");
        let now = Timestamp(0);
        let (task, order, quote) = run_to(&workflow, 0, now);
        assert_eq!(
            quote.payload.value()["input"],
            order.input,
            "a step without a mapping is sent everything"
        );
        let quoted = Outcome::Succeeded {
            output: json!({"price": 12}),
        };
        let decision = on_response(&task, &workflow, &order, &respond(&quote, quoted), now);
        let book = dispatched(&decision)[0].clone();
        assert_eq!(
            book.payload.value(),
            json!({"task_id": "t1", "step": "book",
                   "fields": {"from": "a", "quote": 12, "booking": null}}),
            "only the mapped fields: not the input's other fields, not the results"
        );
        let task = decision.next.expect("recorded");
        let booked = Outcome::Succeeded {
            output: json!({"id": "bk-9"}),
        };
        let decision = on_response(&task, &workflow, &order, &respond(&book, booked), now);
        let pay = dispatched(&decision)[0].clone();
        let task = decision.next.expect("recorded");
        let refused = Outcome::Failed {
            error: "card declined".into(),
        };
        let decision = on_response(&task, &workflow, &order, &respond(&pay, refused), now);
        assert_eq!((book.method, book.path.as_str()), (Method::Put, "/book"));
        let undo = dispatched(&decision)[0];
        assert_eq!(undo.operation, Operation::Compensate);
        assert_eq!(
            (undo.method, undo.path.as_str()),
            (Method::Delete, "/book"),
            "the compensation's own method"
        );
        assert_eq!(quote.method, Method::Post, "a POST unless named");
        assert_eq!(
            undo.payload.value()["fields"],
            json!({"from": "a", "quote": 12, "booking": "bk-9"}),
            "the compensation sees the step's own result"
        );
    }

    #[test]
    fn a_path_that_cannot_be_filled_fails_its_operation_for_good() {
        let text = r#"{"name":"paths","version":1,"input":{"order":"string"},
            "steps":[
              {"name":"create","agent":"p","call":"/packages","compensation":"DELETE /packages/{results.create.id}"},
              {"name":"ship","agent":"s","call":"PUT /shipments/{results.create.id}"}]}"#;
        let workflow = Workflow::parse("paths.json", text).expect("valid");
        let now = Timestamp(0);
        let (task, order, create) = run_to(&workflow, 0, now);
        assert_eq!(create.path, "/packages");
        let no_id = Outcome::Succeeded {
            output: json!({"created": true}),
        };
        let decision = on_response(&task, &workflow, &order, &respond(&create, no_id), now);
        let task = decision.next.clone().expect("recorded");
        assert_eq!(
            task.steps[1].state,
            StepState::Error,
            "the shipment cannot be addressed: failed without a call"
        );
        assert_eq!(
            task.error.as_deref(),
            Some("step 'ship' failed: path: {results.create.id} has no value")
        );
        assert_eq!(
            task.steps[0].state,
            StepState::CompensationFailed,
            "nor can the package's cancellation: left for a person, with an alert"
        );
        assert_eq!(task.state, TaskState::Error);
        assert!(dispatched(&decision).is_empty(), "nothing sent");

        let (task, order, create) = run_to(&workflow, 0, now);
        let with_id = Outcome::Succeeded {
            output: json!({"id": "pk-1"}),
        };
        let decision = on_response(&task, &workflow, &order, &respond(&create, with_id), now);
        let ship = dispatched(&decision)[0];
        assert_eq!(
            (ship.method, ship.path.as_str()),
            (Method::Put, "/shipments/pk-1")
        );
    }

    #[test]
    fn a_request_its_workflow_would_make_too_large_fails_without_a_call() {
        use crate::domain::limits::{MAX_PATH, MAX_TASK_DATA};
        let text = r#"{"name":"large","version":1,"input":{"order":"string"},
            "steps":[
              {"name":"big","agent":"b","call":"/big"},
              {"name":"copies","agent":"c","call":"/c",
               "fields":{"a":"results.big.text","b":"results.big.text","c":"results.big.text","d":"results.big.text"}},
              {"name":"addressed","agent":"a","call":"/a/{results.big.text}"}]}"#;
        let workflow = Workflow::parse("large.json", text).expect("valid");
        let now = Timestamp(0);
        // An answer within a step's limit, which four copies take over a request's.
        let big = Outcome::Succeeded {
            output: json!({"text": "x".repeat(MAX_TASK_DATA / 4)}),
        };
        let (task, order, first) = run_to(&workflow, 0, now);
        let decision = on_response(&task, &workflow, &order, &respond(&first, big), now);
        let task = decision.next.clone().expect("recorded");
        assert!(dispatched(&decision).is_empty(), "nothing sent");
        assert_eq!(task.steps[1].state, StepState::Error);
        let error = task.error.as_deref().expect("error");
        assert!(
            error.starts_with("step 'copies' failed: fields:")
                && error.ends_with(&format!("over the {MAX_TASK_DATA} a request may carry")),
            "{error}"
        );

        let long = Outcome::Succeeded {
            output: json!({"text": "y".repeat(MAX_PATH)}),
        };
        let single = Workflow::parse("long.json", &text.replace(
            r#"{"name":"copies","agent":"c","call":"/c",
               "fields":{"a":"results.big.text","b":"results.big.text","c":"results.big.text","d":"results.big.text"}},"#,
            "",
        ))
        .expect("valid");
        let (task, order, first) = run_to(&single, 0, now);
        let decision = on_response(&task, &single, &order, &respond(&first, long), now);
        let task = decision.next.expect("recorded");
        assert_eq!(
            task.error.as_deref(),
            Some(
                format!(
                    "step 'addressed' failed: path: {} bytes, over the {MAX_PATH} a path may have",
                    MAX_PATH + 3
                )
                .as_str()
            )
        );
    }

    /// A new task whose first step is refused for good (`error`): nothing to undo,
    /// it ends in Error in that one decision. The decision, and the task's order.
    fn refused_at_first(workflow: &Workflow, error: &str, now: Timestamp) -> (Decision, Order) {
        let (task, order, request) = run_to(workflow, 0, now);
        let failed = Outcome::Failed {
            error: error.into(),
        };
        let decision = on_response(&task, workflow, &order, &respond(&request, failed), now);
        (decision, order)
    }

    /// Runs a new task through `on_run` and the first `steps` successful responses.
    fn run_to(workflow: &Workflow, steps: usize, now: Timestamp) -> (Task, Order, AgentRequest) {
        let (task, order, _) = submit(workflow, submission(true), now);
        let claim = on_run(&task, workflow, &order, "s1", now);
        let mut task = claim.next.clone().expect("claimed");
        let mut request = dispatched(&claim)[0].clone();
        for _ in 0..steps {
            let decision = on_response(&task, workflow, &order, &respond(&request, ok()), now);
            task = decision.next.clone().expect("recorded");
            request = dispatched(&decision)[0].clone();
        }
        (task, order, request)
    }

    #[test]
    fn a_task_runs_its_steps_in_order_to_processed() {
        let workflow = drone();
        let now = Timestamp(1_000);
        let (task, order, effects) = submit(&workflow, submission(true), now);
        assert_eq!(
            (task.state, task.version, task.locked_by.as_deref()),
            (TaskState::Pending, 1, None)
        );
        assert_eq!(
            task.complete_by,
            Some(now.plus(workflow.pickup_timeout)),
            "a pickup lease"
        );
        assert!(matches!(effects[0], Effect::Schedule { .. }));
        assert!(
            matches!(&effects[1], Effect::Notify { outbound, .. } if outbound.notification.state == TaskState::Pending)
        );

        let claim = on_run(&task, &workflow, &order, "s1", now);
        let mut task = claim.next.clone().expect("claimed");
        assert_eq!(
            (task.state, task.locked_by.as_deref(), task.version),
            (TaskState::Processing, Some("s1"), 2)
        );
        let mut request = dispatched(&claim)[0].clone();
        let mut order_seen = vec![];
        loop {
            order_seen.push(request.step_name.clone());
            assert_eq!(
                request.idempotency_key,
                format!("t1/1/{}", request.step_name)
            );
            assert_eq!(
                task.complete_by,
                Some(request.complete_by),
                "the task's lease is the step's"
            );
            let decision = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
            task = decision.next.clone().expect("recorded");
            match dispatched(&decision).first() {
                Some(next) => request = (*next).clone(),
                None => break,
            }
        }
        let names: Vec<_> = workflow.steps.iter().map(|s| s.name.clone()).collect();
        assert_eq!(order_seen, names);
        let task = notifications_sent(&task, &outboxed(&task), now)
            .next
            .expect("notifications sent");
        assert_eq!(
            (task.state, task.locked_by.clone(), task.complete_by),
            (TaskState::Processed, None, None)
        );
        assert!(
            task.steps
                .iter()
                .all(|s| s.state == StepState::Processed && s.attempt == 1)
        );
    }

    #[test]
    fn duplicate_and_stale_messages_change_nothing() {
        let workflow = drone();
        let now = Timestamp(0);
        let (task, order, request) = run_to(&workflow, 1, now);
        assert_eq!(
            on_run(&task, &workflow, &order, "s2", now).next,
            None,
            "a second claim"
        );
        let previous = AgentRequest {
            step: 0,
            step_name: "check-account".into(),
            attempt: 1,
            ..request.clone()
        };
        assert_eq!(
            on_response(&task, &workflow, &order, &respond(&previous, ok()), now).next,
            None,
            "a duplicate response"
        );
        let old_attempt = AgentRequest {
            attempt: 0,
            ..request.clone()
        };
        assert_eq!(
            on_response(&task, &workflow, &order, &respond(&old_attempt, ok()), now).next,
            None
        );
        let old_run = AgentRequest { run: 0, ..request };
        assert_eq!(
            on_response(&task, &workflow, &order, &respond(&old_run, ok()), now).next,
            None
        );
    }

    #[test]
    fn an_expired_step_is_retried_until_its_threshold_then_compensated() {
        let workflow = drone();
        let threshold = workflow.steps[3].supervision.failure_threshold;
        let mut now = Timestamp(0);
        let (mut task, order, mut request) = run_to(&workflow, 3, now);
        assert_eq!(request.step_name, "schedule-drone");
        assert_eq!(
            on_expired(&task, &workflow, now).next,
            None,
            "the lease is live"
        );
        for failure in 1..=threshold {
            now = request.complete_by;
            let decision = on_expired(&task, &workflow, now);
            task = decision.next.clone().expect("retry");
            assert_eq!(decision.verdict, Verdict::Retry);
            assert_eq!(
                (task.state, task.locked_by.clone()),
                (TaskState::Pending, None)
            );
            assert_eq!(
                (task.steps[3].failure_count, task.failure_count),
                (failure, failure)
            );
            let wait = if failure == threshold {
                workflow.steps[3].supervision.extended_wait
            } else {
                Duration::ZERO
            };
            assert!(decision.effects.contains(&Effect::Schedule {
                task_id: task.id.clone(),
                delay: wait
            }));
            let claim = on_run(&task, &workflow, &order, "s2", now);
            task = claim.next.clone().expect("claimed again");
            request = dispatched(&claim)[0].clone();
            assert_eq!((request.step, request.attempt), (3, failure + 1));
            assert_eq!(
                request.idempotency_key, "t1/1/schedule-drone",
                "the same key on every attempt"
            );
        }
        now = request.complete_by;
        let decision = on_expired(&task, &workflow, now);
        task = decision.next.clone().expect("gave up");
        assert_eq!(decision.verdict, Verdict::GaveUp);
        assert_eq!(task.steps[3].failure_count, threshold + 1);
        assert_eq!(
            (task.state, task.steps[3].state),
            (TaskState::Compensating, StepState::TimedOut)
        );

        // Compensation runs in reverse order: the timed-out drone, then the package.
        let claim = on_run(&task, &workflow, &order, "s3", now);
        task = claim.next.clone().expect("claimed for compensation");
        let mut undone = vec![];
        let mut decision = claim;
        while let Some(request) = dispatched(&decision).first().map(|r| (*r).clone()) {
            assert_eq!(request.operation, Operation::Compensate);
            assert!(request.idempotency_key.ends_with("/compensate"));
            undone.push(request.step_name.clone());
            decision = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
            task = decision.next.clone().expect("compensated");
        }
        assert_eq!(undone, ["schedule-drone", "create-package"]);
        let alert = alert_of(&decision).expect("alerted");
        assert_eq!(alert.reason, "step 'schedule-drone' timed out 4 times");
        assert_eq!(
            (task.state, task.locked_by.clone(), task.complete_by),
            (TaskState::Error, None, Some(now.plus(ALERT_REDELIVERY))),
            "a lease until the alert is published"
        );
        assert_eq!(task.pending_alert.as_ref(), Some(&alert));
    }

    fn alert_of(decision: &Decision) -> Option<Alert> {
        decision.effects.iter().find_map(|e| match e {
            Effect::Alert(a) => Some(a.clone()),
            _ => None,
        })
    }

    #[test]
    fn a_timed_out_step_whose_compensation_times_out_is_still_timed_out() {
        let workflow = drone();
        let threshold = workflow.steps[3].supervision.failure_threshold;
        let (mut task, order, mut request) = run_to(&workflow, 3, Timestamp(0));
        let mut now = Timestamp(0);
        for _ in 0..=threshold {
            now = request.complete_by;
            task = on_expired(&task, &workflow, now).next.expect("expired");
            let claim = on_run(&task, &workflow, &order, "s", now);
            task = claim.next.clone().expect("claimed");
            request = dispatched(&claim)[0].clone();
        }
        assert_eq!(request.operation, Operation::Compensate, "gave up, undoing");
        assert_eq!(task.steps[3].state, StepState::Compensating);

        let decision = on_expired(&task, &workflow, request.complete_by);
        assert_eq!(decision.verdict, Verdict::Retry);
        let task = decision.next.expect("to be undone again");
        assert_eq!(
            task.steps[3].state,
            StepState::TimedOut,
            "as it was, not Processed"
        );
        let claim = on_run(&task, &workflow, &order, "s", now);
        assert_eq!(
            (dispatched(&claim)[0].step, dispatched(&claim)[0].operation),
            (3, Operation::Compensate),
            "undone again"
        );
    }

    /// A JSON string output whose text has exactly `bytes` bytes.
    fn output_of(bytes: usize) -> Outcome {
        Outcome::Succeeded {
            output: json!("x".repeat(bytes - 2)),
        }
    }

    #[test]
    fn an_answer_too_large_to_keep_is_oversized_and_compensated_with_the_steps_before() {
        use crate::domain::limits::{MAX_STEP_OUTPUT, MAX_TASK_DATA};
        let workflow = drone();
        let now = Timestamp(0);
        let (task, order, request) = run_to(&workflow, 3, now);
        assert_eq!(request.step_name, "schedule-drone");
        let at_limit = on_response(
            &task,
            &workflow,
            &order,
            &respond(&request, output_of(MAX_STEP_OUTPUT)),
            now,
        );
        let kept = at_limit.next.expect("recorded");
        assert_eq!(kept.steps[3].state, StepState::Processed, "at the limit");

        let over = on_response(
            &task,
            &workflow,
            &order,
            &respond(&request, output_of(MAX_STEP_OUTPUT + 1)),
            now,
        );
        let refused = over.next.clone().expect("recorded");
        assert_eq!(
            refused.steps[3].state,
            StepState::Compensating,
            "Unusable, and its compensation sent at once"
        );
        assert_eq!(refused.steps[3].output, None, "not kept");
        assert!(
            refused.steps[3]
                .error
                .as_deref()
                .is_some_and(|e| e.contains("65537 bytes")),
            "{:?}",
            refused.steps[3].error
        );
        assert_eq!(refused.state, TaskState::Compensating);
        let undo = dispatched(&over);
        assert_eq!(
            (undo[0].step_name.as_str(), undo[0].operation),
            ("schedule-drone", Operation::Compensate),
            "its effect is in place: undone first"
        );

        // Outputs each within the limit, together over what a task may carry.
        let each = MAX_STEP_OUTPUT - 1_000;
        let (mut task, order, mut request) = run_to(&workflow, 0, now);
        let mut decision = None;
        for step in 0..4 {
            let d = on_response(
                &task,
                &workflow,
                &order,
                &respond(&request, output_of(each)),
                now,
            );
            task = d.next.clone().expect("recorded");
            let total = limits::json_size(&order.input) + each * (step + 1);
            if total > MAX_TASK_DATA {
                assert!(
                    task.steps[step]
                        .error
                        .as_deref()
                        .is_some_and(|e| e.contains("a task may carry")),
                    "step {step}: {:?}",
                    task.steps[step]
                );
                decision = Some(d);
                break;
            }
            assert_eq!(task.steps[step].state, StepState::Processed, "step {step}");
            request = dispatched(&d)[0].clone();
        }
        let decision = decision.expect("the fourth output crosses the task's limit");
        assert_eq!(task.state, TaskState::Compensating);
        let undo = dispatched(&decision);
        assert_eq!(undo[0].step_name, "schedule-drone");
        assert!(
            serde_json::to_vec(undo[0]).expect("json").len() < crate::domain::limits::MAX_MESSAGE,
            "the compensation fits in a message"
        );
    }

    #[test]
    fn an_alert_not_published_is_raised_again_until_it_is() {
        let workflow = drone();
        let now = Timestamp(0);
        let (decision, _) = refused_at_first(&workflow, "no such account", now);
        let alert = alert_of(&decision).expect("alerted");
        let in_error = decision.next.expect("in Error");
        assert_eq!(in_error.state, TaskState::Error);

        let early = now.plus(ALERT_REDELIVERY - Duration::from_millis(1));
        assert_eq!(on_expired(&in_error, &workflow, early).next, None);
        let late = now.plus(ALERT_REDELIVERY);
        let again = on_expired(&in_error, &workflow, late);
        assert_eq!(again.verdict, Verdict::AlertedAgain);
        assert_eq!(alert_of(&again), Some(alert.clone()), "the same alert");
        assert!(
            again
                .effects
                .iter()
                .any(|e| matches!(e, Effect::Notify { outbound, .. }
                if outbound.notification.state == TaskState::Error)),
            "the caller told again"
        );
        let retried = again.next.expect("a new lease");
        assert_eq!(retried.complete_by, Some(late.plus(ALERT_REDELIVERY)));

        let told = notifications_sent(&retried, &outboxed(&retried), late);
        let published = alert_published(&told.next.expect("told"), &alert, late);
        let cleared = published.next.expect("cleared");
        assert_eq!(
            (cleared.pending_alert.clone(), cleared.complete_by),
            (None, None)
        );
        assert_eq!(cleared.state, TaskState::Error);
        assert_eq!(alert_published(&cleared, &alert, late).next, None, "once");
        assert_eq!(
            on_expired(&cleared, &workflow, late.plus(ALERT_REDELIVERY)).next,
            None
        );
    }

    #[test]
    fn a_permanent_error_compensates_at_once_and_a_resubmission_redoes_the_undone_steps() {
        let workflow = drone();
        let now = Timestamp(0);
        let (task, order, request) = run_to(&workflow, 4, now);
        assert_eq!(request.step_name, "create-delivery");
        let failed = Outcome::Failed {
            error: "address not served".into(),
        };
        let decision = on_response(&task, &workflow, &order, &respond(&request, failed), now);
        let mut task = decision.next.clone().expect("recorded");
        assert_eq!(task.state, TaskState::Compensating);
        assert_eq!(task.steps[4].state, StepState::Error);
        let mut decision = decision;
        while let Some(request) = dispatched(&decision).first().map(|r| (*r).clone()) {
            decision = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
            task = decision.next.clone().expect("compensated");
        }
        let states: Vec<_> = task.steps.iter().map(|s| s.state).collect();
        use StepState::{Compensated, Error, Processed};
        assert_eq!(
            states,
            [Processed, Compensated, Processed, Compensated, Error]
        );
        assert_eq!(task.state, TaskState::Error);

        assert!(
            resubmit(
                &run_to(&workflow, 1, now).0,
                &workflow,
                &order,
                again(),
                now
            )
            .is_err(),
            "only a task in Error"
        );
        let decision = resubmit(&task, &workflow, &order, again(), now).expect("resubmitted");
        let task = decision.next.expect("reset");
        assert_eq!(
            (task.state, task.run, task.failure_count, task.error.clone()),
            (TaskState::Pending, 2, 0, None)
        );
        let claim = on_run(&task, &workflow, &order, "s1", now);
        let request = dispatched(&claim)[0];
        assert_eq!(
            (request.step_name.as_str(), request.idempotency_key.as_str()),
            ("create-package", "t1/2/create-package")
        );
    }

    fn operator(batch: Option<&str>) -> Request {
        Request {
            by: super::super::task::Actor::Operator,
            at: Timestamp(0),
            batch: batch.map(str::to_owned),
        }
    }

    /// An operator's resubmission, with the input as it is.
    fn again() -> Resubmit {
        Resubmit {
            request: operator(None),
            input: None,
        }
    }

    /// Answers every request `decision` sends with success until the task stops
    /// sending: the task then, and the steps whose compensation was sent, in order.
    fn answer_all(
        mut task: Task,
        workflow: &Workflow,
        order: &Order,
        mut decision: Decision,
    ) -> (Task, Vec<String>, Vec<Effect>) {
        let mut compensated = Vec::new();
        let mut effects = decision.effects.clone();
        while let Some(request) = dispatched(&decision).first().map(|r| (*r).clone()) {
            if request.operation == Operation::Compensate {
                compensated.push(request.step_name.clone());
            }
            decision = on_response(
                &task,
                workflow,
                order,
                &respond(&request, ok()),
                Timestamp(0),
            );
            task = decision.next.clone().expect("recorded");
            effects.extend(decision.effects.clone());
        }
        (task, compensated, effects)
    }

    /// The queues and versions of the notifications `task` keeps, as sent.
    fn outboxed(task: &Task) -> Vec<(QueueName, u64)> {
        task.outbox
            .iter()
            .map(|o| (o.queue.clone(), o.notification.version))
            .collect()
    }

    /// The states of the notifications `effects` send.
    fn told(effects: &[Effect]) -> Vec<TaskState> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Notify { outbound, .. } => Some(outbound.notification.state),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_notification_is_kept_with_its_change_until_sent_and_sent_again_until_then() {
        let workflow = drone();
        let now = Timestamp(0);
        let (task, order, request) = run_to(&workflow, 4, now);
        let finished = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
        assert_eq!(told(&finished.effects), [TaskState::Processed]);
        let done = finished.next.expect("processed");
        use TaskState::{Pending, Processed, Processing};
        let kept: Vec<_> = done.outbox.iter().map(|o| o.notification.state).collect();
        assert_eq!(kept, [Pending, Processing, Processed], "none known sent");
        assert_eq!(done.complete_by, Some(now.plus(ALERT_REDELIVERY)));

        // The Pending and Processing notifications were sent; the Processed one was
        // not (the send failed, or the function stopped after the write).
        let early: Vec<_> = outboxed(&done)[..2].to_vec();
        let told_early = notifications_sent(&done, &early, now);
        let task = told_early.next.expect("cleared");
        assert_eq!(
            notifications_sent(&task, &early, now).verdict,
            Verdict::NotificationsClearedAlready
        );
        assert_eq!(task.complete_by, Some(now.plus(ALERT_REDELIVERY)));
        let late = now.plus(ALERT_REDELIVERY);
        assert_eq!(on_expired(&task, &workflow, now).next, None, "not yet");
        let again = on_expired(&task, &workflow, late);
        assert_eq!(again.verdict, Verdict::NotifiedAgain);
        assert_eq!(told(&again.effects), [Processed], "the same notification");
        let Effect::Notify { outbound, .. } = &again.effects[0] else {
            panic!("a notification first: {:?}", again.effects);
        };
        assert_eq!(
            outbound, &task.outbox[0],
            "its version kept, for a caller to deduplicate"
        );
        let task = again.next.expect("a new lease");
        assert_eq!(task.complete_by, Some(late.plus(ALERT_REDELIVERY)));
        let task = notifications_sent(&task, &outboxed(&task), late)
            .next
            .expect("sent at last");
        assert!(task.outbox.is_empty());
        assert_eq!(task.complete_by, None, "nothing left to deliver");
    }

    #[test]
    fn a_change_that_passes_through_a_state_tells_only_where_it_ends() {
        let workflow = drone();
        let now = Timestamp(0);
        // The first step is refused: Compensating, with nothing to undo, then Error,
        // in one write of one version.
        let (decision, _) = refused_at_first(&workflow, "no such customer", now);
        assert_eq!(told(&decision.effects), [TaskState::Error]);
        let task = decision.next.expect("in error");
        let versions: Vec<_> = task
            .outbox
            .iter()
            .map(|o| (o.notification.version, o.notification.state))
            .collect();
        assert_eq!(
            versions,
            [
                (1, TaskState::Pending),
                (2, TaskState::Processing),
                (task.version, TaskState::Error)
            ],
            "a version names one notification"
        );
    }

    fn states(task: &Task) -> Vec<StepState> {
        task.steps.iter().map(|s| s.state).collect()
    }

    use StepState::{Compensated, Pending as Untouched, Processed as Done};

    #[test]
    fn a_cancel_during_a_call_keeps_its_result_then_undoes_the_done_steps_once() {
        let workflow = drone();
        let now = Timestamp(0);
        let (task, order, running) = run_to(&workflow, 2, now);
        let decision = cancel(&task, &workflow, operator(None), now).expect("cancelled");
        assert_eq!(decision.verdict, Verdict::CancelRequested);
        assert!(
            dispatched(&decision).is_empty(),
            "the running call is waited for"
        );
        let task = decision.next.expect("marked");
        assert_eq!(task.error.as_deref(), Some("cancelled by an operator"));
        assert_eq!(
            (task.state, task.steps[2].state),
            (TaskState::Compensating, StepState::Processing),
            "to be undone, once the running call is done"
        );
        assert_eq!(
            cancel(&task, &workflow, operator(None), now).map(|d| (d.verdict, d.next)),
            Ok((Verdict::CancelledAlready, None)),
            "asking again changes nothing"
        );
        let answered = on_response(&task, &workflow, &order, &respond(&running, ok()), now);
        let task = answered.next.clone().expect("recorded");
        assert_eq!(task.state, TaskState::Compensating);
        let (task, compensated, effects) = answer_all(task, &workflow, &order, answered);
        assert_eq!(compensated, ["create-package"]);
        assert_eq!(task.state, TaskState::Error);
        assert_eq!(
            states(&task),
            [Done, Compensated, Done, Untouched, Untouched]
        );
        let alert = effects.iter().find_map(|e| match e {
            Effect::Alert(alert) => Some(alert),
            _ => None,
        });
        assert_eq!(
            alert.map(|a| a.reason.as_str()),
            Some("cancelled by an operator")
        );
        let told = effects.iter().any(|e| {
            matches!(e, Effect::Notify { outbound, .. }
            if outbound.notification.state == TaskState::Error
                && outbound.notification.error.as_deref() == Some("cancelled by an operator"))
        });
        assert!(told, "the caller is told it was cancelled: {effects:?}");
        assert_eq!(
            cancel(&task, &workflow, operator(None), now).map(|d| d.verdict),
            Ok(Verdict::CancelledAlready)
        );
    }

    #[test]
    fn a_cancel_during_a_compensation_undoes_each_done_step_once() {
        let workflow = drone();
        let now = Timestamp(0);
        let (task, order, request) = run_to(&workflow, 4, now);
        let failed = Outcome::Failed {
            error: "address not served".into(),
        };
        let decision = on_response(&task, &workflow, &order, &respond(&request, failed), now);
        let task = decision.next.clone().expect("compensating");
        let undoing = dispatched(&decision)[0].clone();
        assert_eq!(undoing.step_name, "schedule-drone");
        let cancelled = cancel(&task, &workflow, operator(None), now).expect("cancelled");
        assert!(cancelled.effects.is_empty(), "{:?}", cancelled.effects);
        let task = cancelled.next.expect("marked");
        assert!(
            task.error
                .as_deref()
                .is_some_and(|e| e.contains("address not served"))
        );
        let answered = on_response(&task, &workflow, &order, &respond(&undoing, ok()), now);
        let task = answered.next.clone().expect("recorded");
        let (task, compensated, _) = answer_all(task, &workflow, &order, answered);
        assert_eq!(compensated, ["create-package"]);
        assert_eq!(task.state, TaskState::Error);
        assert!(task.cancelled.is_some());
    }

    #[test]
    fn a_cancel_during_a_supervisor_retry_wait_compensates_without_the_retry() {
        let workflow = drone();
        let now = Timestamp(0);
        let (task, order, _) = run_to(&workflow, 2, now);
        let late = task.complete_by.expect("lease");
        let retry = on_expired(&task, &workflow, late);
        assert_eq!(retry.verdict, Verdict::Retry);
        let task = retry.next.expect("waiting");
        assert_eq!(
            (task.state, task.locked_by.as_deref()),
            (TaskState::Pending, None)
        );
        let decision = cancel(&task, &workflow, operator(Some("b1")), late).expect("cancelled");
        assert!(
            decision
                .effects
                .iter()
                .any(|e| matches!(e, Effect::Schedule { .. }))
        );
        let task = decision.next.expect("compensating");
        assert_eq!(task.state, TaskState::Compensating);
        assert_eq!(
            cancel(&task, &workflow, operator(Some("b1")), late),
            Err(Refused::TakenByBatch("b1".into())),
            "a batch takes a task once"
        );
        let claim = on_run(&task, &workflow, &order, "s2", late);
        let task = claim.next.clone().expect("claimed");
        let (task, compensated, _) = answer_all(task, &workflow, &order, claim);
        assert_eq!(
            compensated,
            ["create-package"],
            "check-transport, sent once, has no compensation"
        );
        assert_eq!(
            states(&task),
            [Done, Compensated, StepState::TimedOut, Untouched, Untouched],
            "the step waiting for its retry may have taken effect"
        );
        assert_eq!(task.state, TaskState::Error);
    }

    #[test]
    fn a_call_whose_lease_ends_after_a_cancel_is_not_retried_but_undone() {
        let workflow = drone();
        let now = Timestamp(0);
        let (task, order, running) = run_to(&workflow, 3, now);
        assert_eq!(running.step_name, "schedule-drone");
        let task = cancel(&task, &workflow, operator(None), now)
            .expect("cancelled")
            .next
            .expect("marked");
        let late = task.complete_by.expect("lease");
        let expired = on_expired(&task, &workflow, late);
        assert_eq!(expired.verdict, Verdict::GaveUp);
        let task = expired.next.expect("given up");
        assert_eq!(task.steps[3].state, StepState::TimedOut);
        let claim = on_run(&task, &workflow, &order, "s2", late);
        let task = claim.next.clone().expect("claimed");
        let (task, compensated, _) = answer_all(task, &workflow, &order, claim);
        assert_eq!(compensated, ["schedule-drone", "create-package"]);
        assert_eq!(task.error.as_deref(), Some("cancelled by an operator"));
    }

    #[test]
    fn a_task_not_started_is_cancelled_at_once_and_an_ended_one_not_at_all() {
        let workflow = drone();
        let now = Timestamp(0);
        let (task, order, _) = submit(&workflow, submission(false), now);
        let task = cancel(&task, &workflow, operator(None), now)
            .expect("cancelled")
            .next
            .expect("compensating");
        let claim = on_run(&task, &workflow, &order, "s1", now);
        let task = claim.next.expect("ended");
        assert_eq!(task.state, TaskState::Error);
        assert!(dispatched_none(&claim.effects));
        let (done, ..) = run_to(&workflow, 0, now);
        let mut processed = done;
        processed.state = TaskState::Processed;
        assert_eq!(
            cancel(&processed, &workflow, operator(None), now),
            Err(Refused::Ended(TaskState::Processed))
        );
    }

    fn dispatched_none(effects: &[Effect]) -> bool {
        !effects.iter().any(|e| matches!(e, Effect::Dispatch(_)))
    }

    #[test]
    fn an_edited_resubmission_checks_the_input_keeps_the_old_one_and_runs_the_new() {
        let workflow = drone();
        let now = Timestamp(0);
        let (decision, order) = refused_at_first(&workflow, "no such customer", now);
        let task = decision.next.expect("in error");
        assert_eq!(task.state, TaskState::Error);
        let edit = |input: Value| Resubmit {
            request: operator(None),
            input: Some(input),
        };
        let refused = resubmit(
            &task,
            &workflow,
            &order,
            edit(json!({"customer_id": 7})),
            now,
        );
        assert!(matches!(refused, Err(Refused::Input(e)) if e.field == "input.customer_id"));
        let new = json!({"customer_id": "c2", "pickup": "a", "dropoff": "b", "weight_kg": 1});
        let decision = resubmit(&task, &workflow, &order, edit(new.clone()), now).expect("ok");
        let edited = decision.order.expect("a new input");
        assert_eq!(edited.input, new);
        assert_eq!(
            edited.earlier,
            [EarlierInput {
                until_run: 1,
                input: order.input.clone()
            }]
        );
        let task = decision.next.expect("resubmitted");
        assert_eq!((task.run, task.resubmissions.len()), (2, 1));
        assert!(task.resubmissions[0].edited);
        let claim = on_run(&task, &workflow, &edited, "s1", now);
        assert_eq!(dispatched(&claim)[0].payload.value()["input"], new);
        // Each edit keeps the input it replaces: past what a record holds, one is refused.
        let (mut task, mut order) = (task, edited);
        let large = json!({"customer_id": "x".repeat(60 * 1024), "pickup": "a", "dropoff": "b", "weight_kg": 1});
        for _ in 0..4 {
            task.state = TaskState::Error;
            let decision =
                resubmit(&task, &workflow, &order, edit(large.clone()), now).expect("ok");
            (task, order) = (decision.next.expect("task"), decision.order.expect("order"));
        }
        task.state = TaskState::Error;
        assert!(matches!(
            resubmit(&task, &workflow, &order, edit(large), now),
            Err(Refused::InputsTooLarge(size)) if size > limits::MAX_ORDER
        ));
        assert_eq!(order.earlier.len(), 5);
    }

    /// Lets the supervisor find `request`'s lease expired until the task gives it
    /// up: the task then, Compensating, and the decision that gave up.
    fn time_out(
        mut task: Task,
        workflow: &Workflow,
        order: &Order,
        mut request: AgentRequest,
    ) -> (Task, Decision) {
        loop {
            let decision = on_expired(&task, workflow, request.complete_by);
            task = decision.next.clone().expect("expired");
            if decision.verdict == Verdict::GaveUp {
                return (task, decision);
            }
            let claim = on_run(&task, workflow, order, "s2", request.complete_by);
            task = claim.next.clone().expect("claimed again");
            request = dispatched(&claim)[0].clone();
        }
    }

    /// The idempotency keys of the calls a task run with every answer a success sends.
    fn keys_called(task: Task, workflow: &Workflow, order: &Order) -> Vec<String> {
        let claim = on_run(&task, workflow, order, "s1", Timestamp(0));
        let (_, _, effects) =
            answer_all(claim.next.clone().expect("claimed"), workflow, order, claim);
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Dispatch(r) if r.operation == Operation::Call => {
                    Some(r.idempotency_key.clone())
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_resubmission_calls_a_step_whose_effect_may_be_in_place_under_the_key_it_had() {
        let workflow = drone();
        let now = Timestamp(0);
        // The delivery times out past its threshold: created, perhaps, and nothing
        // undoes it. The drone's cancellation is refused.
        let (task, order, request) = run_to(&workflow, 4, now);
        assert_eq!(request.step_name, "create-delivery");
        let (task, _) = time_out(task, &workflow, &order, request);
        let claim = on_run(&task, &workflow, &order, "s3", now);
        let mut task = claim.next.clone().expect("claimed");
        let mut decision = claim;
        while let Some(request) = dispatched(&decision).first().map(|r| (*r).clone()) {
            let outcome = match request.step_name.as_str() {
                "schedule-drone" => Outcome::Failed {
                    error: "already flying".into(),
                },
                _ => ok(),
            };
            decision = on_response(&task, &workflow, &order, &respond(&request, outcome), now);
            task = decision.next.clone().expect("recorded");
        }
        use StepState::{CompensationFailed, TimedOut};
        assert_eq!(
            states(&task),
            [Done, Compensated, Done, CompensationFailed, TimedOut]
        );
        assert_eq!(task.state, TaskState::Error);
        let alert = alert_of(&decision).expect("alerted");
        assert_eq!(alert.compensation_failed, ["schedule-drone"]);
        assert_eq!(alert.not_undone, ["create-delivery"], "the alert lists it");
        assert_eq!(task.not_undone, ["create-delivery"]);
        assert!(task.needs_a_person(), "kept until a person acts");

        // Run again as it is: the package, undone, and the drone, undone by hand as
        // the alert asks, under the new run's keys; the delivery, perhaps in place
        // and with nothing to undo it, under the key it had.
        let decision = resubmit(&task, &workflow, &order, again(), now).expect("resubmitted");
        let task = decision.next.expect("reset");
        assert!(task.not_undone.is_empty() && !task.needs_a_person());
        assert_eq!(
            keys_called(task, &workflow, &order),
            [
                "t1/2/create-package",
                "t1/2/schedule-drone",
                "t1/1/create-delivery"
            ]
        );
    }

    #[test]
    fn an_edited_resubmission_runs_every_step_again_unless_an_effect_may_be_in_place() {
        let workflow = drone();
        let now = Timestamp(0);
        let edit = |input: Value| Resubmit {
            request: operator(None),
            input: Some(input),
        };
        let new = json!({"customer_id": "c2", "pickup": "a", "dropoff": "b", "weight_kg": 1});

        // Refused for good at the delivery: every effect is undone or never was.
        let (task, order, request) = run_to(&workflow, 4, now);
        let refused = Outcome::Failed {
            error: "address not served".into(),
        };
        let decision = on_response(&task, &workflow, &order, &respond(&request, refused), now);
        let (task, _, _) = answer_all(
            decision.next.clone().expect("recorded"),
            &workflow,
            &order,
            decision,
        );
        assert_eq!(task.state, TaskState::Error);
        let decision = resubmit(&task, &workflow, &order, edit(new.clone()), now).expect("ok");
        let edited = decision.order.expect("a new input");
        let task = decision.next.expect("resubmitted");
        assert_eq!(
            states(&task),
            [Untouched; 5],
            "the checks see the new input"
        );
        let claim = on_run(&task, &workflow, &edited, "s1", now);
        let first = dispatched(&claim)[0];
        assert_eq!(
            (first.step_name.as_str(), first.idempotency_key.as_str()),
            ("check-account", "t1/2/check-account")
        );
        assert_eq!(first.payload.value()["input"], new);

        // An input the steps' requests could not carry with their results.
        let mut errored = task.clone();
        errored.state = TaskState::Error;
        let huge = json!({"customer_id": "x".repeat(limits::MAX_TASK_DATA), "pickup": "a", "dropoff": "b", "weight_kg": 1});
        assert!(matches!(
            resubmit(&errored, &workflow, &edited, edit(huge), now),
            Err(Refused::InputTooLarge(size)) if size > limits::MAX_TASK_DATA
        ));

        // The delivery timed out: it may have been made with the old input.
        let (task, order, request) = run_to(&workflow, 4, now);
        let (task, _) = time_out(task, &workflow, &order, request);
        let claim = on_run(&task, &workflow, &order, "s3", now);
        let (task, _, _) = answer_all(
            claim.next.clone().expect("claimed"),
            &workflow,
            &order,
            claim,
        );
        assert_eq!(task.state, TaskState::Error);
        let refused = resubmit(&task, &workflow, &order, edit(new), now);
        assert_eq!(
            refused,
            Err(Refused::EffectsInPlace(vec!["create-delivery".into()]))
        );
        assert!(
            refused
                .expect_err("refused")
                .to_string()
                .contains("create-delivery"),
            "the refusal names the step"
        );
    }

    #[test]
    fn an_agents_error_is_kept_cut_to_what_a_task_keeps() {
        let workflow = drone();
        let now = Timestamp(0);
        let (task, order, request) = run_to(&workflow, 1, now);
        let long = Outcome::Failed {
            error: "é".repeat(100 * 1024),
        };
        let decision = on_response(&task, &workflow, &order, &respond(&request, long), now);
        let task = decision.next.expect("recorded");
        let kept = task.steps[1].error.as_deref().expect("the step's error");
        assert!(kept.len() <= limits::MAX_ERROR_TEXT + 16, "{}", kept.len());
        assert!(kept.ends_with("[cut]"));
        let reason = task.error.as_deref().expect("the task's error");
        assert!(
            reason.len() <= limits::MAX_ERROR_TEXT + 64,
            "{}",
            reason.len()
        );
    }

    #[test]
    fn an_unclaimed_task_is_sent_again_without_counting_a_failure() {
        let workflow = drone();
        let (task, _, _) = submit(&workflow, submission(false), Timestamp(0));
        let late = task.complete_by.expect("lease");
        let decision = on_expired(&task, &workflow, late);
        let next = decision.next.expect("sent again");
        assert_eq!((next.failure_count, next.state), (0, TaskState::Pending));
        assert!(next.complete_by > task.complete_by);
        assert_eq!(
            decision.effects,
            [
                Effect::Schedule {
                    task_id: task.id.clone(),
                    delay: Duration::ZERO
                },
                Effect::Deadline {
                    task_id: task.id,
                    at: next.complete_by.expect("a new lease"),
                }
            ],
            "a Run, and a deadline message for the new lease (the last one is spent)"
        );
    }

    #[test]
    fn a_deadline_message_follows_each_tasks_lease_one_at_a_time() {
        let workflow = drone();
        let deadlines = |decision: &Decision| -> Vec<Timestamp> {
            decision
                .effects
                .iter()
                .filter_map(|e| match e {
                    Effect::Deadline { at, .. } => Some(*at),
                    _ => None,
                })
                .collect()
        };
        let now = Timestamp(0);
        let (task, order, effects) = submit(&workflow, submission(false), now);
        let pickup = task.complete_by.expect("the pickup lease");
        assert!(effects.contains(&Effect::Deadline {
            task_id: task.id.clone(),
            at: pickup,
        }));
        assert_eq!(task.deadline, Some(pickup));
        let claim = on_run(&task, &workflow, &order, "s", now);
        let claimed = claim.next.clone().expect("claimed");
        let first = claimed.complete_by.expect("the step's lease");
        assert!(first < pickup);
        assert_eq!(
            deadlines(&claim),
            [first],
            "a lease ending sooner: a message of its own"
        );
        let request = dispatched(&claim)[0].clone();
        let later = Timestamp(1_000);
        let answered = on_response(&claimed, &workflow, &order, &respond(&request, ok()), later);
        let second = answered.next.clone().expect("recorded");
        assert!(
            deadlines(&answered).is_empty(),
            "a lease ending later: the message on its way follows it"
        );

        // The pickup's message is spent: dropped without a write.
        let spent = on_deadline(&second, &workflow, pickup, pickup);
        assert_eq!(
            (spent.verdict, spent.next, spent.effects),
            (Verdict::DeadlineSuperseded, None, vec![])
        );
        // The first step's comes at its end, finds the lease moved on and is followed
        // by one for the new end; there the lease has expired: acted on as the
        // supervisor would, and the next lease watched.
        let moved = on_deadline(&second, &workflow, first, first);
        assert_eq!(moved.verdict, Verdict::DeadlineMoved);
        let second_end = second.complete_by.expect("the second step's lease");
        assert_eq!(deadlines(&moved), [second_end]);
        let watched = moved.next.expect("the new end recorded");
        let expired = on_deadline(&watched, &workflow, second_end, second_end);
        assert_eq!(expired.verdict, Verdict::Retry);
        let retried = expired.next.clone().expect("sent back");
        let pickup_again = retried.complete_by.expect("a pickup lease");
        assert_eq!(deadlines(&expired), [pickup_again]);

        // Claimed again: a lease ending sooner, one message more; the pickup's is
        // spent when it comes. One chain, however often the task is sent back.
        let claim = on_run(&retried, &workflow, &order, "s", second_end);
        let reclaimed = claim.next.clone().expect("claimed again");
        assert_eq!(
            deadlines(&claim),
            [reclaimed.complete_by.expect("its lease")]
        );
        assert_eq!(
            on_deadline(&reclaimed, &workflow, pickup_again, pickup_again).verdict,
            Verdict::DeadlineSuperseded
        );

        // The supervisor, finding a lease expired (its message lost), watches the new one.
        let lost = reclaimed.complete_by.expect("lease");
        let swept = on_expired(&reclaimed, &workflow, lost);
        assert_eq!(
            deadlines(&swept),
            [swept.next.expect("retried").complete_by.expect("lease")]
        );

        // A task that ends keeps a lease while its notifications are not known sent;
        // once they are, it has none to watch, and the chain ends.
        let (last, order, request) = run_to(&workflow, 4, now);
        let finished = on_response(&last, &workflow, &order, &respond(&request, ok()), later);
        let done = finished.next.clone().expect("processed");
        let held = done.complete_by.expect("held for its notifications");
        assert!(
            done.deadline.is_some_and(|due| due <= held),
            "the message on its way watches it"
        );
        let told = notifications_sent(&done, &outboxed(&done), later);
        let told = told.next.expect("cleared");
        assert_eq!(told.complete_by, None);
        let end = on_deadline(&told, &workflow, held, held);
        assert_eq!((end.next, end.effects), (None, vec![]));
    }

    #[test]
    fn the_fingerprint_tells_a_repeat_from_a_different_request() {
        let a = submission(false);
        let mut b = submission(false);
        assert_eq!(a.fingerprint("w"), b.fingerprint("w"));
        let stored = json!({"workflow": "w", "input": a.input, "notify": a.notify});
        assert_eq!(
            a.fingerprint("w"),
            super::super::workflow::sha256_hex(&stored.to_string()),
            "the digest of the JSON map it was first written from: stored tasks' still match"
        );
        b.input["weight_kg"] = json!(3);
        assert_ne!(a.fingerprint("w"), b.fingerprint("w"));
        assert_ne!(a.fingerprint("w"), a.fingerprint("v"));
    }
}
