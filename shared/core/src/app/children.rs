//! Child tasks, as their parents' steps ask: started (or found started), undone or
//! cancelled, and their ends told to their parents. Each is done after the parent's
//! decision is written; a step's watch has it done again if this process stops
//! half way, so every move here may be made twice.

use tracing::warn;

use crate::ports::{Chain, Outgoing, OutgoingMessage, StoreError};
use sas_domain::decide::{self, ChildrenStart};
use sas_domain::ids::TaskId;
use sas_domain::messages::{ChildEnded, SchedulerMessage};
use sas_domain::submission::Submission;
use sas_domain::task::{ParentLink, Task, TaskState, WorkflowRef};

use super::submission::{SubmitError, Submitted};
use super::{App, TaskError};

impl App {
    /// Starts the children a step asks for: each created (with a Run message), or
    /// found: run again when its parent's new run needs it, or, ended, told to its
    /// parent again. A child whose input does not fit its workflow fails unstarted.
    pub(super) async fn start_children(&self, start: ChildrenStart) {
        let reference = match start.version {
            Some(version) => WorkflowRef {
                name: start.workflow.clone(),
                version,
            },
            None => match self.workflows.latest(&start.workflow) {
                Some(latest) => WorkflowRef {
                    name: latest.name.clone(),
                    version: latest.version,
                },
                None => {
                    warn!(task_id = %start.parent, workflow = %start.workflow, "children not started: no such workflow");
                    return;
                }
            },
        };
        let definition = match self.workflow(&reference).await {
            Ok(definition) => definition,
            Err(error) => {
                warn!(task_id = %start.parent, error = %Chain(&error), "children not started: the step's watch starts them again");
                return;
            }
        };
        for (item, input) in start.children {
            let link = ParentLink {
                task: start.parent.clone(),
                step: start.step,
                item,
                run: start.run,
            };
            if let Err(error) = definition.validate_input(&input) {
                warn!(task_id = %start.parent, item, error = %error, "a child's input does not fit its workflow: it fails unstarted");
                self.tell_parent(unstarted(&link)).await;
                continue;
            }
            let submission = Submission {
                id: start.parent.child(&start.step_name, item),
                input,
                notify: start.notify.clone(),
                owner: start.owner.clone(),
                parent: Some(link),
                pinned: start.pinned.clone(),
            };
            let id = submission.id.clone();
            let found = match self.create(&definition, submission.clone(), false).await {
                Ok(Submitted::Created(_)) => continue,
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
        }
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
                    let input = (order.input != submission.input).then(|| submission.input.clone());
                    Ok::<_, TaskError>(
                        decide::rerun_child(task, workflow, order, input, link.run, now)
                            .unwrap_or_else(|_| {
                                decide::Decision::ignore(decide::Verdict::RefusedAlready)
                            }),
                    )
                })
                .await;
            if let Err(error) = rerun {
                warn!(task_id = %child.id, error = %Chain(&error), "a child not run again: its parent's watch tries again");
            }
            return;
        }
        if let Some(mut ended) = ChildEnded::of(child) {
            ended.run = link.run;
            self.tell_parent(ended).await;
        }
    }

    /// Has the children a step names undone, or, running, cancelled: each that has
    /// nothing left to do (in Error, or never started) is told to its parent again.
    pub(super) async fn stop_children(
        &self,
        parent: &TaskId,
        step: usize,
        step_name: &str,
        run: u32,
        items: Vec<u32>,
    ) {
        for item in items {
            let id = parent.child(step_name, item);
            let link = ParentLink {
                task: parent.clone(),
                step,
                item,
                run,
            };
            let child = match self.store.task(&id).await {
                Ok(child) => child,
                Err(error) => {
                    warn!(task_id = %id, error = %Chain(&error), "a child not stopped: its parent's watch tries again");
                    continue;
                }
            };
            match child {
                None => self.tell_parent(unstarted(&link)).await,
                Some(child) if child.state == TaskState::Error => {
                    if let Some(mut ended) = ChildEnded::of(&child) {
                        ended.run = run;
                        self.tell_parent(ended).await;
                    }
                }
                Some(_) => {
                    let stopped = self
                        .transition(&id, |task, workflow, _, now| {
                            Ok::<_, TaskError>(decide::stop_as_child(task, workflow, now))
                        })
                        .await;
                    if let Err(error) = stopped {
                        warn!(task_id = %id, error = %Chain(&error), "a child not stopped: its parent's watch tries again");
                    }
                }
            }
        }
    }

    /// Tells a parent that a child ended, on the scheduler's queue; a message lost is
    /// found by the parent step's watch.
    async fn tell_parent(&self, ended: ChildEnded) {
        let parent = ended.task_id.clone();
        let outgoing = Outgoing {
            queue: self.names.scheduler.clone(),
            message: child_ended_message(ended),
        };
        if let Err(error) = self.send(vec![outgoing]).await {
            warn!(task_id = %parent, error = %Chain(&error), "a child's end not told: its parent's watch finds it");
        }
    }
}

/// The message that tells a parent of its child's end.
pub(super) fn child_ended_message(ended: ChildEnded) -> OutgoingMessage {
    OutgoingMessage::json(
        &SchedulerMessage::ChildEnded(ended),
        std::time::Duration::ZERO,
    )
}

/// The end of a child that was never started (its input did not fit its workflow).
fn unstarted(link: &ParentLink) -> ChildEnded {
    ChildEnded {
        task_id: link.task.clone(),
        step: link.step,
        item: link.item,
        run: link.run,
        state: TaskState::Error,
        needs_a_person: false,
    }
}
