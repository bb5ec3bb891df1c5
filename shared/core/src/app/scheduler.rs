//! The scheduler: each message of its queues (Run, an agent's response, a deadline,
//! a buffered submission) taken to the task's decision.

use tracing::warn;

use sas_domain::decide::{self, Decision, Verdict};
use sas_domain::messages::{AgentResponse, SchedulerMessage};

use super::{App, HandleError, TaskError};
use crate::offload::message_body;
use crate::ports::StoreError;

/// How long a child's end that lost every race for its parent's record waits before
/// it is handled again: SQS delays by whole seconds.
const CHILD_ENDED_AGAIN: std::time::Duration = std::time::Duration::from_secs(1);

/// A queue a scheduler reads: each takes only the messages meant for it, so that
/// an agent allowed to answer cannot create or move tasks by other means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inbox {
    /// The scheduler's queue: Run and Deadline messages, which the system sends.
    Scheduler,
    /// The agents' responses.
    AgentResponses,
    /// Buffered submissions, which the API accepted (checked again on arrival).
    Ingest,
}

impl Inbox {
    /// Refuses `message` unless it is one this queue takes.
    fn check(self, message: &SchedulerMessage) -> Result<(), HandleError> {
        if self.accepts(message) {
            return Ok(());
        }
        Err(HandleError::Refused(format!(
            "a {} message on the {} queue, which takes only {}",
            message.kind(),
            self.as_str(),
            self.takes()
        )))
    }

    /// Whether `message` is one this queue takes.
    fn accepts(self, message: &SchedulerMessage) -> bool {
        matches!(
            (self, message),
            (
                Self::Scheduler,
                SchedulerMessage::Run { .. }
                    | SchedulerMessage::Deadline { .. }
                    | SchedulerMessage::ChildEnded(_)
                    | SchedulerMessage::Granted(_)
                    | SchedulerMessage::Gate { .. }
            ) | (Self::AgentResponses, SchedulerMessage::Response(_))
                | (Self::Ingest, SchedulerMessage::Submit(_))
        )
    }

    /// Its name, in errors.
    const fn as_str(self) -> &'static str {
        match self {
            Self::Scheduler => "scheduler",
            Self::AgentResponses => "agent-response",
            Self::Ingest => "ingest",
        }
    }

    /// The messages it takes, in errors.
    const fn takes(self) -> &'static str {
        match self {
            Self::Scheduler => "run, deadline, child-ended and gates' messages",
            Self::AgentResponses => "agents' responses",
            Self::Ingest => "buffered submissions",
        }
    }
}

/// What the scheduler did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Handled {
    /// A decision about the message's task was made (and written, if it changed it).
    Decided(Verdict),
    /// The message is for a task that does not exist: dropped.
    UnknownTask,
    /// A deadline message due beyond the longest delay a queue allows is sent on.
    DeadlineChained,
    /// A buffered submission's task was created.
    Created,
    /// A buffered submission's task was created already, by the same request.
    Repeated,
    /// A child's end that lost every race for its parent's record, sent again.
    SentAgain,
    /// A gate's line moved on, its rate's next token come.
    GateMoved,
}

impl Handled {
    /// Its name in logs.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Decided(verdict) => verdict.as_str(),
            Self::Created => "created",
            Self::Repeated => "repeated",
            Self::UnknownTask => "unknown task",
            Self::DeadlineChained => "deadline chained",
            Self::SentAgain => "sent again",
            Self::GateMoved => "gate moved",
        }
    }
}

impl App {
    /// Which of a scheduler's queues the queue named `queue` is, if it is one.
    fn inbox(&self, queue: &str) -> Option<Inbox> {
        if queue == self.names.scheduler.as_str() {
            Some(Inbox::Scheduler)
        } else if queue == self.names.agent_responses.as_str() {
            Some(Inbox::AgentResponses)
        } else {
            self.ingest
                .queue()
                .is_some_and(|ingest| ingest.as_str() == queue)
                .then_some(Inbox::Ingest)
        }
    }

