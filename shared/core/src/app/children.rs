//! Child tasks, as their parents' steps ask: started (or found started), undone or
//! cancelled, and their ends told to their parents. Each is done after the parent's
//! decision is written; a step's watch has it done again if this process stops
//! half way, so every move here may be made twice.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use tracing::warn;

use crate::ports::{Chain, Outgoing, OutgoingMessage, StoreError};
use sas_domain::decide::{self, ChildVersion, ChildrenOf, Decision, Verdict};
use sas_domain::ids::TaskId;
use sas_domain::machine::BranchEnd;
use sas_domain::messages::{ChildEnded, SchedulerMessage};
use sas_domain::submission::Submission;
use sas_domain::task::{ParentLink, Task, TaskState, WorkflowRef};
use sas_domain::workflow::Workflow;

use super::submission::{Creation, SubmitError, Submitted};

/// The children one step's effect starts or stops at once: a map of a thousand at a
/// time is made in a few dozen store round trips' time, not a thousand.
const AT_ONCE: usize = 16;
use super::{App, TaskError};

impl App {
    /// The definition `of`'s children run: the version their parent pinned, the one
    /// a machine's ARN names (a published version, or the one its alias routes the
    /// first child to), or the newest.
    async fn children_workflow(&self, of: &ChildrenOf) -> Result<Arc<Workflow>, TaskError> {
        let version = match &of.version {
            Some(ChildVersion::Pinned(version)) => *version,
            Some(ChildVersion::Qualified(qualifier)) => {
                let first = of.parent.child(&of.step_name, 0);
                let found = self
                    .qualified_definition(&of.workflow, qualifier, first.as_str())
                    .await?;
                return found
                    .map(|(workflow, _)| workflow)
                    .ok_or_else(|| TaskError::UnknownWorkflow(of.workflow.clone(), 0));
            }
            None => {
                (self.definition(&of.workflow).await?)
                    .ok_or_else(|| TaskError::UnknownWorkflow(of.workflow.clone(), 0))?
                    .version
            }
        };
        self.workflow(&WorkflowRef {
            name: of.workflow.as_str().into(),
            version,
        })
        .await
    }

    /// Starts the children a step asks for: each created claimed by this process when
    /// `claimed`, its first step asked for in its creation ([`decide::submit_claimed`];
    /// a send lost is left to its lease), otherwise Pending for a scheduler to claim;
    /// or found: run again when its parent's new run needs it, or, ended, told to its
    /// parent again. A child whose input does not fit its workflow fails unstarted.
    pub(super) async fn start_children(
        &self,
        of: ChildrenOf,
        children: Vec<(u32, Value)>,
        claimed: bool,
    ) {
        let creation = if claimed {
            Creation::ClaimedForCaller
        } else {
            Creation::Unclaimed
        };
        let definition = match self.children_workflow(&of).await {
            Ok(definition) => definition,
            // A machine a Task names that is not there: its Task fails, as Step
            // Functions' does (a workflow's own children are checked when it loads).
            Err(TaskError::UnknownWorkflow(name, _))
                if of
                    .scope
                    .as_ref()
                    .is_some_and(|scope| scope.execution.is_some()) =>
            {
                let cause = format!("State Machine Does Not Exist: '{name}'");
                for (item, _) in children {
                    let failure = ("StepFunctions.StateMachineDoesNotExistException", &*cause);
                    self.tell_parent(unstarted(&link(&of, item), Some(failure)))
                        .await;
                }
                return;
            }
            Err(error) => {
                warn!(task_id = %of.parent, error = %Chain(&error), "children not started: the step's watch starts them again");
                return;
            }
        };
        let start = async |(item, input): (u32, Value)| {
            let link = link(&of, item);
            if let Err(error) = definition.validate_input(&input) {
                warn!(task_id = %of.parent, item, error = %error, "a child's input does not fit its workflow: it fails unstarted");
                self.tell_parent(unstarted(&link, None)).await;
                return;
            }
            let submission = Submission {
                id: of.parent.child(&of.step_name, item),
                input,
                notify: of.notify.clone(),
                owner: of.owner.clone(),
                parent: Some(link),
                pinned: of.pinned.clone(),
                start_at: None,
                priority: of.priority,
                alias: of.version.as_ref().and_then(ChildVersion::alias),
                trace: of.trace.clone(),
            };
            let id = submission.id.clone();
            let found = match self.create(&definition, submission.clone(), creation).await {
                // An execution whose start is all its Task waits for has started.
                Ok(Submitted::Created(child)) => {
                    if let Some(started) = ChildEnded::started(&child) {
                        self.tell_parent(started).await;
                    }
                    return;
                }
                Ok(Submitted::Replayed(child)) => Ok(child),
                Err(SubmitError::Conflict(_)) => self
                    .store
                    .task(&id)
                    .await
                    .and_then(|child| child.ok_or(StoreError::Conflict))
                    .map_err(Into::into),
                Err(error) => Err(error),
            };
            match found {
                Ok(child) => self.found_child(&child, submission).await,
                Err(error) => {
                    warn!(task_id = %id, error = %Chain(&error), "a child not started: its parent's watch starts it again");
                }
            }
        };
        futures_util::stream::iter(children)
            .for_each_concurrent(AT_ONCE, start)
            .await;
    }

