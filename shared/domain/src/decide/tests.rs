//! The decisions, step by step: a task run to its end, duplicates and stale
//! messages, expiry, compensation, notifications, resubmission and cancel.

use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::ids::{QueueName, TaskId};
use crate::limits;
use crate::messages::Method;
use crate::messages::{AgentRequest, AgentResponse, Alert, Operation, Outcome};
use crate::submission::Submission;
use crate::task::{EarlierInput, Order, Request, StepState, Task, TaskState};
use crate::time::Timestamp;
use crate::workflow::Registry;
use crate::workflow::Workflow;

fn drone() -> std::sync::Arc<Workflow> {
    Registry::built_in()
        .latest("drone-delivery")
        .expect("drone")
}

fn submission(notify: bool) -> Submission {
    Submission {
        owner: None,
        id: TaskId::parse("t1").expect("id"),
        input: json!({"customer_id": "c", "pickup": "a", "dropoff": "b", "weight_kg": 2.5}),
        notify: notify.then(|| QueueName::parse("mine").expect("queue")),
    }
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
    AgentResponse {
        task_id: request.task_id.clone(),
        run: request.run,
        step: request.step,
        attempt: request.attempt,
        operation: request.operation,
        outcome,
    }
}

fn ok() -> Outcome {
    Outcome::Succeeded {
        output: json!({"ok": true}),
    }
}

#[test]
fn a_task_created_claimed_is_submitted_and_claimed_in_one_write() {
    let workflow = drone();
    let now = Timestamp(0);
    let (pending, submitted_order, _) = submit(&workflow, submission(true), now);
    let run = on_run(&pending, &workflow, &submitted_order, "s1", now);
    let (task, order, effects) = submit_claimed(&workflow, submission(true), "s1", now);
    let claimed = run.next.expect("claimed");
    assert_eq!(task, claimed, "the same task as a submission then a Run");
    assert_eq!(order, submitted_order);
    assert_eq!(told(&effects), [TaskState::Pending, TaskState::Processing]);
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Schedule { .. })),
        "no Run message"
    );
    let deadlines: Vec<_> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Deadline { at, .. } => Some(*at),
            _ => None,
        })
        .collect();
    assert_eq!(
        deadlines,
        [task.complete_by.expect("a lease")],
        "the first step's lease only"
    );
    assert_eq!(task.deadline, task.complete_by);
    let dispatched: Vec<_> = effects
        .iter()
        .filter(|e| matches!(e, Effect::Dispatch(_)))
        .collect();
    assert_eq!(dispatched.len(), 1, "the first step sent");
}

#[test]
fn a_step_with_a_field_mapping_sends_only_those_fields_and_its_undo_its_own_result() {
    let text = r#"{"name":"mapped","version":1,
        "input":{"customer_id":"string","pickup":"string","dropoff":"string","weight_kg":"number"},
        "steps":[
          {"name":"quote","agent":"q","call":"/quote"},
          {"name":"book","agent":"b","call":"PUT /book","compensation":"DELETE /book",
           "fields":{"from":"input.pickup","quote":"results.quote.price","booking":"results.book.id"}},
          {"name":"pay","agent":"p","call":"/pay"}]}"#;
    let workflow = Workflow::parse("mapped.json", text).expect("valid");
    let now = Timestamp(0);
    let (task, order, quote) = run_to(&workflow, 0, now);
    assert_eq!(
        quote.payload.value()["input"],
        order.input,
        "a step without a mapping is sent everything"
    );
    let quoted = Outcome::Succeeded {
        output: json!({"price": 12}),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&quote, quoted), now);
    let book = dispatched(&decision)[0].clone();
    assert_eq!(
        book.payload.value(),
        json!({"task_id": "t1", "step": "book",
               "fields": {"from": "a", "quote": 12, "booking": null}}),
        "only the mapped fields: not the input's other fields, not the results"
    );
    let task = decision.next.expect("recorded");
    let booked = Outcome::Succeeded {
        output: json!({"id": "bk-9"}),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&book, booked), now);
    let pay = dispatched(&decision)[0].clone();
    let task = decision.next.expect("recorded");
    let refused = Outcome::Failed {
        error: "card declined".into(),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&pay, refused), now);
    assert_eq!((book.method, book.path.as_str()), (Method::Put, "/book"));
    let undo = dispatched(&decision)[0];
    assert_eq!(undo.operation, Operation::Compensate);
    assert_eq!(
        (undo.method, undo.path.as_str()),
        (Method::Delete, "/book"),
        "the compensation's own method"
    );
    assert_eq!(quote.method, Method::Post, "a POST unless named");
    assert_eq!(
        undo.payload.value()["fields"],
        json!({"from": "a", "quote": 12, "booking": "bk-9"}),
        "the compensation sees the step's own result"
    );
}

#[test]
fn a_path_that_cannot_be_filled_fails_its_operation_for_good() {
    let text = r#"{"name":"paths","version":1,"input":{"order":"string"},
        "steps":[
          {"name":"create","agent":"p","call":"/packages","compensation":"DELETE /packages/{results.create.id}"},
          {"name":"ship","agent":"s","call":"PUT /shipments/{results.create.id}"}]}"#;
    let workflow = Workflow::parse("paths.json", text).expect("valid");
    let now = Timestamp(0);
    let (task, order, create) = run_to(&workflow, 0, now);
    assert_eq!(create.path, "/packages");
    let no_id = Outcome::Succeeded {
        output: json!({"created": true}),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&create, no_id), now);
    let task = decision.next.clone().expect("recorded");
    assert_eq!(
        task.steps[1].state,
        StepState::Error,
        "the shipment cannot be addressed: failed without a call"
    );
    assert_eq!(
        task.error.as_deref(),
        Some("step 'ship' failed: path: {results.create.id} has no value")
    );
    assert_eq!(
        task.steps[0].state,
        StepState::CompensationFailed,
        "nor can the package's cancellation: left for a person, with an alert"
    );
    assert_eq!(task.state, TaskState::Error);
    assert!(dispatched(&decision).is_empty(), "nothing sent");

    let (task, order, create) = run_to(&workflow, 0, now);
    let with_id = Outcome::Succeeded {
        output: json!({"id": "pk-1"}),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&create, with_id), now);
    let ship = dispatched(&decision)[0];
    assert_eq!(
        (ship.method, ship.path.as_str()),
        (Method::Put, "/shipments/pk-1")
    );
}

