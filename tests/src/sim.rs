//! A deterministic simulation of the whole pattern: submission, schedulers, agents,
//! supervisors and an operator over the in-memory backend, on a virtual clock, with
//! a seeded random source choosing every interleaving and every fault: messages
//! delayed, reordered, duplicated and lost; handlers that crash before or after any
//! write; agents running past complete-by; remote services failing transiently,
//! for good, hanging or down; two supervisors sweeping at once; schedulers
//! restarting; operators resubmitting, cancelling, pausing and resuming; callbacks
//! used twice, late, or by a token gone dead, heartbeats lost ([`waits`]). The same
//! seed replays the same run. Odd
//! seeds buffer their submissions: a scheduler creates each task from an ingest
//! queue, whose messages are crashed on, duplicated, delayed and dead-lettered (SQS
//! keeps a message until it is handled: an ingest message is never dropped, but it
//! may end in the dead-letter queue, whose alarm an operator answers by redriving
//! it).
//!
//! After a phase of chaos, the faults stop (but for the permanent ones) and the
//! system must settle: every task Processed or Error within a bound of virtual time,
//! with the invariants holding throughout ([`transitions`]) and at the end ([`end`]).
//!
//! This module holds the run of one seed and what it found; its parts, each a module
//! of its own: [`world`], the randomness and the record of a run; [`store`],
//! [`queues`] and [`remote`], the ports with their faults; [`transitions`], the
//! invariants of every write; [`generated`] and [`machine`], the seed's own workflows
//! and state machine; [`setup`], the system assembled; [`delivery`], messages handed
//! to the functions; [`chaos`], the actions of the chaos phase; [`waits`], callbacks,
//! heartbeats and pauses; [`end`], the settling and the invariants at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use sas_core::app::{App, Ports, QueueNames};
use sas_core::step_caller::StepCaller;
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::workflow::Registry;
use sas_testkit::ManualClock;
use sas_testkit::memory::Memory;
use serde_json::Value;

mod chaos;
mod delivery;
mod end;
mod generated;
mod machine;
mod queues;
mod remote;
mod repairs;
mod setup;
mod store;
mod transitions;
mod waits;
mod world;

use remote::SimRemote;
use world::Shared;

/// The queue of the callers that ask for notifications.
const CALLERS: &str = "callers";

/// How long the system has to settle once the chaos stops, beyond the longest its
/// generated workflow sleeps ([`Sim::settle_bound`]).
const SETTLE_BOUND: Duration = Duration::from_secs(3600);
/// Actions of the chaos phase.
const CHAOS_STEPS: usize = 400;

/// What one seed's run found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// Broken invariants; empty when the run is sound.
    pub violations: Vec<String>,
    /// The events of the run, in order.
    pub trace: Vec<String>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Tasks by final state.
    pub ended: BTreeMap<String, usize>,
    /// Whether submissions were buffered (odd seeds).
    pub buffered: bool,
}

impl Outcome {
    /// The command that replays this seed with its trace.
    #[must_use]
    pub fn reproduce(&self) -> String {
        format!(
            "cargo run -p sas-tools --bin simulate -- --seed {} --trace",
            self.seed
        )
    }

    /// A report of a failed run: the violations, the command, the trace's end.
    #[must_use]
    pub fn report(&self, trace_lines: usize) -> String {
        let mut text = format!(
            "seed {} ({} ingestion) broke {} invariant(s):\n",
            self.seed,
            if self.buffered { "buffered" } else { "direct" },
            self.violations.len()
        );
        for violation in &self.violations {
            let _ = writeln!(text, "  - {violation}");
        }
        let _ = writeln!(text, "reproduce: {}", self.reproduce());
        let _ = writeln!(text, "last {} events:", trace_lines.min(self.trace.len()));
        for line in &self.trace[self.trace.len().saturating_sub(trace_lines)..] {
            let _ = writeln!(text, "  {line}");
        }
        text
    }
}

/// The simulated system.
struct Sim {
    world: Shared,
    clock: Arc<ManualClock>,
    memory: Arc<Memory>,
    remote: Arc<SimRemote>,
    ports: Ports,
    workflows: Arc<Registry>,
    names: QueueNames,
    /// The queue of buffered submissions, and its dead-letter queue, for odd seeds.
    ingest: Option<(QueueName, QueueName)>,
    schedulers: Vec<Arc<App>>,
    supervisors: Vec<Arc<App>>,
    step_caller: Arc<StepCaller>,
    restarts: usize,
    submitted: Vec<(TaskId, Value)>,
    accepted: BTreeSet<String>,
    resubmitted: BTreeSet<String>,
    /// Every callback token seen: sent to a service, or shown in a task's view.
    tokens: Vec<String>,
    /// What an execution of the seed's state machine that succeeds comes to.
    machine: machine::Expected,
    /// How long the system has to settle once the chaos stops: [`SETTLE_BOUND`] and
    /// the longest its generated workflow sleeps, which a task started just before
    /// may still have ahead of it.
    settle_bound: Duration,
}

/// Runs one seed.
///
/// # Panics
/// When the runtime cannot be built.
#[must_use]
pub fn run(seed: u64) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut sim = Sim::new(seed);
        sim.submit().await;
        for _ in 0..CHAOS_STEPS {
            sim.chaos_step().await;
        }
        let settled = sim.settle().await;
        sim.check_end(settled);
        let tasks = sim.memory.tasks();
        let world = sim.world.world();
        let mut ended = BTreeMap::new();
        for task in tasks {
            *ended.entry(task.state.as_str().to_owned()).or_default() += 1;
        }
        Outcome {
            seed,
            violations: world.violations.clone(),
            trace: world.trace.clone(),
            faults: world.faults.clone(),
            ended,
            buffered: sim.ingest.is_some(),
        }
    })
}
