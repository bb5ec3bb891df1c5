//! A task created for a submission, and a buffered submission refused on a task.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::submission::Submission;
use crate::task::{Happened, Order, RefusedSubmission, Step, Task, TaskState, WorkflowRef};
use crate::time::Timestamp;
use crate::workflow::Workflow;

use super::change::Change;
use super::{Decision, Effect, Verdict, on_run};

/// A new task for `submission`: its state, its order data, and the effects
/// (a message to the schedulers, the caller told it is Pending).
#[must_use]
pub fn submit(
    workflow: &Workflow,
    submission: Submission,
    now: Timestamp,
) -> (Task, Order, Vec<Effect>) {
    create(workflow, submission, now, crate::callback::new_key())
}

/// [`submit`], the task's secret `callback_key`.
fn create(
    workflow: &Workflow,
    submission: Submission,
    now: Timestamp,
    callback_key: String,
) -> (Task, Order, Vec<Effect>) {
    let mut task = Task {
        id: submission.id.clone(),
        version: 0,
        write_id: 0,
        workflow: WorkflowRef {
            name: workflow.name.as_str().into(),
            version: workflow.version,
        },
        fingerprint: submission.fingerprint(&workflow.name).into(),
        notify: submission.notify.clone(),
        owner: submission.owner.clone(),
        parent: submission.parent.clone(),
        pinned: submission.pinned.clone(),
        state: TaskState::Pending,
        locked_by: None,
        complete_by: None,
        deadline: None,
        failure_count: 0,
        run: 1,
        steps: workflow.steps.iter().map(|s| Step::new(&s.name)).collect(),
        machine: None,
        error: None,
        pending_alert: None,
        outbox: Vec::new(),
        not_undone: Vec::new(),
        rewind: Vec::new(),
        cancelled: None,
        paused: None,
        start_at: submission.start_at,
        priority: submission.priority,
        alias: submission.alias.clone(),
        callback_key,
        resubmissions: Vec::new(),
        refused: Vec::new(),
        history: Vec::new(),
        attributes: BTreeMap::new(),
        trace: submission.trace.clone(),
        created_at: now,
        updated_at: now,
    };
    task.attributes = workflow.attributes_of(&submission.input, &task);
    let mut change = Change::of(&task, now);
    // A task to start later holds its start as its lease, and no Run message yet.
    change.wait_for_start(workflow);
    change.log(Happened::State {
        state: TaskState::Pending,
    });
    change.notify();
    change.watch_lease();
    let order = Order {
        task_id: submission.id,
        input: Arc::new(submission.input),
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
    create_claimed(
        workflow,
        submission,
        instance,
        now,
        crate::callback::new_key(),
    )
}

/// [`submit_claimed`], the task's secret `callback_key`.
fn create_claimed(
    workflow: &Workflow,
    submission: Submission,
    instance: &str,
    now: Timestamp,
    callback_key: String,
) -> (Task, Order, Vec<Effect>) {
    let (mut pending, order, submitted) = create(workflow, submission, now, callback_key);
    if pending.start_at.is_some_and(|at| at > now) {
        // It is not to be claimed yet.
        return (pending, order, submitted);
    }
    // The pickup lease's deadline message is not sent: the claim watches its own lease.
    pending.deadline = None;
    let claim = on_run(&pending, workflow, &order, instance, now);
    let told = submitted
        .into_iter()
        .filter(|effect| matches!(effect, Effect::Notify { .. }));
    let effects = told.chain(claim.effects).collect();
    (claim.next.unwrap_or(pending), order, effects)
}

/// The messages of the creation of `stored`, a task [`submit_claimed`] created for
/// `submission`, if it has not moved since: the scheduler may have died after the
/// write, before it sent them. It is rebuilt from the instant, the instance and the
/// secret it was created with: its first request is the one it sent, its callback
/// token one the task signs. The caller is not told again.
#[must_use]
pub fn creation_again(
    workflow: &Workflow,
    submission: Submission,
    stored: &Task,
) -> Option<Vec<Effect>> {
    let instance = stored.locked_by.as_deref()?;
    let (again, _, effects) = create_claimed(
        workflow,
        submission,
        instance,
        stored.created_at,
        stored.callback_key.clone(),
    );
    let unsent = effects
        .into_iter()
        .filter(|effect| !matches!(effect, Effect::Notify { .. }));
    unmoved_since_created(&again, stored).then(|| unsent.collect())
}

/// Whether `stored` is the task `created` (as [`submit_claimed`] wrote it) has been
/// since, but for submissions refused on it ([`refuse_submission`]): a refusal moves
/// a task's version, not its work, so the messages of its creation are still due.
fn unmoved_since_created(created: &Task, stored: &Task) -> bool {
    let mut work = stored.clone();
    work.history
        .retain(|event| !matches!(event.what(), Happened::Refused));
    let refusals = stored.history.len() - work.history.len();
    if refusals > 0 {
        work.refused.clear();
        work.version = work.version.saturating_sub(refusals as u64);
        work.updated_at = created.updated_at;
        work.write_id = created.write_id;
    }
    work == *created
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
