//! A machine's task moved on: the state it is in entered, its step's visit sent, its
//! answer taken through the state's exit (or its `Retry` and `Catch`), and the states
//! that only choose or shape data passed through in the same write.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use sas_asl::definition::{State, StateKind, StateMachine};
use sas_asl::run::context::{self, Execution, Position};
use sas_asl::run::{self, Left, Recovery, Until, Visit, Work};
use sas_asl::{Failure, errors};

use super::history::{self, Detail};
use super::work::{step_failure, task_call, waits_for_token};
use super::{
    Branches, MachineRun, READ_ITEMS, Status, VisitWork, WRITE_RESULTS, branch_scope, visit_step,
};
use crate::callback::Token;
use crate::decide::Effect;
use crate::decide::HEARTBEAT_MISSED;
use crate::decide::change::Change;
use crate::decide::steps::RETRY_EARLY;
use crate::ids::CHILD_SEPARATOR;
use crate::messages::Operation;
use crate::task::{Order, Step, StepState, TaskState};
use crate::time::Timestamp;
use crate::workflow::Workflow;

/// The states one decision passes through at most before it writes what it has: a
/// loop of states that never wait moves on, a write at a time, and never holds a
/// scheduler.
const TRANSITIONS_A_WRITE: u32 = 1_000;

