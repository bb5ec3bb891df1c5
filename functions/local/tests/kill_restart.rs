//! A kill -9 soak: the local process killed at random points of a load, and once
//! more after the last submission while tasks are in flight, each kill followed by
//! a restart on the same data: every accepted task ends Processed, none is lost or
//! stuck, and every remote side effect is applied once. The kill points come from
//! a seed (`SAS_KILL_SEED`, printed), so that a failure can be replayed.
//!
//! The workflow is `drone-delivery-soak`: a kill costs each task in flight one
//! failure, so its threshold outlasts the kills, and its 5 s budgets leave room for
//! a loaded machine's fsyncs (the 500 ms of the quick workflow timed steps out three
//! times on a CI machine whose disk was shared).

mod common;

use common::spawn_with;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::RwLock;

const TASKS: usize = 300;
const CLIENTS: usize = 8;
/// Kills during the load; one more follows it.
const KILLS: usize = 5;

/// The JSON body of a GET.
async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    http.get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: not JSON: {e}"))
}

async fn count(http: &reqwest::Client, api: &str, state: &str) -> usize {
    let mut total = 0;
    let mut after: Option<String> = None;
    loop {
        let cursor = after
            .as_ref()
            .map(|a| format!("&after={a}"))
            .unwrap_or_default();
        let page = get_json(
            http,
            &format!("{api}/tasks?state={state}&limit=100{cursor}"),
        )
        .await;
        total += page["tasks"].as_array().expect("tasks").len();
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => return total,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_accepted_task_is_lost_or_stuck_across_kill_9_and_restart() {
    soak("direct").await;
}

/// In buffered ingestion, the kills also come between a submission's acceptance and
/// its task's creation, and in the middle of a batch of creations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_buffered_submission_is_lost_or_doubled_across_kill_9_and_restart() {
    soak("buffered").await;
}

async fn soak(ingestion: &str) {
    let variables = [("SAS_INGESTION", ingestion)];
    let spawn = |data: &std::path::Path| spawn_with(data, &variables);
    let data = tempfile::tempdir().expect("data directory");
    let (mut child, api, mut mock) = spawn(data.path());
    let api = Arc::new(RwLock::new(api));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(25))
        .build()
        .expect("client");
    let next = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (api, http, next, accepted) = (
            Arc::clone(&api),
            http.clone(),
            Arc::clone(&next),
            Arc::clone(&accepted),
        );
        clients.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= TASKS {
                    return;
                }
                let body = json!({
                    "workflow": "drone-delivery-soak",
                    "input": {"customer_id": format!("c-{i}"), "pickup": "a", "dropoff": "b", "weight_kg": 1},
                });
                // A PUT that got no answer is sent again: the same request, the same task.
                loop {
                    let base = api.read().await.clone();
                    let sent = http.put(format!("{base}/tasks/kill-{i}")).json(&body).send().await;
                    if sent.is_ok_and(|r| r.status() == 202) {
                        accepted.fetch_add(1, Ordering::SeqCst);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }));
    }
    let seed = std::env::var("SAS_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    println!("kill points from SAS_KILL_SEED={seed}");
    let mut random = fastrand::Rng::with_seed(seed);
    let mut kill_points: Vec<usize> = (0..KILLS).map(|_| random.usize(10..TASKS - 10)).collect();
    kill_points.sort_unstable();
    kill_points.push(TASKS);
    for kill_at in kill_points {
        while accepted.load(Ordering::SeqCst) < kill_at {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // Past the acceptances, at a random moment of the processing.
        tokio::time::sleep(Duration::from_millis(random.u64(0..30))).await;
        child.kill().expect("kill -9");
        child.wait().expect("reaped");
        let (restarted, new_api, new_mock) = spawn(data.path());
        child = restarted;
        mock = new_mock;
        *api.write().await = new_api;
    }
    for client in clients {
        client.await.expect("client");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), TASKS);

    let base = api.read().await.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let mut unfinished;
    loop {
        unfinished = Vec::new();
        for state in ["Pending", "Processing", "Compensating", "Error"] {
            unfinished.push((state, count(&http, &base, state).await));
        }
        if unfinished.iter().all(|(_, n)| *n == 0) || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut states = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..TASKS {
        // Waiting, as a buffered submission's task may not be created yet.
        let task = get_json(&http, &format!("{base}/tasks/kill-{i}?wait=20s")).await;
        *states
            .entry(task["state"].as_str().unwrap_or("lost").to_owned())
            .or_default() += 1;
    }
    // What the first failed tasks went through, for the assertion message below.
    let failed = get_json(&http, &format!("{base}/tasks?state=Error&limit=3")).await;
    let effects = get_json(&http, &format!("{mock}/effects")).await;
    child.kill().expect("stop");
    let _ = child.wait();
    assert!(
        unfinished.iter().all(|(_, n)| *n == 0),
        "none stuck or failed: {unfinished:?}; the first failed: {failed}"
    );
    assert_eq!(
        states,
        [("Processed".to_owned(), TASKS)].into(),
        "every accepted task ends Processed"
    );
    let effects = effects["effects"].as_array().expect("effects");
    assert_eq!(
        effects.len(),
        5 * TASKS,
        "one side effect per step and task, under one key each"
    );
}
