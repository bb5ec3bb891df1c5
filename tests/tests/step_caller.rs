//! The step caller (the agent's actor) against a scripted remote service, on a manual
//! clock: a service's Retry-After is waited for within the step's budget, and past
//! it the agent stays silent; a request in a trace makes its call's and attempts'
//! spans, and each attempt passes its span to the service.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sas_core::clock::Clock;
use sas_core::ports::{Consumer, RemoteCall, RemoteError, RemoteRequest, Spans, Unit};
use sas_core::step_caller::{CallVerdict, StepCaller};
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::messages::{AgentRequest, Method, Operation, Outcome, Payload, SchedulerMessage};
use sas_domain::resilience::BreakerSettings;
use sas_domain::task::spans::FinishedSpan;
use sas_domain::time::Timestamp;
use sas_domain::trace::TraceContext;
use sas_domain::workflow::RetryPolicy;
use sas_testkit::ManualClock;
use sas_testkit::memory::Memory;
use sas_testkit::metrics::{Put, Recorded};
use serde_json::{Value, json};

/// A service that answers from a script, and notes when it was called, in which
/// trace.
struct Scripted {
    answers: Mutex<VecDeque<Result<Value, RemoteError>>>,
    calls: Mutex<Vec<(Timestamp, Option<TraceContext>)>>,
    clock: Arc<ManualClock>,
}

#[async_trait::async_trait]
impl RemoteCall for Scripted {
    async fn call(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        let call = (self.clock.now(), request.trace.clone());
        self.calls.lock().expect("calls").push(call);
        self.answers
            .lock()
            .expect("answers")
            .pop_front()
            .expect("an answer left in the script")
    }
}

/// The spans told, kept.
#[derive(Default)]
struct Kept(Mutex<Vec<FinishedSpan>>);

impl Spans for Kept {
    fn finished(&self, spans: Vec<FinishedSpan>) {
        self.0.lock().expect("spans").extend(spans);
    }
}

const START: Timestamp = Timestamp(1_800_000_000_000);

/// What one request came to.
struct Run {
    verdict: CallVerdict,
    /// When the service was called...
    called_at: Vec<Timestamp>,
    /// ...and in which trace.
    traces: Vec<Option<TraceContext>>,
    /// The response sent...
    outcome: Option<Outcome>,
    /// ...and the trace its message carried.
    answered_in: Option<TraceContext>,
    /// The call's latency, as its metric was put.
    latency: Vec<Put>,
    spans: Vec<FinishedSpan>,
}

/// Runs one request whose budget ends `budget` after the start against `answers`,
/// its message in `trace`.
async fn run(
    answers: Vec<Result<Value, RemoteError>>,
    budget: Duration,
    trace: Option<TraceContext>,
) -> Run {
    let clock = Arc::new(ManualClock::new(START));
    let memory = Arc::new(Memory::new(Arc::clone(&clock) as _));
    let responses = QueueName::parse("responses").expect("name");
    memory.create_queue(&responses, Duration::from_secs(30), None);
    let service = Arc::new(Scripted {
        answers: Mutex::new(answers.into()),
        calls: Mutex::new(Vec::new()),
        clock: Arc::clone(&clock),
    });
    let spans = Arc::new(Kept::default());
    let metrics = Arc::new(Recorded::default());
    let caller = StepCaller::new(
        Arc::clone(&service) as _,
        Arc::clone(&memory) as _,
        clock,
        responses.clone(),
        BreakerSettings::default(),
        7,
    )
    .with_spans(Arc::clone(&spans) as _)
    .with_metrics(Arc::clone(&metrics) as _);
    let request = AgentRequest {
        task_id: TaskId::parse("t-1").expect("id"),
        run: 1,
        step: 0,
        step_name: "schedule-drone".into(),
        attempt: 1,
        operation: Operation::Call,
        agent: "drone".into(),
        method: Method::Post,
        path: "/drones/schedule".into(),
        complete_by: START.plus(budget),
        idempotency_key: "t-1/1/schedule-drone".into(),
        retry: RetryPolicy {
            attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            jitter: false,
            call_timeout: None,
        },
        payload: Payload::of(&json!({})).expect("JSON"),
        sealed_task: Some("opaque to the agent".into()),
        task_created_at: Some(START),
        parts_apart: false,
    };
    let verdict = caller
        .on_request(
            &serde_json::to_string(&request).expect("json"),
            trace.as_ref(),
        )
        .await
        .expect("handled");
    let sent = memory
        .receive(&responses, 10, Duration::ZERO)
        .await
        .expect("receive");
    let outcome = sent.first().map(|delivery| {
        match serde_json::from_str(&delivery.body).expect("a scheduler message") {
            SchedulerMessage::Response(response) => {
                assert_eq!(
                    (response.sealed_task.as_deref(), response.task_created_at),
                    (Some("opaque to the agent"), Some(START)),
                    "the request's sealed task and its task's creation given back"
                );
                response.outcome
            }
            other => panic!("not a response: {other:?}"),
        }
    });
    let answered_in = sent.first().and_then(|delivery| delivery.trace.clone());
    let (called_at, traces) = service.calls.lock().expect("calls").iter().cloned().unzip();
    let spans = spans.0.lock().expect("spans").clone();
    Run {
        verdict,
        called_at,
        traces,
        outcome,
        answered_in,
        latency: metrics.of("CallLatency"),
        spans,
    }
}

