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
//! with the invariants below holding throughout and at the end.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use sas_core::app::{App, Ports, QueueNames};
use sas_core::clock::Clock;
use sas_core::ports::{
    AlertError, Alerts, CursorKey, CursorKeyStore, Expired, ExpiredCursor, GateStore, LeaseIndex,
    NoMetrics, OutgoingMessage, QueueError, Queues, RemoteCall, RemoteError, RemoteRequest,
    StoreError, TaskListing, TaskPage, TaskStore, Unreadable, WorkflowStore,
};
use sas_core::step_caller::StepCaller;
use sas_domain::decide::Resubmit;
use sas_domain::flow::{Gate, Waiter};
use sas_domain::ids::{CHILD_SEPARATOR, QueueName, TaskId};
use sas_domain::messages::{AgentRequest, Alert, SchedulerMessage};
use sas_domain::resilience::BreakerSettings;
use sas_domain::submission::Submission;
use sas_domain::task::{Actor, Order, Request, Step, StepState, Task, TaskState};
use sas_domain::time::Timestamp;
use sas_domain::workflow::{Registry, Workflow};
use sas_testkit::ManualClock;
use sas_testkit::memory::Memory;

use crate::in_memory;
use serde_json::{Value, json};

mod waits;

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

/// The randomness, the fault switch, the counters and the record of a run.
struct World {
    random: fastrand::Rng,
    chaos: bool,
    clock: Arc<ManualClock>,
    start: Timestamp,
    faults: BTreeMap<&'static str, u64>,
    trace: Vec<String>,
    violations: Vec<String>,
    /// Times each (task, run, step) became Processed.
    completions: HashMap<(String, u32, usize), u32>,
    /// Each (task, run) that reached Error: each must have its alert published,
    reached_error: BTreeSet<(String, u32)>,
    /// unless an operator resubmitted it first (the operator saw it without one).
    acted_on: BTreeSet<(String, u32)>,
    /// Each status change written of a task that asks for notifications, as (task,
    /// version, state): each must reach the callers' queue at least once.
    owed: BTreeSet<(String, u64, String)>,
    /// Callbacks taken, by token and its task's run: a token ends at most one wait
    /// a run.
    token_uses: HashMap<(String, u32), u32>,
}

#[derive(Clone)]
struct Shared(Arc<Mutex<World>>);

impl Shared {
    fn world(&self) -> MutexGuard<'_, World> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// True with probability `p` while the chaos lasts, counting a fault of `kind`.
    fn fault(&self, kind: &'static str, p: f64) -> bool {
        let mut world = self.world();
        let hit = world.chaos && world.random.f64() < p;
        if hit {
            *world.faults.entry(kind).or_default() += 1;
        }
        hit
    }

    fn chance(&self, p: f64) -> bool {
        self.world().random.f64() < p
    }

    fn below(&self, n: usize) -> usize {
        self.world().random.usize(..n.max(1))
    }

    fn note(&self, event: impl AsRef<str>) {
        let mut world = self.world();
        let at = world.start.until(world.clock.now());
        let line = format!("t={:>9.3}s {}", at.as_secs_f64(), event.as_ref());
        world.trace.push(line);
    }

    fn violation(&self, what: String) {
        let mut world = self.world();
        if !world.violations.contains(&what) {
            world.violations.push(what);
        }
    }

    /// Lets other handlers run first, a random number of times: the interleaving.
    async fn interleave(&self) {
        let yields = self.world().random.u8(..3);
        for _ in 0..yields {
            tokio::task::yield_now().await;
        }
    }
}

fn crash() -> StoreError {
    StoreError::Unavailable("simulated crash".into())
}

/// The state store as the actors see it: interleaved, crashing before or after its
/// writes, serving stale copies to eventually consistent reads, and checking every
/// transition written against the invariants.
struct FaultyStore {
    inner: Arc<Memory>,
    world: Shared,
    workflows: Arc<Registry>,
    /// Every version of every task written, oldest first: what a replica may still have.
    written: Mutex<HashMap<TaskId, Vec<(Task, Order)>>>,
}

impl FaultyStore {
    /// The invariants of one transition, from `old` (if any) to `new`.
    fn check(&self, old: Option<&Task>, new: &Task) {
        let Some(workflow) = self
            .workflows
            .version(&new.workflow.name, new.workflow.version)
        else {
            return self
                .world
                .violation(format!("task {} runs an unknown workflow", new.id));
        };
        if new.notify.is_some() && old.is_none_or(|o| o.state != new.state) {
            self.world.world().owed.insert((
                new.id.to_string(),
                new.version,
                new.state.as_str().to_owned(),
            ));
        }
        // A child alerts no operator (its parent does, if it fails), unless a person
        // must undo what it left.
        let alerts = new.parent.is_none() || new.needs_a_person();
        if new.state == TaskState::Error
            && old.is_none_or(|o| o.state != TaskState::Error)
            && alerts
        {
            self.world
                .world()
                .reached_error
                .insert((new.id.to_string(), new.run));
        }
        if let Some(old) = old.filter(|o| o.run < new.run) {
            // Resubmitted (a child, with its parent): a person acted on its alert.
            self.world
                .world()
                .acted_on
                .insert((new.id.to_string(), old.run));
        }
        self.check_children(old, new, &workflow);
        if let Some(old) = old.filter(|o| o.cancelled.is_some() && o.run == new.run) {
            if new.state == TaskState::Processed {
                self.world
                    .violation(format!("task {} Processed after a cancel", new.id));
            }
            let called = old.steps.iter().zip(&new.steps).any(|(was, is)| {
                was.state != StepState::Processing && is.state == StepState::Processing
            });
            if called {
                self.world
                    .violation(format!("task {} called a step after a cancel", new.id));
            }
        }
        if let Some(old) = old.filter(|o| o.run == new.run) {
            self.check_order(old, new, &workflow);
            let now = self.world.world().clock.now();
            for broken in waits::check_transition(old, new, now) {
                self.world.violation(broken);
            }
        }
        if new.state == TaskState::Processed && !new.steps.iter().all(Step::is_settled) {
            self.world.violation(format!(
                "task {} Processed with a step neither Processed nor Skipped",
                new.id
            ));
        }
        for (index, (step, definition)) in new.steps.iter().zip(&workflow.steps).enumerate() {
            let Some(call) = definition.call() else {
                continue;
            };
            let bound = call.supervision.failure_threshold + 1;
            if step.failure_count > bound || step.compensation_failure_count > bound {
                self.world.violation(format!(
                    "task {} step {} FailureCount {}/{} past the threshold {} by more than one",
                    new.id,
                    step.name,
                    step.failure_count,
                    step.compensation_failure_count,
                    bound - 1
                ));
            }
            // A completion is a step that was running becoming Processed (a step whose
            // compensation timed out goes back to the state it had, Processed for
            // most, to be undone again).
            let was_running = old.is_some_and(|o| o.steps[index].state == StepState::Processing);
            if step.state == StepState::Processed && was_running {
                let mut world = self.world.world();
                let count = world
                    .completions
                    .entry((new.id.to_string(), new.run, index))
                    .or_default();
                *count += 1;
                if *count > 1 {
                    drop(world);
                    self.world.violation(format!(
                        "task {} step {} completed twice in run {}",
                        new.id, step.name, new.run
                    ));
                }
            }
        }
    }