impl Change {
    /// Runs a machine's task on from where it is, as [`Change::advance`] does a
    /// workflow's.
    pub(crate) fn advance_machine(
        &mut self,
        workflow: &Workflow,
        machine: &StateMachine,
        order: &Order,
    ) {
        match self.task.state {
            TaskState::Processed | TaskState::Error => return,
            // Asked to stop (cancelled, or its parent failed): nothing of a machine is
            // undone; the execution is aborted.
            TaskState::Compensating => {
                if self.task.running_steps().next().is_some() {
                    self.hold(workflow);
                } else {
                    // The error and cause `StopExecution` gave, if it gave any
                    // ([`crate::decide::stop_execution`]); else why it stopped.
                    let run = self.task.machine.as_deref();
                    let (error, cause) =
                        match run.filter(|r| r.error.is_some() || r.cause.is_some()) {
                            Some(run) => (run.error.clone(), run.cause.clone()),
                            None => (None, self.task.error.clone()),
                        };
                    self.end(Status::Aborted, None, error, cause);
                    self.finish(workflow, TaskState::Error);
                }
                return;
            }
            TaskState::Pending | TaskState::Processing => {}
        }
        self.set_state(TaskState::Processing);
        // A branch of a Parallel or a Map runs its branch's machine.
        let Some(machine) = super::machine_of(&self.task, workflow) else {
            self.start_machine(machine, order);
            self.fail_execution(Failure::runtime("the branch is not in its machine"));
            return self.finish(workflow, TaskState::Error);
        };
        if self
            .task
            .machine
            .as_deref()
            .is_none_or(MachineRun::is_unstarted)
        {
            self.start_machine(machine, order);
        }
        loop {
            // Handed over to another scheduler's write (too many states passed).
            if self.task.state != TaskState::Processing {
                return;
            }
            let Some(run) = self.task.machine.as_deref() else {
                return;
            };
            if run.status == Status::Running && run.deadline.is_some_and(|at| at <= self.now) {
                if let Some(index) = run.state.as_deref().and_then(|s| workflow.step_index(s)) {
                    self.stop_branches(index);
                }
                self.end(
                    Status::TimedOut,
                    None,
                    Some(errors::TIMEOUT.to_owned()),
                    None,
                );
                self.task
                    .error
                    .get_or_insert_with(|| errors::TIMEOUT.to_owned());
                continue;
            }
            match run.status {
                Status::Running => {}
                Status::Succeeded => return self.finish(workflow, TaskState::Processed),
                _ => return self.finish(workflow, TaskState::Error),
            }
            let (Some(name), input) = (run.state.clone(), Arc::clone(&run.input)) else {
                return;
            };
            let Some(state) = machine.state(&name) else {
                // Ended at the top of the loop, as every failure is.
                self.fail_execution(Failure::runtime(format!("no state named '{name}'")));
                continue;
            };
            let index = visit_step(workflow, &name, run.work.as_ref());
            // A distributed Map that reads its items first, at its reader's step, or
            // writes its results last, at its writer's.
            let s3_call = match (&state.kind, &run.work) {
                (StateKind::Map(_), Some(VisitWork::Service { operation, .. })) => {
                    Some(operation.as_str())
                }
                _ => None,
            };
            let reading = s3_call.is_some_and(|operation| operation != WRITE_RESULTS);
            let writing = s3_call == Some(WRITE_RESULTS);
            let (Some(index), false) = (index, run.to_enter) else {
                // The state the last write stopped before.
                self.enter(workflow, machine, order, state, (*input).clone(), None);
                continue;
            };
            let step = &self.task.steps[index];
            match step.state {
                StepState::Pending => {
                    let not_yet = step
                        .retry_at
                        .is_some_and(|at| at > self.now.plus(RETRY_EARLY));
                    if self.is_paused() || not_yet {
                        return self.hold(workflow);
                    }
                    self.dispatch(workflow, order, index, Operation::Call);
                    if self.task.steps[index].state != StepState::Processed {
                        return self.hold(workflow);
                    }
                }
                StepState::Processing | StepState::Compensating => return self.hold(workflow),
                StepState::Processed if reading => {
                    self.items_read(workflow, machine, order, state, &input, index);
                }
                // A reader's or writer's failure, as Step Functions names it.
                StepState::Error | StepState::Unusable if reading || writing => {
                    let failure = step_failure(&self.task.steps[index], state);
                    let error = if reading {
                        errors::ITEM_READER_FAILED
                    } else {
                        errors::RESULT_WRITER_FAILED
                    };
                    let cause = format!("{}: {}", failure.error, failure.cause);
                    let failure = crate::limits::bounded_failure(Failure::new(error, cause));
                    self.leave(workflow, machine, order, state, &input, Err(failure));
                }
                StepState::Processed if writing => {
                    let result = match self.task.machine.as_deref().and_then(|r| r.work.as_ref()) {
                        Some(VisitWork::Service { request, .. }) => run::writer::exported(request),
                        _ => Value::Null,
                    };
                    self.leave(workflow, machine, order, state, &input, Ok(result));
                }
                StepState::Processed if self.exports_results() => {
                    self.export_results(workflow, machine, order, state, &input, index);
                }
                StepState::Processed => {
                    let result = self.take_visit_result(index, state);
                    self.work_ended(state, &result, false);
                    self.leave(workflow, machine, order, state, &input, result);
                }
                StepState::Error | StepState::Unusable => {
                    let failure = Err(step_failure(&self.task.steps[index], state));
                    self.work_ended(state, &failure, false);
                    self.leave(workflow, machine, order, state, &input, failure);
                }
                StepState::TimedOut => {
                    let missed = step.error.as_deref() == Some(HEARTBEAT_MISSED);
                    let error = if missed {
                        errors::HEARTBEAT_TIMEOUT
                    } else {
                        errors::TIMEOUT
                    };
                    let failure = Err(Failure::new(error, ""));
                    self.work_ended(state, &failure, true);
                    self.leave(workflow, machine, order, state, &input, failure);
                }
                StepState::Compensated | StepState::CompensationFailed | StepState::Skipped => {
                    self.fail_execution(Failure::runtime(format!(
                        "the state '{name}' is in no state a machine's step can be in"
                    )));
                }
            }
        }
    }

    /// The step of the state the machine is in, when it waits to be sent (a retry's
    /// time come).
    pub(crate) fn due_visit(&self, workflow: &Workflow) -> Option<usize> {
        let run = self.task.machine.as_ref()?;
        let index = visit_step(workflow, run.state.as_deref()?, run.work.as_ref())?;
        let step = &self.task.steps[index];
        let due = step
            .retry_at
            .is_none_or(|at| at <= self.now.plus(RETRY_EARLY));
        (step.state == StepState::Pending && due).then_some(index)
    }

