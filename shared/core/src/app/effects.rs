//! Carrying decisions out: a decision written with a conditional write (retried on
//! conflict), then its effects performed: messages sent, notifications and alerts
//! delivered and marked so.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tracing::{error, info, warn};

use crate::ports::{Chain, Outgoing, OutgoingMessage, QueueError, StoreError};
use sas_domain::decide::{self, Decision, Effect, Verdict};
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::limits::MAX_DELAY;
use sas_domain::messages::{AgentRequest, SchedulerMessage};
use sas_domain::submission::Submission;
use sas_domain::task::spans::{ended_operations, finished};
use sas_domain::task::{Order, Task, TaskState, WorkflowRef};
use sas_domain::time::Timestamp;
use sas_domain::trace::TraceContext;
use sas_domain::workflow::Workflow;

use super::{App, TaskError};

/// A conditional write lost this many times in a row means something is wrong. A
/// parent whose children end together loses a race for each sibling written before
/// it: each round of them has one winner, so this many rounds take a map's ends at
/// the concurrency the schedulers have.
const MAX_CONFLICT_RETRIES: usize = 32;

/// A decision written (or one that writes nothing), its effects still to perform.
struct Written {
    verdict: Verdict,
    next: Option<Task>,
    /// The messages the write has not sent with it.
    unsent: Vec<Outgoing>,
    best_effort: Vec<Effect>,
}

impl App {
    /// Reads a task with its order, decides, and writes the decision; a write that
    /// loses a race reads again and decides again. This process's transitions of one
    /// task take turns (`task_locks`), so that only other processes' writes race.
    /// Returns the verdict and the state written, or `None` when there is no such
    /// task.
    ///
    /// The first read may be stale (an eventually consistent read, half the price on
    /// DynamoDB): a decision from it that writes is safe, its write being conditional
    /// on the version read. Anything else it leads to (no such task, a decision that
    /// leaves the task as it is, such as a response taken for a stale one, an error,
    /// or order data older than the task's last edited resubmission: a read of its
    /// two items that tore) is decided again on a consistent read, unless the task
    /// read had ended Processed, which no later write changes (but a child's: its
    /// parent may have it undone).
    pub(super) async fn transition<E>(
        &self,
        id: &TaskId,
        decide: impl Fn(&Task, &Workflow, &Order, Timestamp) -> Result<Decision, E>,
    ) -> Result<Option<(Verdict, Option<Task>)>, E>
    where
        E: From<TaskError>,
    {
        self.transition_from(id, None, decide).await
    }

    /// [`App::transition`], deciding first from `carried` (a task and its order as
    /// a write left them, given back sealed with an agent's response: [`sealed`]),
    /// when given, rather than from a read: as stale as a read may be, and no more.
    /// Boxed: a transition's future, copied whole where it is boxed, would otherwise
    /// hold room for it several times over.
    ///
    /// [`sealed`]: super::sealed
    pub(super) async fn transition_from<E>(
        &self,
        id: &TaskId,
        carried: Option<Box<(Task, Order)>>,
        decide: impl Fn(&Task, &Workflow, &Order, Timestamp) -> Result<Decision, E>,
    ) -> Result<Option<(Verdict, Option<Task>)>, E>
    where
        E: From<TaskError>,
    {
        // Carried out apart from the decision's write, so that the task read and the
        // decision are not kept across its sends: an answer's future, boxed and
        // copied at each step, is the larger by them.
        match self.written(id, carried, decide).await? {
            Some(written) => Ok(Some(self.carry_out(written).await?)),
            None => Ok(None),
        }
    }

