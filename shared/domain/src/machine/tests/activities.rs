//! Activities: a Task's visit offered to workers, taken by one, ended by its token.

use std::time::Duration;

use serde_json::{Value, json};

use super::{dispatched, machine, run, started};
use crate::callback::Token;
use crate::decide::{CallbackOutcome, CallbackUse, Refused, on_callback, on_expired, on_run};
use crate::machine::activities::{given, offer, take};
use crate::task::{Caller, Order, Task, TaskState};
use crate::time::Timestamp;
use crate::workflow::Workflow;

const ACTIVITY: &str = "arn:aws:states:us-east-1:123456789012:activity:review";

fn reviewed(extra: Value) -> Workflow {
    let mut state = json!({"Type": "Task", "Resource": ACTIVITY,
                           "Parameters": {"order.$": "$.id"}, "ResultPath": "$.review",
                           "Next": "Done"});
    if let (Some(state), Value::Object(extra)) = (state.as_object_mut(), extra) {
        state.extend(extra);
    }
    machine(json!({
        "StartAt": "Review",
        "States": {
            "Review": state,
            "Done": {"Type": "Pass", "End": true},
            "Gave up": {"Type": "Pass", "End": true}
        }
    }))
}

/// The token's use, as `SendTaskSuccess` or `SendTaskFailure` makes it.
fn used(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    token: &str,
    outcome: CallbackOutcome,
    now: i64,
) -> Result<Task, Refused> {
    let callback = CallbackUse {
        step: 0,
        token: Token::parse(token),
        by: Caller::Token,
        outcome,
    };
    let decision = on_callback(task, workflow, order, callback, Timestamp(now))?;
    let task = decision.next.expect("recorded");
    Ok(on_run(&task, workflow, order, "s1", Timestamp(now + 1))
        .next
        .expect("moved on"))
}

#[test]
fn a_visit_is_offered_until_one_worker_takes_it_and_its_token_ends_it() {
    let workflow = reviewed(json!({"Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Gave up"}]}));
    let (_, order, claim) = started(&workflow, json!({"id": "o-1"}));
    assert!(dispatched(&claim).is_empty(), "an activity calls nothing");
    let task = claim.next.expect("claimed");
    let offered = offer(&task).expect("offered");
    assert_eq!(offered.activity, "review");

    let refused = take(&task, &workflow, "other", ("w", "p-0"), Timestamp(5));
    assert!(
        refused.is_err(),
        "a worker of another activity takes nothing"
    );
    assert_eq!(given(&task), None, "nothing given before a worker takes it");
    let decision = take(&task, &workflow, "review", ("w-1", "p-1"), Timestamp(5)).expect("taken");
    let task = decision.next.expect("written");
    let again =
        take(&task, &workflow, "review", ("w-1", "p-1"), Timestamp(6)).expect("the same poll");
    assert!(
        again.next.is_none(),
        "the same poll again writes nothing: its take is written"
    );
    let given = given(&task).expect("given");
    assert_eq!(given.input, r#"{"order":"o-1"}"#);
    assert_eq!(offer(&task), None, "taken: offered no more");
    assert!(
        take(&task, &workflow, "review", ("w-2", "p-2"), Timestamp(6)).is_err(),
        "a visit is given to one worker"
    );

    let done = used(
        &task,
        &workflow,
        &order,
        &given.token,
        CallbackOutcome::Output(json!({"ok": true})),
        7,
    )
    .expect("used");
    assert_eq!(done.state, TaskState::Processed);
    assert_eq!(
        run(&done).output.as_deref(),
        Some(&json!({"id": "o-1", "review": {"ok": true}}))
    );
}

#[test]
fn a_workers_failure_is_the_states_error_and_its_retry_is_offered_under_a_new_token() {
    let workflow = reviewed(json!({
        "Retry": [{"ErrorEquals": ["Rejected"], "IntervalSeconds": 1, "MaxAttempts": 1}],
        "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Gave up"}]
    }));
    let (_, order, claim) = started(&workflow, json!({"id": "o-2"}));
    let mut task = claim.next.expect("claimed");
    let mut tokens = Vec::new();
    for attempt in 0..2_i64 {
        let now = 10_000 * attempt;
        let poll = format!("p-{attempt}");
        let decision =
            take(&task, &workflow, "review", ("w", &poll), Timestamp(now)).expect("offered");
        task = decision.next.expect("taken");
        let given = given(&task).expect("given");
        tokens.push(given.token.clone());
        let failure = json!({"Error": "Rejected", "Cause": format!("no {attempt}")});
        task = used(
            &task,
            &workflow,
            &order,
            &given.token,
            CallbackOutcome::Error(failure.to_string()),
            now + 1,
        )
        .expect("used");
        if attempt == 0 && offer(&task).is_none() {
            // Its retry is offered once its interval is over.
            task = on_run(&task, &workflow, &order, "s1", Timestamp(now + 2_000))
                .next
                .expect("retried");
        }
    }
    assert_ne!(
        tokens[0], tokens[1],
        "each attempt is taken under its own token"
    );
    let stale = used(
        &task,
        &workflow,
        &order,
        &tokens[0],
        CallbackOutcome::Output(json!(1)),
        30_000,
    );
    assert!(stale.is_err(), "an earlier attempt's token ends nothing");
    assert_eq!(task.state, TaskState::Processed);
    assert_eq!(
        run(&task).output.as_deref(),
        Some(&json!({"id": "o-2", "error": {"Error": "Rejected", "Cause": "no 1"}}))
    );
}

#[test]
fn a_worker_that_stops_beating_times_the_state_out() {
    let workflow = reviewed(json!({
        "TimeoutSeconds": 60, "HeartbeatSeconds": 5,
        "Catch": [{"ErrorEquals": ["States.HeartbeatTimeout"], "ResultPath": "$.error", "Next": "Gave up"}]
    }));
    let (_, order, claim) = started(&workflow, json!({"id": "o-3"}));
    let task = claim.next.expect("claimed");
    let lease = task.steps[0].complete_by.expect("a lease");
    assert_eq!(
        lease,
        Timestamp(0).plus(Duration::from_secs(5)),
        "the first heartbeat is due at the state's HeartbeatSeconds"
    );
    let late = take(&task, &workflow, "review", ("w", "p-late"), lease);
    assert!(
        late.is_err(),
        "a visit whose heartbeat lapsed is given to no worker"
    );
    let decision = take(&task, &workflow, "review", ("w", "p"), Timestamp(1)).expect("offered");
    let task = decision.next.expect("taken");
    let expired = on_expired(&task, &workflow, &order, lease)
        .next
        .expect("expired");
    let task = on_run(
        &expired,
        &workflow,
        &order,
        "s1",
        lease.plus(Duration::from_secs(1)),
    )
    .next
    .expect("moved on");
    assert_eq!(task.state, TaskState::Processed);
    assert_eq!(
        run(&task).output.as_deref(),
        Some(&json!({"id": "o-3", "error": {"Error": "States.HeartbeatTimeout", "Cause": ""}}))
    );
}
