//! Runs the deterministic simulation: one seed with its trace, or a soak of many.
//!
//! ```text
//! simulate --seed 42 [--trace]         one seed; the whole trace with --trace
//! simulate --seeds 100000 [--from 0]   a soak: schedules per second, faults by kind
//! ```

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

use sas_tests::sim;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    if let Some(seed) = value("--seed") {
        let outcome = sim::run(seed);
        if args.iter().any(|a| a == "--trace") {
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
    let Some(seeds) = value("--seeds") else {
        eprintln!("usage: simulate --seed N [--trace] | --seeds COUNT [--from FIRST]");
        return ExitCode::from(2);
    };
    let from = value("--from").unwrap_or(0);
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