    /// The children of one transition: a step runs at most its `max_concurrency`
    /// children, counted and in the store; a task ends with none of its children
    /// running.
    fn check_children(&self, old: Option<&Task>, new: &Task, workflow: &Workflow) {
        for (step, definition) in new.steps.iter().zip(&workflow.steps) {
            let (Some(spec), Some(children)) = (definition.children(), &step.children) else {
                continue;
            };
            if children.running.len() > spec.max_concurrency as usize {
                self.world.violation(format!(
                    "task {} step {} counts {} children running, over its cap of {}",
                    new.id,
                    step.name,
                    children.running.len(),
                    spec.max_concurrency
                ));
            }
            let ended = new.state.is_final() && old.is_none_or(|o| !o.state.is_final());
            if !ended {
                continue;
            }
            let stored = self.inner.tasks();
            let running: Vec<String> = (0..children.started)
                .map(|item| new.id.child(&step.name, item))
                .filter(|id| stored.iter().any(|t| t.id == *id && !t.state.is_final()))
                .map(|id| id.to_string())
                .collect();
            if !running.is_empty() {
                self.world.violation(format!(
                    "task {} ended {:?} with children of {} running: {running:?}",
                    new.id, new.state, step.name
                ));
            }
        }
        let starts =
            new.parent.is_some() && !new.state.is_final() && old.is_none_or(|o| o.state.is_final());
        if let Some(link) = new.parent.as_ref().filter(|_| starts) {
            let stored = self.inner.tasks();
            let cap = stored
                .iter()
                .find(|t| t.id == link.task)
                .and_then(|p| self.workflows.version(&p.workflow.name, p.workflow.version))
                .and_then(|w| Some(w.steps.get(link.step)?.children()?.max_concurrency));
            let siblings = stored
                .iter()
                .filter(|t| t.id != new.id && !t.state.is_final())
                .filter(|t| {
                    t.parent
                        .as_ref()
                        .is_some_and(|p| p.task == link.task && p.step == link.step)
                })
                .count();
            if let Some(cap) = cap.filter(|&cap| siblings + 1 > cap as usize) {
                self.world.violation(format!(
                    "child {} runs beside {siblings} siblings, over their cap of {cap}",
                    new.id
                ));
            }
        }
    }

    /// The order of one transition's calls and compensations: a step is called only
    /// once the steps it waits for are Processed (or Skipped), and not while the task is being
    /// undone; a step is undone only once every step done after it is (branches undo
    /// in the reverse of the order their effects came to be in place), and no call
    /// is out; a call waiting for its retry is not sent before its time.
    fn check_order(&self, old: &Task, new: &Task, workflow: &Workflow) {
        for (index, (was, is)) in old.steps.iter().zip(&new.steps).enumerate() {
            let sent = |state| was.state != state && is.state == state;
            if sent(StepState::Processing) {
                let waiting: Vec<&str> = workflow.steps[index]
                    .after
                    .iter()
                    .filter(|&&before| !new.steps[before].is_settled())
                    .map(|&before| new.steps[before].name.as_str())
                    .collect();
                if !waiting.is_empty() {
                    self.world.violation(format!(
                        "task {} called {} before {waiting:?}",
                        new.id, is.name
                    ));
                }
                if old.state == TaskState::Compensating {
                    self.world.violation(format!(
                        "task {} called {} while being undone",
                        new.id, is.name
                    ));
                }
                let now = self.world.world().clock.now();
                if let Some(due) = was
                    .retry_at
                    .filter(|due| now.plus(Duration::from_secs(1)) < *due)
                {
                    self.world.violation(format!(
                        "task {} called {} at {now}, before its retry's time {due}",
                        new.id, is.name
                    ));
                }
            }
            if sent(StepState::Compensating) {
                let later: Vec<&str> = new
                    .steps
                    .iter()
                    .zip(&workflow.steps)
                    .filter(|(other, definition)| {
                        other.done_order > is.done_order
                            && definition.can_be_undone()
                            && matches!(
                                other.state,
                                StepState::Processed | StepState::TimedOut | StepState::Unusable
                            )
                    })
                    .map(|(other, _)| other.name.as_str())
                    .collect();
                if !later.is_empty() {
                    self.world.violation(format!(
                        "task {} undid {} before {later:?}, done after it",
                        new.id, is.name
                    ));
                }
                if let Some(out) = new.steps.iter().find(|s| s.state == StepState::Processing) {
                    self.world.violation(format!(
                        "task {} undid {} while the call of {} is out",
                        new.id, is.name, out.name
                    ));
                }
            }
        }
    }

    /// Keeps the version of a task just written, for the stale reads.
    async fn remember(&self, id: &TaskId) -> Result<(), StoreError> {
        if let Some(stored) = self.inner.task_with_order(id).await? {
            self.written
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(id.clone())
                .or_default()
                .push(stored);
        }
        Ok(())
    }

    async fn write<T>(
        &self,
        kind: &'static str,
        write: impl AsyncFnOnce() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.world.interleave().await;
        if self.world.fault("crash before a write", 0.03) {
            self.world.note(format!("  crash before {kind}"));
            return Err(crash());
        }
        let written = write().await?;
        if self.world.fault("crash after a write", 0.03) {
            self.world.note(format!("  crash after {kind}"));
            return Err(crash());
        }
        // The write landed and its answer was lost: the SDK's retry of it then
        // fails its own condition.
        if self.world.fault("write applied, conflict returned", 0.03) {
            self.world
                .note(format!("  {kind} applied, a conflict returned"));
            return Err(StoreError::Conflict);
        }
        Ok(written)
    }
}

#[async_trait]
impl TaskStore for FaultyStore {
    async fn create(&self, task: &Task, order: &Order) -> Result<(), StoreError> {
        self.write("a creation", async || {
            self.inner.create(task, order).await?;
            self.check(None, task);
            self.remember(&task.id).await
        })
        .await
    }

    async fn task(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        self.world.interleave().await;
        self.inner.task(id).await
    }

    async fn task_with_order(&self, id: &TaskId) -> Result<Option<(Task, Order)>, StoreError> {
        self.world.interleave().await;
        self.inner.task_with_order(id).await
    }

    /// A replica a write or more behind, at times: any earlier version, or none yet.
    async fn task_with_order_eventually_consistent(
        &self,
        id: &TaskId,
    ) -> Result<Option<(Task, Order)>, StoreError> {
        self.world.interleave().await;
        if self.world.fault("stale read", 0.2) {
            let written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
            let earlier = written.get(id).map_or(&[][..], |w| &w[..w.len() - 1]);
            let pick = self.world.below(earlier.len() + 1);
            let stale = earlier.get(pick).cloned();
            drop(written);
            self.world.note(format!(
                "  stale read of {id}: {}",
                stale
                    .as_ref()
                    .map_or("none yet".to_owned(), |(t, _)| format!(
                        "version {}",
                        t.version
                    ))
            ));
            return Ok(stale);
        }
        self.inner.task_with_order(id).await
    }

    async fn update(&self, task: &Task) -> Result<(), StoreError> {
        self.write("an update", async || {
            let old = self.inner.task(&task.id).await?;
            self.inner.update(task).await?;
            self.check(old.as_ref(), task);
            self.remember(&task.id).await
        })
        .await
    }

    async fn update_with_order(&self, task: &Task, order: &Order) -> Result<(), StoreError> {
        self.write("an update with its order", async || {
            let old = self.inner.task(&task.id).await?;
            self.inner.update_with_order(task, order).await?;
            self.check(old.as_ref(), task);
            self.remember(&task.id).await
        })
        .await
    }
}

