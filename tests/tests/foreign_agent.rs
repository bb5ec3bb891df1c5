//! An agent in another language: a Python agent (`tests/agents/python_agent.py`, boto3)
//! answers the agent-request queue of the functions on moto, each message checked on
//! both sides against the published schemas, and the scheduler takes its answer.

use std::process::{Command, Stdio};
use std::time::Duration;

use sas_tests::aws::{QueuePolicy, Stack, repository};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_written_in_python_runs_a_step_over_the_published_contract() {
    let python = std::env::var("SAS_PYTHON").map_or_else(
        |_| repository().join(".venv/bin/python"),
        std::path::PathBuf::from,
    );
    assert!(
        python.exists(),
        "no Python with boto3 and jsonschema at {}: run ./tests/run, which installs them \
         into .venv, or set SAS_PYTHON",
        python.display()
    );
    let policy = QueuePolicy {
        visibility_seconds: 5,
        max_receive_count: 3,
    };
    let stack = Stack::start("http://127.0.0.1:9", policy).await;
    stack.leave_agent_requests();
    let body = json!({ "workflow": "order-processing", "input": { "order_id": "o-1" } });
    let (status, _) = stack.http("PUT", "/tasks/py-1", Some(&body)).await;
    assert_eq!(status, 202);

    let agent = Command::new(&python)
        .arg(repository().join("tests/agents/python_agent.py"))
        .args(["--endpoint", &stack.moto.endpoint])
        .args(["--requests", &stack.config.agent_request_queue_url])
        .args(["--responses", &stack.config.agent_response_queue_url])
        .args(["--count", "1", "--seconds", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", python.display()));
    let task = stack
        .run_until("py-1", Duration::from_secs(60), false, |t| {
            t["state"] == "Processed" || t["state"] == "Error"
        })
        .await;
    let ran = agent.wait_with_output().expect("the agent ends");
    assert!(
        ran.status.success(),
        "the Python agent failed: {}{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    assert_eq!(task["state"], "Processed", "{task:#}");
    assert_eq!(
        task["steps"][0]["output"],
        json!({ "order_id": "o-1", "processed_by": "python" }),
        "the step's output is the Python agent's answer"
    );
    let answered: Vec<serde_json::Value> = String::from_utf8_lossy(&ran.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    assert_eq!(
        answered,
        [json!({ "answered": "py-1/1/process-order" })],
        "one request, answered once"
    );
}
