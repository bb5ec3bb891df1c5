//! The actions on a task's waits: a step's callback used (by its token, or by the
//! owner or an operator), its heartbeat, and the pause.

use sas_domain::callback::Token;
use sas_domain::decide::{self, CallbackOutcome, CallbackUse, Refused};
use sas_domain::ids::TaskId;
use sas_domain::task::{Caller, Request, Task};

use super::App;
use super::operator::ActionError;

impl App {
    /// The holder of a callback's token ends its step's wait ([`decide::on_callback`]).
    ///
    /// # Errors
    /// [`Refused::UnknownCallback`] for a token that is not one (malformed, for no
    /// task, or not signed by its task: nothing tells them apart);
    /// [`Refused::NotWaiting`] when its wait is over.
    pub async fn use_callback(
        &self,
        token: &str,
        outcome: CallbackOutcome,
    ) -> Result<Task, ActionError> {
        let token = self.signed_token(token).await?;
        let callback = CallbackUse {
            step: token.step,
            token: Some(token.clone()),
            by: Caller::Token,
            outcome,
        };
        unknown_if_missing(
            self.act(&token.task, |task, workflow, order, now| {
                decide::on_callback(task, workflow, order, callback.clone(), now)
            })
            .await,
        )
    }

    /// The holder of a callback's token says it is alive ([`decide::on_heartbeat`]).
    ///
    /// # Errors
    /// As [`Self::use_callback`]; refused for a step that takes no heartbeat.
    pub async fn heartbeat(&self, token: &str) -> Result<Task, ActionError> {
        let token = self.signed_token(token).await?;
        unknown_if_missing(
            self.act(&token.task, |task, workflow, _, now| {
                decide::on_heartbeat(task, workflow, &token, now)
            })
            .await,
        )
    }

    /// The token `text` is, if its task exists and signed it: one consistent read of
    /// the task whatever the token, before anything that could answer otherwise, so
    /// that a forged token tells nothing of its task (whether it exists, whether its
    /// record fits its workflow), not even by the time its answer takes.
    async fn signed_token(&self, text: &str) -> Result<Token, ActionError> {
        let token = Token::parse(text).ok_or(Refused::UnknownCallback)?;
        match self.tasks.task(&token.task).await? {
            Some(task) if token.is_signed_for(&task) => Ok(token),
            _ => Err(Refused::UnknownCallback.into()),
        }
    }

    /// The owner or an operator ends the wait of task `id`'s step named `step`, as
    /// its callback would, without the token.
    ///
    /// # Errors
    /// [`ActionError::NoSuchStep`] for a step the task's workflow does not have;
    /// otherwise as [`Self::use_callback`].
    pub async fn complete_step(
        &self,
        id: &TaskId,
        step: &str,
        by: Caller,
        outcome: CallbackOutcome,
    ) -> Result<Task, ActionError> {
        self.act(id, |task, workflow, order, now| {
            let index = workflow
                .steps
                .iter()
                .position(|s| s.name == step)
                .ok_or_else(|| Refused::NoSuchStep(step.to_owned()))?;
            let callback = CallbackUse {
                step: index,
                token: None,
                by,
                outcome: outcome.clone(),
            };
            decide::on_callback(task, workflow, order, callback, now)
        })
        .await
    }

    /// The owner or an operator pauses a task ([`decide::pause`]).
    ///
    /// # Errors
    /// [`ActionError`] when the task is missing, has ended or is being undone.
    pub async fn pause(&self, id: &TaskId, request: Request) -> Result<Task, ActionError> {
        self.act(id, |task, workflow, _, now| {
            decide::pause(task, workflow, request.clone(), now)
        })
        .await
    }

    /// The owner or an operator resumes a paused task ([`decide::resume`]).
    ///
    /// # Errors
    /// [`ActionError`] when the task is missing or has ended.
    pub async fn resume(&self, id: &TaskId, request: Request) -> Result<Task, ActionError> {
        self.act(id, |task, workflow, _, now| {
            decide::resume(task, workflow, request.clone(), now)
        })
        .await
    }
}

/// A token's task that does not exist is a token that is not one.
fn unknown_if_missing(acted: Result<Task, ActionError>) -> Result<Task, ActionError> {
    match acted {
        Err(ActionError::NotFound(_)) => Err(Refused::UnknownCallback.into()),
        other => other,
    }
}