fn asks_for(wait: Duration) -> Result<Value, RemoteError> {
    Err(RemoteError::RetryAfter {
        reason: "service 'drone' answered 429 Too Many Requests".into(),
        wait,
    })
}

#[tokio::test]
async fn a_wait_asked_for_is_waited_before_the_next_try_within_the_budget() {
    let Run {
        verdict,
        called_at,
        outcome,
        spans,
        ..
    } = run(
        vec![asks_for(Duration::from_secs(10)), Ok(json!({"drone": 7}))],
        Duration::from_secs(60),
        None,
    )
    .await;
    assert!(spans.is_empty(), "no span of a request in no trace");
    assert_eq!(verdict, CallVerdict::Answered);
    assert_eq!(
        called_at,
        [START, START.plus(Duration::from_secs(10))],
        "tried again after the 10 s asked for, not after the 100 ms backoff"
    );
    assert_eq!(
        outcome,
        Some(Outcome::Succeeded {
            output: json!({"drone": 7})
        })
    );
}

#[tokio::test]
async fn a_wait_past_the_budget_leaves_the_agent_silent_after_one_try() {
    let Run {
        verdict,
        called_at,
        outcome,
        latency,
        ..
    } = run(
        vec![asks_for(Duration::from_secs(120))],
        Duration::from_secs(60),
        None,
    )
    .await;
    assert_eq!(verdict, CallVerdict::Silent);
    assert_eq!(called_at, [START], "no try the budget cannot wait for");
    assert_eq!(outcome, None, "silent: the supervisor takes it from here");
    let [silent] = &latency[..] else {
        panic!("one latency: {latency:?}");
    };
    assert_eq!(
        silent.dimensions,
        [
            ("Service", "drone".to_owned()),
            ("Outcome", "silent".to_owned())
        ]
    );
}

#[tokio::test]
async fn a_traced_request_makes_its_calls_span_and_passes_each_attempts_to_the_service() {
    let step = TraceContext::of_headers(
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        Some("vendor=value"),
    )
    .expect("a valid traceparent");
    let Run {
        verdict,
        traces,
        spans,
        answered_in,
        latency,
        ..
    } = run(
        vec![asks_for(Duration::from_secs(10)), Ok(json!({"drone": 7}))],
        Duration::from_secs(60),
        Some(step.clone()),
    )
    .await;
    assert_eq!(verdict, CallVerdict::Answered);
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["attempt 1", "attempt 2", "call drone"]);
    let call = &spans[2];
    assert_eq!(
        call.parent,
        Some(step.parent),
        "the call under the step's span"
    );
    assert!(!call.failed);
    assert_eq!(call.end, START.plus(Duration::from_secs(10)));
    for (attempt, sent) in spans[..2].iter().zip(&traces) {
        assert_eq!(attempt.trace_id, step.trace_id);
        assert_eq!(
            attempt.parent,
            Some(call.span_id),
            "the attempt under the call"
        );
        let sent = sent.as_ref().expect("the service told the attempt's span");
        assert_eq!(sent.parent, attempt.span_id);
        assert_eq!(sent.state.as_deref(), Some("vendor=value"));
    }
    let answered_in = answered_in.expect("the answer in the trace");
    assert_eq!(
        (answered_in.trace_id, answered_in.parent),
        (step.trace_id, call.span_id),
        "the answer goes on from the call's span"
    );
    assert!(spans[0].failed, "the first attempt was asked to wait");
    let [answered] = &latency[..] else {
        panic!("one latency: {latency:?}");
    };
    let dimensions = [
        ("Service", "drone".to_owned()),
        ("Outcome", "succeeded".to_owned()),
    ];
    assert_eq!(answered.dimensions, dimensions);
    assert_eq!(
        (answered.value, answered.unit),
        (10_000, Unit::Milliseconds),
        "from the request to the answer, the wait asked for included"
    );
    assert!(!spans[1].failed);
}
