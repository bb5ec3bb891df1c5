//! `bench map`: one parcel order, each parcel shipped by a child task: the time to
//! Processed, children a second, the server's peak memory.

use std::time::{Duration, Instant};

use sas_tools::Ingestion;
use serde_json::{Value, json};

use super::burst::epoch_millis;
use super::server::{Durability, Launch, Server, tool_workflows};
use super::stats::quantile;

/// `n` in base 36: 10,000 ids in at most three characters each.
fn base36(mut n: usize) -> String {
    let mut digits = Vec::new();
    loop {
        digits.push(char::from_digit((n % 36) as u32, 36).unwrap_or('0'));
        n /= 36;
        if n == 0 {
            return digits.iter().rev().collect();
        }
    }
}

/// A parcel order of `parcels` parcels, as `parcel-order` or `parcel-order-by-id` takes it.
fn parcel_order(parcels: usize, by_id: bool) -> Value {
    if !by_id {
        return sas_tests::parcel_order("order", parcels);
    }
    let ids: Vec<String> = (0..parcels).map(base36).collect();
    json!({
        "workflow": "parcel-order-by-id",
        "input": {"order_id": "order", "customer_id": "c-1", "dropoff": "Bondi", "weight_kg": 1.5, "parcels": ids},
    })
}

/// The most bytes of an input a submission's body carries, as `sas` sends one (of the
/// API's 64 KiB a body): a larger one is uploaded first, and named by reference.
const INLINE_INPUT: usize = 48 * 1024;

/// `order`'s input uploaded (`POST /payloads/uploads`, then the `PUT` it answers) and
/// named by its reference, where it is too large to send inline.
async fn by_reference(http: &reqwest::Client, api: &str, order: &mut Value) -> anyhow::Result<()> {
    let text = order["input"].to_string().into_bytes();
    if text.len() <= INLINE_INPUT {
        return Ok(());
    }
    let named = json!(sas_domain::payload::PayloadRef::of(&text));
    let asked: Value = (http.post(format!("{api}/payloads/uploads")).json(&named))
        .send()
        .await?
        .json()
        .await?;
    let url = asked["url"].as_str().unwrap_or_default();
    let put = (http.put(format!("{api}{url}")))
        .header("content-type", "application/json")
        .body(text)
        .send()
        .await?;
    anyhow::ensure!(
        put.status().is_success(),
        "the order's input not uploaded: {}",
        put.status()
    );
    order["input"] = json!({"$payload": asked["$payload"]});
    Ok(())
}

/// One parcel order of `parcels` parcels, its input uploaded first where it is large,
/// submitted and waited for until Processed.
pub(super) async fn map(parcels: usize, by_id: bool, durability: Durability) -> anyhow::Result<()> {
    let server = Server::start_with(
        durability,
        Ingestion::Direct,
        Launch::default(),
        Some(&tool_workflows()),
        None,
        None,
    )?;
    let mut order = parcel_order(parcels, by_id);
    let http = reqwest::Client::new();
    let cpu_before = server.cpu_seconds();
    let began = std::time::SystemTime::now();
    let started = Instant::now();
    by_reference(&http, &server.api, &mut order).await?;
    let body = order.to_string();
    let body_bytes = body.len();
    let put = http
        .put(format!("{}/tasks/order", server.api))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    anyhow::ensure!(
        put.status() == 202,
        "the order of {body_bytes} bytes refused: {} {}",
        put.status(),
        put.text().await?
    );
    let task = loop {
        let task: Value = http
            .get(format!("{}/tasks/order?wait=20s", server.api))
            .send()
            .await?
            .json()
            .await?;
        match task["state"].as_str() {
            Some("Processed") => break task,
            Some("Error") => anyhow::bail!("the order failed: {task}"),
            _ => {}
        }
    };
    let wall = started.elapsed().as_secs_f64();
    let (cpu, peak_rss) = (server.cpu_seconds() - cpu_before, server.peak_rss_mb());
    // When each child ended (its last write), from the submission.
    let began = began.duration_since(std::time::UNIX_EPOCH)?.as_secs_f64() * 1000.0;
    let children = sas_tests::all_children("order", "deliver-each", 100, async |path| {
        let answer = http
            .get(format!("{}{path}", server.api))
            .send()
            .await
            .expect("a page of children");
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap_or_default())
    })
    .await;
    let mut ended: Vec<Duration> = children
        .iter()
        .filter_map(|child| epoch_millis(child["updated_at"].as_str()?))
        .map(|at| Duration::from_secs_f64((at - began).max(0.0) / 1000.0))
        .collect();
    ended.sort_unstable();
    let step = &task["steps"][1];
    let at = |field: &str| step[field].as_str().and_then(epoch_millis);
    let map_s = at("finished_at")
        .zip(at("started_at"))
        .map_or(f64::NAN, |(end, start)| (end - start) / 1000.0);
    let last = quantile(&ended, 1.0) / 1000.0;
    #[allow(clippy::cast_precision_loss)]
    let (joined_rate, ended_rate) = (parcels as f64 / wall, parcels as f64 / last);
    println!(
        "engine=sas-local mode=map workflow={} parcels={parcels} body_bytes={body_bytes} succeeded={} failed={} \
         submission_to_processed_s={wall:.2} map_step_s={map_s:.2} children_per_s={joined_rate:.0} \
         children_ended_p50_s={:.2} children_ended_p99_s={:.2} last_child_ended_s={last:.2} \
         children_ended_per_s={ended_rate:.0} server_cpu_s={cpu:.1} server_peak_rss_mb={peak_rss:.1} durability={}",
        order["workflow"].as_str().unwrap_or_default(),
        step["output"]["succeeded"],
        step["output"]["failed"],
        quantile(&ended, 0.5) / 1000.0,
        quantile(&ended, 0.99) / 1000.0,
        durability.name(),
    );
    Ok(())
}