    /// A child found started already for `submission`: one in Error from an earlier
    /// run of its parent runs again (with the new input, if it changed); one that has
    /// ended is told to its parent again (a Processed one counts in the new run: its
    /// effect is in place); a running one tells its parent when it ends.
    async fn found_child(&self, child: &Task, submission: Submission) {
        let Some(link) = submission.parent else {
            return;
        };
        let earlier_run = child.parent.as_ref().is_some_and(|p| p.run < link.run);
        if earlier_run && child.state == TaskState::Error {
            let rerun = self
                .transition(&child.id, |task, workflow, order, now| {
                    // Run again already (this write landed, its answer lost; or another
                    // process's).
                    if task.parent.as_ref().is_some_and(|p| p.run >= link.run) {
                        return Ok::<_, TaskError>(Decision::ignore(Verdict::RerunForParent));
                    }
                    let input =
                        (*order.input != submission.input).then(|| submission.input.clone());
                    Ok(
                        decide::rerun_child(task, workflow, order, input, link.run, now)
                            .unwrap_or_else(|_| Decision::ignore(Verdict::RefusedAlready)),
                    )
                })
                .await;
            match rerun {
                Ok(Some((Verdict::RerunForParent, _))) => {}
                Ok(_) => {
                    // It cannot run again (its new input cannot be run while effects
                    // of its own are in place): it fails in its parent's new run.
                    self.tell_parent(unstarted(&link, None)).await;
                }
                Err(error) => {
                    warn!(task_id = %child.id, error = %Chain(&error), "a child not run again: its parent's watch tries again");
                }
            }
            return;
        }
        self.tell_parent_again(child, link.run).await;
    }

    /// Has the children of `of` for `items` cancelled if running and, with `undo`,
    /// undone if Processed: each that has ended and is not to be undone is told to
    /// its parent again, and one not yet created is kept from starting
    /// ([`decide::never_started`]).
    pub(super) async fn stop_children(&self, of: ChildrenOf, items: Vec<u32>, undo: bool) {
        let stop = async |item: u32| {
            let id = of.parent.child(&of.step_name, item);
            if let Err(error) = self.stop_child(&of, item, &id, undo).await {
                warn!(task_id = %id, error = %Chain(&error), "a child not stopped: its parent's watch tries again");
            }
        };
        futures_util::stream::iter(items)
            .for_each_concurrent(AT_ONCE, stop)
            .await;
    }

    async fn stop_child(
        &self,
        of: &ChildrenOf,
        item: u32,
        id: &TaskId,
        undo: bool,
    ) -> Result<(), TaskError> {
        let child = match self.tasks.task(id).await? {
            Some(child) => child,
            None => {
                let definition = self.children_workflow(of).await?;
                let (task, order) = decide::never_started(&definition, of, item, self.clock.now());
                self.index_attributes(None, &task).await?;
                match self.tasks.create(&task, &order).await {
                    Ok(()) => {
                        self.tell_parent(unstarted(&link(of, item), None)).await;
                        return Ok(());
                    }
                    // Created meanwhile, by its start: stopped as any other.
                    Err(StoreError::Conflict) => {
                        self.tasks.task(id).await?.ok_or(StoreError::Conflict)?
                    }
                    Err(error) => return Err(error.into()),
                }
            }
        };
        let ended =
            child.state == TaskState::Error || (child.state == TaskState::Processed && !undo);
        if ended {
            self.tell_parent_again(&child, of.run).await;
            return Ok(());
        }
        self.transition(id, |task, workflow, _, now| {
            Ok::<_, TaskError>(decide::stop_as_child(task, workflow, undo, now))
        })
        .await?;
        Ok(())
    }

    /// Tells the parent of `child`, which has ended, of its end again, for the
    /// parent's run `run` (of an execution whose start is all its Task waits for,
    /// that it started).
    async fn tell_parent_again(&self, child: &Task, run: u32) {
        if let Some(mut ended) = ChildEnded::of(child).or_else(|| ChildEnded::started(child)) {
            ended.run = run;
            self.tell_parent(ended).await;
        }
    }

    /// The message that tells a parent of its child's end, after `delay`.
    pub(super) fn to_parent(&self, ended: ChildEnded, delay: Duration) -> Outgoing {
        Outgoing {
            queue: self.names.scheduler.clone(),
            message: OutgoingMessage::json(&SchedulerMessage::ChildEnded(ended), delay),
        }
    }

    /// Tells a parent that a child ended, on the scheduler's queue; a message lost is
    /// found by the parent step's watch.
    async fn tell_parent(&self, ended: ChildEnded) {
        let parent = ended.task_id.clone();
        if let Err(error) = self.send(vec![self.to_parent(ended, Duration::ZERO)]).await {
            warn!(task_id = %parent, error = %Chain(&error), "a child's end not told: its parent's watch finds it");
        }
    }
}

/// The link of the child of `of` for `item` to its parent.
fn link(of: &ChildrenOf, item: u32) -> ParentLink {
    ParentLink {
        task: of.parent.clone(),
        step: of.step,
        item,
        run: of.run,
        scope: of.scope.clone(),
    }
}

/// The end of a child that was never started (its input did not fit its workflow,
/// or its machine is not there: `failure`, for a state machine's branch or
/// execution).
fn unstarted(link: &ParentLink, failure: Option<(&str, &str)>) -> ChildEnded {
    ChildEnded {
        task_id: link.task.clone(),
        step: link.step,
        item: link.item,
        run: link.run,
        state: TaskState::Error,
        needs_a_person: false,
        branch: (link.scope.as_deref()).map(|scope| Box::new(BranchEnd::unstarted(scope, failure))),
    }
}
