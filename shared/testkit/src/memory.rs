//! An in-memory backend for tests and the simulator: the same semantics as the
//! embedded backend and AWS (it passes the same conformance suite), time from the
//! given clock, nothing durable. Messages can be taken in any order, which lets a
//! simulator choose the order of deliveries.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use sas_core::clock::Clock;
use sas_core::ports::{
    AlertError, Alerts, Consumer, CursorKey, CursorKeyStore, Delivery, ExecutionHistory, Expired,
    ExpiredCursor, GateStore, HistoryPage, LeaseIndex, LeaseKey, OutgoingMessage, QueueError,
    Queues, Registration, ShardProgress, StoreError, TaskListing, TaskPage, TaskStore, Unreadable,
    WorkflowStore,
};
use sas_domain::flow::{Gate, Waiter};
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::machine::activities;
use sas_domain::machine::history::HistoryEvent;
use sas_domain::messages::Alert;
use sas_domain::task::{Order, Task, TaskState};
use sas_domain::time::Timestamp;
use sas_domain::workflow::{Workflow, attribute_text};

/// A queue's dead-letter settings.
#[derive(Debug, Clone)]
struct Redrive {
    max_receive_count: u32,
    dead_letter: QueueName,
}

/// A message in a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The message's id, unique in the backend.
    pub id: u64,
    /// The body.
    pub body: String,
    /// When it may next be received.
    pub visible_at: Timestamp,
    /// Times received.
    pub receive_count: u32,
    /// The span it came from.
    pub trace: Option<sas_domain::trace::TraceContext>,
}

#[derive(Default)]
struct State {
    tasks: BTreeMap<String, Task>,
    orders: HashMap<String, Order>,
    workflows: HashMap<(String, u32), String>,
    registrations: BTreeMap<String, Registration>,
    cursor_key: Option<CursorKey>,
    queues: BTreeMap<String, Vec<Stored>>,
    visibility: HashMap<String, Duration>,
    redrive: HashMap<String, Redrive>,
    alerts: Vec<Alert>,
    next_id: u64,
    replica: Replica,
    /// Task records the reads of expired leases have returned so far.
    expired_reads: usize,
    /// Writes of workflow definitions so far.
    workflow_writes: usize,
    /// The gates, by name.
    gates: HashMap<String, Gate>,
    /// The gates' lines, by gate, in order: (position, call) to the call.
    lines: HashMap<String, BTreeMap<(Timestamp, String), Waiter>>,
    /// The executions' histories, by task, each event by its id.
    histories: HashMap<String, BTreeMap<u64, HistoryEvent>>,
}

impl State {
    /// Keeps the history events `task`'s write made, with it.
    fn keep_history(&mut self, task: &Task) {
        let Some(run) = task.machine.as_deref() else {
            return;
        };
        let history = self.histories.entry(task.id.to_string()).or_default();
        history.extend(
            run.written_events()
                .into_iter()
                .map(|event| (event.id, event)),
        );
    }
}

/// What eventually consistent reads see: the store, or a replica behind when a test
/// says so.
#[derive(Default)]
struct Replica {
    /// The copy the next eventually consistent read returns, once.
    lagging: Option<Option<(Task, Order)>>,
    /// Reads of a task (with its order or not) so far: consistent, eventually
    /// consistent.
    reads: [usize; 2],
    /// Tasks listings have read so far.
    listed: usize,
    /// A task's consistent reads fail, as a store's reads do when it is down.
    refusing: bool,
}

/// The in-memory backend.
pub struct Memory {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
}

