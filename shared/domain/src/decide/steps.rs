//! A task's steps, each sent once the steps it waits for are Processed (a straight
//! line of them one at a time, parallel branches at once), and undone in the reverse
//! of the order their effects came to be in place: the scheduler's claim, its
//! dispatch of each operation, and the record of each answer.

use std::sync::Arc;
use std::time::Duration;

use crate::messages::{Operation, Outcome};
use crate::task::{Answer, Happened, Order, Step, StepState, Task, TaskState};
use crate::time::Timestamp;
use crate::workflow::{Results, Workflow};

use super::change::Change;
use super::repair::undoable;
use super::{Decision, Verdict};

/// How early a retry's Run message may come and still send its step: SQS delays a
/// message by whole seconds.
pub(crate) const RETRY_EARLY: Duration = Duration::from_secs(1);

impl Change {
    /// Runs the task on from where it is: every step whose turn has come (the
    /// steps it waits for Processed; its retry due), the next compensation, or its
    /// end. A failing task sends no new step, and undoes nothing while calls of its
    /// other branches are out: they finish or time out first.
    pub(crate) fn advance(&mut self, workflow: &Workflow, order: &Order) {
        if let Some(machine) = &workflow.machine {
            return self.advance_machine(workflow, &machine.0, order);
        }
        match self.task.state {
            TaskState::Processing | TaskState::Pending => {
                self.set_state(TaskState::Processing);
                // A step may end as it starts (a map of no items, a timer already
                // past, a step skipped), and the steps after it are due at once.
                loop {
                    if self.task.steps.iter().all(Step::is_settled) {
                        self.finish(workflow, TaskState::Processed);
                        return;
                    }
                    let due = if self.is_paused() {
                        Vec::new()
                    } else {
                        self.due(workflow)
                    };
                    if due.is_empty() || self.task.state != TaskState::Processing {
                        break;
                    }
                    for index in due {
                        // A step that cannot be sent fails at once, and the task with it.
                        if self.task.state == TaskState::Processing
                            && self.runs(workflow, order, index)
                        {
                            self.dispatch(workflow, order, index, Operation::Call);
                        }
                    }
                }
                if self.task.state == TaskState::Compensating {
                    // A step failed as it started (its condition, or its timer's
                    // instant, could not be read): what is done is undone.
                    self.advance(workflow, order);
                    return;
                }
                self.hold(workflow);
            }
            TaskState::Compensating => {
                if self.task.running_steps().next().is_some() {
                    self.hold(workflow);
                    return;
                }
                if self.rewind_failed() {
                    return self.advance(workflow, order);
                }
                let rewind = &self.task.rewind;
                let undo = self
                    .task
                    .steps
                    .iter()
                    .enumerate()
                    .filter(|(i, s)| {
                        undoable(s, &workflow.steps[*i])
                            && (rewind.is_empty() || rewind.iter().any(|name| **name == *s.name))
                    })
                    .max_by_key(|(i, s)| (s.done_order, *i))
                    .map(|(i, _)| i);
                match undo {
                    Some(index) => self.dispatch(workflow, order, index, Operation::Compensate),
                    None if !rewind.is_empty() => self.rewound(workflow, order),
                    None => self.finish(workflow, TaskState::Error),
                }
            }
            TaskState::Processed | TaskState::Error => {}
        }
    }

    /// The steps whose turn has come: Pending, the steps they wait for Processed, and
    /// those before them too, all the way back (a resubmission keeps Processed steps,
    /// so a step may be Processed while one before it is not), and a retry's time (if
    /// they wait for one) come.
    pub(crate) fn due(&self, workflow: &Workflow) -> Vec<usize> {
        if workflow.machine.is_some() {
            return self.due_visit(workflow).into_iter().collect();
        }
        // Steps come after the steps they wait for, so one pass settles each.
        let mut settled = Vec::with_capacity(self.task.steps.len());
        for (step, definition) in self.task.steps.iter().zip(&workflow.steps) {
            let before_settled = definition.after.iter().all(|&before| settled[before]);
            settled.push(step.is_settled() && before_settled);
        }
        self.task
            .steps
            .iter()
            .enumerate()
            .filter(|(index, step)| {
                step.state == StepState::Pending
                    && workflow.steps[*index]
                        .after
                        .iter()
                        .all(|&before| settled[before])
                    && step
                        .retry_at
                        .is_none_or(|at| at <= self.now.plus(RETRY_EARLY))
            })
            .map(|(index, _)| index)
            .collect()
    }

    /// The task's lease while it runs: the soonest complete-by of its steps out, or of
    /// a retry's pickup. With no step out and a retry to wait for, the task is
    /// released to the schedulers until then (the retry's Run message is on its way).
    /// A paused task with no step out is released too, and holds no lease: nothing is
    /// due until it is resumed.
    pub(crate) fn hold(&mut self, workflow: &Workflow) {
        let running = self
            .task
            .running_steps()
            .filter_map(|index| self.task.steps[index].complete_by)
            .min();
        let paused = self.is_paused();
        let retry = self
            .task
            .steps
            .iter()
            .filter(|s| s.state == StepState::Pending && !paused)
            .filter_map(|s| s.retry_at)
            .min();
        let pickup = retry.map(|at| at.max(self.now).plus(workflow.pickup_timeout));
        if running.is_none()
            && (pickup.is_some() || paused)
            && self.task.state == TaskState::Processing
        {
            self.task.locked_by = None;
            self.set_state(TaskState::Pending);
        }
        self.task.complete_by = match running.into_iter().chain(pickup).min() {
            Some(at) => Some(at),
            None if paused => None,
            None => self.task.complete_by,
        };
    }

