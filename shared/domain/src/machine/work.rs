//! What a visit of a state asks of the world, and what it gave: a Task's call made
//! from its arguments (a function's `Invoke`, an API action, an HTTPS call, an
//! execution of a machine), the agent's answer read as the state's result or error,
//! and a Map's items (read from S3 first, where it has a reader) begun as its
//! children.

use std::sync::Arc;

use serde_json::Value;

use sas_asl::definition::{Pattern, Resource, State, StateKind, StateMachine, Target};
use sas_asl::run::{self, Visit, Work};
use sas_asl::{Failure, errors, executions, http, lambda, services};

use super::results::Writing;
use super::{
    Awaited, Branches, InvokeAnswer, ServiceAnswer, StartedExecution, VisitWork, activities,
};
use crate::decide::change::Change;
use crate::task::{Order, Step, StepState};
use crate::workflow::Workflow;

impl Change {
    /// The Map `visit` asks for `work` on its items: a child task each (in batches
    /// where it has a batcher).
    pub(super) fn begin_items(
        &mut self,
        workflow: &Workflow,
        order: &Order,
        visit: &Visit,
        work: Work,
    ) -> Result<(), Failure> {
        let (
            StateKind::Map(map),
            Work::Items {
                items,
                max_concurrency,
                tolerated_count,
                tolerated_percentage,
            },
        ) = (&visit.state.kind, work)
        else {
            return Err(Failure::runtime("items from a state that is no Map"));
        };
        let inputs = items
            .iter()
            .enumerate()
            .map(|(index, item)| run::item_input(visit, map, index, item))
            .collect::<Result<Vec<_>, _>>()?;
        let inputs = match &map.item_batcher {
            Some(batcher) => run::batches(visit, batcher, inputs)?,
            None => inputs,
        };
        let work = Branches {
            inputs,
            max_concurrency: u32::try_from(max_concurrency).unwrap_or(u32::MAX),
            tolerated_count,
            tolerated_percentage,
            execution_input: self.children_execution_input(order, visit.state),
            writing: match &map.result_writer {
                Some(_) => Some(Box::new(Writing {
                    export: run::writer::export_request(visit)?,
                    ends: Vec::new(),
                })),
                None => None,
            },
            ..Branches::default()
        };
        self.begin_visit(workflow, visit.state, VisitWork::Branches(Box::new(work)));
        Ok(())
    }

    /// The reader of the Map `state` (at step `index`) read its object: a child task
    /// for each of its items, or the Map's failure, through its `Retry` and `Catch`.
    pub(super) fn items_read(
        &mut self,
        workflow: &Workflow,
        machine: &StateMachine,
        order: &Order,
        state: &State,
        input: &Value,
        index: usize,
    ) {
        let context = self.context(order, state);
        let variables = self.run_mut().variables.clone();
        let visit = Visit {
            state,
            input,
            context: &context,
            variables: &variables,
        };
        let begun = self
            .agents_answer::<ServiceAnswer>(index)
            .and_then(|answer| match &answer.body {
                Value::String(text) => run::items_read(&visit, text),
                _ => Err(Failure::new(
                    errors::ITEM_READER_FAILED,
                    "the object read is not text",
                )),
            })
            .and_then(|work| self.begin_items(workflow, order, &visit, work));
        if let Err(failure) = begun {
            self.leave(workflow, machine, order, state, input, Err(failure));
        }
    }

    /// What the visit of `state` (its step `index`) gave: a Lambda function's answer
    /// as the Task's result or error (cut to Step Functions' lengths), or a timer's
    /// result. Taken from the step: the result and the history's events keep it, and
    /// the record does not carry the answer again at every later write.
    pub(super) fn take_visit_result(
        &mut self,
        index: usize,
        state: &State,
    ) -> Result<Value, Failure> {
        let result = self.work_result(index, state);
        self.task.steps[index].output = None;
        result.map_err(crate::limits::bounded_failure)
    }

    fn work_result(&self, index: usize, state: &State) -> Result<Value, Failure> {
        let run = self.task.machine.as_deref();
        match (run.and_then(|run| run.work.as_ref()), &state.kind) {
            (Some(VisitWork::Timer { result, .. }), _) => Ok(result.clone()),
            // An execution started: what it told of itself, or, given the task token,
            // the token's use.
            (Some(VisitWork::Branches(branches)), StateKind::Task(task))
                if branches.execution.is_some() =>
            {
                let told = self.execution_result(index, &task.resource)?;
                if waits_for_token(state) {
                    let used = self.task.steps[index].output.as_deref().cloned();
                    return Ok(used.unwrap_or(Value::Null));
                }
                Ok(told)
            }
            (Some(VisitWork::Branches(branches)), _) => Ok(self
                .shaped_results(index, state)
                .unwrap_or_else(|| Value::Array(branches.outputs.clone()))),
            // The token's use gave the result.
            (
                Some(
                    VisitWork::Invoke { .. }
                    | VisitWork::Service { .. }
                    | VisitWork::Activity { .. },
                ),
                _,
            ) if ends_by_token(state) => Ok(self.task.steps[index]
                .output
                .as_deref()
                .cloned()
                .unwrap_or(Value::Null)),
            (Some(VisitWork::Invoke { .. }), StateKind::Task(task)) => {
                let answer: InvokeAnswer = self.agents_answer(index)?;
                answer.task_result(&task.resource)
            }
            (Some(VisitWork::Service { .. }), StateKind::Task(task))
                if task.resource.target == Target::HttpInvoke =>
            {
                let answer: ServiceAnswer = self.agents_answer(index)?;
                http::task_result(http::Answer {
                    status: answer.status,
                    status_text: answer.status_text.as_deref().unwrap_or_default(),
                    headers: &answer.headers,
                    body: answer.body.as_str().unwrap_or_default(),
                })
            }
            (Some(VisitWork::Service { .. }), StateKind::Task(task)) => {
                let answer: ServiceAnswer = self.agents_answer(index)?;
                services::task_result(
                    &task.resource,
                    services::Answer {
                        body: &answer.body,
                        status: answer.status,
                        headers: &answer.headers,
                    },
                )
            }
            _ => Err(Failure::runtime("a visit without its work")),
        }
    }