    /// The execution begins at `StartAt`, with the task's input; a branch, with the
    /// variables in scope where its Parallel or Map was entered.
    fn start_machine(&mut self, machine: &StateMachine, order: &Order) {
        let deadline = machine
            .timeout_seconds
            .map(|seconds| self.task.created_at.plus(Duration::from_secs(seconds)));
        let scope = branch_scope(&self.task);
        let is_branch = scope.is_some();
        let base = self.task.machine.as_ref().map_or(0, |run| run.history_base);
        let variables = scope
            .map(|scope| scope.variables.clone())
            .unwrap_or_default();
        self.task.machine = Some(Box::new(MachineRun {
            state: Some(machine.start_at.clone()),
            to_enter: true,
            input: Arc::clone(&order.input),
            variables,
            events: base + u64::from(!is_branch),
            history_base: base,
            deadline,
            ..MachineRun::default()
        }));
        match (is_branch, base) {
            (true, _) => {}
            (false, 0) => {
                let role = role_arn(&self.task.workflow.name);
                self.write_event(1, history::execution_started(&order.input, &role));
            }
            (false, base) => {
                let redriven = u64::from(self.task.run.saturating_sub(1));
                self.write_event(base + 1, history::execution_redriven(redriven));
            }
        }
    }

    pub(super) fn run_mut(&mut self) -> &mut MachineRun {
        self.task.machine.get_or_insert_with(Box::default)
    }

    /// The context object of the visit of `state`: none where the state does not
    /// read it.
    pub(super) fn context(&self, order: &Order, state: &State) -> Value {
        if !state.reads_context {
            return Value::Null;
        }
        let workflow = &self.task.workflow.name;
        let run = self.task.machine.as_deref();
        // A branch is of its root task's execution; an execution a Task started is
        // its own.
        let id = self.task.id.to_string();
        let name = match branch_scope(&self.task) {
            Some(_) => id.split(CHILD_SEPARATOR).next().unwrap_or(&id),
            None => &id,
        };
        let execution = Execution {
            id: super::execution_arn(workflow, name),
            name: name.to_owned(),
            input: self.execution_input(order),
            role_arn: role_arn(workflow),
            start_time: self.task.created_at.to_rfc3339(),
            redrive_count: u64::from(self.task.run.saturating_sub(1)),
            machine_id: super::machine_arn(workflow),
            machine_name: workflow.to_string(),
        };
        let retry_count = run.map(|run| run.retries.iter().sum()).unwrap_or(0);
        let entered = self.now.to_rfc3339();
        let token = waits_for_token(state)
            .then(|| {
                self.task
                    .steps
                    .iter()
                    .position(|step| *step.name == *state.name)
            })
            .flatten()
            .and_then(|index| Token::issue(&self.task, index, true));
        let position = Position {
            state: &state.name,
            entered_time: &entered,
            retry_count: (!state.retry.is_empty()).then_some(retry_count),
            item: None,
            task_token: token.as_deref(),
        };
        context::context(&execution, &position)
    }

    /// The input of the execution this task is of: its own, or, for a branch, the one
    /// its parent kept for it.
    fn execution_input(&self, order: &Order) -> Value {
        match branch_scope(&self.task) {
            Some(scope) => scope.execution_input.clone().unwrap_or(Value::Null),
            None => Value::clone(&order.input),
        }
    }

    /// The execution's input for the children of `state` (a Parallel's branches, a
    /// Map's item processor), where one of their states reads the context object.
    pub(super) fn children_execution_input(&self, order: &Order, state: &State) -> Option<Value> {
        let read = |machine: &StateMachine| {
            (machine.all_states().iter()).any(|(_, state)| state.reads_context)
        };
        let reads = match &state.kind {
            StateKind::Parallel { branches } => branches.iter().any(read),
            StateKind::Map(map) => read(&map.processor),
            _ => false,
        };
        reads.then(|| self.execution_input(order))
    }