#[test]
fn a_request_its_workflow_would_make_too_large_fails_without_a_call() {
    use crate::limits::{MAX_PATH, MAX_TASK_DATA};
    let text = r#"{"name":"large","version":1,"input":{"order":"string"},
        "steps":[
          {"name":"big","agent":"b","call":"/big"},
          {"name":"copies","agent":"c","call":"/c",
           "fields":{"a":"results.big.text","b":"results.big.text","c":"results.big.text","d":"results.big.text"}},
          {"name":"addressed","agent":"a","call":"/a/{results.big.text}"}]}"#;
    let workflow = Workflow::parse("large.json", text).expect("valid");
    let now = Timestamp(0);
    // An answer within a step's limit, which four copies take over a request's.
    let big = Outcome::Succeeded {
        output: json!({"text": "x".repeat(MAX_TASK_DATA / 4)}),
    };
    let (task, order, first) = run_to(&workflow, 0, now);
    let decision = on_response(&task, &workflow, &order, &respond(&first, big), now);
    let task = decision.next.clone().expect("recorded");
    assert!(dispatched(&decision).is_empty(), "nothing sent");
    assert_eq!(task.steps[1].state, StepState::Error);
    let error = task.error.as_deref().expect("error");
    assert!(
        error.starts_with("step 'copies' failed: fields:")
            && error.ends_with(&format!("over the {MAX_TASK_DATA} a request may carry")),
        "{error}"
    );

    let long = Outcome::Succeeded {
        output: json!({"text": "y".repeat(MAX_PATH)}),
    };
    let single = Workflow::parse("long.json", &text.replace(
        r#"{"name":"copies","agent":"c","call":"/c",
           "fields":{"a":"results.big.text","b":"results.big.text","c":"results.big.text","d":"results.big.text"}},"#,
        "",
    ))
    .expect("valid");
    let (task, order, first) = run_to(&single, 0, now);
    let decision = on_response(&task, &single, &order, &respond(&first, long), now);
    let task = decision.next.expect("recorded");
    assert_eq!(
        task.error.as_deref(),
        Some(
            format!(
                "step 'addressed' failed: path: {} bytes, over the {MAX_PATH} a path may have",
                MAX_PATH + 3
            )
            .as_str()
        )
    );
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

#[test]
fn a_task_runs_its_steps_in_order_to_processed() {
    let workflow = drone();
    let now = Timestamp(1_000);
    let (task, order, effects) = submit(&workflow, submission(true), now);
    assert_eq!(
        (task.state, task.version, task.locked_by.as_deref()),
        (TaskState::Pending, 1, None)
    );
    assert_eq!(
        task.complete_by,
        Some(now.plus(workflow.pickup_timeout)),
        "a pickup lease"
    );
    assert!(matches!(effects[0], Effect::Schedule { .. }));
    assert!(
        matches!(&effects[1], Effect::Notify { outbound, .. } if outbound.notification.state == TaskState::Pending)
    );

    let claim = on_run(&task, &workflow, &order, "s1", now);
    let mut task = claim.next.clone().expect("claimed");
    assert_eq!(
        (task.state, task.locked_by.as_deref(), task.version),
        (TaskState::Processing, Some("s1"), 2)
    );
    let mut request = dispatched(&claim)[0].clone();
    let mut order_seen = vec![];
    loop {
        order_seen.push(request.step_name.clone());
        assert_eq!(
            request.idempotency_key,
            format!("t1/1/{}", request.step_name)
        );
        assert_eq!(
            task.complete_by,
            Some(request.complete_by),
            "the task's lease is the step's"
        );
        let decision = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
        task = decision.next.clone().expect("recorded");
        match dispatched(&decision).first() {
            Some(next) => request = (*next).clone(),
            None => break,
        }
    }
    let names: Vec<_> = workflow.steps.iter().map(|s| s.name.clone()).collect();
    assert_eq!(order_seen, names);
    let task = notifications_sent(&task, &outboxed(&task), now)
        .next
        .expect("notifications sent");
    assert_eq!(
        (task.state, task.locked_by.clone(), task.complete_by),
        (TaskState::Processed, None, None)
    );
    assert!(
        task.steps
            .iter()
            .all(|s| s.state == StepState::Processed && s.attempt == 1)
    );
}

#[test]
fn duplicate_and_stale_messages_change_nothing() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, request) = run_to(&workflow, 1, now);
    assert_eq!(
        on_run(&task, &workflow, &order, "s2", now).next,
        None,
        "a second claim"
    );
    let previous = AgentRequest {
        step: 0,
        step_name: "check-account".into(),
        attempt: 1,
        ..request.clone()
    };
    assert_eq!(
        on_response(&task, &workflow, &order, &respond(&previous, ok()), now).next,
        None,
        "a duplicate response"
    );
    let old_attempt = AgentRequest {
        attempt: 0,
        ..request.clone()
    };
    assert_eq!(
        on_response(&task, &workflow, &order, &respond(&old_attempt, ok()), now).next,
        None
    );
    let old_run = AgentRequest { run: 0, ..request };
    assert_eq!(
        on_response(&task, &workflow, &order, &respond(&old_run, ok()), now).next,
        None
    );
}

