//! Fuzzing of everything that comes from outside, with proptest on the stable
//! toolchain (each target a strategy and a property, run by [`run::fuzz`]: a bounded
//! number of cases in the suite, a timed campaign with `SAS_FUZZ_SECONDS`): HTTP
//! requests (bodies, query strings, path segments, timestamps and durations in them),
//! raw bytes to the local server, every SQS message body each actor decodes, the
//! services' answers, workflow files and the CEL conditions in them, callback tokens
//! and listing cursors. The properties: nothing panics; every refusal is a 4xx with a
//! JSON body naming the problem; every undecodable message is poison, for its queue's
//! dead-letter queue; a task whatever its workflow, input and answers can be shown;
//! the server answers after any request.

#[path = "fuzz/drive.rs"]
mod drive;
#[path = "fuzz/run.rs"]
mod run;

use std::sync::{Arc, LazyLock};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sas_api::{self as api, ApiRequest, Caller};
use sas_core::app::{App, HandleError, Ports, QueueNames};
use sas_core::ports::{RemoteCall, RemoteError, RemoteRequest};
use sas_core::step_caller::{CallError, StepCaller};
use sas_domain::ids::{Owner, QueueName};
use sas_domain::messages::{AgentRequest, Outcome, SchedulerMessage};
use sas_domain::resilience::BreakerSettings;
use sas_domain::time::Timestamp;
use sas_domain::workflow::{Registry, Workflow};
use sas_testkit::ManualClock;
use sas_testkit::memory::Memory;
use serde_json::{Value, json};

use drive::World;
use run::{any_json, changed, changes, fuzz};

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

