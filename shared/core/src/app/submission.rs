//! Submission: a task created for a caller's request, at once or through the
//! ingest queue (buffered ingestion), and the workflows it may name.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tracing::{error, info, warn};

use crate::ports::{Chain, OutgoingMessage, QueueError, StoreError};
use sas_domain::decide;
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::messages::Buffered;
use sas_domain::submission::Submission;
use sas_domain::task::{Task, TaskState, WorkflowRef};
use sas_domain::workflow::{InputError, Workflow};

use super::{App, HandleError, Handled, Ingest, TaskError};

/// Why a submission was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// No workflow of that name.
    #[error("unknown workflow '{0}'")]
    UnknownWorkflow(String),
    /// The input does not fit the workflow.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A task with that id exists, from a different request.
    #[error("task '{0}' exists with a different request")]
    Conflict(TaskId),
    /// The notification queue is one of the pattern's own.
    #[error("notify: '{0}' is one of the system's own queues")]
    ReservedQueue(QueueName),
    /// The notification queue is not named as the functions may post to.
    #[error(
        "notify: '{queue}' cannot be posted to: notification queues' names must start with '{prefix}'"
    )]
    UnreachableQueue {
        /// The queue named.
        queue: QueueName,
        /// How the queues the functions may post to are named.
        prefix: String,
    },
    /// The notification queue is not named as the owner's queues are.
    #[error(
        "notify: '{queue}' is not one of yours: your queues' names end with '{suffix}' (see GET /me)"
    )]
    ForeignQueue {
        /// The queue named.
        queue: QueueName,
        /// How the owner's queues' names end.
        suffix: String,
    },
    /// The input names an uploaded value that is not there.
    #[error("input: no value {0} was uploaded (POST /payloads)")]
    UnknownValue(String),
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The scheduler's queue failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// A submission's result.
#[derive(Debug, Clone, PartialEq)]
pub enum Submitted {
    /// A new task.
    Created(Task),
    /// The same request again: the task it made.
    Replayed(Task),
}

/// How a task is created ([`App::create`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Creation {
    /// Pending, for a scheduler to claim. A failed send is left to its pickup lease.
    Unclaimed,
    /// Claimed by this process ([`decide::submit_claimed`]), for a caller waiting on
    /// the answer (an API's caller, a parent's step starting its children). A failed
    /// send is left to its lease.
    ClaimedForCaller,
    /// Claimed by a scheduler, from a buffered submission's message. A failed send
    /// fails the message, which comes again and sends them sooner.
    ClaimedFromQueue,
}

impl App {
    /// Stores every known workflow definition, so that a task can finish on the
    /// version it started with after the files change.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when a stored version differs from its file.
    pub async fn register_workflows(&self) -> Result<(), StoreError> {
        for workflow in self.workflows.all() {
            self.store_workflow(&workflow).await?;
        }
        Ok(())
    }

    /// Stores `definition` and the versions of the workflows its tasks' children
    /// run, which a new task pins: they are those versions to its end.
    async fn store_pinned(
        &self,
        definition: &Workflow,
    ) -> Result<std::collections::BTreeMap<String, u32>, StoreError> {
        self.store_workflow(definition).await?;
        let pins = self.workflows.pins(definition);
        for (name, version) in &pins {
            if let Some(child) = self.workflows.version(name, *version) {
                self.store_workflow(&child).await?;
            }
        }
        Ok(pins)
    }