#[async_trait]
impl LeaseIndex for FaultyStore {
    async fn expired(
        &self,
        now: Timestamp,
        limit: usize,
        from: &ExpiredCursor,
    ) -> Result<Expired, StoreError> {
        self.world.interleave().await;
        self.inner.expired(now, limit, from).await
    }

    async fn quarantine(&self, record: &Unreadable) -> Result<(), StoreError> {
        self.inner.quarantine(record).await
    }
}

#[async_trait]
impl TaskListing for FaultyStore {
    async fn list(
        &self,
        state: TaskState,
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        self.inner.list(state, limit, after).await
    }
}

#[async_trait]
impl WorkflowStore for FaultyStore {
    async fn save_workflow(&self, workflow: &Workflow) -> Result<(), StoreError> {
        self.inner.save_workflow(workflow).await
    }

    async fn load_workflow(&self, name: &str, version: u32) -> Result<Option<String>, StoreError> {
        self.inner.load_workflow(name, version).await
    }
}

#[async_trait]
impl CursorKeyStore for FaultyStore {
    async fn cursor_key(&self, drawn: CursorKey) -> Result<CursorKey, StoreError> {
        self.inner.cursor_key(drawn).await
    }
}

#[async_trait]
impl GateStore for FaultyStore {
    async fn gate(&self, gate: &str, first: usize) -> Result<(Gate, Vec<Waiter>), StoreError> {
        self.world.interleave().await;
        self.inner.gate(gate, first).await
    }

    async fn enqueue(&self, waiter: &Waiter) -> Result<(), StoreError> {
        self.write("a call put in a gate's line", async || {
            self.inner.enqueue(waiter).await
        })
        .await
    }

    async fn update_gate(
        &self,
        name: &str,
        gate: &Gate,
        taken: &[Waiter],
    ) -> Result<(), StoreError> {
        self.write("a gate's update", async || {
            self.inner.update_gate(name, gate, taken).await?;
            // A gate gives no more slots than its limit: those held and not past.
            let now = self.world.world().clock.now();
            let held = gate.holders.values().filter(|until| **until > now).count();
            let max = taken.first().and_then(|w| w.gate()?.limit.max_concurrency);
            if let Some(max) = max.filter(|max| held > *max as usize) {
                self.world.violation(format!(
                    "gate {name} gave {held} slots, over its limit of {max}"
                ));
            }
            Ok(())
        })
        .await
    }
}

/// The queues as the actors see them: sends interleaved, crashing before or after,
/// and delayed at random (which reorders them).
struct FaultyQueues {
    inner: Arc<Memory>,
    world: Shared,
}

#[async_trait]
impl Queues for FaultyQueues {
    async fn send(
        &self,
        queue: &QueueName,
        messages: &[OutgoingMessage],
    ) -> Result<(), QueueError> {
        self.world.interleave().await;
        let failed = || QueueError::new(queue, "simulated crash");
        if queue.as_str() == CALLERS && self.world.fault("notification send failed", 0.2) {
            self.world.note(format!("  a send to {queue} failed"));
            return Err(failed());
        }
        if self.world.fault("crash before a send", 0.03) {
            self.world.note(format!("  crash before a send to {queue}"));
            return Err(failed());
        }
        let mut delayed = messages.to_vec();
        for message in &mut delayed {
            if self.world.fault("message delayed", 0.1) {
                let extra = Duration::from_millis(self.world.world().random.u64(1..20_000));
                message.delay += extra;
            }
        }
        self.inner.send(queue, &delayed).await?;
        if self.world.fault("crash after a send", 0.03) {
            self.world.note(format!("  crash after a send to {queue}"));
            return Err(failed());
        }
        Ok(())
    }
}

/// The operators' alert channel: down at times, or the function dies before it
/// publishes (the same to the operator: no alert).
struct FaultyAlerts {
    inner: Arc<Memory>,
    world: Shared,
}

#[async_trait]
impl Alerts for FaultyAlerts {
    async fn raise(&self, alert: &Alert) -> Result<(), AlertError> {
        self.world.interleave().await;
        if self.world.fault("alert not published", 0.2) {
            self.world
                .note(format!("  alert for {} not published", alert.task_id));
            return Err(AlertError("simulated publish failure".into()));
        }
        self.inner.raise(alert).await
    }
}

/// A remote effect, as the simulated services applied it.
#[derive(Debug, Clone)]
struct Applied {
    task: String,
    step: String,
    compensation: bool,
}

/// The remote services: idempotent by key, with transient and permanent errors,
/// hangs past the deadline and outages.
struct SimRemote {
    world: Shared,
    clock: Arc<ManualClock>,
    /// Effects applied, by (service, key).
    applied: Mutex<BTreeMap<(String, String), Applied>>,
    /// Steps whose call fails for good, by (task, step).
    doomed: Mutex<BTreeSet<(String, String)>>,
    /// Calls refused for good, by (service, key): the same key gets the same answer
    /// (a call of an earlier run, delivered again after a resubmission, is refused
    /// again, not applied).
    refused: Mutex<BTreeSet<(String, String)>>,
    /// Services down until the instant given.
    outages: Mutex<HashMap<String, Timestamp>>,
    /// The callback tokens of the calls applied, in the order they came.
    tokens: Mutex<Vec<String>>,
    /// The services limited to so many calls at once, and the calls each has in
    /// progress, by idempotency key (a request delivered twice at once is one call,
    /// twice): never more.
    limits: HashMap<String, u32>,
    in_flight: Mutex<HashMap<String, HashMap<String, u32>>>,
}

/// A call in progress at a simulated service, counted while it lives.
struct InFlight<'a> {
    remote: &'a SimRemote,
    service: String,
    key: String,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut all = self
            .remote
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let calls = all.entry(self.service.clone()).or_default();
        if let Some(count) = calls.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                calls.remove(&self.key);
            }
        }
    }
}

