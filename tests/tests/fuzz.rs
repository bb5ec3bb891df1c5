//! Fuzzing of everything that comes from outside, with proptest on the stable
//! toolchain (each target a strategy and a property, run by [`run::fuzz`]: a bounded
//! number of cases in the suite, a timed campaign with `SAS_FUZZ_SECONDS`): HTTP
//! requests (bodies, query strings, path segments, timestamps and durations in them),
//! Step Functions' protocol's operations and bodies, raw bytes to the local server, every SQS message body each actor decodes, the
//! services' answers, workflow files and the CEL conditions in them, callback tokens
//! and listing cursors. The properties: nothing panics; every refusal is a 4xx with a
//! JSON body naming the problem; every undecodable message is poison, for its queue's
//! dead-letter queue; a task whatever its workflow, input and answers can be shown;
//! the server answers after any request.
//!
//! This file holds the subject every target drives and the rules its answers keep; the
//! targets, each a module: [`http`], [`stepfunctions`], [`messages`], [`workflows`] and
//! [`tokens`]; how a target runs: [`run`]; a task run to its end in memory: [`drive`].

#[path = "fuzz/drive.rs"]
mod drive;
#[path = "fuzz/http.rs"]
mod http;
#[path = "fuzz/messages.rs"]
mod messages;
#[path = "fuzz/run.rs"]
mod run;
#[path = "fuzz/stepfunctions.rs"]
mod stepfunctions;
#[path = "fuzz/tokens.rs"]
mod tokens;
#[path = "fuzz/workflows.rs"]
mod workflows;

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sas_api::{self as api, ApiRequest, Caller};
use sas_core::app::{App, Ports, QueueNames};
use sas_core::ports::{RemoteCall, RemoteError, RemoteRequest};
use sas_core::step_caller::StepCaller;
use sas_domain::ids::QueueName;
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

/// An API, a scheduler and an agent over an empty in-memory backend.
struct Subject {
    runtime: tokio::runtime::Runtime,
    memory: Arc<Memory>,
    app: App,
    step_caller: StepCaller,
}

fn subject() -> Subject {
    let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
    let memory = Arc::new(Memory::new(Arc::clone(&clock) as _));
    let name = |n: &str| QueueName::parse(n).expect("name");
    let names = QueueNames {
        scheduler: name("scheduler"),
        agent_requests: name("agent-requests"),
        agent_responses: name("agent-responses"),
    };
    let ports = Ports::of(&memory, Arc::clone(&clock) as _);
    let workflows = Arc::new(Registry::built_in());
    let step_caller = StepCaller::new(
        Arc::new(Unreachable),
        Arc::clone(&memory) as _,
        clock,
        names.agent_responses.clone(),
        BreakerSettings::default(),
        1,
    );
    Subject {
        runtime: runtime(),
        memory,
        app: App::new(ports, workflows, names, "fuzz".into()),
        step_caller,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

impl Subject {
    fn call(
        &self,
        caller: &Caller,
        method: &str,
        path: &str,
        query: Option<&str>,
        body: &[u8],
    ) -> api::ApiResponse {
        let request = ApiRequest {
            caller,
            method,
            path,
            query,
            body,
            target: None,
            trace: api::TraceHeaders::default(),
        };
        self.runtime.block_on(api::handle(&self.app, request))
    }
}

/// The answer's rules: under 500; a refusal's body names its code and the problem;
/// an accepted task has a Location; a batch's results each hold to the same.
fn answered_by_the_rules(what: &str, response: &api::ApiResponse) -> Result<(), TestCaseError> {
    prop_assert!(
        response.status < 500,
        "{what} answered {}: {}",
        response.status,
        response.body
    );
    let answer: Value = serde_json::from_str(&response.body).unwrap_or_default();
    if response.status >= 400 {
        prop_assert!(
            answer["error"]["code"].is_string(),
            "{what}: {}",
            response.body
        );
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        prop_assert!(!message.is_empty(), "{what}: {}", response.body);
    }
    if response.status == 202 {
        prop_assert!(
            response.location.is_some(),
            "{what}: an accepted task has a Location"
        );
    }
    for result in answer["results"].as_array().into_iter().flatten() {
        let status = result["status"].as_u64().unwrap_or_default();
        prop_assert!((202..500).contains(&status), "{what}: {}", response.body);
        prop_assert!(
            status != 202 || result["location"].is_string(),
            "{what}: {}",
            response.body
        );
        prop_assert!(
            status == 202 || result["body"]["error"]["code"].is_string(),
            "{what}: {}",
            response.body
        );
    }
    Ok(())
}

/// The workflow files of `dir` (under this crate's), by name, and their text.
fn workflow_files(dir: &str) -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    std::fs::read_dir(dir)
        .expect("a workflows directory")
        .map(|entry| {
            let path = entry.expect("an entry").path();
            let text = std::fs::read_to_string(&path).expect("a file");
            (path.display().to_string(), text)
        })
        .collect()
}

/// The workflow files the tests run, beside the built-in ones.
fn test_workflows() -> Vec<(String, String)> {
    workflow_files("workflows")
}

/// A valid input of each built-in workflow.
fn inputs() -> Vec<(String, Value)> {
    let delivery = sas_testkit::delivery_input();
    let parcel = json!({ "id": "p-1", "dropoff": "Bondi", "weight_kg": 1.5 });
    vec![
        ("drone-delivery".into(), delivery.clone()),
        ("drone-delivery-parallel".into(), delivery.clone()),
        ("drone-delivery-pickup".into(), delivery),
        (
            "order-processing".into(),
            json!({ "order_id": "o-1", "customer_id": "c-1", "amount": 12.5 }),
        ),
        (
            "refund".into(),
            json!({ "order_id": "o-1", "customer_id": "c-1", "amount": 250 }),
        ),
        (
            "parcel-order".into(),
            json!({ "order_id": "o-1", "customer_id": "c-1", "parcels": [parcel.clone(), parcel] }),
        ),
    ]
}
