//! Calls that wait for their gates' slots ([`crate::flow`]): put in the gates' lines,
//! sent once given their slots, their complete-by starting then, and their slots
//! given back when they end.

use std::time::Duration;

use crate::flow::{Admission, CallRef, GateRef, Grant, Limit, line_position};
use crate::messages::Operation;
use crate::task::{Happened, Order, StepState, Task, Waiting};
use crate::time::Timestamp;
use crate::workflow::{CallStep, Workflow};

use crate::decide::change::Change;
use crate::decide::{Decision, Effect, Verdict};

/// How long a call waits for its slots before the supervisor asks for them again (its
/// place in the lines kept): a grant lost costs no more. Never a failure.
pub const SLOT_RECHECK: Duration = Duration::from_secs(5 * 60);

/// A slot is held its call's complete-by and this much more: a release comes first,
/// unless it is lost.
const HOLD_MARGIN: Duration = Duration::from_secs(5);

impl Change {
    /// Puts step `index`'s begun operation in the lines of `gates`: it is sent once
    /// given a slot of each ([`on_granted`]).
    pub(crate) fn queue(
        &mut self,
        call: &CallStep,
        index: usize,
        operation: Operation,
        gates: Vec<(String, &Limit)>,
    ) {
        let since = self.now;
        let step = &mut self.task.steps[index];
        step.waiting = Some(Waiting::Slot { since });
        step.complete_by = Some(since.plus(SLOT_RECHECK));
        let attempt = step.attempt;
        self.log(Happened::Queued {
            step: index,
            operation,
            attempt,
        });
        self.admit(call, index, operation, since, gates);
    }

    /// Asks for the slots of step `index`'s operation, waiting since `since`.
    fn admit(
        &mut self,
        call: &CallStep,
        index: usize,
        operation: Operation,
        since: Timestamp,
        gates: Vec<(String, &Limit)>,
    ) {
        self.effects.push(Effect::Admit(Admission {
            call: call_of(&self.task, index, operation),
            gates: gates
                .into_iter()
                .map(|(name, limit)| GateRef {
                    name,
                    limit: limit.clone(),
                })
                .collect(),
            service: call.agent.clone(),
            since,
            position: line_position(since, self.task.priority),
            hold: call.complete_by + HOLD_MARGIN,
            trace: Some(self.task.step_trace(index)),
        }));
    }

    /// The supervisor, on step `index` whose wait for its slots has lasted a recheck:
    /// it asks for them again, in the place it had (a grant lost, or a line's entry).
    pub(crate) fn admit_again(&mut self, workflow: &Workflow, order: &Order, index: usize) {
        let step = &self.task.steps[index];
        let (Some(Waiting::Slot { since }), Some(call)) =
            (step.waiting, workflow.steps[index].call())
        else {
            return;
        };
        let operation = operation_of(step.state);
        let gates = gates_of(call, workflow, index, order, &self.task);
        self.task.steps[index].complete_by = Some(self.now.plus(SLOT_RECHECK));
        self.admit(call, index, operation, since, gates);
    }

    /// Gives back the slots of the calls `held` when the change began that have
    /// ended in it (answered, timed out, stopped, or another attempt begun).
    pub(crate) fn release_ended_calls(&mut self, held: Vec<(CallRef, Vec<String>)>) {
        for (call, gates) in held {
            let step = &mut self.task.steps[call.step];
            let same_call = step.attempt == call.attempt
                && self.task.run == call.run
                && matches!(step.state, StepState::Processing | StepState::Compensating);
            if same_call {
                continue;
            }
            if step.slots == gates {
                step.slots.clear();
            }
            self.effects.push(Effect::Release { call, gates });
        }
    }
}

/// The gates `task`'s step `index`, `call`, passes ([`CallStep::gates`]): a state
/// machine's at the endpoint its visit's request names.
pub(crate) fn gates_of<'w>(
    call: &'w CallStep,
    workflow: &Workflow,
    index: usize,
    order: &Order,
    task: &Task,
) -> Vec<(String, &'w Limit)> {
    let name = &workflow.steps[index].name;
    let endpoint = crate::machine::visit_endpoint(task);
    call.gates(&workflow.name, name, &order.input, endpoint)
}