impl SimRemote {
    fn applied(&self) -> MutexGuard<'_, BTreeMap<(String, String), Applied>> {
        self.applied.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a call of `service` under `key` in progress, checking its limit.
    fn enter(&self, service: &str, key: &str) -> InFlight<'_> {
        let mut all = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let calls = all.entry(service.to_owned()).or_default();
        *calls.entry(key.to_owned()).or_default() += 1;
        let now = calls.len();
        if let Some(limit) = self
            .limits
            .get(service)
            .filter(|limit| now > **limit as usize)
        {
            drop(all);
            self.world.violation(format!(
                "service {service} had {now} calls at once, over its limit of {limit}"
            ));
        }
        InFlight {
            remote: self,
            service: service.to_owned(),
            key: key.to_owned(),
        }
    }

    fn tokens(&self) -> Vec<String> {
        self.tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl RemoteCall for SimRemote {
    async fn call(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        let _in_flight = self.enter(&request.service, &request.idempotency_key);
        self.world.interleave().await;
        let payload = request.payload.value();
        let task = payload["task_id"].as_str().unwrap_or_default().to_owned();
        let step = payload["step"].as_str().unwrap_or_default().to_owned();
        let compensation = request.idempotency_key.ends_with("/compensate");
        let now = self.clock.now();
        if self
            .outages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&request.service)
            .is_some_and(|until| now < *until)
        {
            return Err(RemoteError::Transient("outage".into()));
        }
        if self.world.fault("remote outage", 0.005) {
            let until = now.plus(Duration::from_secs(self.world.world().random.u64(1..120)));
            self.outages
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(request.service.clone(), until);
            return Err(RemoteError::Transient("outage".into()));
        }
        if self.world.fault("remote transient error", 0.08) {
            return Err(RemoteError::Transient("503".into()));
        }
        let doomed = self
            .doomed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&(task.clone(), step.clone()));
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        let answered = (request.service.clone(), request.idempotency_key.clone());
        if refused.contains(&answered) || (doomed && !compensation) {
            refused.insert(answered);
            return Err(RemoteError::Permanent("refused".into()));
        }
        // A key answers as it first did: one applied is never refused after.
        if task.contains(CHILD_SEPARATOR)
            && !compensation
            && !self.applied().contains_key(&answered)
            && self.world.fault("a child's call refused for good", 0.02)
        {
            refused.insert(answered);
            return Err(RemoteError::Permanent("refused".into()));
        }
        drop(refused);
        if compensation
            && self
                .world
                .fault("remote permanent error on a compensation", 0.01)
        {
            return Err(RemoteError::Permanent("cannot undo".into()));
        }
        self.applied()
            .entry((request.service.clone(), request.idempotency_key.clone()))
            .or_insert(Applied {
                task,
                step,
                compensation,
            });
        if let Some(token) = payload["callback_token"].as_str() {
            // The service may call back from now on.
            self.tokens
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(token.to_owned());
        }
        if self.world.fault("remote hang past the deadline", 0.04) {
            // The effect is applied; the answer comes after the call's whole time.
            self.clock
                .advance(request.timeout + Duration::from_millis(1));
            return Err(RemoteError::Transient("timed out".into()));
        }
        Ok(json!({ "id": request.idempotency_key }))
    }
}

/// The workflows of the seed's own: `generated`, a line of two to four items, each a
/// step, a parallel step of two or three branches (one of them, at most, with a
/// parallel step inside), or a step that starts children of `generated-kid` (a map
/// over `input.items`, or one child), or a wait (a timer, of seconds or of 20
/// minutes, or a callback without a service); and `generated-kid`, a line of one or
/// two steps. The steps are undone by a compensation, read-only, or neither, at
/// random; some calls wait for a callback after their service answers, with
/// heartbeats or not; some steps have a condition on the input. Every service is the
/// simulated remote. With them, the longest a task of `generated` sleeps
/// ([`sleeps_in_line`]): up to sixteen timers of 20 minutes one after another.
fn generated_workflows(random: &mut fastrand::Rng) -> ([Workflow; 2], Duration) {
    fn step(random: &mut fastrand::Rng, names: &mut usize) -> Value {
        *names += 1;
        let name = format!("s{names}");
        let mut step = json!({"name": name, "agent": format!("svc{}", random.usize(1..4)), "call": format!("/{name}")});
        match random.usize(0..10) {
            0..=5 => step["compensation"] = json!(format!("/{name}/undo")),
            6..=7 => step["read_only"] = json!(true),
            _ => {}
        }
        if random.usize(0..8) == 0 {
            step["limit"] = json!({"max_concurrency": random.usize(1..3)});
        }
        if random.usize(0..6) == 0 {
            let timeout = random.usize(5..60);
            step["callback"] = json!({"timeout": format!("{timeout}s")});
            if random.bool() {
                step["callback"]["heartbeat"] = json!(format!("{}s", random.usize(2..timeout)));
            }
        }
        step
    }
    fn wait(random: &mut fastrand::Rng, names: &mut usize) -> Value {
        *names += 1;
        let name = format!("w{names}");
        match random.usize(0..5) {
            0..=1 => json!({"name": name, "sleep": format!("{}s", random.usize(1..30))}),
            2 => json!({"name": name, "sleep": "20m"}),
            _ => {
                json!({"name": name, "callback": {"timeout": format!("{}s", random.usize(5..60))}})
            }
        }
    }
    fn conditional(random: &mut fastrand::Rng, mut step: Value) -> Value {
        if random.usize(0..5) == 0 {
            step["when"] = json!(format!("size(input.items) >= {}", random.usize(0..4)));
        }
        step
    }
    fn children(random: &mut fastrand::Rng, names: &mut usize) -> Value {
        *names += 1;
        let name = format!("c{names}");
        if random.bool() {
            return json!({"name": name, "workflow": "generated-kid", "input": {"order_id": "input.order_id"}});
        }
        let tolerated = match random.usize(0..3) {
            0 => json!(0),
            1 => json!(1),
            _ => json!("50%"),
        };
        json!({"name": name, "map": {
            "items": "input.items", "workflow": "generated-kid",
            "max_concurrency": random.usize(1..4), "tolerated_failures": tolerated,
            "input": {"order_id": "item.key"},
        }})
    }
    fn sequence(
        random: &mut fastrand::Rng,
        names: &mut usize,
        len: usize,
        depth: u32,
    ) -> Vec<Value> {
        (0..len)
            .map(|_| match random.usize(0..8) {
                0..=1 if depth < 2 => {
                    *names += 1;
                    let name = format!("p{names}");
                    let branches: Vec<Value> = (0..random.usize(2..4))
                        .map(|_| {
                            let len = random.usize(1..3);
                            json!(sequence(random, names, len, depth + 1))
                        })
                        .collect();
                    json!({"name": name, "parallel": branches})
                }
                2 => children(random, names),
                3 => {
                    let wait = wait(random, names);
                    conditional(random, wait)
                }
                _ => {
                    let step = step(random, names);
                    conditional(random, step)
                }
            })
            .collect()
    }
    let defaults = json!({
        "complete_by": "10s",
        "retry": {"attempts": 3, "initial_backoff": "100ms", "max_backoff": "1s"},
        "supervisor": {"failure_threshold": 2, "retry_delay": "1s", "extended_wait": "20s"}
    });
    let mut names = 0;
    let len = random.usize(2..5);
    let steps = sequence(random, &mut names, len, 0);
    let sleeps = sleeps_in_line(&steps);
    let parent = json!({
        "name": "generated",
        "version": 1,
        "input": {"order_id": "string", "items": "array<object>"},
        "defaults": defaults,
        "steps": steps,
    });
    let len = random.usize(1..3);
    let kid = json!({
        "name": "generated-kid",
        "version": 1,
        "input": {"order_id": "string"},
        "defaults": defaults,
        "steps": (0..len).map(|_| step(random, &mut names)).collect::<Vec<_>>(),
    });
    let workflows = [parent, kid].map(|text| {
        Workflow::parse("generated.json", &text.to_string()).expect("a generated workflow is valid")
    });
    (workflows, sleeps)
}

/// The longest that a line of steps as written sleeps, one timer after another: a
/// parallel step's longest branch, whether or not its condition holds.
fn sleeps_in_line(steps: &[Value]) -> Duration {
    steps
        .iter()
        .map(|step| match (&step["parallel"], &step["sleep"]) {
            (Value::Array(branches), _) => branches
                .iter()
                .map(|branch| sleeps_in_line(branch.as_array().map_or(&[], Vec::as_slice)))
                .max()
                .unwrap_or_default(),
            (_, Value::String(sleep)) => {
                humantime::parse_duration(sleep).expect("a generated sleep is valid")
            }
            _ => Duration::ZERO,
        })
        .sum()
}

