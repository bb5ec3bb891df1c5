//! Steps that start child tasks: started at most `max_concurrency` at a time, joined
//! by counts, failed past what they tolerate, watched, cancelled and undone by
//! their children's own compensations.

use super::*;
use crate::messages::ChildEnded;
use crate::task::{Actor, ParentLink};

/// `a`, then a map `m` over `input.items` of `kid` children (two at a time, one
/// failure tolerated), then `b`: `a` and `b` undone by compensations.
fn mapped() -> Workflow {
    let text = r#"{"name": "mapped", "version": 1,
        "input": {"items": "array<object>", "order": "string"},
        "steps": [
            {"name": "a", "agent": "s", "call": "/a", "compensation": "/a/undo"},
            {"name": "m", "map": {"items": "input.items", "workflow": "kid", "max_concurrency": 2,
                "tolerated_failures": 1, "input": {"n": "item.n", "order": "input.order"}}},
            {"name": "b", "agent": "s", "call": "/b", "compensation": "/b/undo"}
        ]}"#;
    Workflow::parse("mapped.json", text).expect("valid")
}

fn order_of(items: usize) -> Order {
    Order {
        task_id: TaskId::parse("t1").expect("id"),
        input: std::sync::Arc::new(json!({
            "items": (0..items).map(|n| json!({"n": n})).collect::<Vec<_>>(),
            "order": "o-1",
        })),
        earlier: Vec::new(),
    }
}

/// A task of `mapped` over `items` items, its first step done: the task and the
/// children it started.
fn at_the_map(items: usize, now: Timestamp) -> (Workflow, Task, Order, Vec<(u32, Value)>) {
    at_the_map_of(order_of(items), now)
}

/// [`at_the_map`], with `order`.
fn at_the_map_of(order: Order, now: Timestamp) -> (Workflow, Task, Order, Vec<(u32, Value)>) {
    let workflow = mapped();
    let submission = Submission {
        input: Value::clone(&order.input),
        ..submission(false)
    };
    let (task, _, _) = submit(&workflow, submission, now);
    let claim = on_run(&task, &workflow, &order, "s1", now);
    let request = dispatched(&claim)[0].clone();
    let task = claim.next.expect("claimed");
    let decision = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
    let started = started(&decision);
    (workflow, decision.next.expect("recorded"), order, started)
}

