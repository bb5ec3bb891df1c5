//! Property-based fuzzing of what comes from outside: HTTP requests and queue
//! messages. Nothing panics; every bad request is a 4xx with a JSON error naming
//! the problem; every undecodable message is refused as poison, so that its queue
//! moves it to the dead-letter queue.

use std::sync::Arc;

use proptest::prelude::*;
use sas_api::{self as api, ApiRequest, Caller};
use sas_core::app::{App, HandleError, Ports, QueueNames};
use sas_core::ports::{RemoteCall, RemoteError, RemoteRequest};
use sas_core::step_caller::{CallError, StepCaller};
use sas_domain::ids::{Owner, QueueName};
use sas_domain::resilience::BreakerSettings;
use sas_domain::time::Timestamp;
use sas_domain::workflow::Registry;
use sas_testkit::ManualClock;
use sas_testkit::memory::Memory;
use serde_json::{Value, json};

struct Unreachable;

#[async_trait::async_trait]
impl RemoteCall for Unreachable {
    async fn call(&self, _: &RemoteRequest) -> Result<Value, RemoteError> {
        Err(RemoteError::Transient(
            "no remote services in this test".into(),
        ))
    }
}

struct Subject {
    runtime: tokio::runtime::Runtime,
    app: App,
    step_caller: StepCaller,
}

fn subject() -> Subject {
    let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
    let memory = Arc::new(Memory::new(Arc::clone(&clock) as _));
    let name = |n: &str| QueueName::parse(n).expect("name");
    let names = QueueNames {
        scheduler: name("s"),
        agent_requests: name("q"),
        agent_responses: name("r"),
    };
    let ports = Ports::of(&memory, Arc::clone(&clock) as _);
    let workflows = Arc::new(Registry::built_in());
    let step_caller = StepCaller::new(
        Arc::new(Unreachable),
        memory,
        clock,
        names.agent_responses.clone(),
        BreakerSettings::default(),
        1,
    );
    Subject {
        runtime: tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime"),
        app: App::new(ports, workflows, names, "fuzz".into()),
        step_caller,
    }
}

/// JSON of any shape, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,10}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Submission bodies near the valid one: fields dropped, replaced or added.
fn submission_body() -> impl Strategy<Value = Vec<u8>> {
    let valid = json!({
        "workflow": "drone-delivery",
        "input": {"customer_id": "c", "pickup": "a", "dropoff": "b", "weight_kg": 1},
        "notify": "q1",
    });
    (
        any_json(),
        "[a-z_.]{1,20}",
        any::<u8>(),
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(move |(value, field, how, bytes)| {
            let mut body = valid.clone();
            match how % 5 {
                0 => body[field.as_str()] = value,
                1 => body["input"][field.as_str()] = value,
                2 => {
                    body.as_object_mut()
                        .expect("object")
                        .remove(field.split('.').next().unwrap_or_default());
                }
                3 => return bytes,
                _ => body = value,
            }
            body.to_string().into_bytes()
        })
}

/// A submission's body, or a batch of them (`POST /tasks/batch`), of 0 to 30.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let batch = prop::collection::vec(submission_body(), 0..30).prop_map(|bodies| {
        let tasks: Vec<serde_json::Value> = bodies
            .iter()
            .map(|b| serde_json::from_slice(b).unwrap_or(json!(String::from_utf8_lossy(b))))
            .collect();
        json!({ "tasks": tasks }).to_string().into_bytes()
    });
    prop_oneof![submission_body(), batch]
}

/// Anyone, an unauthenticated caller, or a client or operator named by any text.
fn caller() -> impl Strategy<Value = Caller> {
    prop_oneof![
        Just(Caller::Anyone),
        Just(Caller::Unauthenticated),
        (".{0,20}", any::<bool>()).prop_map(|(name, operator)| {
            Owner::new(name).map_or(Caller::Unauthenticated, |owner| Caller::Known {
                owner,
                operator,
            })
        }),
    ]
}

fn request() -> impl Strategy<Value = (String, String, Option<String>, Vec<u8>)> {
    let method = prop_oneof![
        Just("GET".to_owned()),
        Just("POST".to_owned()),
        Just("PUT".to_owned()),
        Just("DELETE".to_owned()),
        "[A-Z]{1,7}",
    ];
    let segment = prop_oneof![
        Just("tasks".to_owned()),
        Just("batch".to_owned()),
        Just("resubmit".to_owned()),
        Just("workflows".to_owned()),
        Just("operator".to_owned()),
        Just("me".to_owned()),
        "[a-zA-Z0-9_.%-]{0,70}",
        ".{0,8}"
    ];
    let path = prop_oneof![
        3 => prop::collection::vec(segment, 0..5).prop_map(|s| format!("/{}", s.join("/"))),
        1 => Just("/tasks/batch".to_owned()),
    ];
    let query = prop::option::of(prop_oneof![
        "state=[A-Za-z]{0,12}",
        "limit=[0-9-]{0,4}",
        "after=.{0,20}",
        ".{0,30}"
    ]);
    (method, path, query, body())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn no_request_panics_and_every_refusal_is_a_named_4xx((method, path, query, body) in request(), caller in caller()) {
        let subject = subject();
        let response = subject.runtime.block_on(api::handle(&subject.app, ApiRequest {
            caller: &caller, method: &method, path: &path, query: query.as_deref(), body: &body,
        }));
        prop_assert!(response.status < 500, "{method} {path} answered {}: {}", response.status, response.body);
        if response.status >= 400 {
            let body: serde_json::Value = serde_json::from_str(&response.body).unwrap_or_default();
            prop_assert!(body["error"]["code"].is_string(), "{}", response.body);
            prop_assert!(!body["error"]["message"].as_str().unwrap_or_default().is_empty(), "{}", response.body);
        }
        if response.status == 202 {
            prop_assert!(response.location.is_some(), "an accepted task has a Location");
        }
        // A batch's results hold to the same rules, each its own.
        let answer: serde_json::Value = serde_json::from_str(&response.body).unwrap_or_default();
        for result in answer["results"].as_array().into_iter().flatten() {
            let status = result["status"].as_u64().unwrap_or_default();
            prop_assert!((202..500).contains(&status), "{}", response.body);
            prop_assert!(status != 202 || result["location"].is_string(), "{}", response.body);
            prop_assert!(status == 202 || result["body"]["error"]["code"].is_string(), "{}", response.body);
        }
    }

    #[test]
    fn every_undecodable_message_is_poison(text in prop_oneof![".{0,200}", any_json().prop_map(|v| v.to_string())]) {
        let subject = subject();
        // On the agents' response queue, the one any agent may write to.
        let scheduled = subject.runtime.block_on(subject.app.on_scheduler_message("r", &text));
        let decoded = serde_json::from_str::<sas_domain::messages::SchedulerMessage>(&text);
        match decoded {
            Err(_) => prop_assert!(matches!(scheduled, Err(HandleError::Poison(_))), "scheduler: {text:?} -> {scheduled:?}"),
            Ok(sas_domain::messages::SchedulerMessage::Response(_)) => {}
            Ok(_) => prop_assert!(matches!(scheduled, Err(HandleError::Refused(_))), "scheduler: {text:?} -> {scheduled:?}"),
        }
        let answered = subject.runtime.block_on(subject.step_caller.on_request(&text));
        let decodes = serde_json::from_str::<sas_domain::messages::AgentRequest>(&text).is_ok();
        prop_assert!(decodes || matches!(answered, Err(CallError::Poison(_))), "agent: {text:?} -> {answered:?}");
    }
}
