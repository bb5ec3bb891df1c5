//! The gates' lines at work ([`sas_domain::flow`]): a call is put in the line of its
//! first gate; a gate with a slot free (and a token of its rate) gives it to the first
//! of its line, which goes on to its next gate's line, or, given a slot of each, is
//! sent (a Granted message to the scheduler); a call that ends gives its slots back,
//! and the lines move on. Every change of a gate is a write conditional on its
//! version: two schedulers at one gate give each slot once.

use std::time::Duration;

use tracing::warn;

use crate::ports::{Chain, Outgoing, OutgoingMessage, StoreError};
use sas_domain::decide::SLOT_RECHECK;
use sas_domain::flow::{Admission, CallRef, Gate, Grant, Waiter};
use sas_domain::messages::SchedulerMessage;
use sas_domain::time::Timestamp;

use super::App;
use super::locks::{Striped, stable_hash};

/// The most calls one pass of a gate reads and gives slots to (a gate with more slots
/// free passes again).
const GRANTS_A_PASS: usize = 10;
/// The tries at a gate that other processes keep changing, before the change is left
/// to the next release, tick or recheck (a slot not given back comes back when its
/// hold ends): a few seconds of tries, with the backoff below.
const TRIES: u32 = 12;
/// The longest pause between two tries at a gate (each pause a random share of a
/// doubling bound, from a millisecond).
const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// Locks that keep this process's changes of one gate one at a time: its own writers
/// do not race for the gate's record (a process may move one line from many tasks at
/// once), and its conditional writes lose only to other processes'. Striped: keyed
/// gates need no lock each.
pub(super) type GateLocks = Striped<64>;

impl App {
    /// Puts a call in the line of its first gate, and moves that line on. A call
    /// asked for again by the supervisor has waited a recheck at least: its wait so
    /// far is a `SlotWait` metric, which grows while its gates stay shut (a call put
    /// in line for the first time has waited nothing, and records nothing).
    pub(super) async fn admit(&self, admission: Admission) {
        let now = self.clock.now();
        if admission.since.until(now) >= SLOT_RECHECK {
            self.record_wait(&admission, now);
        }
        let waiter = Waiter {
            admission,
            at: 0,
            held_until: None,
        };
        self.line_up(waiter).await;
    }

    /// Puts `waiter` in its gate's line and moves the line on; a call with no gate
    /// left is granted.
    async fn line_up(&self, waiter: Waiter) {
        let Some(gate) = waiter.gate().map(|g| g.name.clone()) else {
            let until = waiter.held_until.unwrap_or(Timestamp(i64::MAX));
            self.record_wait(&waiter.admission, self.clock.now());
            return self.grant(&waiter.admission, until).await;
        };
        if let Err(error) = self.store.enqueue(&waiter).await {
            warn!(task_id = %waiter.admission.call.task_id, gate = %gate, error = %Chain(&error), "a call not put in its gate's line: the supervisor asks again");
            return;
        }
        Box::pin(self.move_line(&gate)).await;
    }

    /// Gives the slots of a call that has ended back to each of its gates, and moves
    /// their lines on: one change of each gate.
    pub(super) async fn release(&self, call: &CallRef, gates: &[String]) {
        let id = call.id();
        for gate in gates {
            self.pass(gate, Some(&id)).await;
        }
    }

    /// Moves gate `gate`'s line on: as many calls as may pass now get a slot, and go
    /// on (to their next gate, or sent). When the rate is what holds the line, a
    /// message comes back when its next token does.
    pub(super) async fn move_line(&self, gate: &str) {
        self.pass(gate, None).await;
    }

    /// [`Self::move_line`], the slot of call `releasing` given back in its first
    /// change, if any.
    async fn pass(&self, gate: &str, mut releasing: Option<&str>) {
        loop {
            if !self.move_line_once(gate, releasing.take()).await {
                return;
            }
        }
    }