impl Memory {
    /// A page of up to `limit` tasks that `kept` keeps, by creation then id, from the
    /// cursor `after`: a listing's, or an index's of attributes.
    fn page_of(
        &self,
        limit: usize,
        after: Option<&str>,
        kept: impl Fn(&Task) -> bool,
    ) -> Result<TaskPage, StoreError> {
        let key = TaskPage::cursor_after;
        if let Some(cursor) = after {
            TaskPage::parse_cursor(cursor)?;
        }
        let mut tasks: Vec<Task> = (self.state().tasks.values())
            .filter(|t| kept(t) && after.is_none_or(|a| key(t).as_str() > a))
            .cloned()
            .collect();
        tasks.sort_by_key(key);
        let next = (tasks.len() > limit).then(|| {
            tasks.truncate(limit);
            tasks.last().map(key).unwrap_or_default()
        });
        self.state().replica.listed += tasks.len();
        Ok(TaskPage::by_creation(tasks, next))
    }

    /// An empty backend on `clock`.
    #[must_use]
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            clock,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fails when a test has reads refused ([`Memory::refuse_reads`]).
    fn readable(state: &State) -> Result<(), StoreError> {
        if state.replica.refusing {
            return Err(StoreError::Unavailable("reads are refused".into()));
        }
        Ok(())
    }

    /// The next eventually consistent read of a task returns `copy` (`None`: not
    /// there yet), as a replica a write or more behind would; later ones the store.
    pub fn lag(&self, copy: Option<(Task, Order)>) {
        self.state().replica.lagging = Some(copy);
    }

    /// Removes a task and its order, as DynamoDB's TTL does once a finished task's
    /// retention has passed: its id may then be used again.
    pub fn remove_task(&self, id: &TaskId) {
        let mut state = self.state();
        state.tasks.remove(id.as_str());
        state.orders.remove(id.as_str());
    }

    /// A task's consistent reads (`task`, `task_with_order`) fail from now on, or work
    /// again; eventually consistent reads and listings are not touched.
    pub fn refuse_reads(&self, refusing: bool) {
        self.state().replica.refusing = refusing;
    }

    /// Tasks listings have read so far.
    #[must_use]
    pub fn listed(&self) -> usize {
        self.state().replica.listed
    }

    /// Reads of a task (with its order or not) so far: consistent, then eventually
    /// consistent.
    #[must_use]
    pub fn reads(&self) -> [usize; 2] {
        self.state().replica.reads
    }

    /// Writes of workflow definitions ([`WorkflowStore::save_workflow`]) so far.
    #[must_use]
    pub fn workflow_writes(&self) -> usize {
        self.state().workflow_writes
    }

    /// Task records the reads of expired leases ([`LeaseIndex::expired`]) have
    /// returned so far: what a sweep read.
    #[must_use]
    pub fn expired_reads(&self) -> usize {
        self.state().expired_reads
    }

    fn with_order(state: &State, id: &TaskId) -> Option<(Task, Order)> {
        state
            .tasks
            .get(id.as_str())
            .cloned()
            .zip(state.orders.get(id.as_str()).cloned())
    }

    /// Sets a queue's visibility timeout and, optionally, its dead-letter queue.
    pub fn create_queue(
        &self,
        queue: &QueueName,
        visibility: Duration,
        redrive: Option<(u32, QueueName)>,
    ) {
        let mut state = self.state();
        state.queues.entry(queue.to_string()).or_default();
        state.visibility.insert(queue.to_string(), visibility);
        if let Some((max_receive_count, dead_letter)) = redrive {
            state.queues.entry(dead_letter.to_string()).or_default();
            state.redrive.insert(
                queue.to_string(),
                Redrive {
                    max_receive_count,
                    dead_letter,
                },
            );
        }
    }

    /// Every message of a queue, visible or not, oldest first.
    #[must_use]
    pub fn messages(&self, queue: &QueueName) -> Vec<Stored> {
        self.state()
            .queues
            .get(queue.as_str())
            .cloned()
            .unwrap_or_default()
    }

    /// Receives the message `id` if it is visible, as a receive that found it
    /// would (counting it, hiding it, or moving it to the dead-letter queue).
    #[must_use]
    pub fn receive_one(&self, queue: &QueueName, id: u64) -> Option<Delivery> {
        let now = self.clock.now();
        let mut state = self.state();
        Self::take(&mut state, queue.as_str(), now, 1, |m| m.id == id)
            .into_iter()
            .next()
    }