/// Some of the simulated services (and the drone's) limited to one to three calls at
/// once, at random.
fn service_limits(random: &mut fastrand::Rng) -> BTreeMap<String, u32> {
    ["svc1", "svc2", "svc3", "drone"]
        .into_iter()
        .filter_map(|service| {
            let limited = random.bool();
            let max = random.u32(1..4);
            limited.then(|| (service.to_owned(), max))
        })
        .collect()
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
    /// How long the system has to settle once the chaos stops: [`SETTLE_BOUND`] and
    /// the longest its generated workflow sleeps, which a task started just before
    /// may still have ahead of it.
    settle_bound: Duration,
}

impl Sim {
    fn new(seed: u64) -> Self {
        let start = Timestamp(1_800_000_000_000);
        let clock = Arc::new(ManualClock::new(start));
        let world = Shared(Arc::new(Mutex::new(World {
            random: fastrand::Rng::with_seed(seed),
            chaos: true,
            clock: Arc::clone(&clock),
            start,
            faults: BTreeMap::new(),
            trace: Vec::new(),
            violations: Vec::new(),
            completions: HashMap::new(),
            reached_error: BTreeSet::new(),
            acted_on: BTreeSet::new(),
            owed: BTreeSet::new(),
            token_uses: HashMap::new(),
        })));
        let (memory, names) = in_memory(&clock, Some(5));
        let callers = QueueName::parse(CALLERS).expect("name");
        memory.create_queue(&callers, Duration::from_secs(30), None);
        let ingest = (seed % 2 == 1).then(|| {
            let name = |n: &str| QueueName::parse(n).expect("name");
            let (ingest, dead_letter) = (name("ingest"), name("ingest-dlq"));
            memory.create_queue(
                &ingest,
                Duration::from_secs(30),
                Some((5, dead_letter.clone())),
            );
            (ingest, dead_letter)
        });
        let workflows = Arc::new(Registry::built_in());
        let (generated, sleeps) = generated_workflows(&mut world.world().random);
        for generated in generated {
            world.note(format!("generated workflow: {}", generated.source));
            workflows.add(generated).expect("a new workflow");
        }
        let limits = service_limits(&mut world.world().random);
        world.note(format!("services limited to calls at once: {limits:?}"));
        let settings: HashMap<String, sas_domain::services::Service> = limits
            .iter()
            .map(|(service, max)| {
                let json = json!({ service: { "url": "sim", "max_concurrency": max } });
                let parsed = sas_domain::services::parse(&json.to_string()).expect("valid");
                (service.clone(), parsed[service].clone())
            })
            .collect();
        workflows.limit_services(&settings);
        let queues: Arc<FaultyQueues> = Arc::new(FaultyQueues {
            inner: Arc::clone(&memory),
            world: world.clone(),
        });
        let ports = Ports {
            store: Arc::new(FaultyStore {
                inner: Arc::clone(&memory),
                world: world.clone(),
                workflows: Arc::clone(&workflows),
                written: Mutex::default(),
            }),
            queues: Arc::clone(&queues) as _,
            alerts: Arc::new(FaultyAlerts {
                inner: Arc::clone(&memory),
                world: world.clone(),
            }),
            metrics: Arc::new(NoMetrics),
            clock: Arc::clone(&clock) as _,
        };
        let remote = Arc::new(SimRemote {
            world: world.clone(),
            clock: Arc::clone(&clock),
            applied: Mutex::new(BTreeMap::new()),
            doomed: Mutex::new(BTreeSet::new()),
            refused: Mutex::new(BTreeSet::new()),
            outages: Mutex::new(HashMap::new()),
            tokens: Mutex::new(Vec::new()),
            limits: limits.into_iter().collect(),
            in_flight: Mutex::new(HashMap::new()),
        });
        let step_caller = Arc::new(StepCaller::new(
            Arc::clone(&remote) as _,
            queues,
            Arc::clone(&clock) as _,
            names.agent_responses.clone(),
            BreakerSettings::default(),
            seed,
        ));
        let mut sim = Self {
            world,
            clock,
            memory,
            remote,
            ports,
            workflows,
            names,
            ingest,
            schedulers: Vec::new(),
            supervisors: Vec::new(),
            step_caller,
            restarts: 0,
            submitted: Vec::new(),
            accepted: BTreeSet::new(),
            resubmitted: BTreeSet::new(),
            tokens: Vec::new(),
            settle_bound: SETTLE_BOUND + sleeps,
        };
        for _ in 0..2 {
            let scheduler = sim.app();
            sim.schedulers.push(scheduler);
            let supervisor = sim.app();
            sim.supervisors.push(supervisor);
        }
        sim
    }

    fn app(&mut self) -> Arc<App> {
        self.restarts += 1;
        let instance = format!("instance-{}", self.restarts);
        let app = App::new(
            self.ports.clone(),
            Arc::clone(&self.workflows),
            self.names.clone(),
            instance,
        )
        .with_deadline_messages(true)
        // As on Lambda: requests carry their tasks sealed, responses give them back.
        .with_sealed_tasks(true);
        Arc::new(match &self.ingest {
            Some((ingest, _)) => app.with_ingestion(ingest.clone()),
            None => app,
        })
    }

    fn queues(&self) -> Vec<QueueName> {
        let mut queues = vec![
            self.names.scheduler.clone(),
            self.names.agent_requests.clone(),
            self.names.agent_responses.clone(),
        ];
        queues.extend(self.ingest.iter().map(|(ingest, _)| ingest.clone()));
        queues
    }

    /// Whether `queue` is the queue of buffered submissions.
    fn is_ingest(&self, queue: &QueueName) -> bool {
        self.ingest
            .as_ref()
            .is_some_and(|(ingest, _)| ingest == queue)
    }

    /// An operator, alarmed by the ingest dead-letter queue, sends its messages back.
    async fn redrive_ingest(&self) {
        let Some((ingest, dead_letter)) = &self.ingest else {
            return;
        };
        for message in self.memory.messages(dead_letter) {
            let describe = describe(&message.body);
            self.move_message(dead_letter, message.id, message.body, ingest)
                .await;
            self.world.note(format!("redrive {dead_letter} {describe}"));
        }
    }

    /// Takes message `id` (its body `body`) off `from` and puts it, visible, on `to`.
    async fn move_message(&self, from: &QueueName, id: u64, body: String, to: &QueueName) {
        self.memory.drop_message(from, id);
        let message = OutgoingMessage {
            body,
            delay: Duration::ZERO,
        };
        Queues::send(self.memory.as_ref(), to, &[message])
            .await
            .expect("the in-memory queue takes it");
    }

    /// Messages that may be received now, by queue and id.
    fn visible(&self) -> Vec<(QueueName, u64)> {
        let now = self.clock.now();
        self.queues()
            .into_iter()
            .flat_map(|q| {
                self.memory
                    .messages(&q)
                    .into_iter()
                    .filter(|m| m.visible_at <= now)
                    .map(move |m| (q.clone(), m.id))
            })
            .collect()
    }