    /// The decision on the task `id` written: [`App::transition_from`] but for its
    /// effects. `None` when there is no such task.
    async fn written<E>(
        &self,
        id: &TaskId,
        mut carried: Option<Box<(Task, Order)>>,
        decide: impl Fn(&Task, &Workflow, &Order, Timestamp) -> Result<Decision, E>,
    ) -> Result<Option<Written>, E>
    where
        E: From<TaskError>,
    {
        let mut consistent = false;
        let lock = self.task_locks.of(id);
        for _ in 0..MAX_CONFLICT_RETRIES {
            let one_at_a_time = match lock.try_lock() {
                Ok(guard) => guard,
                Err(_) => {
                    // Another transition of this process goes first, most likely of
                    // this task: what it writes is read after it, consistently.
                    consistent = true;
                    lock.lock().await
                }
            };
            let read = match carried.take() {
                Some(carried) if !consistent => Ok(Some(*carried)),
                _ if consistent => self.tasks.task_with_order(id).await,
                _ => self.tasks.task_with_order_eventually_consistent(id).await,
            };
            let Some((task, order)) = read.map_err(TaskError::from)? else {
                if consistent {
                    return Ok(None);
                }
                consistent = true;
                continue;
            };
            if !consistent && order.predates(&task) {
                consistent = true;
                continue;
            }
            let workflow = self.workflow(&task.workflow).await?;
            if task.steps.len() != workflow.steps.len() {
                return Err(TaskError::StepsMismatch {
                    task: task.id,
                    steps: task.steps.len(),
                    defined: workflow.steps.len(),
                }
                .into());
            }
            let mut decision = match decide(&task, &workflow, &order, self.clock.now()) {
                Ok(decision) => decision,
                Err(_) if !consistent => {
                    consistent = true;
                    continue;
                }
                Err(error) => return Err(error),
            };
            let settled = task.state == TaskState::Processed && task.parent.is_none();
            if !consistent && decision.next.is_none() && !settled {
                consistent = true;
                continue;
            }
            if let Some(next) = &mut decision.next {
                // Its search attributes, as this write leaves its input and results.
                let input = &decision.order.as_ref().unwrap_or(&order).input;
                next.attributes = workflow.attributes_of(input, next);
                (self.index_attributes(Some(&task), next).await).map_err(TaskError::from)?;
            }
            let written = self.write(decision, &order).await?;
            drop(one_at_a_time);
            if let Some(written) = written {
                // Counted as it enters Error, once a task (always by the scheduler, the
                // dimension the alarm watches), not at each raise of its alert.
                if let Some(failed) = written
                    .next
                    .as_ref()
                    .filter(|n| n.state == TaskState::Error && task.state != TaskState::Error)
                {
                    self.metrics
                        .count("TasksInError", ("Workflow", &failed.workflow.name), 1);
                }
                if let Some(next) = &written.next {
                    self.tell_ended(Some(&task), next);
                }
                return Ok(Some(written));
            }
            consistent = true;
            // Lost a race: the winners go first.
            tokio::task::yield_now().await;
        }
        Err(TaskError::from(StoreError::Conflict).into())
    }

    /// Tells what `next`, written over `task` (`None`: created), ended: each step
    /// operation's duration (`StepDuration`, by workflow, step and the state it
    /// ended in), and the spans of its trace.
    pub(super) fn tell_ended(&self, task: Option<&Task>, next: &Task) {
        for ended in ended_operations(task, next) {
            let step = &next.steps[ended.index];
            let dimensions = [
                ("Workflow", &*next.workflow.name),
                ("Step", &*step.name),
                ("Outcome", step.state.as_str()),
            ];
            let duration = ended.start.until(ended.end);
            self.metrics.time("StepDuration", &dimensions, duration);
        }
        if let Some(spans) = &self.spans {
            spans.finished(finished(task, next));
        }
    }