/// The calls of `task` holding slots: each with its gates.
pub(crate) fn held_slots(task: &Task) -> Vec<(CallRef, Vec<String>)> {
    task.steps
        .iter()
        .enumerate()
        .filter(|(_, step)| !step.slots.is_empty())
        .map(|(index, step)| {
            (
                call_of(task, index, operation_of(step.state)),
                step.slots.clone(),
            )
        })
        .collect()
}

/// The call `task`'s step `index` makes now: its operation `operation`, in its
/// current attempt.
fn call_of(task: &Task, index: usize, operation: Operation) -> CallRef {
    CallRef {
        task_id: task.id.clone(),
        run: task.run,
        step: index,
        attempt: task.steps[index].attempt,
        operation,
    }
}

/// The operation a running step's state says it makes.
fn operation_of(state: StepState) -> Operation {
    if state == StepState::Compensating {
        Operation::Compensate
    } else {
        Operation::Call
    }
}

/// A scheduler, on the grant of a call's slots: the call is sent, its complete-by
/// from now, if its step still waits for them; otherwise (the task was cancelled, the
/// grant came twice) the slots are given back.
#[must_use]
pub fn on_granted(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    grant: &Grant,
    now: Timestamp,
) -> Decision {
    let granted = &grant.call;
    let step = task.steps.get(granted.step);
    let waits = task.run == granted.run
        && step.is_some_and(|s| {
            s.attempt == granted.attempt
                && matches!(s.waiting, Some(Waiting::Slot { .. }))
                && operation_of(s.state) == granted.operation
        });
    let call = workflow.steps.get(granted.step).and_then(|s| s.call());
    let running = task.run == granted.run
        && step.is_some_and(|s| s.attempt == granted.attempt && !s.slots.is_empty());
    if running && !waits {
        // Granted again (its wait asked for again while the first grant came): the
        // call holds these very slots, and gives them back when it ends.
        return Decision::ignore(Verdict::GrantUnused);
    }
    let (true, Some(call), Some(step)) = (waits, call, step) else {
        let gates = call.map_or_else(Vec::new, |call| {
            gates_of(call, workflow, granted.step, order, task)
                .into_iter()
                .map(|(gate, _)| gate)
                .collect()
        });
        return Decision {
            next: None,
            order: None,
            effects: vec![Effect::Release {
                call: granted.clone(),
                gates,
            }],
            verdict: Verdict::GrantUnused,
        };
    };
    let Some(Waiting::Slot { since }) = step.waiting else {
        return Decision::ignore(Verdict::GrantUnused);
    };
    let index = granted.step;
    let mut change = Change::of(task, now);
    // The call must be done before its first slot lapses: a grant that came too late
    // (its message delayed) is asked for again, the slots it still holds renewed.
    let Some(within) = grant
        .until
        .0
        .checked_sub(millis(HOLD_MARGIN))
        .map(Timestamp)
        .filter(|within| *within > now)
    else {
        change.admit_again(workflow, order, index);
        change.hold(workflow);
        return change.done(Verdict::SlotsAskedAgain);
    };
    let held = gates_of(call, workflow, index, order, task)
        .into_iter()
        .map(|(gate, _)| gate)
        .collect();
    let waiting = &mut change.task.steps[index];
    waiting.waiting = None;
    waiting.slots = held;
    waiting.waited_ms = Some(u64::try_from(since.until(now).as_millis()).unwrap_or(u64::MAX));
    match change.request(call, index, order, granted.operation) {
        Ok((path, payload)) => {
            change.send(call, index, granted.operation, path, payload, within);
        }
        Err(error) => {
            change.record(
                index,
                granted.operation,
                crate::messages::Outcome::Failed { error },
            );
            change.advance(workflow, order);
        }
    }
    change.hold(workflow);
    change.done(Verdict::Granted)
}

/// `duration` in whole milliseconds, saturating.
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