    /// Hands a message to its function, as an event-source mapping would: deleted
    /// when handled, left to come back when the handler fails.
    async fn deliver(&self, queue: &QueueName, id: u64) {
        let Some(delivery) = self.memory.receive_one(queue, id) else {
            return;
        };
        let describe = describe(&delivery.body);
        if let Some((_, dead_letter)) = self.ingest.as_ref().filter(|_| self.is_ingest(queue)) {
            if self.world.fault("ingest message dead-lettered", 0.02) {
                self.move_message(queue, id, delivery.body, dead_letter)
                    .await;
                self.world
                    .note(format!("dead-letter {queue} #{id} {describe}"));
                return;
            }
        } else if self.world.fault("message lost", 0.02) {
            self.memory.drop_message(queue, id);
            self.world.note(format!("lose {queue} #{id} {describe}"));
            return;
        }
        let copies = if self.world.fault("message duplicated", 0.05) {
            2
        } else {
            1
        };
        let handled =
            futures_util::future::join_all((0..copies).map(|_| self.handle(queue, &delivery.body)))
                .await;
        for outcome in &handled {
            self.world.note(format!(
                "deliver {queue} #{id} (receive {}) {describe} -> {outcome}",
                delivery.receive_count
            ));
        }
        if handled.iter().any(|o| !o.starts_with("failed")) {
            let _ =
                sas_core::ports::Consumer::delete(self.memory.as_ref(), queue, &delivery.receipt)
                    .await;
        }
    }

    async fn handle(&self, queue: &QueueName, body: &str) -> String {
        let failed = |e: &dyn std::fmt::Display| format!("failed: {e}");
        if *queue == self.names.agent_requests {
            match self.step_caller.on_request(body).await {
                Ok(verdict) => format!("{verdict:?}"),
                Err(e) => failed(&e),
            }
        } else {
            let scheduler = &self.schedulers[self.world.below(self.schedulers.len())];
            match scheduler.on_scheduler_message(queue.as_str(), body).await {
                Ok(handled) => handled.as_str().to_owned(),
                Err(e) => failed(&e),
            }
        }
    }

    async fn sweep(&self) {
        let twice = self.world.fault("two supervisors at once", 0.3);
        let sweeps = futures_util::future::join_all(
            self.supervisors
                .iter()
                .take(if twice { 2 } else { 1 })
                .map(|s| s.sweep(100)),
        )
        .await;
        for report in sweeps {
            match report {
                Ok(report) if !report.is_empty() => self
                    .world
                    .note(format!("sweep {}", serde_json::json!(report))),
                Ok(_) => {}
                Err(e) => self.world.note(format!("sweep failed: {e}")),
            }
        }
    }

    async fn submit(&mut self) {
        let n = self.submitted.len();
        let id = TaskId::parse(format!("t{n}")).expect("id");
        let drone = json!({"customer_id": format!("c{n}"), "pickup": "a", "dropoff": "b", "weight_kg": 1.0});
        let order = json!({"order_id": format!("o{n}")});
        let items: Vec<Value> = (0..self.world.below(5))
            .map(|i| json!({"key": format!("o{n}-{i}")}))
            .collect();
        let (workflow, input) = match self.world.below(10) {
            0..=2 => ("drone-delivery", drone),
            3..=4 => ("drone-delivery-parallel", drone),
            5..=7 => (
                "generated",
                json!({"order_id": format!("o{n}"), "items": items}),
            ),
            _ => ("order-processing", order),
        };
        if self.world.chance(0.15) {
            let steps = &self.workflows.latest(workflow).expect("workflow").steps;
            let step = steps[self.world.below(steps.len())].name.clone();
            self.remote
                .doomed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert((id.to_string(), step.clone()));
            self.world.note(format!("doom {id} at {step}"));
        }
        // Half the callers ask for notifications; some tasks start later.
        let notify = self.world.chance(0.5).then_some(CALLERS);
        let priority = 1 + self.world.below(5);
        let start_at = self.world.chance(0.1).then(|| {
            let later = Duration::from_secs(self.world.world().random.u64(1..60));
            self.clock.now().plus(later).0
        });
        self.submitted.push((
            id.clone(),
            json!({"workflow": workflow, "input": input, "notify": notify, "start_at": start_at,
                   "priority": priority}),
        ));
        self.submit_again(n).await;
    }

    /// Submits task `n`, again when it was already: the same request, the same task.
    async fn submit_again(&mut self, n: usize) {
        let (id, request) = self.submitted[n].clone();
        let submission = Submission {
            owner: None,
            id: id.clone(),
            input: request["input"].clone(),
            notify: request["notify"]
                .as_str()
                .map(|q| QueueName::parse(q).expect("name")),
            parent: None,
            pinned: Default::default(),
            start_at: request["start_at"].as_i64().map(Timestamp),
            priority: request["priority"]
                .as_u64()
                .and_then(|p| u8::try_from(p).ok())
                .unwrap_or(sas_domain::flow::DEFAULT_PRIORITY),
        };
        let scheduler = &self.schedulers[self.world.below(self.schedulers.len())];
        let workflow = request["workflow"].as_str().unwrap_or_default();
        let outcome = if self.ingest.is_some() {
            scheduler.accept(workflow, submission).await.map(drop)
        } else {
            scheduler.submit(workflow, submission).await.map(drop)
        };
        match outcome {
            Ok(()) => {
                self.accepted.insert(id.to_string());
                self.world.note(format!("submit {id} -> accepted"));
            }
            Err(e) => self.world.note(format!("submit {id} -> failed: {e}")),
        }
    }

