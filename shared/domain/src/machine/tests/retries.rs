//! A Task's Retry: each attempt a call of its own, with its own task token and its
//! own count of leases lapsed.

use std::time::Duration;

use serde_json::{Value, json};

use super::{answered, dispatched, invoked, machine, run, started};
use crate::callback::Token;
use crate::decide::{CallbackOutcome, CallbackUse, on_callback, on_expired, on_response, on_run};
use crate::task::{Caller, TaskState};
use crate::time::Timestamp;

#[test]
fn a_retry_of_a_task_token_wait_gives_a_new_token_and_the_old_one_ends_nothing() {
    let workflow = machine(json!({
        "StartAt": "Ask",
        "States": {
            "Ask": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
                    "Parameters": {"FunctionName": "ask",
                                   "Payload": {"token.$": "$$.Task.Token", "retry.$": "$$.State.RetryCount"}},
                    "Retry": [{"ErrorEquals": ["Refused"], "IntervalSeconds": 1, "MaxAttempts": 1}],
                    "End": true}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({}));
    let mut task = claim.next.clone().expect("claimed");
    let mut decision = claim;
    let mut tokens = Vec::new();
    for (attempt, outcome) in [
        CallbackOutcome::Error("Refused".into()),
        CallbackOutcome::Output(json!("yes")),
    ]
    .into_iter()
    .enumerate()
    {
        let request = dispatched(&decision).pop().expect("the function invoked");
        let sent: Value = serde_json::from_str(&invoked(&request).payload).expect("a payload");
        assert_eq!(sent["retry"], attempt, "the retry's context is its own");
        tokens.push(sent["token"].as_str().expect("the token").to_owned());
        let now = 10_000 * (attempt as i64 + 1);
        let called = on_response(
            &task,
            &workflow,
            &order,
            &answered(&request, "null", None),
            Timestamp(now),
        );
        task = called.next.expect("recorded");
        if attempt == 1 {
            let stale = CallbackUse {
                step: 0,
                token: Token::parse(&tokens[0]),
                by: Caller::Token,
                outcome: CallbackOutcome::Output(json!("late")),
            };
            let refused = on_callback(&task, &workflow, &order, stale, Timestamp(now + 1));
            assert!(refused.is_err(), "the first attempt's token ends nothing");
        }
        let callback = CallbackUse {
            step: 0,
            token: Token::parse(tokens.last().expect("a token")),
            by: Caller::Token,
            outcome,
        };
        let used = on_callback(&task, &workflow, &order, callback, Timestamp(now + 2));
        task = used.expect("used").next.expect("recorded");
        decision = on_run(&task, &workflow, &order, "s1", Timestamp(now + 5_000));
        task = decision.next.clone().expect("moved on");
    }
    assert_ne!(
        tokens[0], tokens[1],
        "each attempt waits under its own token"
    );
    assert_eq!(task.state, TaskState::Processed);
    assert_eq!(run(&task).output.as_deref(), Some(&json!("yes")));
}

#[test]
fn a_retry_after_a_timeout_counts_its_own_lapsed_leases() {
    let workflow = machine(json!({
        "StartAt": "Call",
        "States": {
            "Call": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
                     "Parameters": {"FunctionName": "slow", "Payload": {}}, "TimeoutSeconds": 5,
                     "Retry": [{"ErrorEquals": ["States.Timeout"], "IntervalSeconds": 1, "MaxAttempts": 2}],
                     "End": true}
        }
    }));
    let (_, order, claim) = started(&workflow, json!({}));
    let mut task = claim.next.clone().expect("claimed");
    for attempt in 0..2 {
        let lapsed = task.steps[0].complete_by.expect("a lease");
        let expired = on_expired(&task, &workflow, &order, lapsed);
        task = expired.next.clone().expect("expired");
        // The timeout is the state's error, its retry sent once its interval is over.
        let mut now = lapsed;
        let retried = loop {
            let decision = on_run(&task, &workflow, &order, "s1", now);
            task = decision.next.clone().expect("run");
            if !dispatched(&decision).is_empty() || now > lapsed.plus(Duration::from_secs(9)) {
                break decision;
            }
            now = now.plus(Duration::from_secs(1));
        };
        assert_eq!(dispatched(&retried).len(), 1, "the retry's call is sent");
        assert_eq!(
            task.steps[0].failure_count, 0,
            "attempt {attempt}: the retry's leases are counted afresh"
        );
    }
}