    /// Deletes a message whatever its receipt: a message lost in transit.
    pub fn drop_message(&self, queue: &QueueName, id: u64) {
        if let Some(messages) = self.state().queues.get_mut(queue.as_str()) {
            messages.retain(|m| m.id != id);
        }
    }

    /// The alerts raised.
    #[must_use]
    pub fn alerts(&self) -> Vec<Alert> {
        self.state().alerts.clone()
    }

    /// Every task.
    #[must_use]
    pub fn tasks(&self) -> Vec<Task> {
        self.state().tasks.values().cloned().collect()
    }

    /// Receives up to `max` of the visible messages that `pick` selects.
    fn take(
        state: &mut State,
        queue: &str,
        now: Timestamp,
        max: usize,
        pick: impl Fn(&Stored) -> bool,
    ) -> Vec<Delivery> {
        let visibility = state
            .visibility
            .get(queue)
            .copied()
            .unwrap_or(Duration::from_secs(30));
        let redrive = state.redrive.get(queue).cloned();
        let Some(messages) = state.queues.get_mut(queue) else {
            return Vec::new();
        };
        let mut received = Vec::new();
        let mut dead = Vec::new();
        messages.retain_mut(|m| {
            if received.len() == max || m.visible_at > now || !pick(m) {
                return true;
            }
            m.receive_count += 1;
            if let Some(redrive) = redrive
                .as_ref()
                .filter(|r| m.receive_count > r.max_receive_count)
            {
                dead.push((
                    redrive.dead_letter.clone(),
                    Stored {
                        visible_at: now,
                        receive_count: 0,
                        ..m.clone()
                    },
                ));
                return false;
            }
            m.visible_at = now.plus(visibility);
            received.push(Delivery {
                id: m.id.to_string(),
                body: m.body.clone(),
                receive_count: m.receive_count,
                receipt: format!("{}:{}", m.id, m.receive_count),
                trace: m.trace.clone(),
            });
            true
        });
        for (queue, message) in dead {
            state
                .queues
                .entry(queue.to_string())
                .or_default()
                .push(message);
        }
        received
    }
}

#[async_trait]
impl TaskStore for Memory {
    async fn create(&self, task: &Task, order: &Order) -> Result<(), StoreError> {
        let mut state = self.state();
        if state.tasks.contains_key(task.id.as_str()) {
            return Err(StoreError::Conflict);
        }
        state.tasks.insert(task.id.to_string(), task.clone());
        state.orders.insert(task.id.to_string(), order.clone());
        state.keep_history(task);
        Ok(())
    }

    async fn task(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        let mut state = self.state();
        Self::readable(&state)?;
        state.replica.reads[0] += 1;
        Ok(state.tasks.get(id.as_str()).cloned())
    }

    async fn task_with_order(&self, id: &TaskId) -> Result<Option<(Task, Order)>, StoreError> {
        let mut state = self.state();
        Self::readable(&state)?;
        state.replica.reads[0] += 1;
        Ok(Self::with_order(&state, id))
    }

    async fn task_with_order_eventually_consistent(
        &self,
        id: &TaskId,
    ) -> Result<Option<(Task, Order)>, StoreError> {
        let mut state = self.state();
        state.replica.reads[1] += 1;
        Ok(match state.replica.lagging.take() {
            Some(copy) => copy,
            None => Self::with_order(&state, id),
        })
    }

    async fn update(&self, task: &Task) -> Result<(), StoreError> {
        let mut state = self.state();
        match state.tasks.get_mut(task.id.as_str()) {
            // Of the same task: an id used again after its task was removed names
            // another, whose versions repeat the first's.
            Some(stored)
                if stored.version + 1 == task.version && stored.created_at == task.created_at =>
            {
                *stored = task.clone();
                state.keep_history(task);
                Ok(())
            }
            _ => Err(StoreError::Conflict),
        }
    }