    async fn resubmit_one(&mut self) {
        let in_error: Vec<Task> = self
            .memory
            .tasks()
            .into_iter()
            // A child runs again with its parent (it refuses a resubmission of its own).
            .filter(|t| t.parent.is_none())
            .filter(|t| t.state == TaskState::Error && !self.resubmitted.contains(t.id.as_str()))
            .collect();
        let Some(task) = in_error.get(self.world.below(in_error.len())) else {
            return;
        };
        *self
            .world
            .world()
            .faults
            .entry("operator resubmit")
            .or_default() += 1;
        self.resubmitted.insert(task.id.to_string());
        if self.world.chance(0.5) {
            // The operator fixed the cause.
            self.remote
                .doomed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|(t, _)| t != task.id.as_str());
        }
        // Half the time with an edited input: each of its text fields changed.
        let input = self.world.chance(0.5).then(|| {
            let (_, request) = self
                .submitted
                .iter()
                .find(|(id, _)| *id == task.id)
                .expect("submitted");
            let mut input = request["input"].clone();
            for value in input.as_object_mut().expect("object").values_mut() {
                if let Some(text) = value.as_str() {
                    *value = json!(format!("{text}+run{}", task.run + 1));
                }
            }
            input
        });
        // The operator undoes by hand the steps whose compensation failed, as the
        // alerts ask: the task's, and its children's, which run again with it.
        let family = format!("{}{CHILD_SEPARATOR}", task.id);
        for member in self.memory.tasks() {
            if member.id != task.id && !member.id.as_str().starts_with(&family) {
                continue;
            }
            let workflow = self
                .workflows
                .version(&member.workflow.name, member.workflow.version)
                .expect("workflow");
            for (step, definition) in member.steps.iter().zip(&workflow.steps) {
                let Some(call) = definition.call() else {
                    continue;
                };
                if step.state == StepState::CompensationFailed {
                    let key = format!("{}/{}/{}/compensate", member.id, step.key_run, step.name);
                    self.remote.applied().insert(
                        (call.agent.clone(), key),
                        Applied {
                            task: member.id.to_string(),
                            step: step.name.clone(),
                            compensation: true,
                        },
                    );
                }
            }
        }
        let resubmit = Resubmit {
            request: self.request(Actor::Operator),
            input,
        };
        let outcome = self.schedulers[0].resubmit(&task.id, resubmit).await;
        // A resubmission whose answer was lost (a crash after its write) happened too.
        let resubmitted = self
            .memory
            .tasks()
            .iter()
            .any(|t| t.id == task.id && t.run > task.run);
        if resubmitted {
            self.world
                .world()
                .acted_on
                .insert((task.id.to_string(), task.run));
        }
        self.world.note(format!(
            "resubmit {} -> {}",
            task.id,
            outcome.map_or_else(|e| format!("failed: {e}"), |t| format!("run {}", t.run))
        ));
    }

    fn request(&self, by: Actor) -> Request {
        Request {
            by,
            at: self.clock.now(),
            batch: None,
        }
    }

    /// A task at random, whatever its state, and who acts on it: its owner or an
    /// operator.
    fn any_task_and_actor(&self) -> Option<(Task, Actor)> {
        let tasks = self.memory.tasks();
        let task = tasks.get(self.world.below(tasks.len()))?.clone();
        let by = if self.world.chance(0.5) {
            Actor::Owner
        } else {
            Actor::Operator
        };
        Some((task, by))
    }

    /// The owner or an operator cancels a task, whatever its state.
    async fn cancel_one(&mut self) {
        let Some((task, by)) = self.any_task_and_actor() else {
            return;
        };
        *self.world.world().faults.entry("cancel").or_default() += 1;
        let outcome = self.schedulers[0].cancel(&task.id, self.request(by)).await;
        self.world.note(format!(
            "cancel {} ({:?}) -> {}",
            task.id,
            task.state,
            outcome.map_or_else(|e| format!("refused: {e}"), |t| format!("{:?}", t.state))
        ));
    }

    fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// One action of the chaos phase, chosen at random.
    async fn chaos_step(&mut self) {
        let roll = self.world.below(100);
        match roll {
            0..30 => {
                let visible = self.visible();
                if let Some((queue, id)) = visible.get(self.world.below(visible.len())) {
                    self.deliver(queue, *id).await;
                }
            }
            35..45 => {
                let visible = self.visible();
                let picks: Vec<_> = (0..3)
                    .filter_map(|_| visible.get(self.world.below(visible.len())).cloned())
                    .collect();
                if picks.len() > 1 {
                    *self
                        .world
                        .world()
                        .faults
                        .entry("concurrent deliveries")
                        .or_default() += 1;
                }
                futures_util::future::join_all(picks.iter().map(|(q, id)| self.deliver(q, *id)))
                    .await;
            }
            45..65 => {
                let long = self.world.chance(0.15);
                let millis =
                    self.world
                        .world()
                        .random
                        .u64(if long { 1_000..40_000 } else { 0..500 });
                self.advance(Duration::from_millis(millis));
            }
            65..75 => self.sweep().await,
            75..85 if self.submitted.len() < 12 => self.submit().await,
            75..85 => {
                let n = self.world.below(self.submitted.len());
                *self
                    .world
                    .world()
                    .faults
                    .entry("duplicate submission")
                    .or_default() += 1;
                self.submit_again(n).await;
            }
            85..89 => self.resubmit_one().await,
            92..95 => self.cancel_one().await,
            95..97 => self.redrive_ingest().await,
            30..33 => self.use_a_token(true).await,
            33..34 => self.complete_a_step().await,
            34..35 => self.pause_or_resume_one().await,
            89..92 => {
                *self
                    .world
                    .world()
                    .faults
                    .entry("scheduler restart")
                    .or_default() += 1;
                let i = self.world.below(self.schedulers.len());
                self.schedulers[i] = self.app();
                self.world.note(format!("restart scheduler {i}"));
            }
            _ => {}
        }
    }

    /// Runs without faults until every task is final and the queues are empty.
    async fn settle(&mut self) -> bool {
        self.world.world().chaos = false;
        self.remote
            .outages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let deadline = self.clock.now().plus(self.settle_bound);
        loop {
            self.redrive_ingest().await;
            let visible = self.visible();
            if let Some((queue, id)) = visible.get(self.world.below(visible.len())) {
                self.deliver(queue, *id).await;
                continue;
            }
            let tasks = self.memory.tasks();
            let pending = self
                .queues()
                .iter()
                .any(|q| !self.memory.messages(q).is_empty());
            // A task in Error may keep a lease until its alert is published.
            if !pending
                && tasks
                    .iter()
                    .all(|t| t.state.is_final() && t.complete_by.is_none())
            {
                return true;
            }
            if self.clock.now() > deadline {
                return false;
            }
            self.settle_waits().await;
            self.sweep().await;
            if self.visible().is_empty() {
                // Nothing to do until the next message becomes visible or lease expires.
                let next_message = self
                    .queues()
                    .iter()
                    .flat_map(|q| self.memory.messages(q))
                    .map(|m| m.visible_at)
                    .min();
                let next_lease = tasks.iter().filter_map(Task::sweep_at).min();
                let next = [next_message, next_lease]
                    .into_iter()
                    .flatten()
                    .min()
                    .unwrap_or(self.clock.now());
                self.advance(self.clock.now().until(next) + Duration::from_millis(1));
            }
        }
    }

    /// The invariants that hold at the end of a run.
    fn check_end(&self, settled: bool) {
        let tasks = self.memory.tasks();
        let accepted: BTreeSet<String> = tasks.iter().map(|t| t.id.to_string()).collect();
        if !settled {
            let open: Vec<_> = tasks
                .iter()
                .filter(|t| !t.state.is_final() || t.complete_by.is_some())
                .map(|t| format!("{} {:?} until {:?}", t.id, t.state, t.complete_by))
                .collect();
            let bound = self.settle_bound;
            self.world
                .violation(format!("not settled within {bound:?}: {open:?}"));
        }
        let applied = self.remote.applied().clone();
        for task in &tasks {
            let workflow = self
                .workflows
                .version(&task.workflow.name, task.workflow.version)
                .expect("workflow");
            if task.state.is_final() && (task.complete_by.is_some() || task.locked_by.is_some()) {
                self.world
                    .violation(format!("task {} final with a lease or a lock", task.id));
            }
            // A step kept Processed through a resubmission keeps the effect of its run.
            let applied_in =
                |service: &str, runs: std::ops::RangeInclusive<u32>, step: &str, suffix: &str| {
                    runs.into_iter().any(|run| {
                        applied.contains_key(&(
                            service.to_owned(),
                            format!("{}/{run}/{step}{suffix}", task.id),
                        ))
                    })
                };
            for (step, definition) in task.steps.iter().zip(&workflow.steps) {
                let Some(call) = definition.call() else {
                    self.check_children_at_end(&tasks, task, step);
                    continue;
                };
                // Under the keys the step carries now, those of the run it was last
                // sent in since its effect was known absent.
                let applied_for = |suffix: &str| {
                    applied_in(&call.agent, step.key_run..=step.key_run, &step.name, suffix)
                };
                match task.state {
                    TaskState::Processed
                        if step.state != StepState::Skipped
                            && !applied_in(&call.agent, 1..=task.run, &step.name, "") =>
                    {
                        self.world.violation(format!(
                            "task {} Processed without the effect of {}",
                            task.id, step.name
                        ));
                    }
                    TaskState::Error if definition.can_be_undone() => {
                        let undone = matches!(
                            step.state,
                            StepState::Compensated | StepState::CompensationFailed
                        );
                        if matches!(
                            step.state,
                            StepState::Processed | StepState::TimedOut | StepState::Compensating
                        ) {
                            self.world.violation(format!(
                                "task {} in Error with {} not compensated",
                                task.id, step.name
                            ));
                        }
                        if applied_for("") && !undone && step.state != StepState::Error {
                            self.world.violation(format!(
                                "task {} in Error with the effect of {} in place",
                                task.id, step.name
                            ));
                        }
                        if step.state == StepState::Compensated && !applied_for("/compensate") {
                            self.world.violation(format!(
                                "task {} step {} Compensated without its compensation",
                                task.id, step.name
                            ));
                        }
                    }
                    _ => {}
                }
            }
        }
        let alerts = self.memory.alerts();
        let unseen: Vec<(String, u32)> = {
            let world = self.world.world();
            world
                .reached_error
                .difference(&world.acted_on)
                .cloned()
                .collect()
        };
        for (id, run) in &unseen {
            if !alerts
                .iter()
                .any(|a| a.task_id.as_str() == id && a.run == *run)
            {
                self.world.violation(format!(
                    "task {id} reached Error in run {run} and no alert was published"
                ));
            }
        }
        for id in self.accepted.difference(&accepted) {
            self.world
                .violation(format!("task {id} was accepted and lost"));
        }
        self.check_notified();
        let mut keys_per_step: BTreeMap<(&str, &str, bool), usize> = BTreeMap::new();
        for effect in applied.values() {
            *keys_per_step
                .entry((&effect.task, &effect.step, effect.compensation))
                .or_default() += 1;
        }
        for ((task, step, compensation), keys) in keys_per_step {
            let runs = tasks
                .iter()
                .find(|t| t.id.as_str() == task)
                .map_or(0, |t| t.run as usize);
            if keys > runs {
                let what = if compensation {
                    "compensation"
                } else {
                    "effect"
                };
                self.world.violation(format!(
                    "the {what} of task {task} step {step} applied {keys} times in {runs} run(s)"
                ));
            }
        }
        self.check_one_effect_per_step(&tasks, &applied);
        for effect in applied.values() {
            if !accepted.contains(&effect.task) {
                self.world.violation(format!(
                    "an effect of unknown task {} ({}, compensation: {})",
                    effect.task, effect.step, effect.compensation
                ));
            }
        }
        let left: Vec<String> = self
            .queues()
            .iter()
            .flat_map(|queue| {
                self.memory
                    .messages(queue)
                    .into_iter()
                    .map(move |message| format!("{queue}: {}", message.body))
            })
            .collect();
        if !left.is_empty() {
            self.world.violation(format!(
                "messages left in the queues after settling: {left:?}"
            ));
        }
    }
}

