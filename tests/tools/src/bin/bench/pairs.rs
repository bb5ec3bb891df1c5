//! `bench pairs`: a change measured as this project measures one, on a machine whose
//! speed moves by more than most changes give: `run`'s closed loop with this build of
//! `sas-local` and another in turn, pair after pair, each pair's first run alternating
//! (ABBA), so that a drift of the machine weighs on both alike; then, figure by figure,
//! the median of the pairs' ratios and in how many pairs this build's is the higher.

use std::path::Path;

use anyhow::Context as _;
use sas_tools::Ingestion;

use super::compare::settle;
use super::run::{Load, Measured, measure};
use super::server::{Durability, Launch};
use super::stats::median;

/// The figures compared, as the run's line names them.
const FIGURES: [&str; 4] = ["tasks_per_s", "p50_ms", "p99_ms", "server_cpu_s"];

/// The two builds, as each line names them, in the order a pair's figures keep them.
const BUILDS: [&str; 2] = ["this", "baseline"];

/// The builds (their places in [`BUILDS`]) in the order pair `pair` (from 1) runs
/// them: this one first in odd pairs.
fn order(pair: usize) -> [usize; 2] {
    if pair % 2 == 1 { [0, 1] } else { [1, 0] }
}

/// Of pairs of figures (this build's, the baseline's): the median of their ratios,
/// this over the baseline, and how many of them are above 1.
fn compared(pairs: &[(f64, f64)]) -> (f64, usize) {
    let ratios: Vec<f64> = pairs.iter().map(|(this, other)| this / other).collect();
    let higher = ratios.iter().filter(|ratio| **ratio > 1.0).count();
    (median(ratios), higher)
}

pub(super) async fn pairs(
    load: &Load,
    durability: Durability,
    ingestion: Ingestion,
    baseline: &Path,
    count: usize,
) -> anyhow::Result<()> {
    let this = Launch::default().binary();
    anyhow::ensure!(
        baseline.is_file(),
        "no build of sas-local at {}: copy target/server/sas-local there before the change",
        baseline.display()
    );
    println!("{}", sas_tools::provenance());
    println!("# this={} baseline={}", this.display(), baseline.display());
    let binaries = [this.as_path(), baseline];
    let mut runs: Vec<[Option<Measured>; 2]> = Vec::with_capacity(count);
    for pair in 1..=count {
        let mut measured = [None, None];
        for build in order(pair) {
            settle().await;
            let launch = Launch {
                under: &[],
                build: Some(binaries[build]),
            };
            let name = BUILDS[build];
            let run = measure(*load, durability, ingestion, launch)
                .await
                .with_context(|| format!("pair {pair}, {name}"))?;
            println!("pair={pair} build={name} {}", run.line);
            measured[build] = Some(run);
        }
        runs.push(measured);
    }
    println!("# this build over the baseline, the median of {count} pairs' ratios:");
    for figure in FIGURES {
        let figures: Vec<(f64, f64)> = (runs.iter())
            .filter_map(|[this, other]| {
                Some((
                    this.as_ref()?.field(figure)?,
                    other.as_ref()?.field(figure)?,
                ))
            })
            .collect();
        let (ratio, higher) = compared(&figures);
        println!(
            "{figure}: {ratio:.3}x, higher in {higher} of {} pairs",
            figures.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_alternate_which_build_goes_first() {
        let firsts: Vec<&str> = (1..=4).map(|pair| BUILDS[order(pair)[0]]).collect();
        assert_eq!(firsts, ["this", "baseline", "this", "baseline"]);
        for pair in 1..=4 {
            let [first, second] = order(pair);
            assert_ne!(first, second);
        }
    }

    #[test]
    fn the_ratios_median_and_the_pairs_this_build_is_higher_in() {
        // Ratios 1.1, 0.5, 1.2: the median 1.1, higher in two of three.
        let (ratio, higher) = compared(&[(1.1, 1.0), (1.0, 2.0), (2.4, 2.0)]);
        assert!((ratio - 1.1).abs() < 1e-9, "{ratio}");
        assert_eq!(higher, 2);
        // Equal figures are not higher.
        assert_eq!(compared(&[(3.0, 3.0)]), (1.0, 0));
    }
}