/// Text near an RFC 3339 instant: any date and time, fractions, offsets up to a day
/// either way, the edges of the years it can write, and characters of several bytes.
fn instant() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{4}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9](\\.[0-9]{1,9})?(Z|[+-][0-2][0-9]:[0-5][0-9])",
        "(0000|1969|1970|9999)-(01-01|12-31)T(00:00:00|23:59:59)(Z|[+-](00|23):(00|59))",
        ".{0,3}[€é\u{10FFFF}].{0,8}",
    ]
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
        instant(),
    )
        .prop_map(move |(value, field, how, bytes, instant)| {
            let mut body = valid.clone();
            match how % 6 {
                0 => body[field.as_str()] = value,
                5 => body["start_at"] = Value::from(instant.clone()),
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
        prop::sample::select(
            &[
                "tasks",
                "batch",
                "resubmit",
                "cancel",
                "pause",
                "resume",
                "steps",
                "complete",
                "children",
                "callbacks",
                "heartbeat",
                "workflows",
                "operator",
                "bulk",
                "services",
                "dead-letters",
                "redrive",
                "me",
                "openapi.json",
                "scheduler",
                "ingest",
            ][..]
        )
        .prop_map(str::to_owned),
        "[a-zA-Z0-9_.%~-]{0,70}",
        ".{0,8}"
    ];
    let path = prop_oneof![
        3 => prop::collection::vec(segment, 0..5).prop_map(|s| format!("/{}", s.join("/"))),
        1 => Just("/tasks/batch".to_owned()),
    ];
    let query = prop::option::of(prop_oneof![
        "state=[A-Za-z]{0,12}",
        "limit=[0-9-]{0,4}",
        "after=.{0,40}",
        "wait=[0-9]{0,25}(ns|ms|s|m|h|d|y)?",
        "wait=.{0,12}",
        "step=.{0,12}&after=[0-9-]{0,12}",
        "key=.{0,20}",
        ".{0,30}"
    ]);
    (method, path, query, body())
}

#[test]
fn no_request_panics_and_every_refusal_is_a_named_4xx() {
    let strategy = (request(), caller());
    fuzz(
        "http requests",
        2_000,
        strategy,
        |((method, path, query, body), caller)| {
            let subject = subject();
            let response = subject.call(&caller, &method, &path, query.as_deref(), &body);
            answered_by_the_rules(&format!("{method} {path}"), &response)
        },
    );
}

/// The agent handles `text` when it is a request, and refuses it as poison otherwise.
fn agent_takes_it_or_refuses_it_as_poison(
    subject: &Subject,
    text: &str,
) -> Result<(), TestCaseError> {
    let answered = subject
        .runtime
        .block_on(subject.step_caller.on_request(text));
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

/// What a service may answer: any output, a refusal with any reason, an answer it
/// could not keep.
fn answers() -> impl Strategy<Value = Vec<Outcome>> {
    let outcome = prop_oneof![
        4 => any_json().prop_map(|output| Outcome::Succeeded { output }),
        1 => ".{0,40}".prop_map(|error| Outcome::Failed { error }),
        1 => ".{0,40}".prop_map(|error| Outcome::Unusable { error }),
    ];
    prop::collection::vec(outcome, 1..6)
}

#[test]
fn a_task_runs_to_its_end_and_is_shown_whatever_its_input_and_answers() {
    let strategy = (prop::sample::select(inputs()), changes(), answers());
    fuzz(
        "inputs and answers",
        300,
        strategy,
        |((workflow, input), changes, answers)| {
            let world = World::new(Registry::built_in());
            let ran = runtime().block_on(world.run(&workflow, changed(input, &changes), &answers));
            prop_assert!(ran.is_ok(), "{workflow}: {}", ran.err().unwrap_or_default());
            Ok(())
        },
    );
}

/// The workflow files the project ships and tests with, each under a name of its
/// own, so that one changed is a new workflow beside the built-in ones.
static WORKFLOW_FILES: LazyLock<Vec<Value>> = LazyLock::new(|| {
    let shipped = workflow_files("../shared/domain/workflows");
    (shipped.into_iter().chain(test_workflows()))
        .map(|(_, text)| {
            let mut file: Value = serde_json::from_str(&text).expect("JSON");
            file["name"] = json!("fuzzed");
            file
        })
        .collect()
});

/// Text near a CEL condition over `input` and `results`, and text of any kind.
fn condition() -> impl Strategy<Value = String> {
    let atom = prop::sample::select(
        &[
            "input.weight_kg",
            "input.customer_id",
            "results['check-account'].tier",
            "results.x",
            "input.parcels.size()",
            "1",
            "-9223372036854775808",
            "9223372036854775807",
            "1.0e308",
            "'gold'",
            "b'\\xff'",
            "true",
            "null",
            "[1, 2]",
            "{'a': 1}",
            "input.missing",
            "input.items.exists(i, i > 1)",
            "timestamp('2026-01-01T00:00:00Z')",
            "duration('1h')",
            "int('9999999999999999999')",
            "double(input.weight_kg)",
            "string(1)",
            "size(input)",
        ][..],
    );
    let operator = prop::sample::select(
        &[
            " == ", " != ", " < ", " > ", " + ", " - ", " * ", " / ", " % ", " && ", " || ",
            " in ", ".", "[", "(",
        ][..],
    );
    prop_oneof![
        3 => prop::collection::vec((atom, operator), 1..6).prop_map(|parts| {
            let mut text: String = parts.iter().map(|(a, o)| format!("{a}{o}")).collect();
            text.push_str(parts[0].0);
            text
        }),
        1 => ".{0,40}",
        1 => (1_usize..400).prop_map(|depth| format!("{}1{}", "(".repeat(depth), ")".repeat(depth))),
        1 => (1_usize..400).prop_map(|depth| format!("{}true", "!".repeat(depth))),
        1 => (1_usize..200).prop_map(|depth| format!("{}1{}", "[".repeat(depth), "]".repeat(depth))),
    ]
}

/// The changed files that loaded, and ran.
static LOADED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[test]
fn a_workflow_file_of_any_shape_is_refused_or_loaded_and_runs() {
    let file = (
        prop::sample::select(WORKFLOW_FILES.clone()),
        // Unchanged, a file tries its condition alone.
        prop_oneof![Just(Vec::new()), changes()],
        prop::option::of(condition()),
    );
    let input = prop_oneof![
        prop::sample::select(inputs()).prop_map(|(_, input)| input),
        any_json()
    ];
    let strategy = (file, input, answers());
    fuzz(
        "workflow files and conditions",
        300,
        strategy,
        |((file, changes, when), input, answers)| {
            let mut file = changed(file, &changes);
            if let Some(when) = when
                && let Some(step) = file
                    .get_mut("steps")
                    .and_then(|steps| steps.get_mut(1))
                    .and_then(Value::as_object_mut)
            {
                step.insert("when".into(), Value::from(when));
            }
            let text = file.to_string();
            if Workflow::parse("fuzzed.json", &text).is_err() {
                return Ok(());
            }
            let Ok(registry) = Registry::with_files([("fuzzed.json".to_owned(), text)]) else {
                return Ok(());
            };
            LOADED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let world = World::new(registry);
            let name = file["name"].as_str().unwrap_or_default().to_owned();
            let ran = runtime().block_on(world.run(&name, input, &answers));
            prop_assert!(ran.is_ok(), "{file}: {}", ran.err().unwrap_or_default());
            Ok(())
        },
    );
    let loaded = LOADED.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("fuzz workflow files and conditions: {loaded} loaded and ran");
    assert!(
        loaded > 0,
        "no changed file loaded: the target only tries the parser"
    );
}

/// A subject where alice has three tasks waiting for a person's approval, with a
/// genuine callback token of one and the cursor of her listing's first page.
fn issued() -> (Subject, String, String) {
    let subject = subject();
    for id in ["a", "b", "c"] {
        let body = json!({ "workflow": "refund", "input": { "order_id": "o-1", "customer_id": "c-1", "amount": 500 } });
        let answer = subject.call(
            &alice(),
            "PUT",
            &format!("/tasks/{id}"),
            None,
            body.to_string().as_bytes(),
        );
        assert_eq!(answer.status, 202, "{}", answer.body);
    }
    let listed = subject.call(
        &alice(),
        "GET",
        "/tasks",
        Some("state=Pending&limit=1"),
        b"",
    );
    let listed: Value = serde_json::from_str(&listed.body).expect("a page");
    let cursor = listed["next"].as_str().expect("a cursor").to_owned();
    let task = subject.memory.tasks().pop().expect("a task");
    let token = sas_domain::callback::Token::issue(&task, 1, false).expect("a token");
    (subject, token, cursor)
}

fn alice() -> Caller {
    Caller::Known {
        owner: Owner::new("alice").expect("owner"),
        operator: false,
    }
}

/// Changes to a text: characters replaced, cut or added (each at a place taken modulo
/// its length), or another text altogether.
#[derive(Debug, Clone)]
enum Edits {
    Characters(Vec<(usize, char, u8)>),
    Instead(String),
}

fn edits() -> impl Strategy<Value = Edits> {
    prop_oneof![
        4 => prop::collection::vec((any::<usize>(), any::<char>(), 0_u8..3), 1..4).prop_map(Edits::Characters),
        1 => ".{0,120}".prop_map(Edits::Instead),
    ]
}

fn edited(real: &str, edits: &Edits) -> String {
    let edits = match edits {
        Edits::Instead(text) => return text.clone(),
        Edits::Characters(edits) => edits,
    };
    let mut chars: Vec<char> = real.chars().collect();
    for &(at, with, how) in edits {
        let at = at % (chars.len() + 1);
        match how {
            0 if at < chars.len() => chars[at] = with,
            1 if at < chars.len() => {
                chars.remove(at);
            }
            _ => chars.insert(at, with),
        }
    }
    chars.into_iter().collect()
}

fn encoded(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[test]
fn a_callback_token_not_of_a_tokens_shape_is_refused_without_a_read() {
    let strategy = (edits(), any_json(), any::<bool>());
    fuzz(
        "callback tokens",
        500,
        strategy,
        |(edits, body, heartbeat)| {
            let (subject, token, _) = issued();
            let token = edited(&token, &edits);
            // Reads fail from now on: a request that reads is answered 503, one that
            // does not 404.
            subject.memory.refuse_reads(true);
            let path = format!(
                "/callbacks/{}{}",
                encoded(&token),
                if heartbeat { "/heartbeat" } else { "" }
            );
            let answer = subject.call(
                &Caller::Unauthenticated,
                "POST",
                &path,
                None,
                body.to_string().as_bytes(),
            );
            answered_by_the_rules(&path, &answer)?;
            // A body refused (400) is not read either; no token at all is no
            // callback's route.
            if !token.is_empty() && sas_domain::callback::Token::parse(&token).is_none() {
                prop_assert!(
                    matches!(answer.status, 400 | 404),
                    "{}: {}",
                    path,
                    answer.body
                );
            }
            Ok(())
        },
    );
}

#[test]
fn a_listing_cursor_changed_is_refused_naming_it() {
    fuzz("listing cursors", 500, edits(), |edits| {
        let (subject, _, cursor) = issued();
        let query = format!("state=Pending&after={}", encoded(&edited(&cursor, &edits)));
        let answer = subject.call(&alice(), "GET", "/tasks", Some(&query), b"");
        answered_by_the_rules(&query, &answer)?;
        if answer.status != 200 {
            let body: Value = serde_json::from_str(&answer.body).unwrap_or_default();
            prop_assert_eq!(&body["error"]["field"], "after", "{}", answer.body);
        }
        Ok(())
    });
}

/// An HTTP/1.1 request as bytes: a request line, headers and a body, each near what
/// the API takes or anything, or bytes of any kind.
fn raw_request(host: String) -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        prop::sample::select(&["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD"][..])
            .prop_map(str::to_owned),
        "[A-Za-z]{0,10}"
    ];
    let target = prop_oneof![
        (request(), any::<bool>()).prop_map(|((_, path, query, _), _)| match query {
            Some(query) => format!("{path}?{query}"),
            None => path,
        }),
        "[ -~]{0,60}",
    ];
    let header = prop_oneof![
        Just(format!("Host: {host}")),
        Just("Content-Type: application/json".to_owned()),
        "Content-Length: [0-9]{0,20}",
        "Transfer-Encoding: (chunked|gzip|identity)",
        "(Authorization|Origin|Host|Content-Type|Accept): [ -~]{0,40}",
        "[ -~]{0,40}",
    ];
    let request = (method, target, prop::collection::vec(header, 0..6), body()).prop_map(
        |(method, target, headers, body)| {
            let mut bytes = format!(
                "{method} {target} HTTP/1.1\r\n{}\r\n",
                headers
                    .iter()
                    .map(|h| format!("{h}\r\n"))
                    .collect::<String>()
            )
            .into_bytes();
            bytes.extend(body);
            bytes
        },
    );
    prop_oneof![4 => request, 1 => prop::collection::vec(any::<u8>(), 0..300)]
}

#[test]
fn the_local_server_answers_any_bytes_under_500_and_goes_on() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let harness = runtime.block_on(sas_tests::Harness::start(5));
    let address = harness.running.api;
    // The answer's status line, or nothing when none came within a second (a request
    // still waiting for the rest of its body): the server may keep the connection
    // open, so only the line is read.
    let exchange = |bytes: Vec<u8>| {
        runtime.block_on(async {
            let mut stream = tokio::net::TcpStream::connect(address)
                .await
                .expect("connected");
            let _ = stream.write_all(&bytes).await;
            let mut answer = Vec::new();
            let status_line = async {
                let mut chunk = [0_u8; 1024];
                while !answer.windows(2).any(|w| w == b"\r\n") {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => answer.extend_from_slice(&chunk[..n]),
                    }
                }
            };
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), status_line).await;
            String::from_utf8_lossy(&answer)
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned()
        })
    };
    fuzz(
        "raw HTTP to the local server",
        300,
        raw_request(address.to_string()),
        |bytes| {
            let answer = exchange(bytes.clone());
            let status = answer.split(' ').nth(1).unwrap_or_default();
            prop_assert!(
                !status.starts_with('5'),
                "{}\n-> {answer}",
                String::from_utf8_lossy(&bytes)
            );
            let after = exchange(
                format!("GET /openapi.json HTTP/1.1\r\nHost: {address}\r\n\r\n").into_bytes(),
            );
            prop_assert!(
                after.starts_with("HTTP/1.1 200"),
                "after {}: {after}",
                String::from_utf8_lossy(&bytes)
            );
            Ok(())
        },
    );
}