#[test]
fn an_expired_step_is_retried_until_its_threshold_then_compensated() {
    let workflow = drone();
    let threshold = workflow.steps[3].supervision.failure_threshold;
    let mut now = Timestamp(0);
    let (mut task, order, mut request) = run_to(&workflow, 3, now);
    assert_eq!(request.step_name, "schedule-drone");
    assert_eq!(
        on_expired(&task, &workflow, now).next,
        None,
        "the lease is live"
    );
    for failure in 1..=threshold {
        now = request.complete_by;
        let decision = on_expired(&task, &workflow, now);
        task = decision.next.clone().expect("retry");
        assert_eq!(decision.verdict, Verdict::Retry);
        assert_eq!(
            (task.state, task.locked_by.clone()),
            (TaskState::Pending, None)
        );
        assert_eq!(
            (task.steps[3].failure_count, task.failure_count),
            (failure, failure)
        );
        let wait = if failure == threshold {
            workflow.steps[3].supervision.extended_wait
        } else {
            Duration::ZERO
        };
        assert!(decision.effects.contains(&Effect::Schedule {
            task_id: task.id.clone(),
            delay: wait
        }));
        let claim = on_run(&task, &workflow, &order, "s2", now);
        task = claim.next.clone().expect("claimed again");
        request = dispatched(&claim)[0].clone();
        assert_eq!((request.step, request.attempt), (3, failure + 1));
        assert_eq!(
            request.idempotency_key, "t1/1/schedule-drone",
            "the same key on every attempt"
        );
    }
    now = request.complete_by;
    let decision = on_expired(&task, &workflow, now);
    task = decision.next.clone().expect("gave up");
    assert_eq!(decision.verdict, Verdict::GaveUp);
    assert_eq!(task.steps[3].failure_count, threshold + 1);
    assert_eq!(
        (task.state, task.steps[3].state),
        (TaskState::Compensating, StepState::TimedOut)
    );

    // Compensation runs in reverse order: the timed-out drone, then the package.
    let claim = on_run(&task, &workflow, &order, "s3", now);
    task = claim.next.clone().expect("claimed for compensation");
    let mut undone = vec![];
    let mut decision = claim;
    while let Some(request) = dispatched(&decision).first().map(|r| (*r).clone()) {
        assert_eq!(request.operation, Operation::Compensate);
        assert!(request.idempotency_key.ends_with("/compensate"));
        undone.push(request.step_name.clone());
        decision = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
        task = decision.next.clone().expect("compensated");
    }
    assert_eq!(undone, ["schedule-drone", "create-package"]);
    let alert = alert_of(&decision).expect("alerted");
    assert_eq!(alert.reason, "step 'schedule-drone' timed out 4 times");
    assert_eq!(
        (task.state, task.locked_by.clone(), task.complete_by),
        (TaskState::Error, None, Some(now.plus(ALERT_REDELIVERY))),
        "a lease until the alert is published"
    );
    assert_eq!(task.pending_alert.as_ref(), Some(&alert));
}

fn alert_of(decision: &Decision) -> Option<Alert> {
    decision.effects.iter().find_map(|e| match e {
        Effect::Alert(a) => Some(a.clone()),
        _ => None,
    })
}

#[test]
fn a_timed_out_step_whose_compensation_times_out_is_still_timed_out() {
    let workflow = drone();
    let threshold = workflow.steps[3].supervision.failure_threshold;
    let (mut task, order, mut request) = run_to(&workflow, 3, Timestamp(0));
    let mut now = Timestamp(0);
    for _ in 0..=threshold {
        now = request.complete_by;
        task = on_expired(&task, &workflow, now).next.expect("expired");
        let claim = on_run(&task, &workflow, &order, "s", now);
        task = claim.next.clone().expect("claimed");
        request = dispatched(&claim)[0].clone();
    }
    assert_eq!(request.operation, Operation::Compensate, "gave up, undoing");
    assert_eq!(task.steps[3].state, StepState::Compensating);

    let decision = on_expired(&task, &workflow, request.complete_by);
    assert_eq!(decision.verdict, Verdict::Retry);
    let task = decision.next.expect("to be undone again");
    assert_eq!(
        task.steps[3].state,
        StepState::TimedOut,
        "as it was, not Processed"
    );
    let claim = on_run(&task, &workflow, &order, "s", now);
    assert_eq!(
        (dispatched(&claim)[0].step, dispatched(&claim)[0].operation),
        (3, Operation::Compensate),
        "undone again"
    );
}

/// A JSON string output whose text has exactly `bytes` bytes.
fn output_of(bytes: usize) -> Outcome {
    Outcome::Succeeded {
        output: json!("x".repeat(bytes - 2)),
    }
}

