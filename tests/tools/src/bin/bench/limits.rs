//! `bench limits`: a buffered burst with the drone service limited to so many calls at
//! once: its peak concurrency, the account's calls a second, urgent tasks against the rest.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sas_tools::Ingestion;
use serde_json::{Value, json};

use super::burst::{burst_client, processed_at, submit_burst};
use super::server::{DRONE, Durability, Launch, Server, delivery};
use super::stats::quantile;

/// The mock services' count of calls to `service`, and its peak of calls at once.
async fn mock_calls(mock: &str, http: &reqwest::Client, service: &str) -> (u64, u64) {
    let calls: Value = match http.get(format!("{mock}/calls?of={service}")).send().await {
        Ok(answer) => answer.json().await.unwrap_or_default(),
        Err(_) => Value::Null,
    };
    (
        calls["calls"][service].as_u64().unwrap_or(0),
        calls["concurrency"][service]["peak"].as_u64().unwrap_or(0),
    )
}

/// A buffered burst of drone deliveries against a drone service limited to
/// `max_concurrency` calls at once (0: none), each call `latency_ms` long: one line.
pub(super) async fn limits(
    tasks: usize,
    max_concurrency: u32,
    latency_ms: u64,
    urgent_percent: usize,
    senders: usize,
) -> anyhow::Result<()> {
    let services = (max_concurrency > 0)
        .then(|| json!({ "drone": { "max_concurrency": max_concurrency } }).to_string());
    let server = Server::start_with(
        Durability::Full,
        Ingestion::Buffered,
        Launch::default(),
        None,
        services.as_deref(),
        None,
    )?;
    let http = burst_client(senders)?;
    http.put(format!("{}/faults/drone", server.mock))
        .json(&json!({ "latency_ms": latency_ms }))
        .send()
        .await?
        .error_for_status()?;
    // One task in every `every` is urgent, spread evenly through the burst.
    let every = 100 / urgent_percent.clamp(1, 100);
    let urgent = |i: usize| i % every == every / 2;
    // The account service's calls, counted as they come: when the first and the last
    // of the burst's were made.
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let (http, watching) = (http.clone(), Arc::clone(&watching));
        let mock = server.mock.clone();
        tokio::spawn(async move {
            let (mut first, mut last) = (None, None);
            while watching.load(Ordering::Relaxed) {
                let (calls, _) = mock_calls(&mock, &http, "account").await;
                let now = Instant::now();
                if calls > 0 && first.is_none() {
                    first = Some(now);
                }
                if calls as usize >= tasks && last.is_none() {
                    last = Some(now);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            first.zip(last).map(|(first, last)| last - first)
        })
    };
    let (accepted, sent_at) = submit_burst(&server, &http, tasks, senders, |i| {
        let mut body = delivery(DRONE, i);
        if urgent(i) {
            body["priority"] = json!(1);
        }
        body
    })
    .await?;
    let ends = processed_at(&server, &http, tasks).await?;
    watching.store(false, Ordering::Relaxed);
    let account_span = watcher.await?;
    let (drone_calls, drone_peak) = mock_calls(&server.mock, &http, "drone").await;
    let mut took = (Vec::new(), Vec::new());
    for (i, end) in ends.iter().enumerate() {
        let Some(end) = end else { continue };
        let time = Duration::from_secs_f64((end - sent_at[i]).max(0.0) / 1000.0);
        if urgent(i) { &mut took.0 } else { &mut took.1 }.push(time);
    }
    took.0.sort_unstable();
    took.1.sort_unstable();
    let lost = ends.iter().filter(|e| e.is_none()).count();
    let drained = (ends.iter().flatten().fold(0.0_f64, |a, b| a.max(*b))
        - sent_at.iter().copied().fold(f64::MAX, f64::min))
        / 1000.0;
    #[allow(clippy::cast_precision_loss)]
    let account_per_s = account_span.map_or(f64::NAN, |span| tasks as f64 / span.as_secs_f64());
    #[allow(clippy::cast_precision_loss)]
    let drone_per_s = drone_calls as f64 / drained;
    let seconds = |sorted: &[Duration], q: f64| quantile(sorted, q) / 1000.0;
    println!(
        "engine=sas-local mode=limits ingestion=buffered tasks={tasks} accepted={} drone_max_concurrency={max_concurrency} drone_latency_ms={latency_ms} drone_peak={drone_peak} drone_calls={drone_calls} drone_calls_per_s={drone_per_s:.0} account_calls_per_s={account_per_s:.0} urgent={} p1_p50_s={:.2} p1_p99_s={:.2} p3_p50_s={:.2} p3_p99_s={:.2} drained_s={drained:.1} lost={lost} durability=full",
        accepted.len(),
        took.0.len(),
        seconds(&took.0, 0.5),
        seconds(&took.0, 0.99),
        seconds(&took.1, 0.5),
        seconds(&took.1, 0.99),
    );
    Ok(())
}