    async fn update_with_order(&self, task: &Task, order: &Order) -> Result<(), StoreError> {
        self.update(task).await?;
        self.state()
            .orders
            .insert(task.id.to_string(), order.clone());
        Ok(())
    }
}

#[async_trait]
impl TaskListing for Memory {
    async fn list(
        &self,
        state: TaskState,
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        self.page_of(limit, after, |t| t.state == state)
    }

    async fn with_attribute(
        &self,
        name: &str,
        value: &str,
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        self.page_of(limit, after, |t| {
            (t.attributes.get(name)).is_some_and(|v| attribute_text(v) == value)
        })
    }

    async fn offered(&self, activity: &str, limit: usize) -> Result<Vec<TaskId>, StoreError> {
        let state = self.state();
        let mut offers: Vec<(Timestamp, &TaskId)> = (state.tasks.values())
            .filter_map(|task| {
                let offer = activities::offer(task).filter(|o| o.activity == activity)?;
                Some((offer.since, &task.id))
            })
            .collect();
        offers.sort();
        Ok(offers
            .into_iter()
            .take(limit)
            .map(|(_, id)| id.clone())
            .collect())
    }
}

#[async_trait]
impl ExecutionHistory for Memory {
    async fn history(
        &self,
        task: &TaskId,
        page: HistoryPage,
    ) -> Result<Vec<HistoryEvent>, StoreError> {
        let state = self.state();
        let Some(history) = state.histories.get(task.as_str()) else {
            return Ok(Vec::new());
        };
        let events: Box<dyn Iterator<Item = &HistoryEvent>> = match (page.reverse, page.after) {
            (false, after) => Box::new(history.range(after.map_or(0, |a| a + 1)..).map(|e| e.1)),
            (true, None) => Box::new(history.values().rev()),
            (true, Some(after)) => Box::new(history.range(..after).rev().map(|e| e.1)),
        };
        Ok(events.take(page.limit).cloned().collect())
    }
}

#[async_trait]
impl LeaseIndex for Memory {
    async fn expired(
        &self,
        now: Timestamp,
        limit: usize,
        from: &ExpiredCursor,
    ) -> Result<Expired, StoreError> {
        let lease = |t: &Task| {
            t.sweep_at().map(|at| LeaseKey {
                expires: at.0,
                task: t.id.clone(),
            })
        };
        let after = match from.progress(0) {
            ShardProgress::Unread => None,
            ShardProgress::After(key) => Some(key),
            ShardProgress::Done => return Ok(Expired::default()),
        };
        let mut state = self.state();
        let mut tasks: Vec<Task> = state
            .tasks
            .values()
            .filter(|t| {
                lease(t).is_some_and(|key| key.expires <= now.0 && after.is_none_or(|a| key > *a))
            })
            .cloned()
            .collect();
        tasks.sort_by_key(lease);
        tasks.truncate(limit);
        state.expired_reads += tasks.len();
        // A page short of the limit is the last.
        let next = tasks
            .last()
            .filter(|_| tasks.len() == limit)
            .and_then(lease)
            .map(ExpiredCursor::after);
        Ok(Expired {
            tasks,
            unreadable: Vec::new(),
            next,
        })
    }

    /// Records kept as values are always readable: there is nothing to take off.
    async fn quarantine(&self, _: &Unreadable) -> Result<(), StoreError> {
        Ok(())
    }
}

#[async_trait]
impl GateStore for Memory {
    async fn gate(&self, gate: &str, first: usize) -> Result<(Gate, Vec<Waiter>), StoreError> {
        let state = self.state();
        let line = state
            .lines
            .get(gate)
            .map(|line| line.values().take(first).cloned().collect())
            .unwrap_or_default();
        Ok((state.gates.get(gate).cloned().unwrap_or_default(), line))
    }

    async fn enqueue(&self, waiter: &Waiter) -> Result<(), StoreError> {
        let Some(gate) = waiter.gate() else {
            return Ok(());
        };
        self.state()
            .lines
            .entry(gate.name.clone())
            .or_default()
            .insert(line_key(waiter), waiter.clone());
        Ok(())
    }

