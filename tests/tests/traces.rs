//! A task is one trace: `sas-local` run with the standard `OTEL_*` settings exports
//! its spans over OTLP/HTTP (JSON) to a receiver of the test's own, and a drone
//! delivery submitted with a `traceparent` comes out as one trace under the caller's
//! span: the task; its steps under it; each step's agent call under the step, and
//! the call's attempt under the call, whose span the service was sent; a map's
//! children under the map's step; a wait for a callback as its step's span; a lease
//! the supervisor found expired as the end of its operation's span. Over the
//! in-memory backend: a task's notifications and its alert carry its trace; a step
//! that ended is timed (`StepDuration`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use sas_core::app::{App, Ports};
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::messages::{AgentRequest, AgentResponse, Outcome, SchedulerMessage};
use sas_domain::submission::Submission;
use sas_domain::time::Timestamp;
use sas_domain::trace::TraceContext;
use sas_domain::workflow::Registry;
use sas_testkit::ManualClock;
use sas_testkit::metrics::Recorded;
use sas_tests::local::Local;
use sas_tests::otlp::{Receiver, attribute, named, one_tree, the};
use sas_tests::{delivery_input, in_memory, parcel_order};

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// `sas-local` on a data directory of its own, exporting to a receiver of the
/// test's, with the test's workflows beside the built-in ones and a supervisor
/// sweeping every 100 ms.
struct Exporting {
    receiver: Receiver,
    local: Local,
    http: reqwest::Client,
    _data: tempfile::TempDir,
}

