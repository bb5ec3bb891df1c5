//! Runs the deterministic simulation: one seed with its trace, or a soak of many.
//!
//! ```text
//! cargo run -p sas-tools --bin simulate -- --seed 42 [--trace]
//!     one seed; the whole trace with --trace
//! cargo run --release -p sas-tools --bin simulate -- --seeds 100000 [--from 0]
//!     a soak: schedules per second, faults by kind
//! ```

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use sas_tests::sim;

/// Runs the deterministic simulation: one seed with its trace, or a soak of many.
#[derive(Parser)]
#[command(group = clap::ArgGroup::new("run").required(true).args(["seed", "seeds"]))]
struct Args {
    /// Runs this seed alone.
    #[arg(long)]
    seed: Option<u64>,
    /// With --seed, prints the whole trace.
    #[arg(long)]
    trace: bool,
    /// Runs this many seeds: a soak.
    #[arg(long)]
    seeds: Option<u64>,
    /// With --seeds, the first seed.
    #[arg(long, default_value_t = 0)]
    from: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(seed) = args.seed {
        let outcome = sim::run(seed);
        if args.trace {
            for line in &outcome.trace {
                println!("{line}");
            }
        }
        println!(
            "seed {seed}: tasks {:?}, faults {:?}",
            outcome.ended, outcome.faults
        );
        if outcome.violations.is_empty() {
            println!("no invariant broken");
            return ExitCode::SUCCESS;
        }
        println!("{}", outcome.report(60));
        return ExitCode::FAILURE;
    }
    let Some(seeds) = args.seeds else {
        unreachable!("clap requires --seed or --seeds");
    };
    let from = args.from;
    let started = Instant::now();
    let mut faults: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut ended: BTreeMap<String, usize> = BTreeMap::new();
    let mut failed = Vec::new();
    for seed in from..from + seeds {
        let outcome = sim::run(seed);
        for (kind, n) in &outcome.faults {
            *faults.entry(kind).or_default() += n;
        }
        for (state, n) in &outcome.ended {
            *ended.entry(state.clone()).or_default() += n;
        }
        if !outcome.violations.is_empty() {
            eprintln!("{}", outcome.report(30));
            failed.push(seed);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    let rate = seeds as f64 / seconds;
    println!(
        "seeds {from}..{}: {seeds} schedules in {seconds:.1} s, {rate:.0} schedules/s",
        from + seeds
    );
    println!("tasks ended: {ended:?}");
    println!("faults injected:");
    for (kind, n) in &faults {
        println!("  {kind:<42} {n}");
    }
    println!("seeds that broke an invariant: {failed:?}");
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
