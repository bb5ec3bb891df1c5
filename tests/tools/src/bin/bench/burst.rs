//! `bench ingest` and `bench burst`: submissions alone at set rates (open loop), and a
//! burst of them sent at once, each task then waited for: acceptance, drain, lost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sas_tools::Ingestion;
use serde_json::Value;
use tokio::sync::Mutex;

use super::server::{DRONE, Durability, Launch, Server, delivery};
use super::stats::quantile;

pub(super) async fn ingest(
    rates: &[u32],
    seconds: u64,
    durability: Durability,
) -> anyhow::Result<()> {
    let server = Server::start(durability)?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .build()?;
    let mut best = None;
    for &rate in rates {
        let latencies = Arc::new(Mutex::new(Vec::new()));
        let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let total = rate as usize * usize::try_from(seconds).unwrap_or(1);
        let started = Instant::now();
        let mut requests = Vec::with_capacity(total);
        for i in 0..total {
            ticks.tick().await;
            let (http, api, latencies) = (http.clone(), server.api.clone(), Arc::clone(&latencies));
            requests.push(tokio::spawn(async move {
                let start = Instant::now();
                let sent = http
                    .post(format!("{api}/tasks"))
                    .json(&delivery(DRONE, i))
                    .send()
                    .await;
                let ok = sent.is_ok_and(|r| r.status() == 202);
                latencies.lock().await.push(ok.then(|| start.elapsed()));
            }));
        }
        for request in requests {
            let _ = request.await;
        }
        let wall = started.elapsed().as_secs_f64();
        let results = std::mem::take(&mut *latencies.lock().await);
        let errors = results.iter().filter(|r| r.is_none()).count();
        let mut ok: Vec<Duration> = results.into_iter().flatten().collect();
        ok.sort_unstable();
        let p99 = quantile(&ok, 0.99);
        #[allow(clippy::cast_precision_loss)]
        let achieved = ok.len() as f64 / wall;
        println!(
            "engine=sas-local mode=ingest target_rate={rate} achieved_rate={achieved:.0} accepted={} errors={errors} p50_ms={:.2} p99_ms={p99:.2} max_ms={:.2} durability={}",
            ok.len(),
            quantile(&ok, 0.5),
            ok.last().map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0),
            durability.name(),
        );
        if errors == 0 && p99 < 50.0 && achieved >= f64::from(rate) * 0.95 {
            best = Some(rate);
        }
    }
    println!(
        "highest sustained rate with p99 under 50 ms: {}",
        best.map_or("none of those tried".into(), |r| format!("{r}/s"))
    );
    Ok(())
}

/// Milliseconds since the epoch of an RFC 3339 time.
pub(super) fn epoch_millis(text: &str) -> Option<f64> {
    let at = humantime::parse_rfc3339(text).ok()?;
    Some(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64() * 1000.0)
}

/// Submits `tasks` tasks `burst-<i>`, each as `body` gives it, as fast as the client
/// can with at most `senders` in flight: the times of those accepted, sorted, and
/// when each was sent (milliseconds since the epoch).
pub(super) async fn submit_burst(
    server: &Server,
    http: &reqwest::Client,
    tasks: usize,
    senders: usize,
    body: impl Fn(usize) -> Value,
) -> anyhow::Result<(Vec<Duration>, Vec<f64>)> {
    let slots = Arc::new(tokio::sync::Semaphore::new(senders));
    let mut requests = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let permit = Arc::clone(&slots).acquire_owned().await?;
        let (http, api, body) = (http.clone(), server.api.clone(), body(i));
        requests.push(tokio::spawn(async move {
            let sent_at = now_millis();
            let start = Instant::now();
            let sent = http
                .put(format!("{api}/tasks/burst-{i}"))
                .json(&body)
                .send()
                .await;
            drop(permit);
            let accepted = sent.is_ok_and(|r| r.status() == 202);
            (accepted.then(|| start.elapsed()), sent_at)
        }));
    }
    let mut accepted = Vec::with_capacity(tasks);
    let mut sent_at = Vec::with_capacity(tasks);
    for request in requests {
        let (took, at) = request.await?;
        accepted.extend(took);
        sent_at.push(at);
    }
    accepted.sort_unstable();
    Ok((accepted, sent_at))
}

/// Milliseconds since the epoch, now.
fn now_millis() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// Waits for each of tasks `burst-<i>` to be Processed, by a few readers (a reader
/// waiting is a load on the server, which a burst's client would not add): when each
/// was (milliseconds since the epoch), by index; `None` for one never Processed.
pub(super) async fn processed_at(
    server: &Server,
    http: &reqwest::Client,
    tasks: usize,
) -> anyhow::Result<Vec<Option<f64>>> {
    let readers = Arc::new(tokio::sync::Semaphore::new(8));
    let mut waits = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let permit = Arc::clone(&readers).acquire_owned().await?;
        let (http, api) = (http.clone(), server.api.clone());
        waits.push(tokio::spawn(async move {
            let mut end = None;
            for _ in 0..30 {
                let answer = http
                    .get(format!("{api}/tasks/burst-{i}?wait=20s"))
                    .send()
                    .await;
                let Ok(answer) = answer else { continue };
                let task: Value = answer.json().await.unwrap_or_default();
                if task["state"] == "Processed" {
                    end = task["updated_at"].as_str().and_then(epoch_millis);
                    break;
                }
            }
            drop(permit);
            end
        }));
    }
    let mut ends = Vec::with_capacity(tasks);
    for wait in waits {
        ends.push(wait.await?);
    }
    Ok(ends)
}

/// A client for a burst of `senders` requests at once.
pub(super) fn burst_client(senders: usize) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(senders)
        .timeout(Duration::from_secs(60))
        .build()?)
}

pub(super) async fn burst(
    tasks: usize,
    senders: usize,
    ingestion: Ingestion,
) -> anyhow::Result<()> {
    let server = Server::start_with(
        Durability::Full,
        ingestion,
        Launch::default(),
        None,
        None,
        None,
    )?;
    let http = burst_client(senders)?;
    let cpu_before = server.cpu_seconds();
    let began = now_millis();
    let started = Instant::now();
    let (accepted, _) =
        submit_burst(&server, &http, tasks, senders, |i| delivery(DRONE, i)).await?;
    let accept_wall = started.elapsed().as_secs_f64();
    let errors = tasks - accepted.len();
    let ends = processed_at(&server, &http, tasks).await?;
    let lost = ends.iter().filter(|e| e.is_none()).count();
    let last = ends.iter().flatten().fold(began, |a, b| a.max(*b));
    let drained = (last - began) / 1000.0;
    #[allow(clippy::cast_precision_loss)]
    let (accept_rate, processed_rate) = (
        accepted.len() as f64 / accept_wall,
        (tasks - lost) as f64 / drained,
    );
    println!(
        "engine=sas-local mode=burst ingestion={} tasks={tasks} senders={senders} accepted={} errors={errors} accept_wall_s={accept_wall:.2} accept_per_s={accept_rate:.0} accept_p50_ms={:.2} accept_p99_ms={:.2} accept_max_ms={:.2} drained_s={drained:.2} processed_per_s={processed_rate:.0} lost={lost} server_cpu_s={:.1} durability=full",
        ingestion.name(),
        accepted.len(),
        quantile(&accepted, 0.5),
        quantile(&accepted, 0.99),
        accepted
            .last()
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0),
        server.cpu_seconds() - cpu_before,
    );
    Ok(())
}