impl Exporting {
    async fn start() -> Self {
        let receiver = Receiver::start().await;
        let data = tempfile::tempdir().expect("a data directory");
        let workflows = concat!(env!("CARGO_MANIFEST_DIR"), "/workflows");
        let local = Local::start(
            &sas_tests::function_binary("sas-local"),
            data.path(),
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                ("OTEL_BSP_SCHEDULE_DELAY", "100"),
                ("SAS_WORKFLOWS_DIR", workflows),
                ("SAS_SUPERVISOR_INTERVAL", "100ms"),
            ],
        )
        .expect("sas-local starts");
        Self {
            receiver,
            local,
            http: reqwest::Client::new(),
            _data: data,
        }
    }

    /// Submits `body` as task `id` with `headers`, and waits for its end: the task.
    async fn run(&self, id: &str, body: &Value, headers: &[(&str, &str)]) -> Value {
        let mut put = (self.http)
            .put(format!("http://{}/tasks/{id}?wait=20s", self.local.api))
            .json(body);
        for (name, value) in headers {
            put = put.header(*name, *value);
        }
        let answer = put.send().await.expect("the API answers");
        answer.json().await.expect("a task")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_submitted_in_a_trace_is_one_trace_of_its_task_and_steps() {
    let system = Exporting::start().await;
    let caller = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let delivery = json!({"workflow": "drone-delivery", "input": delivery_input()});
    let task = (system.run("traced-1", &delivery, &[("traceparent", &caller)])).await;
    assert_eq!(task["state"], "Processed", "{task:#}");

    let spans = (system.receiver)
        .spans_when(|spans| {
            let calls = spans
                .iter()
                .filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with("call ")));
            spans.iter().any(|s| s["name"] == "task") && calls.count() == 5
        })
        .await;
    for span in &spans {
        assert_eq!(span["traceId"], CALLER_TRACE, "one trace: {span:#}");
    }
    let [run] = named(&spans, "task")[..] else {
        panic!("one task span: {spans:#?}");
    };
    assert_eq!(run["parentSpanId"], CALLER_SPAN, "under the caller's span");
    assert_eq!(attribute(run, "sas.task.id"), Some(&json!("traced-1")));
    assert_eq!(
        attribute(run, "sas.workflow.name"),
        Some(&json!("drone-delivery"))
    );
    assert_eq!(attribute(run, "sas.task.state"), Some(&json!("Processed")));
    let events: Vec<&Value> = run["events"].as_array().expect("events").iter().collect();
    assert!(
        events.iter().any(|e| e["name"] == "state Processed"),
        "{events:#?}"
    );
    let steps = [
        ("check-account", "account"),
        ("create-package", "package"),
        ("check-transport", "transport"),
        ("schedule-drone", "drone"),
        ("create-delivery", "delivery"),
    ];
    for (step, agent) in steps {
        let [span] = named(&spans, &format!("step {step}"))[..] else {
            panic!("one span of {step}: {spans:#?}");
        };
        let [call] = named(&spans, &format!("call {agent}"))[..] else {
            panic!("one call of {agent}: {spans:#?}");
        };
        assert_eq!(
            call["parentSpanId"], span["spanId"],
            "{agent}'s call under {step}"
        );
        assert_eq!(
            attribute(call, "sas.call.outcome"),
            Some(&json!("succeeded"))
        );
        let attempt = spans
            .iter()
            .find(|s| s["name"] == "attempt 1" && s["parentSpanId"] == call["spanId"])
            .unwrap_or_else(|| panic!("{agent}'s attempt: {spans:#?}"));
        // The mock service answers with the traceparent it was sent.
        let output = task["steps"]
            .as_array()
            .and_then(|all| all.iter().find(|s| s["name"] == step))
            .map(|s| &s["output"])
            .unwrap_or_else(|| panic!("{step}'s output: {task:#}"));
        let sent = format!(
            "00-{CALLER_TRACE}-{}-01",
            attempt["spanId"].as_str().expect("an id")
        );
        assert_eq!(
            output["traceparent"], sent,
            "{agent} was sent its attempt's span"
        );
        assert_eq!(span["parentSpanId"], run["spanId"], "{step} under the task");
        assert_eq!(attribute(span, "sas.step.name"), Some(&json!(step)));
        assert_eq!(attribute(span, "sas.step.state"), Some(&json!("Processed")));
        let start: u64 = (span["startTimeUnixNano"].as_str())
            .and_then(|t| t.parse().ok())
            .expect("a start");
        let end: u64 = (span["endTimeUnixNano"].as_str())
            .and_then(|t| t.parse().ok())
            .expect("an end");
        assert!(start <= end, "{span:#}");
    }
    system.local.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_of_ten_children_is_one_trace_under_its_step() {
    let system = Exporting::start().await;
    let task = system
        .run("parcels-1", &parcel_order("parcels-1", 10), &[])
        .await;
    assert_eq!(task["state"], "Processed", "{task:#}");
    let spans = (system.receiver)
        .spans_when(|spans| spans.iter().filter(|s| s["name"] == "task").count() == 11)
        .await;
    let trace = &spans[0]["traceId"];
    assert!(spans.iter().all(|s| &s["traceId"] == trace), "one trace");
    let parent = spans
        .iter()
        .find(|s| s["name"] == "task" && attribute(s, "sas.task.id") == Some(&json!("parcels-1")))
        .expect("the parent's task span");
    assert_eq!(
        parent
            .get("parentSpanId")
            .and_then(Value::as_str)
            .unwrap_or(""),
        "",
        "a root"
    );
    let [map] = named(&spans, "step deliver-each")[..] else {
        panic!("one span of the map's step: {spans:#?}");
    };
    assert_eq!(map["parentSpanId"], parent["spanId"]);
    let children: Vec<&Value> = named(&spans, "task")
        .into_iter()
        .filter(|s| s["spanId"] != parent["spanId"])
        .collect();
    assert_eq!(children.len(), 10);
    for child in children {
        assert_eq!(
            child["parentSpanId"], map["spanId"],
            "a child under the map: {child:#}"
        );
    }
    system.local.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_a_callback_is_its_steps_span_from_its_start_to_the_callback() {
    let system = Exporting::start().await;
    let (http, local) = (&system.http, &system.local);
    let refund = json!({ "workflow": "refund",
        "input": { "order_id": "o-1", "customer_id": "c-1", "amount": 250.0 } });
    let url = format!("http://{}/tasks/refund-1", local.api);
    let put = http
        .put(&url)
        .json(&refund)
        .send()
        .await
        .expect("the API answers");
    assert!(
        put.status().is_success(),
        "{}",
        put.text().await.unwrap_or_default()
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let token = loop {
        let task: Value = http
            .get(&url)
            .send()
            .await
            .expect("a task")
            .json()
            .await
            .expect("json");
        let approve = task["steps"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == "approve"));
        if let Some(token) = approve.and_then(|s| s["waiting"]["token"].as_str()) {
            break token.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "never waited for its callback: {task:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let called_back = http
        .post(format!("http://{}/callbacks/{token}", local.api))
        .json(&json!({"output": {"approved_by": "ops"}}))
        .send()
        .await
        .expect("the API answers");
    assert!(
        called_back.status().is_success(),
        "{}",
        called_back.text().await.unwrap_or_default()
    );
    let spans = (system.receiver)
        .spans_when(|spans| spans.iter().any(|s| s["name"] == "task"))
        .await;
    assert!(one_tree(&spans), "one trace, one tree: {spans:#?}");
    let run = the(&spans, "task");
    assert_eq!(attribute(run, "sas.task.state"), Some(&json!("Processed")));
    let approve = the(&spans, "step approve");
    assert_eq!(approve["parentSpanId"], run["spanId"]);
    let nanos = |span: &Value, at: &str| -> u64 {
        span[at]
            .as_str()
            .and_then(|t| t.parse().ok())
            .expect("a time")
    };
    assert!(
        nanos(approve, "endTimeUnixNano") - nanos(approve, "startTimeUnixNano") >= 200_000_000,
        "the wait, from its start to the callback: {approve:#}"
    );
    for step in ["check-order", "refund-payment", "notify-customer"] {
        assert_eq!(
            the(&spans, &format!("step {step}"))["parentSpanId"],
            run["spanId"]
        );
    }
    system.local.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_the_supervisor_found_expired_ends_its_operations_span_in_the_trace() {
    let system = Exporting::start().await;
    // The drone's service takes the call, then answers past the step's 500 ms.
    let hang = (system.http)
        .put(format!("http://{}/faults/drone", system.local.mock))
        .body(json!({"hang_ms": 3000, "times": 1}).to_string())
        .send()
        .await
        .expect("the mock answers");
    assert!(hang.status().is_success());
    let quick = json!({"workflow": "drone-delivery-quick", "input": delivery_input()});
    let task = system.run("hung-1", &quick, &[]).await;
    assert_eq!(task["state"], "Processed", "{task:#}");
    assert_eq!(
        task["failure_count"], 1,
        "retried once by the supervisor: {task:#}"
    );
    let spans = (system.receiver)
        .spans_when(|spans| {
            spans.iter().any(|s| s["name"] == "task") && named(spans, "call drone").len() == 2
        })
        .await;
    assert!(one_tree(&spans), "one trace, one tree: {spans:#?}");
    let run = the(&spans, "task");
    let recover = the(&spans, "recover schedule-drone");
    let drone_steps = named(&spans, "step schedule-drone");
    let [expired] = drone_steps
        .iter()
        .filter(|s| attribute(s, "sas.step.state") == Some(&json!("Expired")))
        .collect::<Vec<_>>()[..]
    else {
        panic!("the operation that expired: {drone_steps:#?}");
    };
    assert_eq!(expired["parentSpanId"], run["spanId"]);
    assert_eq!(
        recover["parentSpanId"], expired["spanId"],
        "the finding under it"
    );
    let calls = named(&spans, "call drone");
    let silent = calls
        .iter()
        .find(|c| attribute(c, "sas.call.outcome") == Some(&json!("silent")))
        .unwrap_or_else(|| panic!("the hung call: {calls:#?}"));
    assert_eq!(
        silent["parentSpanId"], expired["spanId"],
        "the hung call under it"
    );
    let retried = drone_steps
        .iter()
        .find(|s| attribute(s, "sas.step.state") == Some(&json!("Processed")))
        .unwrap_or_else(|| panic!("the retry: {drone_steps:#?}"));
    assert_ne!(retried["spanId"], expired["spanId"]);
    assert!(calls.iter().any(|c| c["parentSpanId"] == retried["spanId"]));
    system.local.stop();
}

#[tokio::test]
async fn a_refused_tasks_notifications_and_alert_carry_its_trace_and_its_step_is_timed() {
    let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
    let (memory, names) = in_memory(&clock, None);
    let notify = QueueName::parse("updates").expect("name");
    memory.create_queue(&notify, Duration::from_secs(30), None);
    let metrics = Arc::new(Recorded::default());
    let ports = Ports {
        metrics: Arc::clone(&metrics) as _,
        ..Ports::of(&memory, Arc::clone(&clock) as _)
    };
    let app = App::new(
        ports,
        Arc::new(Registry::built_in()),
        names.clone(),
        "all".into(),
    );
    let caller = TraceContext::of_headers(
        Some(&format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")),
        Some("vendor=1"),
    );
    let id = TaskId::parse("refused-1").expect("id");
    let submission = Submission {
        trace: caller,
        notify: Some(notify.clone()),
        ..Submission::new(id.clone(), delivery_input())
    };
    app.submit("drone-delivery", submission)
        .await
        .expect("submitted");
    let run = serde_json::to_string(&SchedulerMessage::Run {
        task_id: id.clone(),
    })
    .expect("json");
    app.on_scheduler_message("scheduler", &run)
        .await
        .expect("claimed");
    clock.advance(Duration::from_millis(250));
    // Its first step refused for good: the task ends in Error, and is alerted.
    let requests = memory.messages(&names.agent_requests);
    let request: AgentRequest = serde_json::from_str(&requests[0].body).expect("a request");
    let refused = AgentResponse::answering(
        request,
        Outcome::Failed {
            error: "no such account".into(),
        },
    );
    let response = serde_json::to_string(&SchedulerMessage::Response(refused)).expect("json");
    app.on_scheduler_message("agent-responses", &response)
        .await
        .expect("recorded");
    let task = app.task(&id).await.expect("read").expect("there");
    assert_eq!(task.state.as_str(), "Error");
    let run_trace = task.run_trace();
    assert_eq!(run_trace.trace_id.to_string(), CALLER_TRACE);
    let notifications = memory.messages(&notify);
    assert!(notifications.len() >= 2, "{notifications:?}");
    for notification in &notifications {
        assert_eq!(
            notification.trace.as_ref(),
            Some(&run_trace),
            "{notification:?}"
        );
    }
    let [step] = &metrics.of("StepDuration")[..] else {
        panic!("one step ended: {:?}", metrics.of("StepDuration"));
    };
    let dimensions = [
        ("Workflow", "drone-delivery".to_owned()),
        ("Step", "check-account".to_owned()),
        ("Outcome", "Error".to_owned()),
    ];
    assert_eq!(step.dimensions, dimensions);
    assert_eq!(step.value, 250, "from the request to the answer, in ms");
    let [alert] = &memory.alerts()[..] else {
        panic!("one alert: {:?}", memory.alerts());
    };
    assert_eq!(
        alert.trace.as_ref(),
        Some(&run_trace),
        "the alert names its trace"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_machines_pure_states_are_spans_of_their_visits() {
    let system = Exporting::start().await;
    for (id, input) in [("greeted", json!({"name": "Ada"})), ("nameless", json!({}))] {
        let greet = json!({"workflow": "greet", "input": input});
        let task = system.run(id, &greet, &[]).await;
        assert!(task["status"].is_string(), "{task:#}");
    }
    let spans = (system.receiver)
        .spans_when(|spans| named(spans, "task").len() == 2)
        .await;
    let of = |id: &str| -> Vec<Value> {
        let trace = &named(&spans, "task")
            .into_iter()
            .find(|s| attribute(s, "sas.task.id") == Some(&json!(id)))
            .unwrap_or_else(|| panic!("{id}'s task span: {spans:#?}"))["traceId"];
        spans
            .iter()
            .filter(|s| &s["traceId"] == trace)
            .cloned()
            .collect()
    };
    let greeted = of("greeted");
    assert!(one_tree(&greeted), "{greeted:#?}");
    let run = the(&greeted, "task");
    for state in ["Named?", "Greet", "Shout"] {
        let visit = the(&greeted, &format!("state {state}"));
        assert_eq!(
            visit["parentSpanId"], run["spanId"],
            "{state} under the task"
        );
        assert_eq!(attribute(visit, "sas.state.name"), Some(&json!(state)));
    }
    let nameless = of("nameless");
    assert!(one_tree(&nameless), "{nameless:#?}");
    let failed = the(&nameless, "state NoName");
    assert_eq!(attribute(failed, "sas.state.type"), Some(&json!("Fail")));
    assert_eq!(failed["status"]["code"], 2, "an error's status: {failed:#}");
    assert!(named(&nameless, "state Greet").is_empty());
    system.local.stop();
}
