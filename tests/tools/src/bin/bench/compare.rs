//! `bench compare`: `sas-local` and the peers (Restate, DBOS) in turn, round after
//! round, with the floor under a task beside them; the medians and our ratios.

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use sas_tools::Ingestion;

use super::Rounds;
use super::floor::{Probe, wal_writes};
use super::run::{Load, Measured, Mode, measure};
use super::server::{DRONE, Durability, Launch, STEPS, Services};
use super::stats::median;

/// Runs a peer's `bench.sh TASKS CONCURRENCY MODE` (warm-up as ours) and reads its
/// line.
fn peer(script: &std::path::Path, load: Load) -> anyhow::Result<Measured> {
    let output = Command::new("bash")
        .arg(script)
        .arg(load.tasks.to_string())
        .arg(load.concurrency.to_string())
        .arg(load.mode.name())
        .env("WARMUP", load.warmup.to_string())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.contains("p99_ms="))
        .unwrap_or_default();
    anyhow::ensure!(
        output.status.success(),
        "{} failed ({}): {line}; set it up with its setup.sh",
        script.display(),
        output.status
    );
    Measured::parse(line).with_context(|| format!("no measurement in {stdout:?}"))
}

/// Waits for a settled machine before a run: the disk flushed, the last run's
/// processes gone.
pub(super) async fn settle() {
    let _ = Command::new("sync").status();
    tokio::time::sleep(Duration::from_secs(3)).await;
}

pub(super) async fn compare(
    peers: &std::path::Path,
    rounds: Rounds,
    services: Services,
    mode: Mode,
) -> anyhow::Result<()> {
    /// Ours in each ingestion mode, then the peers (each a directory of `peers`).
    const ENGINES: [&str; 4] = ["sas-local-buffered", "sas-local-direct", "restate", "dbos"];
    const OURS: [Ingestion; 2] = [Ingestion::Buffered, Ingestion::Direct];
    let loads = rounds.loads(services, mode);
    let Rounds { rounds, .. } = rounds;
    println!("{}", sas_tools::provenance());
    let mut results: Vec<Vec<Vec<Measured>>> = loads
        .iter()
        .map(|_| ENGINES.iter().map(|_| Vec::new()).collect())
        .collect();
    let mut walls = Vec::new();
    for ingestion in OURS {
        let wal = wal_writes(DRONE, ingestion, services, mode).await?;
        println!("wal engine=sas-local-{} {}", ingestion.name(), wal.words());
        walls.push(wal);
    }
    let mut probes = Vec::new();
    for round in 1..=rounds {
        for (load, &shape) in loads.iter().enumerate() {
            if shape.concurrency == 1 {
                let probe = Probe::measure(&walls).await?;
                println!("round={round} {probe}");
                probes.push(probe);
            }
            for (engine, name) in ENGINES.iter().enumerate() {
                settle().await;
                let measured = match OURS.get(engine) {
                    Some(&ingestion) => {
                        measure(shape, Durability::Full, ingestion, Launch::default()).await?
                    }
                    None => peer(&peers.join(name).join("bench.sh"), shape)?,
                };
                println!("round={round} engine={name} {}", measured.line);
                results[load][engine].push(measured);
            }
        }
    }
    println!("medians of {rounds}:");
    for (
        load,
        Load {
            tasks: n,
            concurrency,
            ..
        },
    ) in loads.iter().enumerate()
    {
        let figures: Vec<(f64, f64, f64)> = results[load]
            .iter()
            .map(|runs| {
                let of = |f: fn(&Measured) -> f64| median(runs.iter().map(f).collect());
                (of(|m| m.tasks_per_s), of(|m| m.p50_ms), of(|m| m.p99_ms))
            })
            .collect();
        for (engine, (name, (rate, p50, p99))) in ENGINES.iter().zip(&figures).enumerate() {
            let ratios: String = if let Some(wal) = walls.get(engine) {
                if *concurrency == 1 {
                    let floor = median(probes.iter().map(|p| p.floor_ms(engine, wal)).collect());
                    let disk_p99 = median(probes.iter().map(|p| p.disk_p99_ms(engine)).collect());
                    format!(
                        " floor_ms={floor:.2} p50/floor={:.2}x disk_p99_ms={disk_p99:.2} \
                         p99/disk_p99={:.2}x",
                        p50 / floor,
                        p99 / disk_p99
                    )
                } else {
                    String::new()
                }
            } else {
                OURS.iter()
                    .zip(&figures)
                    .map(|(ours, (our_rate, _, our_p99))| {
                        format!(
                            " {}/theirs: throughput {:.2}x p99 {:.2}x",
                            ours.name(),
                            our_rate / rate,
                            our_p99 / p99
                        )
                    })
                    .collect()
            };
            println!(
                "concurrency={concurrency} n={n} engine={name} tasks_per_s={rate:.1} p50_ms={p50:.2} p99_ms={p99:.2}{ratios}"
            );
        }
    }
    println!(
        "floor at 1, medians of the rounds' probes: {}",
        Probe::medians(&probes)
    );
    if let Some(runs) = loads
        .iter()
        .position(|l| l.concurrency == 1)
        .and_then(|load| results[load].get(ENGINES.len() - 1))
    {
        let of = |key: &str| median(runs.iter().filter_map(|m| m.field(key)).collect());
        let (kb, syncs) = (of("wal_kb_per_workflow"), of("wal_syncs_per_step"));
        println!(
            "wal engine=dbos (Postgres) wal_kb_per_workflow={kb:.1} wal_syncs_per_workflow={:.1} wal_bytes_per_commit={:.0}",
            syncs * STEPS as f64,
            kb * 1024.0 / (syncs * STEPS as f64),
        );
    }
    Ok(())
}