    /// Enters `name`'s state with `input` (and its text, where the state before showed
    /// it as its output), and every state after it that waits for nothing, until one
    /// waits (its visit's step made ready) or the execution ends.
    fn enter(
        &mut self,
        workflow: &Workflow,
        machine: &StateMachine,
        order: &Order,
        state: &State,
        input: Value,
        input_detail: Option<Detail>,
    ) {
        let mut state = state;
        let mut input = Arc::new(input);
        let mut input_detail = input_detail;
        for passed in 0..TRANSITIONS_A_WRITE {
            if passed > 0 && self.history_is_full() {
                break;
            }
            // A state that waits is visited once more: its call's key and its task
            // token name the visit.
            let waits = workflow.step_index(&state.name).is_some();
            let entered = {
                let run = self.run_mut();
                if waits {
                    *run.visits.entry(state.name.clone()).or_insert(0) += 1;
                    run.attempts += 1;
                }
                run.events += 1;
                run.entered_event = run.events;
                run.state = Some(state.name.clone());
                run.to_enter = false;
                run.input = Arc::clone(&input);
                run.retries = vec![0; state.retry.len()];
                run.work = None;
                run.entered_event
            };
            let detail = input_detail.take().unwrap_or_else(|| Detail::of(&input));
            self.write_event(entered, history::state_entered(state, &detail));
            let context = self.context(order, state);
            let variables = self.run_mut().variables.clone();
            let visit = Visit {
                state,
                input: &input,
                context: &context,
                variables: &variables,
            };
            let work = match run::enter(&visit) {
                Ok(work) => work,
                Err(failure) => {
                    return self.fail_execution(run::locate(failure, &state.name, entered));
                }
            };
            let left = match work {
                Work::Done(left) => left,
                Work::Fail(failure) => return self.fail_execution(failure),
                Work::Call {
                    arguments,
                    timeout_seconds,
                    heartbeat_seconds,
                } => {
                    let lease = (timeout_seconds, heartbeat_seconds);
                    let work = match task_call(state, &arguments, lease) {
                        Ok(work) => work,
                        Err(failure) => {
                            return self.fail_execution(run::locate(failure, &state.name, entered));
                        }
                    };
                    return self.begin_visit(workflow, state, work);
                }
                Work::Wait { until, result } => {
                    let until = match until {
                        Until::Seconds(seconds) => self.now.plus(Duration::from_secs(seconds)),
                        Until::At(at) => Timestamp(at.timestamp_millis()),
                    };
                    // A wait past the execution's end wakes it at its end, to time out.
                    let deadline = self.task.machine.as_ref().and_then(|run| run.deadline);
                    let until = deadline.map_or(until, |deadline| until.min(deadline));
                    return self.begin_visit(workflow, state, VisitWork::Timer { until, result });
                }
                Work::Branches { input } => {
                    let StateKind::Parallel { branches } = &state.kind else {
                        return self.fail_execution(Failure::runtime(
                            "branches from a state that is no Parallel",
                        ));
                    };
                    let work = Branches {
                        inputs: vec![input; branches.len()],
                        execution_input: self.children_execution_input(order, state),
                        ..Branches::default()
                    };
                    return self.begin_visit(workflow, state, VisitWork::Branches(Box::new(work)));
                }
                Work::Read { request } => {
                    let resource = match &state.kind {
                        StateKind::Map(map) => {
                            map.item_reader.as_ref().map(|r| r.resource.as_str())
                        }
                        _ => None,
                    };
                    let operation = resource.and_then(super::reader_operation);
                    let work = VisitWork::Service {
                        operation: operation.unwrap_or(READ_ITEMS).to_owned(),
                        request: Arc::new(request),
                        timeout_seconds: None,
                        heartbeat_seconds: None,
                    };
                    return self.begin_visit(workflow, state, work);
                }
                work @ Work::Items { .. } => {
                    if let Err(failure) = self.begin_items(workflow, order, &visit, work) {
                        self.fail_execution(run::locate(failure, &state.name, entered));
                    }
                    return;
                }
            };
            match self.go(state, left) {
                Some((next, output, detail)) => match machine.state(&next) {
                    Some(next) => {
                        state = next;
                        input = Arc::new(output);
                        input_detail = Some(detail);
                    }
                    None => {
                        return self
                            .fail_execution(Failure::runtime(format!("no state named '{next}'")));
                    }
                },
                None => return,
            }
        }
        // The next state is entered by the next write.
        let run = self.run_mut();
        run.state = Some(state.name.clone());
        run.to_enter = true;
        run.input = input;
        self.hand_over(workflow);
    }

