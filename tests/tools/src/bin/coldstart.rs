//! Cold starts, measured against a local Lambda Runtime API: each function's
//! `bootstrap` is started with `AWS_LAMBDA_RUNTIME_API` pointing here, and the time
//! from its start to its first request for an event (its initialization) and to the
//! answer of that event is printed, beside its size, and beside a hello-world function
//! built the same way. Beside each wall-clock time, the CPU time the process used until
//! then (from `/proc/<pid>/task/*/schedstat`), and the page faults of its
//! initialization. The functions run in turn, one of each per round, in a new random
//! order each round, so that a drift of the machine touches them alike, and each starts
//! once moto is idle (still at work on the previous start's requests, it would slow the
//! next: on two cores, even its CPU time). Their configuration points at a moto server
//! started here.
//!
//! ```text
//! cargo build --release -p sas-submission -p sas-scheduler -p sas-agent -p sas-supervisor -p sas-tools --bins
//! cargo run --release -p sas-tools --bin coldstart -- [--runs 10]
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use clap::Parser;
use sas_tests::aws::{Moto, QueuePolicy, Stack};
use serde_json::{Value, json};
use tokio::sync::{Mutex, mpsc};

/// Measures the cold start of each function against a local Lambda Runtime API, beside
/// a hello-world function's: the time to its first request for an event and to its
/// answer, wall-clock and CPU.
///
/// The functions are found beside this binary; build them first with `cargo build
/// --release -p sas-submission -p sas-scheduler -p sas-agent -p sas-supervisor -p
/// sas-tools --bins`.
#[derive(Parser)]
struct Args {
    /// Rounds of one start of each function; the medians are printed.
    #[arg(long, default_value_t = 10)]
    runs: usize,
}

/// A Runtime API serving one event, and telling when the function asked for it (the
/// end of its initialization) and when its answer came, with the CPU time the function
/// had used by then.
#[derive(Clone)]
struct Runtime {
    event: Arc<Value>,
    function: Arc<OnceLock<u32>>,
    answered: mpsc::UnboundedSender<Moment>,
    served: Arc<Mutex<Option<Moment>>>,
}

/// A point in a function's start: the wall clock, and the CPU time and page faults its
/// process had by then.
#[derive(Clone, Copy)]
struct Moment {
    at: Instant,
    cpu: Duration,
    faults: u64,
}

impl Moment {
    fn now(function: &OnceLock<u32>) -> Self {
        let pid = function.get().copied();
        Self {
            at: Instant::now(),
            cpu: pid.map_or(Duration::ZERO, cpu_time),
            faults: pid.map_or(0, page_faults),
        }
    }
}

/// The page faults process `pid` has taken (minor and major, all its threads:
/// `minflt` and `majflt`).
fn page_faults(pid: u32) -> u64 {
    sas_tools::process_stat_sum(&pid.to_string(), &[7, 9])
}

