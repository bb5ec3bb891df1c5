//! The decisions, step by step: a task run to its end, duplicates and stale
//! messages, expiry, compensation, notifications, resubmission and cancel.

use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::ids::{QueueName, TaskId};
use crate::limits;
use crate::messages::{AgentRequest, AgentResponse, Alert, Method, Operation, Outcome};
use crate::submission::Submission;
use crate::task::{EarlierInput, Order, Request, StepState, Task, TaskState};
use crate::time::Timestamp;
use crate::workflow::{Registry, Workflow};

mod children;
mod conditions;
mod delivery;
mod flow;
mod migrate;
mod operator;
mod parallel;
mod pauses;
mod repair;
mod steps;
mod supervise;
mod waits;

fn drone() -> std::sync::Arc<Workflow> {
    Registry::built_in()
        .latest("drone-delivery")
        .expect("drone")
}

fn submission(notify: bool) -> Submission {
    Submission {
        notify: notify.then(|| QueueName::parse("mine").expect("queue")),
        ..Submission::new(
            TaskId::parse("t1").expect("id"),
            json!({"customer_id": "c", "pickup": "a", "dropoff": "b", "weight_kg": 2.5}),
        )
    }
}

/// An order for the supervisor's decisions on steps that call services, which
/// read none.
fn any_order() -> Order {
    Order {
        task_id: TaskId::parse("t1").expect("id"),
        input: std::sync::Arc::new(json!({})),
        earlier: Vec::new(),
    }
}

fn supervision(step: &crate::workflow::StepDefinition) -> &crate::workflow::Supervision {
    &step.call().expect("a call").supervision
}

fn dispatched(decision: &Decision) -> Vec<&AgentRequest> {
    decision
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Dispatch(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn respond(request: &AgentRequest, outcome: Outcome) -> AgentResponse {
    AgentResponse::answering(request.clone(), outcome)
}

fn ok() -> Outcome {
    Outcome::Succeeded {
        output: json!({"ok": true}),
    }
}

/// A new task whose first step is refused for good (`error`): nothing to undo,
/// it ends in Error in that one decision. The decision, and the task's order.
fn refused_at_first(workflow: &Workflow, error: &str, now: Timestamp) -> (Decision, Order) {
    let (task, order, request) = run_to(workflow, 0, now);
    let failed = Outcome::Failed {
        error: error.into(),
    };
    let decision = on_response(&task, workflow, &order, &respond(&request, failed), now);
    (decision, order)
}

/// Runs a new task through `on_run` and the first `steps` successful responses.
fn run_to(workflow: &Workflow, steps: usize, now: Timestamp) -> (Task, Order, AgentRequest) {
    let (task, order, _) = submit(workflow, submission(true), now);
    let claim = on_run(&task, workflow, &order, "s1", now);
    let mut task = claim.next.clone().expect("claimed");
    let mut request = dispatched(&claim)[0].clone();
    for _ in 0..steps {
        let decision = on_response(&task, workflow, &order, &respond(&request, ok()), now);
        task = decision.next.clone().expect("recorded");
        request = dispatched(&decision)[0].clone();
    }
    (task, order, request)
}

fn alert_of(decision: &Decision) -> Option<Alert> {
    decision.effects.iter().find_map(|e| match e {
        Effect::Alert(a) => Some(a.clone()),
        _ => None,
    })
}

/// A JSON string output whose text has exactly `bytes` bytes.
fn output_of(bytes: usize) -> Outcome {
    Outcome::Succeeded {
        output: json!("x".repeat(bytes - 2)),
    }
}

/// A request of `by`'s at `at`, in no batch.
fn asked_by(by: crate::task::Actor, at: Timestamp) -> Request {
    Request {
        by,
        at,
        batch: None,
    }
}

fn operator(batch: Option<&str>) -> Request {
    Request {
        by: crate::task::Actor::Operator,
        at: Timestamp(0),
        batch: batch.map(str::to_owned),
    }
}

/// An operator's resubmission, with the input as it is.
fn again() -> Resubmit {
    Resubmit {
        request: operator(None),
        input: None,
    }
}

/// Answers every request `decision` sends with success until the task stops
/// sending: the task then, and the steps whose compensation was sent, in order.
fn answer_all(
    mut task: Task,
    workflow: &Workflow,
    order: &Order,
    mut decision: Decision,
) -> (Task, Vec<String>, Vec<Effect>) {
    let mut compensated = Vec::new();
    let mut effects = decision.effects.clone();
    while let Some(request) = dispatched(&decision).first().map(|r| (*r).clone()) {
        if request.operation == Operation::Compensate {
            compensated.push(request.step_name.clone());
        }
        decision = on_response(
            &task,
            workflow,
            order,
            &respond(&request, ok()),
            Timestamp(0),
        );
        task = decision.next.clone().expect("recorded");
        effects.extend(decision.effects.clone());
    }
    (task, compensated, effects)
}

/// The queues and versions of the notifications `task` keeps, as sent.
fn outboxed(task: &Task) -> Vec<(QueueName, u64)> {
    task.outbox
        .iter()
        .map(|o| (o.queue.clone(), o.notification.version))
        .collect()
}

/// The states of the notifications `effects` send.
fn told(effects: &[Effect]) -> Vec<TaskState> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Notify { outbound, .. } => Some(outbound.notification.state),
            _ => None,
        })
        .collect()
}

fn states(task: &Task) -> Vec<StepState> {
    task.steps.iter().map(|s| s.state).collect()
}

use StepState::{Compensated, Pending as Untouched, Processed as Done};

fn dispatched_none(effects: &[Effect]) -> bool {
    !effects.iter().any(|e| matches!(e, Effect::Dispatch(_)))
}

/// Lets the supervisor find `request`'s lease expired until the task gives it
/// up: the task then, Compensating, and the decision that gave up.
fn time_out(
    mut task: Task,
    workflow: &Workflow,
    order: &Order,
    mut request: AgentRequest,
) -> (Task, Decision) {
    loop {
        let decision = on_expired(&task, workflow, &any_order(), request.complete_by);
        task = decision.next.clone().expect("expired");
        if decision.verdict == Verdict::GaveUp {
            return (task, decision);
        }
        // The retry's Run message comes after its delay.
        let due = task.steps.iter().filter_map(|s| s.retry_at).min();
        let claim = on_run(
            &task,
            workflow,
            order,
            "s2",
            due.unwrap_or(request.complete_by),
        );
        task = claim.next.clone().expect("claimed again");
        request = dispatched(&claim)[0].clone();
    }
}

/// The idempotency keys of the calls a task run with every answer a success sends.
fn keys_called(task: Task, workflow: &Workflow, order: &Order) -> Vec<String> {
    let claim = on_run(&task, workflow, order, "s1", Timestamp(0));
    let (_, _, effects) = answer_all(claim.next.clone().expect("claimed"), workflow, order, claim);
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Dispatch(r) if r.operation == Operation::Call => {
                Some(r.idempotency_key.clone())
            }
            _ => None,
        })
        .collect()
}