    /// The visited state's step made ready for a new visit: its record as new but for
    /// its attempts (a late answer to an earlier visit names an attempt no longer
    /// current), its key's run drawn again (a new visit is a new call).
    pub(super) fn begin_visit(&mut self, workflow: &Workflow, state: &State, work: VisitWork) {
        let Some(index) = visit_step(workflow, &state.name, Some(&work)) else {
            return self.fail_execution(Failure::runtime(format!(
                "the state '{}' has no step",
                state.name
            )));
        };
        self.run_mut().work = Some(work);
        let step = &mut self.task.steps[index];
        let attempt = step.attempt;
        *step = Step::new(&step.name);
        step.attempt = attempt;
    }

    /// The visit of `state` ended with `result`: its exit, or its retry or catch.
    pub(super) fn leave(
        &mut self,
        workflow: &Workflow,
        machine: &StateMachine,
        order: &Order,
        state: &State,
        input: &Value,
        result: Result<Value, Failure>,
    ) {
        let context = self.context(order, state);
        let (variables, retries, entered) = {
            let run = self.run_mut();
            (
                run.variables.clone(),
                run.retries.clone(),
                run.entered_event,
            )
        };
        let visit = Visit {
            state,
            input,
            context: &context,
            variables: &variables,
        };
        let left = match result {
            Ok(result) => match run::leave(&visit, result) {
                Ok(left) => left,
                Err(failure) => {
                    return self.fail_execution(run::locate(failure, &state.name, entered));
                }
            },
            Err(failure) => match run::recover(&visit, failure, &retries) {
                Recovery::Retry {
                    retrier,
                    delay_seconds,
                    full_jitter,
                } => {
                    let delay = if full_jitter {
                        delay_seconds * fastrand::f64()
                    } else {
                        delay_seconds
                    };
                    let delay = Duration::from_secs_f64(delay.max(0.0));
                    return self.retry_visit(workflow, order, state, retrier, delay);
                }
                Recovery::Caught { left, .. } => left,
                Recovery::Raise(failure) => return self.fail_execution(failure),
            },
        };
        if let Some((next, output, text)) = self.go(state, left) {
            match machine.state(&next) {
                Some(next) => self.enter(workflow, machine, order, next, output, Some(text)),
                None => self.fail_execution(Failure::runtime(format!("no state named '{next}'"))),
            }
        }
    }

    /// Sends the visit of `state` again after `delay`, its retrier's count up: the
    /// same call, but for a Task that gives its task token, which gives a new one.
    fn retry_visit(
        &mut self,
        workflow: &Workflow,
        order: &Order,
        state: &State,
        retrier: usize,
        delay: Duration,
    ) {
        let work = self.task.machine.as_ref().and_then(|run| run.work.as_ref());
        let Some(index) = visit_step(workflow, &state.name, work) else {
            return;
        };
        let run = self.run_mut();
        if let Some(count) = run.retries.get_mut(retrier) {
            *count += 1;
        }
        run.attempts += 1;
        // An activity's retry is offered to the workers again.
        if let Some(VisitWork::Activity { taken, .. }) = run.work.as_mut() {
            *taken = None;
        }
        if waits_for_token(state)
            && let Err(failure) = self.retried_call(order, state)
        {
            let entered = self.run_mut().entered_event;
            return self.fail_execution(run::locate(failure, &state.name, entered));
        }
        let retry_at = self.now.plus(delay);
        let step = &mut self.task.steps[index];
        step.state = StepState::Pending;
        step.retry_at = Some(retry_at);
        // The retrier's attempt is a call of its own: the supervisor counts its
        // leases lapsed afresh, against the step's threshold.
        step.failure_count = 0;
        step.output = None;
        step.error = None;
        self.effects.push(Effect::Schedule {
            task_id: self.task.id.clone(),
            delay,
        });
    }