#[test]
fn an_answer_too_large_to_keep_is_oversized_and_compensated_with_the_steps_before() {
    use crate::limits::{MAX_STEP_OUTPUT, MAX_TASK_DATA};
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, request) = run_to(&workflow, 3, now);
    assert_eq!(request.step_name, "schedule-drone");
    let at_limit = on_response(
        &task,
        &workflow,
        &order,
        &respond(&request, output_of(MAX_STEP_OUTPUT)),
        now,
    );
    let kept = at_limit.next.expect("recorded");
    assert_eq!(kept.steps[3].state, StepState::Processed, "at the limit");

    let over = on_response(
        &task,
        &workflow,
        &order,
        &respond(&request, output_of(MAX_STEP_OUTPUT + 1)),
        now,
    );
    let refused = over.next.clone().expect("recorded");
    assert_eq!(
        refused.steps[3].state,
        StepState::Compensating,
        "Unusable, and its compensation sent at once"
    );
    assert_eq!(refused.steps[3].output, None, "not kept");
    assert!(
        refused.steps[3]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("65537 bytes")),
        "{:?}",
        refused.steps[3].error
    );
    assert_eq!(refused.state, TaskState::Compensating);
    let undo = dispatched(&over);
    assert_eq!(
        (undo[0].step_name.as_str(), undo[0].operation),
        ("schedule-drone", Operation::Compensate),
        "its effect is in place: undone first"
    );

    // Outputs each within the limit, together over what a task may carry.
    let each = MAX_STEP_OUTPUT - 1_000;
    let (mut task, order, mut request) = run_to(&workflow, 0, now);
    let mut decision = None;
    for step in 0..4 {
        let d = on_response(
            &task,
            &workflow,
            &order,
            &respond(&request, output_of(each)),
            now,
        );
        task = d.next.clone().expect("recorded");
        let total = limits::json_size(&order.input) + each * (step + 1);
        if total > MAX_TASK_DATA {
            assert!(
                task.steps[step]
                    .error
                    .as_deref()
                    .is_some_and(|e| e.contains("a task may carry")),
                "step {step}: {:?}",
                task.steps[step]
            );
            decision = Some(d);
            break;
        }
        assert_eq!(task.steps[step].state, StepState::Processed, "step {step}");
        request = dispatched(&d)[0].clone();
    }
    let decision = decision.expect("the fourth output crosses the task's limit");
    assert_eq!(task.state, TaskState::Compensating);
    let undo = dispatched(&decision);
    assert_eq!(undo[0].step_name, "schedule-drone");
    assert!(
        serde_json::to_vec(undo[0]).expect("json").len() < crate::limits::MAX_MESSAGE,
        "the compensation fits in a message"
    );
}

#[test]
fn an_alert_not_published_is_raised_again_until_it_is() {
    let workflow = drone();
    let now = Timestamp(0);
    let (decision, _) = refused_at_first(&workflow, "no such account", now);
    let alert = alert_of(&decision).expect("alerted");
    let in_error = decision.next.expect("in Error");
    assert_eq!(in_error.state, TaskState::Error);

    let early = now.plus(ALERT_REDELIVERY - Duration::from_millis(1));
    assert_eq!(on_expired(&in_error, &workflow, early).next, None);
    let late = now.plus(ALERT_REDELIVERY);
    let again = on_expired(&in_error, &workflow, late);
    assert_eq!(again.verdict, Verdict::AlertedAgain);
    assert_eq!(alert_of(&again), Some(alert.clone()), "the same alert");
    assert!(
        again
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Notify { outbound, .. }
            if outbound.notification.state == TaskState::Error)),
        "the caller told again"
    );
    let retried = again.next.expect("a new lease");
    assert_eq!(retried.complete_by, Some(late.plus(ALERT_REDELIVERY)));

    let told = notifications_sent(&retried, &outboxed(&retried), late);
    let published = alert_published(&told.next.expect("told"), &alert, late);
    let cleared = published.next.expect("cleared");
    assert_eq!(
        (cleared.pending_alert.clone(), cleared.complete_by),
        (None, None)
    );
    assert_eq!(cleared.state, TaskState::Error);
    assert_eq!(alert_published(&cleared, &alert, late).next, None, "once");
    assert_eq!(
        on_expired(&cleared, &workflow, late.plus(ALERT_REDELIVERY)).next,
        None
    );
}

#[test]
fn a_permanent_error_compensates_at_once_and_a_resubmission_redoes_the_undone_steps() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, request) = run_to(&workflow, 4, now);
    assert_eq!(request.step_name, "create-delivery");
    let failed = Outcome::Failed {
        error: "address not served".into(),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&request, failed), now);
    let mut task = decision.next.clone().expect("recorded");
    assert_eq!(task.state, TaskState::Compensating);
    assert_eq!(task.steps[4].state, StepState::Error);
    let mut decision = decision;
    while let Some(request) = dispatched(&decision).first().map(|r| (*r).clone()) {
        decision = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
        task = decision.next.clone().expect("compensated");
    }
    let states: Vec<_> = task.steps.iter().map(|s| s.state).collect();
    use StepState::{Compensated, Error, Processed};
    assert_eq!(
        states,
        [Processed, Compensated, Processed, Compensated, Error]
    );
    assert_eq!(task.state, TaskState::Error);

    assert!(
        resubmit(
            &run_to(&workflow, 1, now).0,
            &workflow,
            &order,
            again(),
            now
        )
        .is_err(),
        "only a task in Error"
    );
    let decision = resubmit(&task, &workflow, &order, again(), now).expect("resubmitted");
    let task = decision.next.expect("reset");
    assert_eq!(
        (task.state, task.run, task.failure_count, task.error.clone()),
        (TaskState::Pending, 2, 0, None)
    );
    let claim = on_run(&task, &workflow, &order, "s1", now);
    let request = dispatched(&claim)[0];
    assert_eq!(
        (request.step_name.as_str(), request.idempotency_key.as_str()),
        ("create-package", "t1/2/create-package")
    );
}