    /// Scheduler: handles one message of one of its queues, named `queue`, which
    /// takes only the messages meant for it ([`Inbox::accepts`]).
    ///
    /// # Errors
    /// [`HandleError`]; the message should then be retried (and dead-lettered in the end).
    pub async fn on_scheduler_message(
        &self,
        queue: &str,
        body: &str,
    ) -> Result<Handled, HandleError> {
        let inbox = self.inbox(queue).ok_or_else(|| {
            HandleError::Refused(format!(
                "a message from '{queue}', which is not the scheduler's"
            ))
        })?;
        let body = message_body(self.payloads.as_deref(), body)
            .await
            .map_err(|error| StoreError::Unavailable(error.into()))?;
        let mut message: SchedulerMessage =
            serde_json::from_str(&body).map_err(|e| HandleError::Poison(e.to_string()))?;
        inbox.check(&message)?;
        if let SchedulerMessage::Response(response) = &mut message
            && response.output_apart
        {
            let Some(offloading) = &self.offloading else {
                return Err(HandleError::Refused(
                    "an answer stored apart, where no values are kept apart".into(),
                ));
            };
            (offloading.read_answer(response).await)
                .map_err(|error| StoreError::Unavailable(error.into()))?;
        }
        self.handle(&message).await
    }

    /// Scheduler: handles an agent's answer in the process that got it (`sas-local`'s
    /// step caller), as [`App::on_scheduler_message`] would its message on the
    /// agents' response queue, without encoding it and reading it back.
    ///
    /// # Errors
    /// [`HandleError`]; the answer should then go as a message.
    pub async fn on_answer_in_place(
        &self,
        answer: &SchedulerMessage,
    ) -> Result<Handled, HandleError> {
        Inbox::AgentResponses.check(answer)?;
        self.handle(answer).await
    }

    /// Takes a message its queue accepts, its parts stored apart read back, to its
    /// task's decision.
    async fn handle(&self, message: &SchedulerMessage) -> Result<Handled, HandleError> {
        let task_id = match message {
            // Boxed: its future is as large as a transition's, which every other
            // message's future would otherwise hold room for too.
            SchedulerMessage::Submit(buffered) => return Box::pin(self.ingest(buffered)).await,
            SchedulerMessage::Run { task_id } | SchedulerMessage::Deadline { task_id, .. } => {
                task_id
            }
            SchedulerMessage::Response(response) => &response.task_id,
            SchedulerMessage::ChildEnded(ended) => &ended.task_id,
            SchedulerMessage::Granted(grant) => &grant.call.task_id,
            SchedulerMessage::Gate { gate } => {
                self.move_line(gate).await;
                return Ok(Handled::GateMoved);
            }
        };
        if let SchedulerMessage::Deadline { at, .. } = *message
            && self.clock.now() < at
        {
            // Its delay could not reach the lease's end (SQS delays at most 15
            // minutes; only earlier versions sent such a message, for a long lease now
            // left to the supervisor until it is within reach): the message goes on.
            self.send(vec![self.deadline(task_id, at)]).await?;
            return Ok(Handled::DeadlineChained);
        }
        // A response may give back its task as its request's write left it.
        let carried = match message {
            SchedulerMessage::Response(AgentResponse {
                sealed_task: Some(sealed),
                ..
            }) => self.opened_task(task_id, sealed).await.map(Box::new),
            _ => None,
        };
        let written = self
            .transition_from(task_id, carried, |task, workflow, order, now| {
                Ok::<_, TaskError>(match message {
                    SchedulerMessage::Run { .. } => {
                        decide::on_run(task, workflow, order, &self.instance, now)
                    }
                    SchedulerMessage::Response(response) => {
                        decide::on_response(task, workflow, order, response, now)
                    }
                    SchedulerMessage::Deadline { at, .. } => {
                        decide::on_deadline(task, workflow, order, *at, now)
                    }
                    SchedulerMessage::ChildEnded(ended) => {
                        decide::on_child_ended(task, workflow, order, ended, now)
                    }
                    SchedulerMessage::Granted(grant) => {
                        decide::on_granted(task, workflow, order, grant, now)
                    }
                    // Handled above, before any task is read.
                    SchedulerMessage::Submit(_) | SchedulerMessage::Gate { .. } => {
                        Decision::ignore(Verdict::NotWaitingForScheduler)
                    }
                })
            })
            .await;
        let written = match (written, message) {
            (Err(TaskError::Store(StoreError::Conflict)), SchedulerMessage::ChildEnded(ended)) => {
                // Its parent's other children ended at once and won every race for its
                // record: this end comes again in a moment, not after the queue's
                // visibility timeout.
                self.send(vec![self.to_parent(ended.clone(), CHILD_ENDED_AGAIN)])
                    .await?;
                return Ok(Handled::SentAgain);
            }
            (written, _) => written?,
        };
        Ok(written.map_or_else(
            || {
                warn!(task_id = %task_id, "message for an unknown task dropped");
                Handled::UnknownTask
            },
            |(verdict, _)| Handled::Decided(verdict),
        ))
    }
}