    /// The call of a retry of the visit of the Task `state`, its arguments worked out
    /// again with the retry's context object (its `RetryCount`, its task token).
    fn retried_call(&mut self, order: &Order, state: &State) -> Result<(), Failure> {
        let context = self.context(order, state);
        let run = self.run_mut();
        let (input, variables) = (Arc::clone(&run.input), run.variables.clone());
        let visit = Visit {
            state,
            input: &input,
            context: &context,
            variables: &variables,
        };
        let Work::Call {
            arguments,
            timeout_seconds,
            heartbeat_seconds,
        } = run::enter(&visit)?
        else {
            return Err(Failure::runtime("a Task that asks for no call"));
        };
        let work = task_call(state, &arguments, (timeout_seconds, heartbeat_seconds))?;
        self.run_mut().work = Some(work);
        Ok(())
    }

    /// The state is left: its variables set, and where it goes with its output and
    /// the output as its events keep it, which the next state's entry shows again
    /// (`None` where the execution ended with its output).
    fn go(&mut self, state: &State, left: Left) -> Option<(String, Value, Detail)> {
        let run = self.run_mut();
        run.variables.extend(left.assigned);
        run.events += 1;
        let exited = run.events;
        let output = Detail::of(&left.output);
        self.write_event(exited, history::state_exited(state, &output));
        match left.next {
            Some(next) => Some((next, left.output, output)),
            None => {
                self.end(Status::Succeeded, Some(left.output), None, None);
                None
            }
        }
    }

    /// The execution failed with `failure` (cut to Step Functions' lengths).
    fn fail_execution(&mut self, failure: Failure) {
        let failure = crate::limits::bounded_failure(failure);
        let error = (!failure.error.is_empty()).then_some(failure.error);
        let cause = (!failure.cause.is_empty()).then_some(failure.cause);
        // The task's error is the execution's, as Step Functions names it (none where
        // a Fail state names none).
        if let Some(error) = &error {
            self.task.error.get_or_insert_with(|| error.clone());
        }
        self.end(Status::Failed, None, error, cause);
    }

    fn end(
        &mut self,
        status: Status,
        output: Option<Value>,
        error: Option<String>,
        cause: Option<String>,
    ) {
        let run = self.run_mut();
        if status != Status::Succeeded
            && let Some(state) = run.state.take()
        {
            run.stopped_at = Some(Box::new(super::StoppedAt {
                state,
                input: Arc::clone(&run.input),
                variables: run.variables.clone(),
            }));
        }
        run.status = status;
        run.state = None;
        run.work = None;
        run.output = output.map(Arc::new);
        run.error = error;
        run.cause = cause;
        // An execution's end, the last of its history; a branch's is its parent's.
        if branch_scope(&self.task).is_none() {
            let run = self.run_mut();
            let (id, ended) = (run.events + 1, history::execution_ended(run));
            self.write_event(id, ended);
        }
    }

    /// Too many states passed in one write: what is done is written, and a Run
    /// message brings a scheduler back to go on.
    fn hand_over(&mut self, workflow: &Workflow) {
        self.release(workflow, Duration::ZERO);
    }
}

/// The role an execution of the machine `workflow` names: this engine runs every
/// machine with the functions' own roles, so it names none of the caller's.
fn role_arn(workflow: &str) -> String {
    format!("arn:aws:iam::{}:role/{workflow}", super::account())
}