    async fn update_gate(
        &self,
        name: &str,
        gate: &Gate,
        taken: &[Waiter],
    ) -> Result<(), StoreError> {
        let mut state = self.state();
        let stored = state.gates.get(name).map_or(0, |g| g.version);
        if stored != gate.version {
            return Err(StoreError::Conflict);
        }
        let written = Gate {
            version: gate.version + 1,
            ..gate.clone()
        };
        state.gates.insert(name.to_owned(), written);
        if let Some(line) = state.lines.get_mut(name) {
            for waiter in taken {
                line.remove(&line_key(waiter));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl CursorKeyStore for Memory {
    async fn cursor_key(&self, drawn: CursorKey) -> Result<CursorKey, StoreError> {
        Ok(*self.state().cursor_key.get_or_insert(drawn))
    }
}

#[async_trait]
impl WorkflowStore for Memory {
    async fn save_workflow(&self, workflow: &Workflow) -> Result<(), StoreError> {
        // A write goes out and comes back, as over a network: whoever else runs
        // meanwhile sees it not yet made.
        tokio::task::yield_now().await;
        let mut state = self.state();
        state.workflow_writes += 1;
        let stored = state
            .workflows
            .entry((workflow.name.clone(), workflow.version))
            .or_insert_with(|| workflow.source.clone());
        if *stored == workflow.source {
            Ok(())
        } else {
            Err(StoreError::Conflict)
        }
    }

    async fn load_workflow(&self, name: &str, version: u32) -> Result<Option<String>, StoreError> {
        Ok(self
            .state()
            .workflows
            .get(&(name.to_owned(), version))
            .cloned())
    }

    async fn put_registration(
        &self,
        registration: &Registration,
        expected: Option<u32>,
    ) -> Result<(), StoreError> {
        let mut state = self.state();
        let now = state
            .registrations
            .get(&registration.name)
            .map(|r| r.version);
        if now != expected {
            return Err(StoreError::Conflict);
        }
        state
            .registrations
            .insert(registration.name.clone(), registration.clone());
        Ok(())
    }

    async fn registration(&self, name: &str) -> Result<Option<Registration>, StoreError> {
        Ok(self.state().registrations.get(name).cloned())
    }

    async fn registrations(&self) -> Result<Vec<Registration>, StoreError> {
        Ok(self.state().registrations.values().cloned().collect())
    }
}

/// Where a call stands in its gate's line: its position, then its id.
fn line_key(waiter: &Waiter) -> (Timestamp, String) {
    (waiter.admission.position, waiter.admission.call.id())
}

#[async_trait]
impl Queues for Memory {
    async fn send(
        &self,
        queue: &QueueName,
        messages: &[OutgoingMessage],
    ) -> Result<(), QueueError> {
        let now = self.clock.now();
        let mut state = self.state();
        for message in messages {
            state.next_id += 1;
            let stored = Stored {
                id: state.next_id,
                body: message.body.clone(),
                visible_at: now.plus(message.delay),
                receive_count: 0,
                trace: message.trace.clone(),
            };
            state
                .queues
                .entry(queue.to_string())
                .or_default()
                .push(stored);
        }
        Ok(())
    }
}

#[async_trait]
impl Consumer for Memory {
    async fn receive(
        &self,
        queue: &QueueName,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let now = self.clock.now();
            let received = Self::take(&mut self.state(), queue.as_str(), now, max.min(10), |_| {
                true
            });
            if !received.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(received);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn delete(&self, queue: &QueueName, receipt: &str) -> Result<(), QueueError> {
        if let Some(messages) = self.state().queues.get_mut(queue.as_str()) {
            messages.retain(|m| format!("{}:{}", m.id, m.receive_count) != receipt);
        }
        Ok(())
    }
}

#[async_trait]
impl Alerts for Memory {
    async fn raise(&self, alert: &Alert) -> Result<(), AlertError> {
        self.state().alerts.push(alert.clone());
        Ok(())
    }
}