/// The CPU time process `pid`'s threads have used, from the scheduler's statistics.
fn cpu_time(pid: u32) -> Duration {
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    let nanoseconds = threads
        .flatten()
        .filter_map(|thread| std::fs::read_to_string(thread.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(nanoseconds)
}

/// Waits until process `pid` has used no CPU for a few milliseconds (at most a
/// second): moto, still at work on the previous start's requests, would slow the next.
async fn until_idle(pid: u32) {
    let mut used = cpu_time(pid);
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = cpu_time(pid);
        if now == used {
            return;
        }
        used = now;
    }
}

/// How long a function took to reach a point of its start: wall-clock and CPU time.
#[derive(Clone, Copy)]
struct Elapsed {
    wall: Duration,
    cpu: Duration,
}

/// One cold start, measured: to the first request for an event, and to its answer.
struct Sample {
    init: Elapsed,
    answered: Elapsed,
    /// Page faults until the first request for an event.
    init_faults: u64,
}

async fn next(State(runtime): State<Runtime>) -> (HeaderMap, String) {
    let first = {
        let mut served = runtime.served.lock().await;
        let first = served.is_none();
        served.get_or_insert_with(|| Moment::now(&runtime.function));
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
    let _ = runtime.answered.send(Moment::now(&runtime.function));
    "{}"
}

/// Starts `binary` against a fresh Runtime API with `event`, until it answers.
async fn cold_start(
    binary: &PathBuf,
    environment: &HashMap<String, String>,
    event: &Value,
) -> Sample {
    let (answered, mut answers) = mpsc::unbounded_channel();
    let served = Arc::new(Mutex::new(None));
    let function = Arc::new(OnceLock::new());
    let runtime = Runtime {
        event: Arc::new(event.clone()),
        function: Arc::clone(&function),
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
    let _ = function.set(child.id());
    let answered = tokio::time::timeout(Duration::from_secs(30), answers.recv())
        .await
        .expect("an answer within 30 s")
        .expect("answer");
    let _ = child.kill();
    let _ = child.wait();
    server.abort();
    let init = served.lock().await.unwrap_or(answered);
    let since_start = |moment: Moment| Elapsed {
        wall: moment.at - started,
        cpu: moment.cpu,
    };
    Sample {
        init: since_start(init),
        answered: since_start(answered),
        init_faults: init.faults,
    }
}

fn median<T: Ord + Copy>(mut samples: Vec<T>) -> T {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

#[tokio::main]
async fn main() {
    let Args { runs } = Args::parse();
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
        ("PAYLOAD_BUCKET", config.payload_bucket.clone()),
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
    let sizes: Vec<u64> = functions
        .iter()
        .map(|(name, _)| {
            std::fs::metadata(directory.join(name))
                .map(|m| m.len())
                .unwrap_or_else(|_| panic!("{name} is not built in {}", directory.display()))
        })
        .collect();
    let mut samples: Vec<Vec<Sample>> = functions.iter().map(|_| Vec::new()).collect();
    let mut order: Vec<usize> = (0..functions.len()).collect();
    let mut random = fastrand::Rng::with_seed(7);
    for _ in 0..runs {
        // A new order each round: no function always follows the same one.
        random.shuffle(&mut order);
        for &index in &order {
            until_idle(stack.moto.pid()).await;
            let (name, event) = &functions[index];
            let sample = cold_start(&directory.join(name), &environment, event).await;
            samples[index].push(sample);
        }
    }
    println!(
        "cold start, median of {runs} (in rounds of one start each), x86_64 release builds on this machine:"
    );
    println!(
        "from process start to its first request for an event (initialization) and to its answer (the event's work included),"
    );
    println!(
        "wall-clock time and the CPU time of the process, their ratio to hello-world's, and the page faults until the first request"
    );
    let medians: Vec<Sample> = samples
        .iter()
        .map(|samples| {
            let middle = |of: fn(&Sample) -> Duration| median(samples.iter().map(of).collect());
            Sample {
                init: Elapsed {
                    wall: middle(|s| s.init.wall),
                    cpu: middle(|s| s.init.cpu),
                },
                answered: Elapsed {
                    wall: middle(|s| s.answered.wall),
                    cpu: middle(|s| s.answered.cpu),
                },
                init_faults: median(samples.iter().map(|s| s.init_faults).collect()),
            }
        })
        .collect();
    let hello = &medians[0];
    let shown = |of: Duration, hello: Duration| {
        format!(
            "{:>6.2} ms {:>+4.0}%",
            of.as_secs_f64() * 1000.0,
            (of.as_secs_f64() / hello.as_secs_f64() - 1.0) * 100.0
        )
    };
    println!(
        "  {:<16} {:>7}  {:<15}  {:<15}  {:<15}  {:<15}  {:>11}",
        "", "size", "init, wall", "init, CPU", "answer, wall", "answer, CPU", "init faults"
    );
    for (((name, _), size), median) in functions.iter().zip(&sizes).zip(&medians) {
        #[allow(clippy::cast_precision_loss)]
        let megabytes = *size as f64 / 1_048_576.0;
        println!(
            "  {name:<16} {megabytes:>4.1} MB  {}  {}  {}  {}  {:>11}",
            shown(median.init.wall, hello.init.wall),
            shown(median.init.cpu, hello.init.cpu),
            shown(median.answered.wall, hello.answered.wall),
            shown(median.answered.cpu, hello.answered.cpu),
            median.init_faults,
        );
    }
}
