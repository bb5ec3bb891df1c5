//! `bench asl`: the drone delivery written in the project's language and twice in the
//! Amazon States Language, in turn, round after round, at 64 clients and at 1, all
//! calling the remote service apart (the workflow and the first state machine its HTTP
//! API, the second Lambda's `Invoke` API, which it plays): every line, then the
//! medians and each state machine's ratios to the workflow; first, what a task of
//! each writes to the WAL.

use sas_tools::Ingestion;

use super::Rounds;
use super::compare::settle;
use super::floor::wal_writes;
use super::run::{Load, Measured, Mode, measure};
use super::server::{DRONE, DRONE_ASL, DRONE_ASL_HTTP, Durability, Launch, STEPS, Services};
use super::stats::{median, number_in};

pub(super) async fn asl(rounds: Rounds) -> anyhow::Result<()> {
    const WORKFLOWS: [&str; 3] = [DRONE, DRONE_ASL_HTTP, DRONE_ASL];
    let loads = rounds.loads(Services::Apart, Mode::Attach);
    let Rounds { rounds, .. } = rounds;
    println!("{}", sas_tools::provenance());
    for workflow in WORKFLOWS {
        let wal = wal_writes(workflow, Ingestion::Direct, Services::Apart, Mode::Attach).await?;
        println!("wal workflow={workflow} {}", wal.words());
    }
    let mut results: Vec<[Vec<Measured>; 3]> = loads.iter().map(|_| Default::default()).collect();
    for round in 1..=rounds {
        for (shape, &load) in loads.iter().enumerate() {
            for (index, workflow) in WORKFLOWS.into_iter().enumerate() {
                settle().await;
                let load = Load { workflow, ..load };
                let measured =
                    measure(load, Durability::Full, Ingestion::Direct, Launch::default()).await?;
                println!("round={round} {}", measured.line);
                results[shape][index].push(measured);
            }
        }
    }
    println!("medians of {rounds}:");
    for (shape, load) in loads.iter().enumerate() {
        let figures: Vec<[f64; 4]> = results[shape]
            .iter()
            .map(|runs| {
                let of = |f: &dyn Fn(&Measured) -> f64| median(runs.iter().map(f).collect());
                // The server's CPU a task, from the line's CPU over the run.
                #[allow(clippy::cast_precision_loss)]
                let cpu_ms = |m: &Measured| {
                    number_in(&m.line, "server_cpu_s").unwrap_or(f64::NAN) * 1000.0
                        / load.tasks as f64
                };
                [
                    of(&|m| m.tasks_per_s),
                    of(&|m| m.p50_ms),
                    of(&|m| m.p99_ms),
                    of(&cpu_ms),
                ]
            })
            .collect();
        for (workflow, [rate, p50, p99, cpu]) in WORKFLOWS.iter().zip(&figures) {
            #[allow(clippy::cast_precision_loss)]
            let states = rate * STEPS as f64;
            println!(
                "concurrency={} workflow={workflow} tasks_per_s={rate:.1} states_per_s={states:.0} p50_ms={p50:.2} p99_ms={p99:.2} server_cpu_ms_per_task={cpu:.3}",
                load.concurrency
            );
        }
        let native = figures[0];
        for (workflow, machine) in WORKFLOWS.iter().zip(&figures).skip(1) {
            println!(
                "concurrency={} workflow={workflow} over_native: tasks_per_s={:.3} p50={:.3} cpu_per_task={:.3}",
                load.concurrency,
                machine[0] / native[0],
                machine[1] / native[1],
                machine[3] / native[3],
            );
        }
    }
    Ok(())
}