    /// The definition a task runs: the one stored under its name and version when
    /// it started, checked once per process against the registry's. A file changed
    /// without a version bump is refused for the tasks of that version (they run
    /// the stored definition, whose steps they have) with an error in the log.
    ///
    /// # Errors
    /// The store's failure, or [`TaskError::UnknownWorkflow`].
    pub async fn workflow(&self, reference: &WorkflowRef) -> Result<Arc<Workflow>, TaskError> {
        let key = (reference.name.clone(), reference.version);
        if let Some(workflow) = self
            .checked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            return Ok(Arc::clone(workflow));
        }
        let file = self.workflows.version(&reference.name, reference.version);
        let stored = self
            .store
            .load_workflow(&reference.name, reference.version)
            .await?;
        let workflow = match stored {
            Some(source) => {
                let mut stored = Workflow::parse_stored(
                    &reference.name,
                    &format!("stored {}@{}", reference.name, reference.version),
                    &source,
                )
                .map_err(|e| StoreError::Corrupt(e.into()))?;
                // A state machine's text names no version: the one it is stored under.
                stored.version = reference.version;
                match file {
                    Some(file) if file.source == stored.source => file,
                    Some(_) => {
                        error!(workflow = %reference.name, version = reference.version,
                            "the workflow file differs from the definition stored under its version: \
                             tasks of that version run the stored one; give a changed definition a new version");
                        Arc::new(stored)
                    }
                    None => Arc::new(stored),
                }
            }
            None => file.ok_or_else(|| {
                TaskError::UnknownWorkflow(reference.name.to_string(), reference.version)
            })?,
        };
        self.checked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, Arc::clone(&workflow));
        Ok(workflow)
    }

    /// Writes the decision's state with the messages it requires (in one transaction
    /// where the store can), `order` the task's order data as read. `None` when the
    /// write lost a race and the caller must read again.
    async fn write(
        &self,
        mut decision: Decision,
        order: &Order,
    ) -> Result<Option<Written>, TaskError> {
        if let Some(next) = &mut decision.next {
            next.write_id = fastrand::u64(..);
        }
        let sealed = match &decision.next {
            Some(next) => {
                let order = decision.order.as_ref().unwrap_or(order);
                self.sealed_for(&decision.effects, next, order).await
            }
            None => None,
        };
        let (required, best_effort) = self.split(decision.effects, sealed, decision.next.as_ref());
        let unsent = match &decision.next {
            Some(next) => {
                let written = match &decision.order {
                    Some(order) => self
                        .store
                        .update_with_order(next, order)
                        .await
                        .map(|()| required.clone()),
                    None => {
                        self.tasks
                            .update_and_send(Cow::Borrowed(next), required.clone())
                            .await
                    }
                };
                let unsent = match written {
                    Ok(unsent) => unsent,
                    Err(StoreError::Conflict) if self.landed(next).await? => {
                        info!(task_id = %next.id, version = next.version,
                            "the write had landed and its answer was lost: its effects are performed");
                        required
                    }
                    Err(StoreError::Conflict) => return Ok(None),
                    Err(error) => return Err(error.into()),
                };
                if next.state.is_final() {
                    let finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(waker) = finished.get(&next.id) {
                        waker.notify_waiters();
                    }
                }
                unsent
            }
            None => required,
        };
        Ok(Some(Written {
            verdict: decision.verdict,
            next: decision.next,
            unsent,
            best_effort,
        }))
    }

    /// Performs the effects of a decision written: sends the messages its write has
    /// not, then the rest. Returns the verdict and the state written.
    async fn carry_out(&self, written: Written) -> Result<(Verdict, Option<Task>), TaskError> {
        self.metrics
            .count("Decisions", ("Verdict", written.verdict.as_str()), 1);
        self.send(written.unsent).await?;
        let task = written.next.as_ref();
        self.perform_best_effort(written.best_effort, task).await;
        Ok((written.verdict, written.next))
    }

    /// Whether a write that failed its condition had in fact landed: its answer was
    /// lost and a retry of it (the SDK retries) found the version already moved, by
    /// itself. The record stored is then exactly the one it meant to write, down to
    /// its `write_id` (another actor's identical decision, in the same millisecond,
    /// has another).
    async fn landed(&self, intended: &Task) -> Result<bool, StoreError> {
        Ok(self.tasks.task(&intended.id).await?.as_ref() == Some(intended))
    }

    /// Clears from a task what was delivered (an alert, notifications), as `decide`
    /// says, so that the supervisor does not deliver it again, and sends the messages
    /// the write requires (a deadline message for a lease it takes). A mark left (the
    /// write failed, or lost every race) only has it delivered again: at least once.
    async fn delivered(&self, task_id: &TaskId, decide: impl Fn(&Task, Timestamp) -> Decision) {
        for _ in 0..MAX_CONFLICT_RETRIES {
            let task = match self.tasks.task(task_id).await {
                Ok(Some(task)) => task,
                Ok(None) => return,
                Err(error) => {
                    warn!(task_id = %task_id, error = %Chain(&error), "delivered, its mark kept: it will be delivered again");
                    return;
                }
            };
            let decision = decide(&task, self.clock.now());
            let Some(next) = decision.next else { return };
            match self.tasks.update(&next).await {
                Ok(()) => {
                    self.metrics
                        .count("Decisions", ("Verdict", decision.verdict.as_str()), 1);
                    let (required, _) = self.split(decision.effects, None, Some(&next));
                    if let Err(error) = self.send(required).await {
                        warn!(task_id = %task_id, error = %Chain(&error), "a deadline message not sent: the supervisor's sweep finds the lease");
                    }
                    return;
                }
                Err(StoreError::Conflict) => {}
                Err(error) => {
                    warn!(task_id = %task_id, error = %Chain(&error), "delivered, its mark kept: it will be delivered again");
                    return;
                }
            }
        }
    }

    /// A deadline message for a lease ending `at`, delayed until then (in whole
    /// seconds, rounded up: never early), or by SQS's longest delay, after which it
    /// is sent on.
    pub(super) fn deadline(&self, task_id: &TaskId, at: Timestamp) -> Outgoing {
        let wait = self.clock.now().until(at);
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let message = SchedulerMessage::Deadline {
            task_id: task_id.clone(),
            at,
        };
        Outgoing {
            queue: self.names.scheduler.clone(),
            message: OutgoingMessage::json(&message, Duration::from_secs(seconds).min(MAX_DELAY)),
        }
    }

    /// Sends a new task's Run again, with its deadline message.
    pub(super) async fn schedule(&self, task: &Task) -> Result<(), QueueError> {
        let mut effects = vec![Effect::Schedule {
            task_id: task.id.clone(),
            delay: Duration::ZERO,
        }];
        if let Some(at) = task.deadline {
            effects.push(Effect::Deadline {
                task_id: task.id.clone(),
                at,
            });
        }
        self.perform(effects, None, task).await
    }

    /// A task created claimed, if it has not moved since ([`decide::creation_again`]):
    /// the messages of its creation may never have been sent (the scheduler died after
    /// the write, or the write's answer was lost and the SDK's retry failed its
    /// condition). They are sent again rather than left to the lease's end; the step's
    /// request may come twice, which its idempotency key and attempt absorb.
    pub(super) async fn claim_again(
        &self,
        definition: &Workflow,
        submission: Submission,
        existing: &Task,
    ) -> Result<(), QueueError> {
        let Some(unsent) = decide::creation_again(definition, submission, existing) else {
            return Ok(());
        };
        info!(task_id = %existing.id, "a task created claimed, not moved since: its first messages are sent again");
        // Its request goes without the task sealed (its order is not read here): its
        // answer costs a read.
        self.perform(unsent, None, existing).await
    }

    /// Sends the messages `effects` on `task` require, the first request carrying
    /// `sealed`, then performs the rest.
    pub(super) async fn perform(
        &self,
        effects: Vec<Effect>,
        sealed: Option<String>,
        task: &Task,
    ) -> Result<(), QueueError> {
        let (required, best_effort) = self.split(effects, sealed, Some(task));
        self.send(required).await?;
        self.perform_best_effort(best_effort, Some(task)).await;
        Ok(())
    }

    /// The messages the effects require (a lease covers their loss), and the
    /// effects performed at best (notifications, alerts). The first request carries
    /// `sealed`, its task as written. The messages of a decision on `task` (as it
    /// is written) come from its trace: a request from its step's span, the rest
    /// from its run's.
    fn split(
        &self,
        effects: Vec<Effect>,
        mut sealed: Option<String>,
        task: Option<&Task>,
    ) -> (Vec<Outgoing>, Vec<Effect>) {
        let mut required = Vec::new();
        let mut best_effort = Vec::new();
        // From the step's span for its request, the run's for the rest.
        let traced = |mut outgoing: Outgoing, step: Option<usize>| {
            if let Some(task) = task {
                let trace = step.map_or_else(|| task.run_trace(), |i| task.step_trace(i));
                outgoing.message = outgoing.message.traced(trace);
            }
            outgoing
        };
        for effect in effects {
            match effect {
                Effect::Dispatch(mut request) => {
                    request.sealed_task = sealed.take();
                    let outgoing = Outgoing {
                        queue: self.names.agent_requests.clone(),
                        message: agent_message(&request),
                    };
                    required.push(traced(outgoing, Some(request.step)));
                }
                Effect::Schedule { task_id, delay } => {
                    let outgoing = Outgoing {
                        queue: self.names.scheduler.clone(),
                        message: run_message(&task_id, delay),
                    };
                    required.push(traced(outgoing, None));
                }
                // Sent with the messages that must be, on the scheduler's queue: in
                // the same batch as a Run, and in the same transaction locally.
                Effect::Deadline { task_id, at } if self.deadline_messages => {
                    required.push(traced(self.deadline(&task_id, at), None));
                }
                Effect::TellParent(ended) => {
                    required.push(traced(self.to_parent(ended, Duration::ZERO), None));
                }
                other => best_effort.push(other),
            }
        }
        (required, best_effort)
    }

    /// Sends messages, one batch per queue.
    pub(super) async fn send(&self, outgoing: Vec<Outgoing>) -> Result<(), QueueError> {
        let mut by_queue: BTreeMap<QueueName, Vec<OutgoingMessage>> = BTreeMap::new();
        for Outgoing { queue, message } in outgoing {
            by_queue.entry(queue).or_default().push(message);
        }
        for (queue, messages) in by_queue {
            self.queues.send(&queue, &messages).await?;
        }
        Ok(())
    }

    /// [`App::deliver`] for the effects there are, in the trace of the run of `task`
    /// as written: most writes have none, and then neither the trace is derived nor
    /// do the futures of the writes that await this hold room for its delivery.
    async fn perform_best_effort(&self, effects: Vec<Effect>, task: Option<&Task>) {
        if !effects.is_empty() {
            let trace = task.map(Task::run_trace);
            Box::pin(self.deliver(effects, trace)).await;
        }
    }

    /// Sends the notifications and raises the alerts of a decision written, then
    /// clears from their tasks those known delivered. The notifications come from
    /// the span `trace` names: the task's run.
    async fn deliver(&self, effects: Vec<Effect>, trace: Option<TraceContext>) {
        let mut sent: BTreeMap<TaskId, Vec<(QueueName, u64)>> = BTreeMap::new();
        for effect in effects {
            match effect {
                Effect::Notify { task_id, outbound } => {
                    let message = OutgoingMessage {
                        trace: trace.clone(),
                        ..OutgoingMessage::json(&outbound.notification, Duration::ZERO)
                    };
                    match self.queues.send(&outbound.queue, &[message]).await {
                        Ok(()) => sent
                            .entry(task_id)
                            .or_default()
                            .push((outbound.queue, outbound.notification.version)),
                        Err(error) => {
                            warn!(task_id = %task_id, error = %Chain(&error), "notification not sent: the supervisor will send it again");
                        }
                    }
                }
                Effect::Alert(alert) => {
                    warn!(task_id = %alert.task_id, reason = %alert.reason, "task in Error: operator alerted");
                    match self.alerts.raise(&alert).await {
                        Ok(()) => {
                            self.delivered(&alert.task_id, |task, now| {
                                decide::alert_published(task, &alert, now)
                            })
                            .await;
                        }
                        Err(error) => {
                            warn!(task_id = %alert.task_id, error = %Chain(&error), "alert not raised: the supervisor will raise it again");
                        }
                    }
                }
                // Boxed: starting a child performs the effects of its creation.
                Effect::StartChildren {
                    of,
                    children,
                    claimed,
                } => {
                    Box::pin(self.start_children(of, children, claimed)).await;
                }
                Effect::StopChildren { of, items, undo } => {
                    Box::pin(self.stop_children(of, items, undo)).await;
                }
                Effect::Admit(admission) => self.admit(admission).await,
                Effect::Release { call, gates } => self.release(&call, &gates).await,
                Effect::Dispatch(_)
                | Effect::Schedule { .. }
                | Effect::Deadline { .. }
                | Effect::TellParent(_) => {}
            }
        }
        for (task_id, sent) in sent {
            self.delivered(&task_id, |task, now| {
                decide::notifications_sent(task, &sent, now)
            })
            .await;
        }
    }
}

fn run_message(task_id: &TaskId, delay: Duration) -> OutgoingMessage {
    let message = SchedulerMessage::Run {
        task_id: task_id.clone(),
    };
    OutgoingMessage::json(&message, delay)
}

fn agent_message(request: &AgentRequest) -> OutgoingMessage {
    OutgoingMessage::json(request, Duration::ZERO)
}