fn operator(batch: Option<&str>) -> Request {
    Request {
        by: super::super::task::Actor::Operator,
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

#[test]
fn a_notification_is_kept_with_its_change_until_sent_and_sent_again_until_then() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, request) = run_to(&workflow, 4, now);
    let finished = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
    assert_eq!(told(&finished.effects), [TaskState::Processed]);
    let done = finished.next.expect("processed");
    use TaskState::{Pending, Processed, Processing};
    let kept: Vec<_> = done.outbox.iter().map(|o| o.notification.state).collect();
    assert_eq!(kept, [Pending, Processing, Processed], "none known sent");
    assert_eq!(done.complete_by, Some(now.plus(ALERT_REDELIVERY)));

    // The Pending and Processing notifications were sent; the Processed one was
    // not (the send failed, or the function stopped after the write).
    let early: Vec<_> = outboxed(&done)[..2].to_vec();
    let told_early = notifications_sent(&done, &early, now);
    let task = told_early.next.expect("cleared");
    assert_eq!(
        notifications_sent(&task, &early, now).verdict,
        Verdict::NotificationsClearedAlready
    );
    assert_eq!(task.complete_by, Some(now.plus(ALERT_REDELIVERY)));
    let late = now.plus(ALERT_REDELIVERY);
    assert_eq!(on_expired(&task, &workflow, now).next, None, "not yet");
    let again = on_expired(&task, &workflow, late);
    assert_eq!(again.verdict, Verdict::NotifiedAgain);
    assert_eq!(told(&again.effects), [Processed], "the same notification");
    let Effect::Notify { outbound, .. } = &again.effects[0] else {
        panic!("a notification first: {:?}", again.effects);
    };
    assert_eq!(
        outbound, &task.outbox[0],
        "its version kept, for a caller to deduplicate"
    );
    let task = again.next.expect("a new lease");
    assert_eq!(task.complete_by, Some(late.plus(ALERT_REDELIVERY)));
    let task = notifications_sent(&task, &outboxed(&task), late)
        .next
        .expect("sent at last");
    assert!(task.outbox.is_empty());
    assert_eq!(task.complete_by, None, "nothing left to deliver");
}

#[test]
fn a_change_that_passes_through_a_state_tells_only_where_it_ends() {
    let workflow = drone();
    let now = Timestamp(0);
    // The first step is refused: Compensating, with nothing to undo, then Error,
    // in one write of one version.
    let (decision, _) = refused_at_first(&workflow, "no such customer", now);
    assert_eq!(told(&decision.effects), [TaskState::Error]);
    let task = decision.next.expect("in error");
    let versions: Vec<_> = task
        .outbox
        .iter()
        .map(|o| (o.notification.version, o.notification.state))
        .collect();
    assert_eq!(
        versions,
        [
            (1, TaskState::Pending),
            (2, TaskState::Processing),
            (task.version, TaskState::Error)
        ],
        "a version names one notification"
    );
}

fn states(task: &Task) -> Vec<StepState> {
    task.steps.iter().map(|s| s.state).collect()
}

use StepState::{Compensated, Pending as Untouched, Processed as Done};

#[test]
fn a_cancel_during_a_call_keeps_its_result_then_undoes_the_done_steps_once() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, running) = run_to(&workflow, 2, now);
    let decision = cancel(&task, &workflow, operator(None), now).expect("cancelled");
    assert_eq!(decision.verdict, Verdict::CancelRequested);
    assert!(
        dispatched(&decision).is_empty(),
        "the running call is waited for"
    );
    let task = decision.next.expect("marked");
    assert_eq!(task.error.as_deref(), Some("cancelled by an operator"));
    assert_eq!(
        (task.state, task.steps[2].state),
        (TaskState::Compensating, StepState::Processing),
        "to be undone, once the running call is done"
    );
    assert_eq!(
        cancel(&task, &workflow, operator(None), now).map(|d| (d.verdict, d.next)),
        Ok((Verdict::CancelledAlready, None)),
        "asking again changes nothing"
    );
    let answered = on_response(&task, &workflow, &order, &respond(&running, ok()), now);
    let task = answered.next.clone().expect("recorded");
    assert_eq!(task.state, TaskState::Compensating);
    let (task, compensated, effects) = answer_all(task, &workflow, &order, answered);
    assert_eq!(compensated, ["create-package"]);
    assert_eq!(task.state, TaskState::Error);
    assert_eq!(
        states(&task),
        [Done, Compensated, Done, Untouched, Untouched]
    );
    let alert = effects.iter().find_map(|e| match e {
        Effect::Alert(alert) => Some(alert),
        _ => None,
    });
    assert_eq!(
        alert.map(|a| a.reason.as_str()),
        Some("cancelled by an operator")
    );
    let told = effects.iter().any(|e| {
        matches!(e, Effect::Notify { outbound, .. }
        if outbound.notification.state == TaskState::Error
            && outbound.notification.error.as_deref() == Some("cancelled by an operator"))
    });
    assert!(told, "the caller is told it was cancelled: {effects:?}");
    assert_eq!(
        cancel(&task, &workflow, operator(None), now).map(|d| d.verdict),
        Ok(Verdict::CancelledAlready)
    );
}

#[test]
fn a_cancel_during_a_compensation_undoes_each_done_step_once() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, request) = run_to(&workflow, 4, now);
    let failed = Outcome::Failed {
        error: "address not served".into(),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&request, failed), now);
    let task = decision.next.clone().expect("compensating");
    let undoing = dispatched(&decision)[0].clone();
    assert_eq!(undoing.step_name, "schedule-drone");
    let cancelled = cancel(&task, &workflow, operator(None), now).expect("cancelled");
    assert!(cancelled.effects.is_empty(), "{:?}", cancelled.effects);
    let task = cancelled.next.expect("marked");
    assert!(
        task.error
            .as_deref()
            .is_some_and(|e| e.contains("address not served"))
    );
    let answered = on_response(&task, &workflow, &order, &respond(&undoing, ok()), now);
    let task = answered.next.clone().expect("recorded");
    let (task, compensated, _) = answer_all(task, &workflow, &order, answered);
    assert_eq!(compensated, ["create-package"]);
    assert_eq!(task.state, TaskState::Error);
    assert!(task.cancelled.is_some());
}

