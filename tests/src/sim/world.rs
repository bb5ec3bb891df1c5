//! The simulation's world: the seeded randomness, the fault switch, the faults
//! counted, the trace and the violations of a run, shared by every part.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use sas_core::clock::Clock;
use sas_domain::time::Timestamp;
use sas_testkit::ManualClock;

/// The randomness, the fault switch, the counters and the record of a run.
pub(super) struct World {
    pub(super) random: fastrand::Rng,
    pub(super) chaos: bool,
    pub(super) clock: Arc<ManualClock>,
    pub(super) start: Timestamp,
    pub(super) faults: BTreeMap<&'static str, u64>,
    pub(super) trace: Vec<String>,
    pub(super) violations: Vec<String>,
    /// Times each (task, run, step) became Processed (a state machine's step, each
    /// visit of its state: `STATE#VISIT`).
    pub(super) completions: HashMap<(String, u32, String), u32>,
    /// Each (task, run) that reached Error: each must have its alert published,
    pub(super) reached_error: BTreeSet<(String, u32)>,
    /// unless an operator resubmitted it first (the operator saw it without one).
    pub(super) acted_on: BTreeSet<(String, u32)>,
    /// Each status change written of a task that asks for notifications, as (task,
    /// version, state): each must reach the callers' queue at least once.
    pub(super) owed: BTreeSet<(String, u64, String)>,
    /// Callbacks taken, by token and its task's run: a token ends at most one wait
    /// a run.
    pub(super) token_uses: HashMap<(String, u32), u32>,
    /// How many times each activity task (by its token) was given to a worker.
    pub(super) activity_given: HashMap<String, u32>,
}

#[derive(Clone)]
pub(super) struct Shared(pub(super) Arc<Mutex<World>>);

impl Shared {
    pub(super) fn world(&self) -> MutexGuard<'_, World> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// True with probability `p` while the chaos lasts, counting a fault of `kind`.
    pub(super) fn fault(&self, kind: &'static str, p: f64) -> bool {
        let mut world = self.world();
        let hit = world.chaos && world.random.f64() < p;
        if hit {
            *world.faults.entry(kind).or_default() += 1;
        }
        hit
    }

    pub(super) fn chance(&self, p: f64) -> bool {
        self.world().random.f64() < p
    }

    pub(super) fn below(&self, n: usize) -> usize {
        self.world().random.usize(..n.max(1))
    }

    pub(super) fn note(&self, event: impl AsRef<str>) {
        let mut world = self.world();
        let at = world.start.until(world.clock.now());
        let line = format!("t={:>9.3}s {}", at.as_secs_f64(), event.as_ref());
        world.trace.push(line);
    }

    pub(super) fn violation(&self, what: String) {
        let mut world = self.world();
        if !world.violations.contains(&what) {
            world.violations.push(what);
        }
    }

    /// Lets other handlers run first, a random number of times: the interleaving.
    pub(super) async fn interleave(&self) {
        let yields = self.world().random.u8(..3);
        for _ in 0..yields {
            tokio::task::yield_now().await;
        }
    }
}