    /// What the agent answered step `index`'s call, read as `T`.
    fn agents_answer<T: serde::de::DeserializeOwned>(&self, index: usize) -> Result<T, Failure> {
        let output = self.task.steps[index].output.as_deref();
        T::deserialize(output.unwrap_or(&Value::Null)).map_err(|error| {
            Failure::new(
                errors::TASK_FAILED,
                format!("the agent's answer does not read: {error}"),
            )
        })
    }
}

/// The error of a step whose call failed for good: the agent's `{"Error", "Cause"}`
/// where it gave one (a Lambda API error), else the call's failure as Step Functions
/// names it; either cut to Step Functions' lengths.
pub(super) fn step_failure(step: &Step, state: &State) -> Failure {
    crate::limits::bounded_failure(unbounded_step_failure(step, state))
}

fn unbounded_step_failure(step: &Step, state: &State) -> Failure {
    let text = step.error.clone().unwrap_or_default();
    if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(&text) {
        let field = |name: &str| {
            fields
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        if fields.contains_key("Error") {
            return Failure::new(field("Error"), field("Cause"));
        }
    }
    match (step.state, &state.kind) {
        // A task token used with an error: the error it names, as `SendTaskFailure`'s.
        _ if ends_by_token(state) => Failure::new(text, ""),
        // An answer too large to keep: as Step Functions reports one past its limit.
        (StepState::Unusable, StateKind::Task(task)) => lambda::too_large(&task.resource),
        _ => Failure::new(errors::TASK_FAILED, text),
    }
}

/// What the call of the Task `state` with `arguments` asks its agent for
/// ([`call_work`]).
pub(super) fn task_call(
    state: &State,
    arguments: &Value,
    lease: (Option<u64>, Option<u64>),
) -> Result<VisitWork, Failure> {
    match &state.kind {
        StateKind::Task(task) => call_work(&task.resource, arguments, lease),
        _ => Err(Failure::runtime("a call from a state that is no Task")),
    }
}

/// What a Task's call to `target` with `arguments` asks its agent for, its lease
/// `timeout_seconds` where its state gives one.
fn call_work(
    resource: &Resource,
    arguments: &Value,
    lease: (Option<u64>, Option<u64>),
) -> Result<VisitWork, Failure> {
    let (timeout_seconds, heartbeat_seconds) = lease;
    match &resource.target {
        Target::Service(action) => {
            return Ok(VisitWork::Service {
                operation: action.operation.to_owned(),
                request: Arc::new(services::request(action, arguments)?),
                timeout_seconds,
                heartbeat_seconds,
            });
        }
        Target::HttpInvoke => {
            let request = serde_json::to_value(http::request(arguments)?)
                .map_err(|error| Failure::runtime(error.to_string()))?;
            return Ok(VisitWork::Service {
                operation: "Invoke".to_owned(),
                request: Arc::new(request),
                timeout_seconds,
                heartbeat_seconds,
            });
        }
        // One child task, which runs the machine named.
        Target::StartExecution => {
            let start = executions::request(arguments)?;
            let awaits = match resource.pattern {
                Pattern::Sync | Pattern::Sync2 => Awaited::End,
                Pattern::RequestResponse | Pattern::WaitForTaskToken => Awaited::Start,
            };
            return Ok(VisitWork::Branches(Box::new(Branches {
                inputs: vec![start.input],
                max_concurrency: 1,
                execution: Some(Box::new(StartedExecution {
                    machine: start.machine,
                    qualifier: start.qualifier,
                    awaits,
                    told: None,
                })),
                ..Branches::default()
            })));
        }
        Target::Activity { name } => {
            return Ok(activities::work(name, arguments.clone(), lease));
        }
        _ => {}
    }
    let request = lambda::request(&resource.target, arguments)?;
    Ok(VisitWork::Invoke {
        function: request.function,
        payload: String::from_utf8_lossy(&request.payload).into_owned(),
        log_tail: request.log_tail,
        timeout_seconds,
        heartbeat_seconds,
    })
}

/// Whether `state` is a Task whose visit its task token's use ends: one that gives
/// the token to its call, or one on an activity, which a worker takes with it.
fn ends_by_token(state: &State) -> bool {
    waits_for_token(state)
        || matches!(&state.kind, StateKind::Task(task) if matches!(task.resource.target, Target::Activity { .. }))
}

/// Whether `state` is a Task that gives its task token to its call, and waits for its
/// use.
pub(super) fn waits_for_token(state: &State) -> bool {
    matches!(&state.kind, StateKind::Task(task) if task.resource.pattern == Pattern::WaitForTaskToken)
}