#[test]
fn a_cancel_during_a_supervisor_retry_wait_compensates_without_the_retry() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, _) = run_to(&workflow, 2, now);
    let late = task.complete_by.expect("lease");
    let retry = on_expired(&task, &workflow, late);
    assert_eq!(retry.verdict, Verdict::Retry);
    let task = retry.next.expect("waiting");
    assert_eq!(
        (task.state, task.locked_by.as_deref()),
        (TaskState::Pending, None)
    );
    let decision = cancel(&task, &workflow, operator(Some("b1")), late).expect("cancelled");
    assert!(
        decision
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Schedule { .. }))
    );
    let task = decision.next.expect("compensating");
    assert_eq!(task.state, TaskState::Compensating);
    assert_eq!(
        cancel(&task, &workflow, operator(Some("b1")), late),
        Err(Refused::TakenByBatch("b1".into())),
        "a batch takes a task once"
    );
    let claim = on_run(&task, &workflow, &order, "s2", late);
    let task = claim.next.clone().expect("claimed");
    let (task, compensated, _) = answer_all(task, &workflow, &order, claim);
    assert_eq!(
        compensated,
        ["create-package"],
        "check-transport, sent once, has no compensation"
    );
    assert_eq!(
        states(&task),
        [Done, Compensated, StepState::TimedOut, Untouched, Untouched],
        "the step waiting for its retry may have taken effect"
    );
    assert_eq!(task.state, TaskState::Error);
}

#[test]
fn a_call_whose_lease_ends_after_a_cancel_is_not_retried_but_undone() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, running) = run_to(&workflow, 3, now);
    assert_eq!(running.step_name, "schedule-drone");
    let task = cancel(&task, &workflow, operator(None), now)
        .expect("cancelled")
        .next
        .expect("marked");
    let late = task.complete_by.expect("lease");
    let expired = on_expired(&task, &workflow, late);
    assert_eq!(expired.verdict, Verdict::GaveUp);
    let task = expired.next.expect("given up");
    assert_eq!(task.steps[3].state, StepState::TimedOut);
    let claim = on_run(&task, &workflow, &order, "s2", late);
    let task = claim.next.clone().expect("claimed");
    let (task, compensated, _) = answer_all(task, &workflow, &order, claim);
    assert_eq!(compensated, ["schedule-drone", "create-package"]);
    assert_eq!(task.error.as_deref(), Some("cancelled by an operator"));
}

#[test]
fn a_task_not_started_is_cancelled_at_once_and_an_ended_one_not_at_all() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, _) = submit(&workflow, submission(false), now);
    let task = cancel(&task, &workflow, operator(None), now)
        .expect("cancelled")
        .next
        .expect("compensating");
    let claim = on_run(&task, &workflow, &order, "s1", now);
    let task = claim.next.expect("ended");
    assert_eq!(task.state, TaskState::Error);
    assert!(dispatched_none(&claim.effects));
    let (done, ..) = run_to(&workflow, 0, now);
    let mut processed = done;
    processed.state = TaskState::Processed;
    assert_eq!(
        cancel(&processed, &workflow, operator(None), now),
        Err(Refused::Ended(TaskState::Processed))
    );
}

fn dispatched_none(effects: &[Effect]) -> bool {
    !effects.iter().any(|e| matches!(e, Effect::Dispatch(_)))
}