impl Sim {
    /// The children of a task's `step` once settled: every child it started has
    /// ended; a Processed task's children as the step counted them (those that failed
    /// within its tolerance in Error, or never started); a failed task's children in
    /// Error, undone by their own compensations (their own checks say so).
    fn check_children_at_end(&self, tasks: &[Task], task: &Task, step: &Step) {
        let Some(children) = &step.children else {
            return;
        };
        if !task.state.is_final() {
            return;
        }
        let states: Vec<Option<TaskState>> = (0..children.started)
            .map(|item| {
                let id = task.id.child(&step.name, item);
                tasks.iter().find(|t| t.id == id).map(|t| t.state)
            })
            .collect();
        let processed = states
            .iter()
            .filter(|s| **s == Some(TaskState::Processed))
            .count();
        let running = states.iter().flatten().filter(|s| !s.is_final()).count();
        let wrong = running > 0
            || match task.state {
                TaskState::Processed => {
                    processed != children.succeeded as usize
                        || states.len() - processed != children.failed as usize
                }
                _ => processed > 0,
            };
        if wrong {
            self.world.violation(format!(
                "task {} {:?} with the children of {} {states:?}, counted {children:?}",
                task.id, task.state, step.name
            ));
        }
    }

    /// Every status change written of a task that asks for notifications reached the
    /// callers' queue at least once (sends failed, and actors stopped between a
    /// write and its sends): a caller may rely on them, deduplicating by version.
    fn check_notified(&self) {
        let callers = QueueName::parse(CALLERS).expect("name");
        let delivered: BTreeSet<(String, u64, String)> = self
            .memory
            .messages(&callers)
            .iter()
            .filter_map(|m| serde_json::from_str::<Value>(&m.body).ok())
            .filter_map(|n| {
                let field = |name: &str| n[name].as_str().map(str::to_owned);
                Some((field("task_id")?, n["version"].as_u64()?, field("state")?))
            })
            .collect();
        let owed = self.world.world().owed.clone();
        for (task, version, state) in owed.difference(&delivered) {
            self.world.violation(format!(
                "task {task}: the status change to {state} of version {version} was never notified"
            ));
        }
    }

    /// No step of a task has its effect applied under two idempotency keys, the
    /// first not undone: across resubmissions too, a step whose effect may be in
    /// place is called again under its key, never under a new one. (Read-only steps
    /// have no effect.)
    fn check_one_effect_per_step(
        &self,
        tasks: &[Task],
        applied: &BTreeMap<(String, String), Applied>,
    ) {
        let mut not_undone: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
        for ((service, key), effect) in applied {
            let undone = applied.contains_key(&(service.clone(), format!("{key}/compensate")));
            if !effect.compensation && !undone {
                not_undone
                    .entry((&effect.task, &effect.step))
                    .or_default()
                    .push(key);
            }
        }
        for ((task, step), keys) in not_undone {
            let read_only = tasks
                .iter()
                .find(|t| t.id.as_str() == task)
                .and_then(|t| self.workflows.version(&t.workflow.name, t.workflow.version))
                .and_then(|w| {
                    w.steps
                        .iter()
                        .find(|s| s.name == step)
                        .and_then(|s| s.call())
                        .map(|c| c.read_only)
                })
                .unwrap_or(false);
            if keys.len() > 1 && !read_only {
                self.world.violation(format!(
                    "task {task} step {step} has its effect in place under {} keys: {keys:?}",
                    keys.len()
                ));
            }
        }
    }
}

/// A short description of a message, for the trace.
fn describe(body: &str) -> String {
    if let Ok(request) = serde_json::from_str::<AgentRequest>(body) {
        return format!(
            "{:?} {} {} attempt {}",
            request.operation, request.task_id, request.step_name, request.attempt
        );
    }
    match serde_json::from_str::<SchedulerMessage>(body) {
        Ok(SchedulerMessage::Run { task_id }) => format!("Run {task_id}"),
        Ok(SchedulerMessage::Deadline { task_id, at }) => format!("Deadline {task_id} at {}", at.0),
        Ok(SchedulerMessage::ChildEnded(ended)) => format!(
            "ChildEnded {} step {} item {} {:?}",
            ended.task_id, ended.step, ended.item, ended.state
        ),
        Ok(SchedulerMessage::Response(r)) => format!(
            "Response {} step {} attempt {} {:?}",
            r.task_id, r.step, r.attempt, r.operation
        ),
        Ok(SchedulerMessage::Submit(b)) => format!("Submit {}", b.submission.id),
        Ok(SchedulerMessage::Granted(grant)) => format!("Granted {}", grant.call.id()),
        Ok(SchedulerMessage::Gate { gate }) => format!("Gate {gate}"),
        Err(_) => "undecodable".into(),
    }
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
