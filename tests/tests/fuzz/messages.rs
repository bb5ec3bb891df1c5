//! The fuzz targets of the queues: any text on the agents' queues, and messages near
//! the real ones of every built-in workflow, each handled or refused as poison.

use std::sync::LazyLock;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sas_api::Caller;
use sas_core::app::HandleError;
use sas_core::step_caller::CallError;
use sas_domain::messages::{AgentRequest, Outcome, SchedulerMessage};
use sas_domain::time::Timestamp;
use sas_domain::workflow::Registry;
use serde_json::{Value, json};

use super::drive::World;
use super::run::{any_json, changed, changes, fuzz};
use super::{Subject, inputs, runtime, subject, test_workflows};

/// The agent handles `text` when it is a request, and refuses it as poison otherwise.
fn agent_takes_it_or_refuses_it_as_poison(
    subject: &Subject,
    text: &str,
) -> Result<(), TestCaseError> {
    let answered = subject
        .runtime
        .block_on(subject.step_caller.on_request(text, None));
    let decodes = serde_json::from_str::<AgentRequest>(text).is_ok();
    prop_assert!(
        decodes || matches!(answered, Err(CallError::Poison(_))),
        "agent: {text:?} -> {answered:?}"
    );
    Ok(())
}

#[test]
fn every_undecodable_message_is_poison() {
    let text = prop_oneof![".{0,200}", any_json().prop_map(|v| v.to_string())];
    fuzz("message text", 1_000, text, |text| {
        let subject = subject();
        // On the agents' response queue, the one any agent may write to.
        let scheduled = subject
            .runtime
            .block_on(subject.app.on_scheduler_message("agent-responses", &text));
        match serde_json::from_str::<SchedulerMessage>(&text) {
            Err(_) => prop_assert!(
                matches!(scheduled, Err(HandleError::Poison(_))),
                "scheduler: {text:?} -> {scheduled:?}"
            ),
            Ok(SchedulerMessage::Response(_)) => {}
            Ok(_) => prop_assert!(
                matches!(scheduled, Err(HandleError::Refused(_))),
                "scheduler: {text:?} -> {scheduled:?}"
            ),
        }
        agent_takes_it_or_refuses_it_as_poison(&subject, &text)
    });
}

/// The message bodies a run of every built-in workflow sent, by queue: a run
/// message, requests and answers, deadlines, children's submissions and ends, a
/// limit's grants; and a buffered submission and a rate's tick.
static MESSAGES: LazyLock<Vec<(String, Value)>> = LazyLock::new(|| {
    let world = World::new(Registry::with_files(test_workflows()).expect("the test workflows"));
    let succeeded = [Outcome::Succeeded {
        output: json!({ "region": "au", "tier": "gold", "ok": true }),
    }];
    runtime().block_on(async {
        for (workflow, input) in inputs() {
            world.submit(&workflow, input).await;
        }
        // Three at once for a limit of one per customer: two wait their turn.
        for _ in 0..3 {
            world
                .submit("one-delivery-per-customer", json!({ "customer_id": "c-1" }))
                .await;
        }
        world.drive(&succeeded).await.expect("a run");
    });
    let mut seen = world.seen();
    let buffered = sas_domain::messages::Buffered {
        workflow: sas_domain::task::WorkflowRef {
            name: "drone-delivery".into(),
            version: 1,
        },
        submission: sas_domain::submission::Submission::new(
            sas_domain::ids::TaskId::parse("buffered").expect("an id"),
            sas_testkit::delivery_input(),
        ),
        accepted_at: Timestamp(1_800_000_000_000),
    };
    seen.push((
        "scheduler".into(),
        sas_domain::to_json(&buffered.as_message()),
    ));
    // A rate's tick (no test workflow's limit has a rate).
    let tick = SchedulerMessage::Gate {
        gate: "step:one-delivery-per-customer/create-delivery/c-1".into(),
    };
    seen.push(("scheduler".into(), sas_domain::to_json(&tick)));
    let kinds: std::collections::BTreeSet<String> = seen
        .iter()
        .filter_map(|(_, body)| {
            Some(
                serde_json::from_str::<Value>(body).ok()?["type"]
                    .as_str()?
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "child_ended",
            "deadline",
            "gate",
            "granted",
            "response",
            "run",
            "submit"
        ],
        "a corpus of every kind of message sent"
    );
    seen.into_iter()
        .filter_map(|(queue, body)| Some((queue, serde_json::from_str(&body).ok()?)))
        .collect()
});

#[test]
fn a_message_of_any_shape_near_a_real_one_is_handled_or_refused_as_poison() {
    let strategy = (
        prop::sample::select(MESSAGES.clone()),
        changes(),
        any::<bool>(),
    );
    fuzz(
        "messages near real ones",
        1_000,
        strategy,
        |((queue, message), changes, elsewhere)| {
            let subject = subject();
            let text = changed(message, &changes).to_string();
            // Each to its own consumer, or (`elsewhere`) to the other: a request as an
            // answer, an answer or a run message as a request.
            if (queue == "agent-requests") != elsewhere {
                agent_takes_it_or_refuses_it_as_poison(&subject, &text)?;
            } else {
                let queue = if queue == "agent-requests" {
                    "agent-responses"
                } else {
                    &queue
                };
                let scheduled = subject
                    .runtime
                    .block_on(subject.app.on_scheduler_message(queue, &text));
                let decodes = serde_json::from_str::<SchedulerMessage>(&text).is_ok();
                prop_assert!(
                    decodes || matches!(scheduled, Err(HandleError::Poison(_))),
                    "{queue}: {text} -> {scheduled:?}"
                );
            }
            // The backend still answers.
            prop_assert_eq!(
                subject
                    .call(&Caller::Anyone, "GET", "/tasks", Some("state=Pending"), b"")
                    .status,
                200
            );
            Ok(())
        },
    );
}