#[test]
fn an_edited_resubmission_checks_the_input_keeps_the_old_one_and_runs_the_new() {
    let workflow = drone();
    let now = Timestamp(0);
    let (decision, order) = refused_at_first(&workflow, "no such customer", now);
    let task = decision.next.expect("in error");
    assert_eq!(task.state, TaskState::Error);
    let edit = |input: Value| Resubmit {
        request: operator(None),
        input: Some(input),
    };
    let refused = resubmit(
        &task,
        &workflow,
        &order,
        edit(json!({"customer_id": 7})),
        now,
    );
    assert!(matches!(refused, Err(Refused::Input(e)) if e.field == "input.customer_id"));
    let new = json!({"customer_id": "c2", "pickup": "a", "dropoff": "b", "weight_kg": 1});
    let decision = resubmit(&task, &workflow, &order, edit(new.clone()), now).expect("ok");
    let edited = decision.order.expect("a new input");
    assert_eq!(edited.input, new);
    assert_eq!(
        edited.earlier,
        [EarlierInput {
            until_run: 1,
            input: order.input.clone()
        }]
    );
    let task = decision.next.expect("resubmitted");
    assert_eq!((task.run, task.resubmissions.len()), (2, 1));
    assert!(task.resubmissions[0].edited);
    let claim = on_run(&task, &workflow, &edited, "s1", now);
    assert_eq!(dispatched(&claim)[0].payload.value()["input"], new);
    // Each edit keeps the input it replaces: past what a record holds, one is refused.
    let (mut task, mut order) = (task, edited);
    let large = json!({"customer_id": "x".repeat(60 * 1024), "pickup": "a", "dropoff": "b", "weight_kg": 1});
    for _ in 0..4 {
        task.state = TaskState::Error;
        let decision = resubmit(&task, &workflow, &order, edit(large.clone()), now).expect("ok");
        (task, order) = (decision.next.expect("task"), decision.order.expect("order"));
    }
    task.state = TaskState::Error;
    assert!(matches!(
        resubmit(&task, &workflow, &order, edit(large), now),
        Err(Refused::InputsTooLarge(size)) if size > limits::MAX_ORDER
    ));
    assert_eq!(order.earlier.len(), 5);
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
        let decision = on_expired(&task, workflow, request.complete_by);
        task = decision.next.clone().expect("expired");
        if decision.verdict == Verdict::GaveUp {
            return (task, decision);
        }
        let claim = on_run(&task, workflow, order, "s2", request.complete_by);
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

#[test]
fn a_resubmission_calls_a_step_whose_effect_may_be_in_place_under_the_key_it_had() {
    let workflow = drone();
    let now = Timestamp(0);
    // The delivery times out past its threshold: created, perhaps, and nothing
    // undoes it. The drone's cancellation is refused.
    let (task, order, request) = run_to(&workflow, 4, now);
    assert_eq!(request.step_name, "create-delivery");
    let (task, _) = time_out(task, &workflow, &order, request);
    let claim = on_run(&task, &workflow, &order, "s3", now);
    let mut task = claim.next.clone().expect("claimed");
    let mut decision = claim;
    while let Some(request) = dispatched(&decision).first().map(|r| (*r).clone()) {
        let outcome = match request.step_name.as_str() {
            "schedule-drone" => Outcome::Failed {
                error: "already flying".into(),
            },
            _ => ok(),
        };
        decision = on_response(&task, &workflow, &order, &respond(&request, outcome), now);
        task = decision.next.clone().expect("recorded");
    }
    use StepState::{CompensationFailed, TimedOut};
    assert_eq!(
        states(&task),
        [Done, Compensated, Done, CompensationFailed, TimedOut]
    );
    assert_eq!(task.state, TaskState::Error);
    let alert = alert_of(&decision).expect("alerted");
    assert_eq!(alert.compensation_failed, ["schedule-drone"]);
    assert_eq!(alert.not_undone, ["create-delivery"], "the alert lists it");
    assert_eq!(task.not_undone, ["create-delivery"]);
    assert!(task.needs_a_person(), "kept until a person acts");

    // Run again as it is: the package, undone, and the drone, undone by hand as
    // the alert asks, under the new run's keys; the delivery, perhaps in place
    // and with nothing to undo it, under the key it had.
    let decision = resubmit(&task, &workflow, &order, again(), now).expect("resubmitted");
    let task = decision.next.expect("reset");
    assert!(task.not_undone.is_empty() && !task.needs_a_person());
    assert_eq!(
        keys_called(task, &workflow, &order),
        [
            "t1/2/create-package",
            "t1/2/schedule-drone",
            "t1/1/create-delivery"
        ]
    );
}

#[test]
fn an_edited_resubmission_runs_every_step_again_unless_an_effect_may_be_in_place() {
    let workflow = drone();
    let now = Timestamp(0);
    let edit = |input: Value| Resubmit {
        request: operator(None),
        input: Some(input),
    };
    let new = json!({"customer_id": "c2", "pickup": "a", "dropoff": "b", "weight_kg": 1});

    // Refused for good at the delivery: every effect is undone or never was.
    let (task, order, request) = run_to(&workflow, 4, now);
    let refused = Outcome::Failed {
        error: "address not served".into(),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&request, refused), now);
    let (task, _, _) = answer_all(
        decision.next.clone().expect("recorded"),
        &workflow,
        &order,
        decision,
    );
    assert_eq!(task.state, TaskState::Error);
    let decision = resubmit(&task, &workflow, &order, edit(new.clone()), now).expect("ok");
    let edited = decision.order.expect("a new input");
    let task = decision.next.expect("resubmitted");
    assert_eq!(
        states(&task),
        [Untouched; 5],
        "the checks see the new input"
    );
    let claim = on_run(&task, &workflow, &edited, "s1", now);
    let first = dispatched(&claim)[0];
    assert_eq!(
        (first.step_name.as_str(), first.idempotency_key.as_str()),
        ("check-account", "t1/2/check-account")
    );
    assert_eq!(first.payload.value()["input"], new);

    // An input the steps' requests could not carry with their results.
    let mut errored = task.clone();
    errored.state = TaskState::Error;
    let huge = json!({"customer_id": "x".repeat(limits::MAX_TASK_DATA), "pickup": "a", "dropoff": "b", "weight_kg": 1});
    assert!(matches!(
        resubmit(&errored, &workflow, &edited, edit(huge), now),
        Err(Refused::InputTooLarge(size)) if size > limits::MAX_TASK_DATA
    ));

    // The delivery timed out: it may have been made with the old input.
    let (task, order, request) = run_to(&workflow, 4, now);
    let (task, _) = time_out(task, &workflow, &order, request);
    let claim = on_run(&task, &workflow, &order, "s3", now);
    let (task, _, _) = answer_all(
        claim.next.clone().expect("claimed"),
        &workflow,
        &order,
        claim,
    );
    assert_eq!(task.state, TaskState::Error);
    let refused = resubmit(&task, &workflow, &order, edit(new), now);
    assert_eq!(
        refused,
        Err(Refused::EffectsInPlace(vec!["create-delivery".into()]))
    );
    assert!(
        refused
            .expect_err("refused")
            .to_string()
            .contains("create-delivery"),
        "the refusal names the step"
    );
}

#[test]
fn an_agents_error_is_kept_cut_to_what_a_task_keeps() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, request) = run_to(&workflow, 1, now);
    let long = Outcome::Failed {
        error: "é".repeat(100 * 1024),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&request, long), now);
    let task = decision.next.expect("recorded");
    let kept = task.steps[1].error.as_deref().expect("the step's error");
    assert!(kept.len() <= limits::MAX_ERROR_TEXT + 16, "{}", kept.len());
    assert!(kept.ends_with("[cut]"));
    let reason = task.error.as_deref().expect("the task's error");
    assert!(
        reason.len() <= limits::MAX_ERROR_TEXT + 64,
        "{}",
        reason.len()
    );
}

