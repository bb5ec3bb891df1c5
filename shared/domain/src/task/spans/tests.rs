//! The spans a task's writes finish, run through the drone delivery.

use serde_json::json;

use super::{FinishedSpan, finished};
use crate::decide::{Effect, on_expired, on_response, on_run, submit};
use crate::ids::TaskId;
use crate::messages::{AgentResponse, Outcome};
use crate::submission::Submission;
use crate::task::Task;
use crate::time::Timestamp;
use crate::trace::{TraceContext, step_span};
use crate::workflow::Registry;

const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The drone delivery run to its end, the spans each write finished collected.
fn delivered(caller: Option<TraceContext>) -> (Task, Vec<FinishedSpan>) {
    let workflow = Registry::built_in()
        .latest("drone-delivery")
        .expect("drone");
    let submission = Submission {
        trace: caller,
        ..Submission::new(
            TaskId::parse("t1").expect("id"),
            json!({"customer_id": "c", "pickup": "a", "dropoff": "b", "weight_kg": 2.5}),
        )
    };
    let (task, order, _) = submit(&workflow, submission, Timestamp(1_000));
    let mut decision = on_run(&task, &workflow, &order, "s1", Timestamp(1_010));
    let mut task = decision.next.clone().expect("claimed");
    let mut spans = Vec::new();
    for now in (1..).map(|i| Timestamp(1_010 + 10 * i)) {
        let Some(request) = decision.effects.iter().find_map(|e| match e {
            Effect::Dispatch(request) => Some(request.clone()),
            _ => None,
        }) else {
            break;
        };
        let answer = Outcome::Succeeded { output: json!({}) };
        let response = AgentResponse::answering(request, answer);
        decision = on_response(&task, &workflow, &order, &response, now);
        let next = decision.next.clone().expect("recorded");
        spans.extend(finished(Some(&task), &next));
        task = next;
    }
    (task, spans)
}

#[test]
fn a_delivery_is_one_trace_of_its_run_and_its_steps() {
    let caller = TraceContext::of_headers(Some(VALID), None).expect("valid");
    let (task, spans) = delivered(Some(caller.clone()));
    assert_eq!(task.state, crate::task::TaskState::Processed);
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "step check-account",
            "step create-package",
            "step check-transport",
            "step schedule-drone",
            "step create-delivery",
            "task"
        ]
    );
    assert!(spans.iter().all(|s| s.trace_id == caller.trace_id));
    let run = spans.last().expect("the run");
    assert_eq!(run.parent, Some(caller.parent));
    assert_eq!(run.span_id, task.run_span(1));
    assert_eq!((run.start, run.end), (Timestamp(1_000), task.updated_at));
    assert!(run.events.iter().any(|(name, _)| name == "state Processed"));
    for (index, step) in spans[..5].iter().enumerate() {
        assert_eq!(step.parent, Some(run.span_id));
        // The id the agent names as its call's parent, from its request.
        assert_eq!(step.span_id, task.step_trace(index).parent);
        assert!(step.start < step.end, "{step:?}");
        assert!(!step.failed);
    }
    // Written again (its answer lost), a write tells the same spans.
    let (again, spans_again) = delivered(Some(caller));
    assert_eq!(again.run_span(1), task.run_span(1));
    assert_eq!(spans_again, spans);
}

#[test]
fn a_task_without_a_caller_is_a_trace_of_its_own() {
    let (task, spans) = delivered(None);
    let run = spans.last().expect("the run");
    assert_eq!(run.parent, None);
    assert_eq!(run.trace_id, task.trace_id());
    let children = task.step_trace(2);
    assert_eq!(children.trace_id, task.trace_id());
    let began = task.steps[2].started_at.expect("begun");
    assert_eq!(
        children.parent,
        step_span(&task.id, task.created_at, 1, 2, "call", began)
    );
}

#[test]
fn an_unsampled_trace_finishes_no_span() {
    let unsampled = TraceContext::of_headers(Some(&VALID.replace("-01", "-00")), None);
    let (_, spans) = delivered(unsampled);
    assert!(spans.is_empty());
}

#[test]
fn an_expired_lease_ends_its_operation_with_the_supervisors_finding_under_it() {
    let workflow = Registry::built_in()
        .latest("drone-delivery")
        .expect("drone");
    let submission = Submission::new(
        TaskId::parse("t2").expect("id"),
        json!({"customer_id": "c", "pickup": "a", "dropoff": "b", "weight_kg": 2.5}),
    );
    let (task, order, _) = submit(&workflow, submission, Timestamp(1_000));
    let claimed = on_run(&task, &workflow, &order, "s1", Timestamp(1_010))
        .next
        .expect("claimed");
    let call = claimed.step_trace(0).parent;
    let late = Timestamp(60_000);
    let expired = on_expired(&claimed, &workflow, &order, late)
        .next
        .expect("recorded");
    let spans = finished(Some(&claimed), &expired);
    let [step, recover] = &spans[..] else {
        panic!("the step's span and the finding: {spans:#?}");
    };
    assert_eq!(step.name, "step check-account");
    assert_eq!(step.span_id, call, "the span its agent's call is under");
    assert_eq!(step.parent, Some(claimed.run_span(1)));
    assert_eq!((step.start, step.end), (Timestamp(1_010), late));
    assert!(step.failed);
    assert_eq!(recover.name, "recover check-account");
    assert_eq!(recover.parent, Some(call));
    assert_eq!((recover.start, recover.end), (late, late));
}
