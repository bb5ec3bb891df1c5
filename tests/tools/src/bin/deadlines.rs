//! How soon an expired lease is acted on, on the deployed stack: `infra/template.yaml`
//! on MiniStack (IAM enforced), the functions run through their real triggers. The
//! drone service hangs past its step's complete-by for each of `--tasks` drone
//! deliveries; for each, the seconds from the step's complete-by to the write that
//! sends it back (the caller's Pending notification), then the p50, p99 and max.
//!
//! ```sh
//! ./tests/run        # once: installs MiniStack and the SAM CLI, builds the functions
//! SAS_MINISTACK=.venv-ministack/bin/ministack SAS_SAM=.venv/bin/sam \
//!     cargo run -p sas-tools --bin deadlines -- [--tasks 20]
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use clap::Parser;
use sas_tests::aws::Remote;
use sas_tests::delivery_input;
use sas_tests::ministack::Deployment;
use serde_json::{Value, json};

/// How soon an expired lease is acted on, on the stack deployed on MiniStack: the
/// seconds from a hung step's complete-by to the write that sends its task back.
///
/// Needs MiniStack and the SAM CLI (`./tests/run` installs them), named by
/// `SAS_MINISTACK` and `SAS_SAM`.
#[derive(Parser)]
struct Args {
    /// Drone deliveries whose drone step hangs past its complete-by.
    #[arg(long, default_value_t = 20)]
    tasks: usize,
}

/// A timestamp of the API (RFC 3339) in milliseconds.
fn millis(text: &str) -> i64 {
    let at = humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    let since = at.duration_since(UNIX_EPOCH).expect("after the epoch");
    i64::try_from(since.as_millis()).expect("milliseconds")
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = (p * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() {
    let Args { tasks } = Args::parse();
    let remote = Remote::start(false).await;
    let stack = Deployment::with_services(&remote).await;
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let inbox = sqs
        .create_queue()
        .queue_name("sas-notify-deadlines")
        .send()
        .await
        .expect("a notification queue")
        .queue_url()
        .expect("its URL")
        .to_owned();
    remote.mocks.set_faults(
        "drone",
        serde_json::from_value(json!({"hang_ms": 15_000, "times": tasks})).expect("faults"),
    );
    for i in 0..tasks {
        let mut body = json!({ "workflow": "drone-delivery", "input": delivery_input() });
        body["notify"] = json!("sas-notify-deadlines");
        let put = stack
            .call("PUT", &format!("/tasks/late-{i}"), Some(&body), false)
            .await;
        assert_eq!(put.status, 202, "{}", put.body);
    }

    // The drone step's complete-by, read while it runs; then the task's end.
    let mut complete_by: BTreeMap<String, i64> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    let mut finished = 0;
    while finished < tasks {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{finished} of {tasks} tasks Processed within 300 s"
        );
        finished = 0;
        for i in 0..tasks {
            let id = format!("late-{i}");
            let task = stack
                .call("GET", &format!("/tasks/{id}"), None, false)
                .await
                .json();
            let drone = &task["steps"][3];
            if drone["state"] == "Processing"
                && drone["attempt"] == 1
                && let Some(at) = drone["complete_by"].as_str()
            {
                complete_by.entry(id).or_insert_with(|| millis(at));
            }
            finished += usize::from(task["state"] == "Processed");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The write that sent each task back: its first Pending after the submission's.
    let mut sent_back: BTreeMap<String, i64> = BTreeMap::new();
    loop {
        let received = sqs
            .receive_message()
            .queue_url(&inbox)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("a receive");
        if received.messages().is_empty() {
            break;
        }
        for message in received.messages() {
            let note: Value =
                serde_json::from_str(message.body().unwrap_or_default()).expect("a notification");
            let (Some(id), Some(at)) = (note["task_id"].as_str(), note["at"].as_i64()) else {
                continue;
            };
            if note["state"] == "Pending" && note["version"].as_u64() > Some(1) {
                let first = sent_back.entry(id.to_owned()).or_insert(at);
                *first = (*first).min(at);
            }
            sqs.delete_message()
                .queue_url(&inbox)
                .receipt_handle(message.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("a delete");
        }
    }

    let mut seconds: Vec<f64> = complete_by
        .iter()
        .filter_map(|(id, end)| Some((sent_back.get(id)? - end) as f64 / 1000.0))
        .collect();
    seconds.sort_by(f64::total_cmp);
    assert!(
        !seconds.is_empty(),
        "no task was seen both running its drone step and sent back"
    );
    println!(
        "engine=sas-lambda-on-ministack mode=deadlines tasks={tasks} measured={} \
         complete_by_to_recovery_s: p50={:.2} p99={:.2} max={:.2} min={:.2}",
        seconds.len(),
        percentile(&seconds, 0.5),
        percentile(&seconds, 0.99),
        seconds[seconds.len() - 1],
        seconds[0],
    );
}