/// The children a decision starts, by item, with their inputs.
fn started(decision: &Decision) -> Vec<(u32, Value)> {
    decision
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::StartChildren { children, .. } => Some(children.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The children a decision has undone or cancelled, by item.
fn stopped(decision: &Decision) -> Vec<u32> {
    decision
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::StopChildren { items, .. } => Some(items.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

fn ended(task: &Task, item: u32, state: TaskState) -> ChildEnded {
    ChildEnded {
        task_id: task.id.clone(),
        step: 1,
        item,
        run: task.run,
        state,
        needs_a_person: false,
        branch: None,
    }
}

/// Tells `task` that child `item` ended in `state`: the decision.
fn tell(task: &Task, workflow: &Workflow, order: &Order, item: u32, state: TaskState) -> Decision {
    on_child_ended(
        task,
        workflow,
        order,
        &ended(task, item, state),
        Timestamp(1_000),
    )
}

#[test]
fn a_map_starts_its_cap_of_children_then_one_for_each_that_ends_and_joins_them() {
    let (workflow, task, order, first) = at_the_map(3, Timestamp(1_000));
    assert_eq!(
        first,
        [
            (0, json!({"n": 0, "order": "o-1"})),
            (1, json!({"n": 1, "order": "o-1"}))
        ]
    );
    let children = task.steps[1].children.clone().expect("counted");
    assert_eq!((children.total, children.started), (3, 2));
    assert_eq!(children.running, [0, 1]);
    assert!(task.steps[1].complete_by.is_some(), "the step is watched");
    let one = tell(&task, &workflow, &order, 1, TaskState::Processed);
    assert_eq!(started(&one), [(2, json!({"n": 2, "order": "o-1"}))]);
    let task = one.next.expect("counted");
    let again = tell(&task, &workflow, &order, 1, TaskState::Processed);
    assert_eq!(again.verdict, Verdict::StaleResponse, "counted once");
    let zero = tell(&task, &workflow, &order, 0, TaskState::Processed);
    assert!(dispatched(&zero).is_empty(), "b waits for the last child");
    let task = zero.next.expect("counted");
    let two = tell(&task, &workflow, &order, 2, TaskState::Processed);
    let task = two.next.clone().expect("joined");
    assert_eq!(task.steps[1].state, StepState::Processed);
    assert_eq!(
        task.steps[1].output.as_deref(),
        Some(
            &json!({"total": 3, "succeeded": 3, "failed": 0, "children": "/tasks/t1/children?step=m"})
        )
    );
    assert_eq!(dispatched(&two)[0].step_name, "b");
}

#[test]
fn an_end_of_another_run_or_a_child_not_running_is_stale() {
    let (workflow, task, order, _) = at_the_map(3, Timestamp(1_000));
    let mut other_run = ended(&task, 0, TaskState::Processed);
    other_run.run += 1;
    let stale = on_child_ended(&task, &workflow, &order, &other_run, Timestamp(1_000));
    assert_eq!(stale.verdict, Verdict::StaleResponse);
    let not_started = tell(&task, &workflow, &order, 2, TaskState::Processed);
    assert_eq!(not_started.verdict, Verdict::StaleResponse);
}

#[test]
fn failures_past_the_tolerance_stop_the_map_and_undo_every_child_it_started_then_a() {
    let (workflow, task, order, _) = at_the_map(5, Timestamp(1_000));
    let first = tell(&task, &workflow, &order, 0, TaskState::Error);
    assert_eq!(started(&first).len(), 1, "one failure is tolerated");
    let task = first.next.expect("counted");
    let second = tell(&task, &workflow, &order, 1, TaskState::Error);
    let task = second.next.clone().expect("counted");
    assert!(
        started(&second).is_empty(),
        "no child starts past the tolerance"
    );
    assert_eq!(task.state, TaskState::Compensating);
    assert_eq!(
        task.error.as_deref(),
        Some("step 'm': 2 of 5 children failed (1 tolerated)")
    );
    assert_eq!(
        task.steps[1].state,
        StepState::Processing,
        "child 2 runs on"
    );
    let last = tell(&task, &workflow, &order, 2, TaskState::Processed);
    let task = last.next.clone().expect("ended");
    assert_eq!(task.steps[1].state, StepState::Compensating);
    assert_eq!(
        stopped(&last),
        [0, 1],
        "every child started is undone, two at a time"
    );
    let task = [0, 1, 2].iter().fold(task, |task, &item| {
        tell(&task, &workflow, &order, item, TaskState::Error)
            .next
            .expect("undone")
    });
    assert_eq!(task.steps[1].state, StepState::Compensated);
    assert_eq!(task.steps[0].state, StepState::Compensating, "then a");
}

#[test]
fn a_map_whose_items_are_not_an_array_fails_without_a_child() {
    let mut order = order_of(1);
    std::sync::Arc::make_mut(&mut order.input)["items"] = json!("many");
    let (_, task, _, first) = at_the_map_of(order, Timestamp(1_000));
    assert!(first.is_empty());
    assert_eq!(task.steps[1].state, StepState::Error);
    assert_eq!(
        task.steps[1].error.as_deref(),
        Some("map.items: 'input.items' is a string, not an array")
    );
    assert_eq!(task.state, TaskState::Compensating, "a is undone");
}

#[test]
fn a_map_of_no_items_is_done_at_once_and_the_next_step_sent() {
    let (_, task, _, first) = at_the_map(0, Timestamp(1_000));
    assert!(first.is_empty());
    assert_eq!(task.steps[1].state, StepState::Processed);
    assert_eq!(task.steps[2].state, StepState::Processing);
}

#[test]
fn a_watch_that_passes_starts_the_running_children_again_without_a_failure() {
    let (workflow, task, order, first) = at_the_map(3, Timestamp(1_000));
    let watch = task.steps[1].complete_by.expect("watched");
    let expired = on_expired(&task, &workflow, &order, watch);
    assert_eq!(expired.verdict, Verdict::ChildrenWatched);
    assert_eq!(started(&expired), first);
    assert!(
        expired
            .effects
            .iter()
            .any(|effect| matches!(effect, Effect::StartChildren { claimed: false, .. })),
        "started again for a scheduler to claim: the watch may be the supervisor's"
    );
    let task = expired.next.expect("watched again");
    assert_eq!(task.failure_count, 0);
    let next = task.steps[1].complete_by.expect("watched");
    assert!(
        watch.until(next) > Timestamp(1_000).until(watch),
        "the watches space out"
    );
}

#[test]
fn a_cancel_cancels_the_running_children_and_their_ends_end_the_map() {
    let (workflow, task, order, _) = at_the_map(3, Timestamp(1_000));
    let request = asked_by(Actor::Owner, Timestamp(1_500));
    let cancelled = cancel(&task, &workflow, request, Timestamp(1_500)).expect("cancelled");
    assert_eq!(stopped(&cancelled), [0, 1]);
    let task = cancelled.next.expect("cancelling");
    let task = tell(&task, &workflow, &order, 0, TaskState::Processed)
        .next
        .expect("counted");
    let last = tell(&task, &workflow, &order, 1, TaskState::Error);
    let task = last.next.clone().expect("ended");
    assert_eq!(task.steps[1].children.as_ref().map(|c| c.started), Some(2));
    assert_eq!(
        task.steps[1].state,
        StepState::Compensating,
        "child 0 is undone"
    );
    assert_eq!(stopped(&last), [0, 1]);
}

#[test]
fn a_child_tells_its_parent_of_its_end_and_alerts_no_operator() {
    let workflow = drone();
    let now = Timestamp(1_000);
    let mut submission = submission(false);
    submission.parent = Some(ParentLink {
        task: TaskId::parse("p").expect("id"),
        step: 4,
        item: 7,
        run: 2,
        scope: None,
    });
    let (decision, _) = {
        let (task, order, _) = submit(&workflow, submission, now);
        let claim = on_run(&task, &workflow, &order, "s1", now);
        let request = dispatched(&claim)[0].clone();
        let task = claim.next.expect("claimed");
        let failed = Outcome::Failed { error: "no".into() };
        (
            on_response(&task, &workflow, &order, &respond(&request, failed), now),
            order,
        )
    };
    assert_eq!(
        decision.next.as_ref().map(|t| t.state),
        Some(TaskState::Error)
    );
    let told: Vec<&ChildEnded> = decision
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::TellParent(ended) => Some(ended),
            _ => None,
        })
        .collect();
    assert_eq!(
        told,
        [&ChildEnded {
            task_id: TaskId::parse("p").expect("id"),
            step: 4,
            item: 7,
            run: 2,
            state: TaskState::Error,
            needs_a_person: false,
            branch: None,
        }]
    );
    assert!(
        !decision
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Alert(_))),
        "the parent alerts, if it fails"
    );
}

#[test]
fn a_child_stopped_for_its_parent_is_undone_when_done_and_cancelled_when_running() {
    let workflow = drone();
    let now = Timestamp(1_000);
    let (mut task, order, _) = submit(&workflow, submission(false), now);
    let claim = on_run(&task, &workflow, &order, "s1", now);
    let running = claim.next.expect("claimed");
    let cancelled = stop_as_child(&running, &workflow, false, now);
    assert_eq!(cancelled.verdict, Verdict::CancelRequested);
    task.state = TaskState::Processed;
    for step in &mut task.steps {
        step.state = StepState::Processed;
    }
    assert_eq!(
        stop_as_child(&task, &workflow, false, now).next,
        None,
        "a cancelled parent's step undoes it later, at its cap"
    );
    let undone = stop_as_child(&task, &workflow, true, now);
    assert_eq!(undone.verdict, Verdict::StoppedForParent);
    let undoing = undone.next.expect("undoing");
    assert_eq!(undoing.state, TaskState::Compensating);
    assert_eq!(undoing.cancelled.map(|r| r.by), Some(Actor::Parent));
    task.state = TaskState::Error;
    assert_eq!(stop_as_child(&task, &workflow, true, now).next, None);
}
