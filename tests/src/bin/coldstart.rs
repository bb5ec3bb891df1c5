//! Cold starts, measured against a local Lambda Runtime API: each function's
//! `bootstrap` is started with `AWS_LAMBDA_RUNTIME_API` pointing here, and the time
//! from its start to the answer of its first event is printed, beside its size, and
//! beside a hello-world function built the same way. The functions' configuration
//! points at a moto server started here (the submission function stores the
//! workflow definitions at start-up).
//!
//! ```text
//! cargo build --release -p sas-submission -p sas-scheduler -p sas-agent -p sas-supervisor -p sas-tests --bins
//! target/release/coldstart [--runs 10]
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use sas_tests::aws::{Moto, QueuePolicy, Stack};
use serde_json::{Value, json};
use tokio::sync::{Mutex, mpsc};

/// A Runtime API serving one event, and telling when the function asked for it (the
/// end of its initialization) and when its answer came.
#[derive(Clone)]
struct Runtime {
    event: Arc<Value>,
    answered: mpsc::UnboundedSender<Instant>,
    served: Arc<Mutex<Option<Instant>>>,
}

async fn next(State(runtime): State<Runtime>) -> (HeaderMap, String) {
    let first = {
        let mut served = runtime.served.lock().await;
        let first = served.is_none();
        served.get_or_insert_with(Instant::now);
        first
    };
    if !first {
        // One event per process: the next request waits until the process is killed.
        std::future::pending::<()>().await;
    }
    let mut headers = HeaderMap::new();
    headers.insert(
        "lambda-runtime-aws-request-id",
        "cold-1".parse().expect("header"),
    );
    headers.insert(
        "lambda-runtime-deadline-ms",
        "9999999999999".parse().expect("header"),
    );
    headers.insert(
        "lambda-runtime-invoked-function-arn",
        "arn:aws:lambda:eu-west-1:123456789012:function:f"
            .parse()
            .expect("header"),
    );
    (headers, runtime.event.to_string())
}

async fn answer(State(runtime): State<Runtime>) -> &'static str {
    let _ = runtime.answered.send(Instant::now());
    "{}"
}

/// Starts `binary` against a fresh Runtime API with `event`; the time to its first
/// request for an event (its initialization), and to its answer.
async fn cold_start(
    binary: &PathBuf,
    environment: &HashMap<String, String>,
    event: &Value,
) -> (Duration, Duration) {
    let (answered, mut answers) = mpsc::unbounded_channel();
    let served = Arc::new(Mutex::new(None));
    let runtime = Runtime {
        event: Arc::new(event.clone()),
        answered,
        served: Arc::clone(&served),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("port");
    let address = listener.local_addr().expect("address");
    let router = axum::Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next))
        .route("/2018-06-01/runtime/invocation/{id}/response", post(answer))
        .route("/2018-06-01/runtime/invocation/{id}/error", post(answer))
        .route("/2018-06-01/runtime/init/error", post(answer))
        .with_state(runtime);
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let started = Instant::now();
    let mut child = Command::new(binary)
        .envs(environment)
        .env("AWS_LAMBDA_RUNTIME_API", address.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", "cold")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "cold")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "cold")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    let done = tokio::time::timeout(Duration::from_secs(30), answers.recv())
        .await
        .expect("an answer within 30 s")
        .expect("answer");
    let _ = child.kill();
    let _ = child.wait();
    server.abort();
    let ready = served.lock().await.unwrap_or(done);
    (ready - started, done - started)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(10);
    let directory = std::env::current_exe()
        .expect("path")
        .parent()
        .expect("directory")
        .to_path_buf();
    let stack = Stack::on(
        Moto::start(),
        "http://127.0.0.1:9",
        QueuePolicy {
            visibility_seconds: 30,
            max_receive_count: 5,
        },
        0,
    )
    .await;
    let config = &stack.config;
    let mut environment: HashMap<String, String> = [
        ("TABLE_NAME", config.table.table.clone()),
        ("SCHEDULER_QUEUE_URL", config.scheduler_queue_url.clone()),
        (
            "AGENT_REQUEST_QUEUE_URL",
            config.agent_request_queue_url.clone(),
        ),
        (
            "AGENT_RESPONSE_QUEUE_URL",
            config.agent_response_queue_url.clone(),
        ),
        ("ALERT_TOPIC_ARN", config.alert_topic_arn.clone()),
        ("AWS_ENDPOINT_URL", stack.moto.endpoint.clone()),
        ("AWS_REGION", "eu-west-1".into()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    environment.insert("AWS_EC2_METADATA_DISABLED".into(), "true".into());
    let api = sas_tests::aws::fixture("apigw-v2-request.json");
    let mut read = api.clone();
    read["rawPath"] = json!("/tasks/none");
    read["requestContext"]["http"]["method"] = json!("GET");
    let empty_batch = json!({ "Records": [] });
    let scheduled = sas_tests::aws::fixture("eventbridge-scheduled.json");
    let functions: [(&str, Value); 5] = [
        ("hello_lambda", json!({"hello": "world"})),
        ("sas-submission", read),
        ("sas-scheduler", empty_batch.clone()),
        ("sas-agent", empty_batch),
        ("sas-supervisor", scheduled),
    ];
    println!(
        "cold start, median of {runs}, on this machine (x86_64 release builds): initialization (process start to"
    );
    println!(
        "its first request for an event), and process start to the first event answered (the event's own work included)"
    );
    let mut hello = (Duration::ZERO, Duration::ZERO);
    for (name, event) in functions {
        let binary = directory.join(name);
        let size = std::fs::metadata(&binary)
            .map(|m| m.len())
            .unwrap_or_else(|_| panic!("{} is not built", binary.display()));
        let mut samples = Vec::new();
        for _ in 0..runs {
            samples.push(cold_start(&binary, &environment, &event).await);
        }
        let init = median(samples.iter().map(|s| s.0).collect());
        let first = median(samples.iter().map(|s| s.1).collect());
        if name == "hello_lambda" {
            hello = (init, first);
        }
        #[allow(clippy::cast_precision_loss)]
        let megabytes = size as f64 / 1_048_576.0;
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "  {name:<16} {megabytes:>6.1} MB  init {:>6.2} ms ({:+.0}% of hello-world)  first event answered {:>6.2} ms",
            ms(init),
            (init.as_secs_f64() / hello.0.as_secs_f64() - 1.0) * 100.0,
            ms(first),
        );
    }
}
