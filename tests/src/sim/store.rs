//! The state store as the simulation's actors see it: interleaved, crashing before
//! or after its writes, serving stale copies to eventually consistent reads; each
//! transition written checked ([`super::transitions`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use sas_core::clock::Clock;
use sas_core::ports::{
    CursorKey, CursorKeyStore, ExecutionHistory, Expired, ExpiredCursor, GateStore, HistoryPage,
    LeaseIndex, Registration, StoreError, TaskListing, TaskPage, TaskStore, Unreadable,
    WorkflowStore,
};
use sas_domain::flow::{Gate, Waiter};
use sas_domain::ids::TaskId;
use sas_domain::machine::history::HistoryEvent;
use sas_domain::task::{Order, Task, TaskState};
use sas_domain::time::Timestamp;
use sas_domain::workflow::{Registry, Workflow};
use sas_testkit::memory::Memory;

use super::world::Shared;

fn crash() -> StoreError {
    StoreError::Unavailable("simulated crash".into())
}

/// The state store as the actors see it: interleaved, crashing before or after its
/// writes, serving stale copies to eventually consistent reads, and checking every
/// transition written against the invariants.
pub(super) struct FaultyStore {
    pub(super) inner: Arc<Memory>,
    pub(super) world: Shared,
    pub(super) workflows: Arc<Registry>,
    /// Every version of every task written, oldest first: what a replica may still have.
    pub(super) written: Mutex<HashMap<TaskId, Vec<(Task, Order)>>>,
}

impl FaultyStore {
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

    async fn index_attributes(
        &self,
        task: &Task,
        changed: &[(String, String)],
    ) -> Result<(), StoreError> {
        self.inner.index_attributes(task, changed).await
    }

    async fn with_attribute(
        &self,
        name: &str,
        value: &str,
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        self.inner.with_attribute(name, value, limit, after).await
    }

    async fn offered(&self, activity: &str, limit: usize) -> Result<Vec<TaskId>, StoreError> {
        self.inner.offered(activity, limit).await
    }
}

#[async_trait]
impl ExecutionHistory for FaultyStore {
    async fn history(
        &self,
        task: &TaskId,
        page: HistoryPage,
    ) -> Result<Vec<HistoryEvent>, StoreError> {
        self.inner.history(task, page).await
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

    async fn put_registration(
        &self,
        registration: &Registration,
        expected: Option<u32>,
    ) -> Result<(), StoreError> {
        self.inner.put_registration(registration, expected).await
    }

    async fn registration(&self, name: &str) -> Result<Option<Registration>, StoreError> {
        self.inner.registration(name).await
    }

    async fn registrations(&self) -> Result<Vec<Registration>, StoreError> {
        self.inner.registrations().await
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