    /// One pass of [`Self::move_line`], the slot of `releasing` given back in the
    /// same write: whether a full pass went through, and another may.
    async fn move_line_once(&self, gate: &str, releasing: Option<&str>) -> bool {
        let now = self.clock.now();
        let passed = self
            .change_gate(gate, GRANTS_A_PASS, |state, line| {
                let released = releasing.is_some_and(|id| state.holders.remove(id).is_some());
                let Some(limit) = line.first().and_then(Waiter::gate).map(|g| &g.limit) else {
                    return released.then(Vec::new);
                };
                // A call that holds a slot already (asked again, its turn lost) passes
                // on it, its hold renewed; the others take the slots open, in order.
                let (holding, waiting): (Vec<&Waiter>, Vec<&Waiter>) = line
                    .iter()
                    .partition(|w| state.holders.contains_key(&w.admission.call.id()));
                for waiter in &holding {
                    state
                        .holders
                        .insert(waiter.admission.call.id(), hold_until(waiter, now));
                }
                let open = state.open(limit, now, waiting.len());
                for waiter in &waiting[..open] {
                    state.take(limit, waiter.admission.call.id(), hold_until(waiter, now));
                }
                Some(
                    holding
                        .into_iter()
                        .chain(waiting[..open].iter().copied())
                        .cloned()
                        .collect(),
                )
            })
            .await;
        let (passed, left) = match passed {
            Ok(moved) => moved,
            Err(error) if releasing.is_some() => {
                warn!(gate = %gate, error = %Chain(&error), "a slot not given back: it comes back when its hold ends");
                return false;
            }
            Err(error) => {
                warn!(gate = %gate, error = %Chain(&error), "a gate's line did not move: the next release, tick or recheck moves it");
                return false;
            }
        };
        let full = passed.len() == GRANTS_A_PASS;
        for waiter in passed {
            let until = hold_until(&waiter, now);
            let next = Waiter {
                at: waiter.at + 1,
                held_until: Some(waiter.held_until.map_or(until, |held| held.min(until))),
                admission: waiter.admission,
            };
            self.line_up(next).await;
        }
        if let Some(at) = left {
            let wait = self.clock.now().until(at).max(Duration::from_millis(1));
            let tick = SchedulerMessage::Gate {
                gate: gate.to_owned(),
            };
            let message = Outgoing {
                queue: self.names.scheduler.clone(),
                message: OutgoingMessage::json(&tick, wait),
            };
            if let Err(error) = self.send(vec![message]).await {
                warn!(gate = %gate, error = %Chain(&error), "a gate's tick not sent: the next release or recheck moves its line");
            }
        }
        full
    }

    /// Changes gate `gate` as `change` says, given its state and the `first` of its
    /// line (`None` or no call passing: nothing to write), on condition of its
    /// version, trying again while other writers win: the calls that passed, and,
    /// when some are left waiting for the rate's next token, when that comes.
    async fn change_gate(
        &self,
        gate: &str,
        first: usize,
        change: impl Fn(&mut Gate, &[Waiter]) -> Option<Vec<Waiter>>,
    ) -> Result<(Vec<Waiter>, Option<Timestamp>), StoreError> {
        let _one_at_a_time = self.gate_locks.of(gate).lock().await;
        for tried in 0..TRIES {
            if tried > 0 {
                // Jittered by who tries (processes that lost to each other try again
                // apart), and the same in every replay of a simulation.
                let bound = Duration::from_millis(1 << tried.min(9)).min(MAX_BACKOFF);
                let share = stable_hash(&(&self.instance, gate, tried)) % 1024;
                #[expect(clippy::cast_precision_loss, reason = "below 1024: exact")]
                let share = share as f64 / 1024.0;
                self.clock.sleep(bound.mul_f64(share)).await;
            }
            let (mut state, line) = self.store.gate(gate, first).await?;
            let holders = state.holders.len();
            let Some(passing) = change(&mut state, &line) else {
                return Ok((Vec::new(), None));
            };
            let limit = line.first().and_then(Waiter::gate).map(|g| &g.limit);
            let next_token = limit
                .filter(|limit| limit.rate.is_some() && state.tokens < 1.0)
                .filter(|_| line.len() > passing.len())
                .and_then(|limit| state.next_token(limit));
            if passing.is_empty() && state.holders.len() == holders {
                // Nothing passes and nothing was given back: no write.
                return Ok((passing, next_token));
            }
            match self.store.update_gate(gate, &state, &passing).await {
                Ok(()) => return Ok((passing, next_token)),
                Err(StoreError::Conflict) => {}
                Err(error) => return Err(error),
            }
        }
        Err(StoreError::Conflict)
    }

    /// `SlotWait`: how long the call `admission` asks for has waited for its slots by
    /// `now`, by service.
    fn record_wait(&self, admission: &Admission, now: Timestamp) {
        let wait = admission.since.until(now);
        self.metrics
            .time("SlotWait", &[("Service", &admission.service)], wait);
    }

    /// Tells the scheduler that the call `admission` asked for has its slots, until
    /// `until`, in the trace of its step.
    async fn grant(&self, admission: &Admission, until: Timestamp) {
        let call = &admission.call;
        let grant = Grant {
            call: call.clone(),
            until,
        };
        let message = Outgoing {
            queue: self.names.scheduler.clone(),
            message: OutgoingMessage {
                trace: admission.trace.clone(),
                ..OutgoingMessage::json(&SchedulerMessage::Granted(grant), Duration::ZERO)
            },
        };
        if let Err(error) = self.send(vec![message]).await {
            warn!(task_id = %call.task_id, error = %Chain(&error), "a grant not sent: its slots come back when their hold ends, and its wait is asked for again");
        }
    }
}

/// Until when `waiter`, passing its gate now, holds its slot: its call's hold at its
/// last gate; at an earlier one, while it may wait at the next ones too (its wait is
/// asked for again, and the hold renewed, every [`SLOT_RECHECK`]).
fn hold_until(waiter: &Waiter, now: Timestamp) -> Timestamp {
    let last = waiter.at + 1 >= waiter.admission.gates.len();
    let waits_on = if last {
        Duration::ZERO
    } else {
        SLOT_RECHECK * 2
    };
    now.plus(waiter.admission.hold + waits_on)
}