    /// Stores a definition before its first task, once per process: a task can then
    /// always finish on the version it started with, and a start-up stores nothing.
    async fn store_workflow(&self, workflow: &Workflow) -> Result<(), StoreError> {
        let key = (workflow.name.clone(), workflow.version);
        let is_stored = || {
            self.stored
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&key)
        };
        if is_stored() {
            return Ok(());
        }
        // Submissions that come together wait for the first one's write rather than
        // each write the whole definition again.
        let _storing = self.storing.lock().await;
        if is_stored() {
            return Ok(());
        }
        if let Err(error) = self.store.save_workflow(workflow).await {
            error!(workflow = %workflow.name, version = workflow.version, error = %Chain(&error),
                "cannot store the workflow definition (a version changed without a bump?)");
            return Err(error);
        }
        self.stored
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key);
        Ok(())
    }

    /// Submission: creates the task and its order data in one transaction and asks
    /// a scheduler to run it. The same request again returns the same task.
    ///
    /// # Errors
    /// [`SubmitError`] for an unknown workflow, a bad input, an id taken by another
    /// request, or a backend failure.
    pub async fn submit(
        &self,
        workflow: &str,
        submission: Submission,
    ) -> Result<Submitted, SubmitError> {
        let definition = self.named_definition(workflow).await?;
        self.submit_on(definition, submission).await
    }

    /// Submission as [`App::submit`]'s, on `definition`: one of a workflow's versions
    /// (a state machine's published version, or the one its alias routes to).
    ///
    /// # Errors
    /// [`SubmitError`] as [`App::submit`]'s.
    pub async fn submit_on(
        &self,
        definition: Arc<Workflow>,
        mut submission: Submission,
    ) -> Result<Submitted, SubmitError> {
        submission.input = self.inline(submission.input).await?;
        self.check_against(&definition, &submission)?;
        submission.pinned = self.store_pinned(&definition).await?;
        let Some(claims_now) = &self.claims_submissions else {
            return self
                .create(&definition, submission, Creation::Unclaimed)
                .await;
        };
        let creation = if claims_now() {
            Creation::ClaimedForCaller
        } else {
            Creation::Unclaimed
        };
        let again = submission.clone();
        let submitted = self.create(&definition, submission, creation).await?;
        if let Submitted::Replayed(existing) = &submitted {
            // Whichever way this request would have been created: the first may have
            // been created claimed. As a lease covers them, a failure is the
            // supervisor's to mend.
            if let Err(error) = self.claim_again(&definition, again, existing).await {
                warn!(task_id = %existing.id, error = %Chain(&error), "a task created claimed: its first messages not sent again");
            }
        }
        Ok(submitted)
    }

    /// Buffered ingestion's submission: checked as [`App::submit`] checks it, then
    /// queued, durably, for a scheduler to create its task
    /// ([`App::on_scheduler_message`]) at the rate the store takes. A request for an
    /// id taken by a different one can no longer be refused here: it is refused on
    /// the task when it is created ([`decide::refuse_submission`]).
    ///
    /// # Errors
    /// [`SubmitError`] for an unknown workflow, a bad input, or a backend failure;
    /// [`SubmitError::Queue`] when this process does not buffer submissions, or the
    /// queue fails (it may have been queued all the same: a repeat is the same task).
    pub async fn accept(
        &self,
        workflow: &str,
        submission: Submission,
    ) -> Result<Buffered, SubmitError> {
        let definition = self.named_definition(workflow).await?;
        self.accept_on(definition, submission).await
    }

    /// Buffered ingestion's submission as [`App::accept`]'s, on `definition` (as
    /// [`App::submit_on`]'s).
    ///
    /// # Errors
    /// [`SubmitError`] as [`App::accept`]'s.
    pub async fn accept_on(
        &self,
        definition: Arc<Workflow>,
        mut submission: Submission,
    ) -> Result<Buffered, SubmitError> {
        let Ingest::Buffered(ingest) = &self.ingest else {
            return Err(SubmitError::Queue(QueueError::new(
                "ingest",
                "this process does not buffer submissions",
            )));
        };
        submission.input = self.inline(submission.input).await?;
        self.check_against(&definition, &submission)?;
        submission.pinned = self.store_pinned(&definition).await?;
        let buffered = Buffered {
            workflow: WorkflowRef {
                name: definition.name.as_str().into(),
                version: definition.version,
            },
            submission,
            accepted_at: self.clock.now(),
        };
        let message = OutgoingMessage::json(&buffered.as_message(), Duration::ZERO);
        self.queues.send(ingest, &[message]).await?;
        self.remember_accepted(&buffered.submission.id, buffered.accepted_at);
        self.metrics
            .count("TasksAccepted", ("Workflow", &buffered.workflow.name), 1);
        Ok(buffered)
    }

    /// Whether submissions are buffered ([`App::with_ingestion`]).
    #[must_use]
    pub fn buffers_submissions(&self) -> bool {
        matches!(self.ingest, Ingest::Buffered(_))
    }

    /// The definition new tasks of `workflow` start on.
    pub(super) async fn named_definition(
        &self,
        workflow: &str,
    ) -> Result<Arc<Workflow>, SubmitError> {
        (self.definition(workflow).await?)
            .ok_or_else(|| SubmitError::UnknownWorkflow(workflow.to_owned()))
    }

    /// A submission's input and notification queue, checked against `definition`.
    pub(super) fn check_against(
        &self,
        definition: &Workflow,
        submission: &Submission,
    ) -> Result<(), SubmitError> {
        definition.validate_input(&submission.input)?;
        // The checks a caller's own queue passes first: a name of the system's own,
        // refused as such, could otherwise be confirmed by a guess.
        if let (Some(prefix), Some(queue)) = (&self.notification_prefix, &submission.notify)
            && !queue.as_str().starts_with(prefix.as_str())
        {
            return Err(SubmitError::UnreachableQueue {
                queue: queue.clone(),
                prefix: prefix.clone(),
            });
        }
        if let (Some(owner), Some(queue)) = (&submission.owner, &submission.notify) {
            let suffix = format!("-{}", owner.tag());
            if !queue.as_str().ends_with(&suffix) {
                return Err(SubmitError::ForeignQueue {
                    queue: queue.clone(),
                    suffix,
                });
            }
        }
        if let Some(queue) = submission.notify.as_ref().filter(|q| self.is_own_queue(q)) {
            return Err(SubmitError::ReservedQueue(queue.clone()));
        }
        Ok(())
    }

    /// Creates the task a checked submission asks for, or finds the one the same
    /// request created.
    pub(super) async fn create(
        &self,
        definition: &Workflow,
        submission: Submission,
        creation: Creation,
    ) -> Result<Submitted, SubmitError> {
        let claim = creation != Creation::Unclaimed;
        let workflow = &definition.name;
        let id = submission.id.clone();
        let now = self.clock.now();
        let (task, order, effects) = if claim {
            decide::submit_claimed(definition, submission, &self.instance, now)
        } else {
            decide::submit(definition, submission, now)
        };
        self.index_attributes(None, &task).await?;
        match self.tasks.create(&task, &order).await {
            Ok(()) => {
                info!(task_id = %id, workflow, "task accepted");
                self.metrics
                    .count("TasksSubmitted", ("Workflow", workflow), 1);
                if task.state == TaskState::Error {
                    // Created claimed, and failed at once (its first step's request
                    // could not be made): it enters Error here, not in `transition`.
                    self.metrics
                        .count("TasksInError", ("Workflow", workflow), 1);
                }
                // Created claimed, it may have ended steps, or ended at once (a
                // state machine of pure states, a first request refused).
                self.tell_ended(None, &task);
                // Created claimed, its first request carries it, as a step's does.
                let sealed = self.sealed_for(&effects, &task, &order).await;
                let sent = self.perform(effects, sealed, &task).await;
                Self::sent_once_written(&id, creation, sent)?;
                Ok(Submitted::Created(task))
            }
            Err(StoreError::Conflict) => {
                let existing = self.tasks.task(&id).await?.ok_or(StoreError::Conflict)?;
                // The new task's digest is the submission's ([`Task::fingerprint`]).
                if existing.fingerprint != task.fingerprint {
                    return Err(SubmitError::Conflict(id));
                }
                if existing.version == 1 && existing.state == TaskState::Pending {
                    // The first submission may have failed between its write and its
                    // send. A task moved since (by a scheduler, or the supervisor's
                    // retry after a delay) has messages of its own: a Run now would
                    // cut the supervisor's delay short.
                    Self::sent_once_written(&id, creation, self.schedule(&existing).await)?;
                }
                Ok(Submitted::Replayed(existing))
            }
            Err(error) => Err(error.into()),
        }
    }

    /// How the sends that follow a task's creation ended, for its creator. The API
    /// answers a task written as accepted whatever they did: its lease has the
    /// supervisor send them again, and a failure answered would have a caller without
    /// an id submit a second task. A scheduler creating a buffered task fails its
    /// message instead, which comes again and sends them sooner.
    fn sent_once_written(
        id: &TaskId,
        creation: Creation,
        sent: Result<(), QueueError>,
    ) -> Result<(), QueueError> {
        match sent {
            Err(error) if creation != Creation::ClaimedFromQueue => {
                warn!(task_id = %id, error = %Chain(&error), "task accepted, its message not sent: the supervisor sends it at its lease's end");
                Ok(())
            }
            other => other,
        }
    }

    /// A scheduler, on a buffered submission: creates its task, or finds it created
    /// by the same request, or refuses it on the task another request created.
    pub(super) async fn ingest(&self, buffered: &Buffered) -> Result<Handled, HandleError> {
        let definition = self.workflow(&buffered.workflow).await?;
        // Checked again here, where it enters the store: whoever may send to the
        // ingest queue, only what the API accepts becomes a task.
        self.check_against(&definition, &buffered.submission)
            .map_err(|e| HandleError::Refused(e.to_string()))?;
        let id = buffered.submission.id.clone();
        match self
            .create(
                &definition,
                buffered.submission.clone(),
                Creation::ClaimedFromQueue,
            )
            .await
        {
            Ok(Submitted::Created(_)) => Ok(Handled::Created),
            Ok(Submitted::Replayed(existing)) => {
                self.claim_again(&definition, buffered.submission.clone(), &existing)
                    .await?;
                Ok(Handled::Repeated)
            }
            Err(SubmitError::Conflict(_)) => {
                let written = self
                    .transition(&id, |task, _, _, now| {
                        Ok::<_, TaskError>(decide::refuse_submission(
                            task,
                            &buffered.submission,
                            &buffered.workflow.name,
                            now,
                        ))
                    })
                    .await?;
                Ok(written.map_or(Handled::UnknownTask, |(verdict, _)| {
                    Handled::Decided(verdict)
                }))
            }
            Err(SubmitError::Store(e)) => Err(e.into()),
            Err(SubmitError::Queue(e)) => Err(e.into()),
            Err(other) => Err(HandleError::Refused(other.to_string())),
        }
    }

    /// Whether `queue` is one of the pattern's queues or their dead-letter queues:
    /// where a caller's notifications must not go, and whose messages no caller may
    /// take.
    #[must_use]
    pub fn is_own_queue(&self, queue: &QueueName) -> bool {
        [
            &self.names.scheduler,
            &self.names.agent_requests,
            &self.names.agent_responses,
        ]
        .into_iter()
        .chain(self.ingest.queue())
        .any(|own| {
            let name = queue.as_str();
            name == own.as_str() || name.strip_suffix("-dlq") == Some(own.as_str())
        })
    }
}