#[test]
fn an_unclaimed_task_is_sent_again_without_counting_a_failure() {
    let workflow = drone();
    let (task, _, _) = submit(&workflow, submission(false), Timestamp(0));
    let late = task.complete_by.expect("lease");
    let decision = on_expired(&task, &workflow, late);
    let next = decision.next.expect("sent again");
    assert_eq!((next.failure_count, next.state), (0, TaskState::Pending));
    assert!(next.complete_by > task.complete_by);
    assert_eq!(
        decision.effects,
        [
            Effect::Schedule {
                task_id: task.id.clone(),
                delay: Duration::ZERO
            },
            Effect::Deadline {
                task_id: task.id,
                at: next.complete_by.expect("a new lease"),
            }
        ],
        "a Run, and a deadline message for the new lease (the last one is spent)"
    );
}

#[test]
fn a_deadline_message_follows_each_tasks_lease_one_at_a_time() {
    let workflow = drone();
    let deadlines = |decision: &Decision| -> Vec<Timestamp> {
        decision
            .effects
            .iter()
            .filter_map(|e| match e {
                Effect::Deadline { at, .. } => Some(*at),
                _ => None,
            })
            .collect()
    };
    let now = Timestamp(0);
    let (task, order, effects) = submit(&workflow, submission(false), now);
    let pickup = task.complete_by.expect("the pickup lease");
    assert!(effects.contains(&Effect::Deadline {
        task_id: task.id.clone(),
        at: pickup,
    }));
    assert_eq!(task.deadline, Some(pickup));
    let claim = on_run(&task, &workflow, &order, "s", now);
    let claimed = claim.next.clone().expect("claimed");
    let first = claimed.complete_by.expect("the step's lease");
    assert!(first < pickup);
    assert_eq!(
        deadlines(&claim),
        [first],
        "a lease ending sooner: a message of its own"
    );
    let request = dispatched(&claim)[0].clone();
    let later = Timestamp(1_000);
    let answered = on_response(&claimed, &workflow, &order, &respond(&request, ok()), later);
    let second = answered.next.clone().expect("recorded");
    assert!(
        deadlines(&answered).is_empty(),
        "a lease ending later: the message on its way follows it"
    );

    // The pickup's message is spent: dropped without a write.
    let spent = on_deadline(&second, &workflow, pickup, pickup);
    assert_eq!(
        (spent.verdict, spent.next, spent.effects),
        (Verdict::DeadlineSuperseded, None, vec![])
    );
    // The first step's comes at its end, finds the lease moved on and is followed
    // by one for the new end; there the lease has expired: acted on as the
    // supervisor would, and the next lease watched.
    let moved = on_deadline(&second, &workflow, first, first);
    assert_eq!(moved.verdict, Verdict::DeadlineMoved);
    let second_end = second.complete_by.expect("the second step's lease");
    assert_eq!(deadlines(&moved), [second_end]);
    let watched = moved.next.expect("the new end recorded");
    let expired = on_deadline(&watched, &workflow, second_end, second_end);
    assert_eq!(expired.verdict, Verdict::Retry);
    let retried = expired.next.clone().expect("sent back");
    let pickup_again = retried.complete_by.expect("a pickup lease");
    assert_eq!(deadlines(&expired), [pickup_again]);

    // Claimed again: a lease ending sooner, one message more; the pickup's is
    // spent when it comes. One chain, however often the task is sent back.
    let claim = on_run(&retried, &workflow, &order, "s", second_end);
    let reclaimed = claim.next.clone().expect("claimed again");
    assert_eq!(
        deadlines(&claim),
        [reclaimed.complete_by.expect("its lease")]
    );
    assert_eq!(
        on_deadline(&reclaimed, &workflow, pickup_again, pickup_again).verdict,
        Verdict::DeadlineSuperseded
    );

    // The supervisor, finding a lease expired (its message lost), watches the new one.
    let lost = reclaimed.complete_by.expect("lease");
    let swept = on_expired(&reclaimed, &workflow, lost);
    assert_eq!(
        deadlines(&swept),
        [swept.next.expect("retried").complete_by.expect("lease")]
    );

    // A task that ends keeps a lease while its notifications are not known sent;
    // once they are, it has none to watch, and the chain ends.
    let (last, order, request) = run_to(&workflow, 4, now);
    let finished = on_response(&last, &workflow, &order, &respond(&request, ok()), later);
    let done = finished.next.clone().expect("processed");
    let held = done.complete_by.expect("held for its notifications");
    assert!(
        done.deadline.is_some_and(|due| due <= held),
        "the message on its way watches it"
    );
    let told = notifications_sent(&done, &outboxed(&done), later);
    let told = told.next.expect("cleared");
    assert_eq!(told.complete_by, None);
    let end = on_deadline(&told, &workflow, held, held);
    assert_eq!((end.next, end.effects), (None, vec![]));
}

#[test]
fn the_fingerprint_tells_a_repeat_from_a_different_request() {
    let a = submission(false);
    let mut b = submission(false);
    assert_eq!(a.fingerprint("w"), b.fingerprint("w"));
    let stored = json!({"workflow": "w", "input": a.input, "notify": a.notify});
    assert_eq!(
        a.fingerprint("w"),
        super::super::workflow::sha256_hex(&stored.to_string()),
        "the digest of the JSON map it was first written from: stored tasks' still match"
    );
    b.input["weight_kg"] = json!(3);
    assert_ne!(a.fingerprint("w"), b.fingerprint("w"));
    assert_ne!(a.fingerprint("w"), a.fingerprint("v"));
}