    /// Starts step `index` (`operation` a call) or undoes it (a compensation), as its
    /// kind does.
    pub(crate) fn dispatch(
        &mut self,
        workflow: &Workflow,
        order: &Order,
        index: usize,
        operation: Operation,
    ) {
        let kind = workflow.steps[index].kind.kind();
        match operation {
            Operation::Call => kind.start(self, workflow, order, index),
            Operation::Compensate => kind.undo(self, workflow, order, index),
        }
    }

    /// Begins step `index`'s operation: its state, a new attempt, its key's run.
    pub(crate) fn begin(&mut self, index: usize, operation: Operation) {
        let run = self.task.run;
        let step = &mut self.task.steps[index];
        step.state = match operation {
            Operation::Call => StepState::Processing,
            Operation::Compensate => {
                step.undoing = Some(step.state);
                StepState::Compensating
            }
        };
        step.attempt += 1;
        step.started_at = Some(self.now);
        step.key_run = step.key_run_in(run);
        step.retry_at = None;
    }
}

/// The scheduler, on a Run message: claims the task if it waits for a scheduler
/// and sends the steps whose turn has come (or its next compensation) to agents; or,
/// on a claimed task whose branch's step waits for this retry, sends it (Resumed). A
/// Run message before a retry's time sends nothing.
#[must_use]
pub fn on_run(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    instance: &str,
    now: Timestamp,
) -> Decision {
    let claimable = task.locked_by.is_none()
        && matches!(task.state, TaskState::Pending | TaskState::Compensating);
    let mut change = Change::of(task, now);
    // A paused task starts nothing until it is resumed; one whose start is to come
    // waits for it (its lease ends then).
    let not_yet = task.start_at.is_some_and(|at| at > now.plus(RETRY_EARLY));
    if change.is_paused() || (task.state == TaskState::Pending && not_yet) {
        return Decision::ignore(Verdict::NotWaitingForScheduler);
    }
    // A Run message before its retry's time (a duplicate, or one early): the task
    // waits on for the one that is due, or for its lease.
    let early = task.state == TaskState::Pending
        && change.due(workflow).is_empty()
        && task.steps.iter().any(|s| s.retry_at.is_some());
    if claimable && !early {
        change.task.locked_by = Some(instance.into());
        change.advance(workflow, order);
        return change.done(Verdict::Claimed);
    }
    // A claimed task whose step (in a branch) waits for this message's retry, while
    // steps of other branches run.
    let resumable = task.locked_by.is_some()
        && task.state == TaskState::Processing
        && !change.due(workflow).is_empty();
    if !resumable {
        return Decision::ignore(Verdict::NotWaitingForScheduler);
    }
    change.advance(workflow, order);
    change.done(Verdict::Resumed)
}

impl Change {
    /// Records how an operation of step `index` ended.
    pub(crate) fn record(&mut self, index: usize, operation: Operation, outcome: Outcome) {
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
        step.waiting = None;
        match (outcome, operation) {
            (Outcome::Succeeded { output }, Operation::Call) => {
                step.state = StepState::Processed;
                step.output = Some(Arc::new(output));
                self.mark_done(index);
            }
            (Outcome::Unusable { error }, Operation::Call) => {
                step.state = StepState::Unusable;
                let reason = format!("step '{}': {error}", step.name);
                step.error = Some(error);
                self.mark_done(index);
                self.fail_step(reason);
            }
            (Outcome::Succeeded { .. } | Outcome::Unusable { .. }, Operation::Compensate) => {
                step.state = StepState::Compensated;
            }
            (Outcome::Failed { error }, Operation::Call) => {
                step.state = StepState::Error;
                let reason = format!("step '{}' failed: {error}", step.name);
                step.error = Some(error);
                self.fail_step(reason);
            }
            (Outcome::Failed { error }, Operation::Compensate) => {
                step.state = StepState::CompensationFailed;
                step.error = Some(format!("compensation failed: {error}"));
            }
        }
    }
}

/// The outputs of `task`'s steps that have one, by step name.
pub(crate) fn results(task: &Task) -> Results<'_> {
    task.steps
        .iter()
        .filter_map(|s| Some((&*s.name, s.output.as_deref()?)))
        .collect()
}

/// The data an agent request carries: the input and the outputs kept.
pub(crate) fn task_data<'a>(
    order: &'a Order,
    task: &'a Task,
) -> impl Iterator<Item = &'a serde_json::Value> + Clone {
    let outputs = task.steps.iter().filter_map(|s| s.output.as_deref());
    std::iter::once(&*order.input).chain(outputs)
}
