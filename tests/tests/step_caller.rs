//! The step caller (the agent's actor) against a scripted remote service, on a manual
//! clock: a service's Retry-After is waited for within the step's budget, and past
//! it the agent stays silent.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sas_core::clock::Clock;
use sas_core::ports::{Consumer, RemoteCall, RemoteError, RemoteRequest};
use sas_core::step_caller::{CallVerdict, StepCaller};
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::messages::{AgentRequest, Method, Operation, Outcome, Payload, SchedulerMessage};
use sas_domain::resilience::BreakerSettings;
use sas_domain::time::Timestamp;
use sas_domain::workflow::RetryPolicy;
use sas_testkit::ManualClock;
use sas_testkit::memory::Memory;
use serde_json::{Value, json};

/// A service that answers from a script, and notes when it was called.
struct Scripted {
    answers: Mutex<VecDeque<Result<Value, RemoteError>>>,
    called_at: Mutex<Vec<Timestamp>>,
    clock: Arc<ManualClock>,
}

#[async_trait::async_trait]
impl RemoteCall for Scripted {
    async fn call(&self, _: &RemoteRequest) -> Result<Value, RemoteError> {
        self.called_at.lock().expect("calls").push(self.clock.now());
        self.answers
            .lock()
            .expect("answers")
            .pop_front()
            .expect("an answer left in the script")
    }
}

const START: Timestamp = Timestamp(1_800_000_000_000);

/// Runs one request whose budget ends `budget` after the start against `answers`;
/// returns what the caller did, when the service was called, and the response sent.
async fn run(
    answers: Vec<Result<Value, RemoteError>>,
    budget: Duration,
) -> (CallVerdict, Vec<Timestamp>, Option<Outcome>) {
    let clock = Arc::new(ManualClock::new(START));
    let memory = Arc::new(Memory::new(Arc::clone(&clock) as _));
    let responses = QueueName::parse("responses").expect("name");
    memory.create_queue(&responses, Duration::from_secs(30), None);
    let service = Arc::new(Scripted {
        answers: Mutex::new(answers.into()),
        called_at: Mutex::new(Vec::new()),
        clock: Arc::clone(&clock),
    });
    let caller = StepCaller::new(
        Arc::clone(&service) as _,
        Arc::clone(&memory) as _,
        clock,
        responses.clone(),
        BreakerSettings::default(),
        7,
    );
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
    };
    let verdict = caller
        .on_request(&serde_json::to_string(&request).expect("json"))
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
    let called_at = service.called_at.lock().expect("calls").clone();
    (verdict, called_at, outcome)
}

fn asks_for(wait: Duration) -> Result<Value, RemoteError> {
    Err(RemoteError::RetryAfter {
        reason: "service 'drone' answered 429 Too Many Requests".into(),
        wait,
    })
}

#[tokio::test]
async fn a_wait_asked_for_is_waited_before_the_next_try_within_the_budget() {
    let (verdict, called_at, outcome) = run(
        vec![asks_for(Duration::from_secs(10)), Ok(json!({"drone": 7}))],
        Duration::from_secs(60),
    )
    .await;
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
    let (verdict, called_at, outcome) = run(
        vec![asks_for(Duration::from_secs(120))],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(verdict, CallVerdict::Silent);
    assert_eq!(called_at, [START], "no try the budget cannot wait for");
    assert_eq!(outcome, None, "silent: the supervisor takes it from here");
}
