//! The state store's ports.

use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use sas_core::ports::{
    CursorKey, CursorKeyStore, Expired, ExpiredCursor, GateStore, LeaseIndex, LeaseKey, Outgoing,
    ShardProgress, StoreError, TaskListing, TaskPage, TaskStore, Unreadable, WorkflowStore,
};
use sas_domain::flow::{Gate, Waiter};
use sas_domain::ids::TaskId;
use sas_domain::task::{Order, Task, TaskState};
use sas_domain::time::Timestamp;
use sas_domain::workflow::Workflow;

use crate::Embedded;
use crate::queues::insert_messages;
use crate::schema::{Compressed, Stored, decode, encode, unavailable};
use crate::writer::{execute, query_row};

/// The rows of a query of one JSON column, decoded.
pub(crate) fn decode_rows<T: serde::de::DeserializeOwned>(
    c: &Connection,
    sql: &str,
    parameters: impl rusqlite::Params,
) -> Result<Vec<T>, StoreError> {
    let mut select = c.prepare_cached(sql).map_err(unavailable)?;
    let rows = select
        .query_map(parameters, |row| row.get::<_, Stored>(0))
        .map_err(unavailable)?;
    rows.map(|row| row.map_err(unavailable)?.decode()).collect()
}

pub(crate) fn read_task(c: &Connection, id: &str) -> Result<Option<Task>, StoreError> {
    let record: Option<Stored> =
        query_row(c, "SELECT record FROM tasks WHERE id = ?1", [id], |row| {
            row.get(0)
        })
        .optional()
        .map_err(unavailable)?;
    record.as_ref().map(Stored::decode).transpose()
}

pub(crate) fn stored_version(task: &Task) -> i64 {
    i64::try_from(task.version).unwrap_or(i64::MAX)
}

/// When the supervisor must look at a task: the end of its lease, in the order the
/// leases are swept.
pub(crate) fn lease(task: &Task) -> Option<i64> {
    task.sweep_at().map(|t| t.0)
}

/// The `leased` flag of a task: 1 for an ended task that keeps a lease (its alert
/// or notifications not known delivered), NULL otherwise. The leases of the tasks in
/// flight are found through the state index (`leases::Leases::load`), so that the
/// flag's index is written in that rare case only, not at every task's creation and
/// end.
fn leased(task: &Task) -> Option<i64> {
    (task.state.is_final() && lease(task).is_some()).then_some(1)
}

/// A task's row, to replace the stored one on condition of its version.
struct Replacement {
    id: String,
    version: i64,
    state: &'static str,
    lease: Option<i64>,
    leased: Option<i64>,
    record: Compressed,
}

impl Replacement {
    fn of(task: &Task) -> Result<Self, StoreError> {
        Ok(Self {
            id: task.id.to_string(),
            version: stored_version(task),
            state: task.state.as_str(),
            lease: lease(task),
            leased: leased(task),
            record: Compressed::json(task)?,
        })
    }

    /// Writes it if the stored version is the one before. The columns the indexes
    /// hold (the state, the `leased` flag) are set only when they change, which is a
    /// few times in a task's life: SQLite rewrites an index's entry whenever its
    /// column is set, changed or not, and a step's commit would write its page.
    fn write(&self, c: &Connection) -> Result<(), StoreError> {
        let parameters = params![
            self.id,
            self.version,
            self.state,
            self.lease,
            self.record,
            self.leased
        ];
        let mut updated = execute(
            c,
            "UPDATE tasks SET version = ?2, lease_expires = ?4, record = ?5
                 WHERE id = ?1 AND version = ?2 - 1 AND state = ?3 AND leased IS ?6",
            parameters,
        )
        .map_err(unavailable)?;
        if updated == 0 {
            updated = execute(
                c,
                "UPDATE tasks SET version = ?2, state = ?3, lease_expires = ?4, record = ?5,
                     leased = ?6
                     WHERE id = ?1 AND version = ?2 - 1",
                parameters,
            )
            .map_err(unavailable)?;
        }
        if updated == 1 {
            Ok(())
        } else {
            Err(StoreError::Conflict)
        }
    }
}

#[async_trait]
impl TaskStore for Embedded {
    async fn create(&self, task: &Task, order: &Order) -> Result<(), StoreError> {
        let record = Compressed::json(task)?;
        let input = encode(&order.input)?;
        let (id, version, state, lease, created, leased) = (
            task.id.to_string(),
            stored_version(task),
            task.state.as_str(),
            lease(task),
            task.created_at.0,
            leased(task),
        );
        let work = move |c: &Connection| {
            let inserted = execute(
                c,
                "INSERT INTO tasks (id, version, state, lease_expires, created_at, record, leased)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (id) DO NOTHING",
                params![id, version, state, lease, created, record, leased],
            )
            .map_err(unavailable)?;
            if inserted == 0 {
                return Err(StoreError::Conflict);
            }
            execute(
                c,
                "INSERT INTO orders (task_id, input) VALUES (?1, ?2)",
                params![id, input],
            )
            .map_err(unavailable)?;
            Ok(())
        };
        self.write_keeping(work, task, Some(order)).await
    }

    async fn task(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        if let Some(task) = self.recent.task(id.as_str()) {
            return Ok(Some(task));
        }
        let id = id.to_string();
        self.read(move |c| read_task(c, &id)).await
    }

    async fn task_with_order(&self, id: &TaskId) -> Result<Option<(Task, Order)>, StoreError> {
        if let Some(both) = self.recent.task_with_order(id.as_str()) {
            return Ok(Some(both));
        }
        let id = id.clone();
        self.read(move |c| {
            // A subquery rather than a join: SQLite re-plans a join on an indexed
            // column at every new binding (STAT4), parsing the statement again.
            let row: Option<(Stored, Option<String>, Option<String>)> = query_row(
                c,
                "SELECT record, (SELECT input FROM orders WHERE task_id = ?1),
                     (SELECT inputs FROM earlier_inputs WHERE task_id = ?1) FROM tasks WHERE id = ?1",
                [id.as_str()],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()
            .map_err(unavailable)?;
            let row = row.and_then(|(record, input, earlier)| Some((record, input?, earlier)));
            row.map(|(record, input, earlier)| {
                let order = Order {
                    task_id: id.clone(),
                    input: decode(&input)?,
                    earlier: earlier.as_deref().map(decode).transpose()?.unwrap_or_default(),
                };
                Ok((record.decode()?, order))
            })
            .transpose()
        })
        .await
    }

    async fn update(&self, task: &Task) -> Result<(), StoreError> {
        self.update_and_send(task, Vec::new()).await.map(drop)
    }

    async fn update_with_order(&self, task: &Task, order: &Order) -> Result<(), StoreError> {
        let replacement = Replacement::of(task)?;
        let (input, earlier) = (encode(&order.input)?, encode(&order.earlier)?);
        let work = move |c: &Connection| {
            replacement.write(c)?;
            let id = &replacement.id;
            execute(
                c,
                "UPDATE orders SET input = ?2 WHERE task_id = ?1",
                params![id, input],
            )
            .map_err(unavailable)?;
            execute(
                c,
                "INSERT OR REPLACE INTO earlier_inputs (task_id, inputs) VALUES (?1, ?2)",
                params![id, earlier],
            )
            .map(drop)
            .map_err(unavailable)
        };
        self.write_keeping(work, task, Some(order)).await
    }

    async fn update_and_send(
        &self,
        task: &Task,
        outbox: Vec<Outgoing>,
    ) -> Result<Vec<Outgoing>, StoreError> {
        let replacement = Replacement::of(task)?;
        let rows = self.rows(outbox.iter().map(|o| (&o.queue, &o.message)));
        let now = self.clock.now().0;
        let work = move |c: &Connection| {
            replacement.write(c)?;
            insert_messages(c, rows, now)
        };
        let inserted = self.write_keeping(work, task, None).await?;
        self.publish(inserted);
        Ok(Vec::new())
    }
}

#[async_trait]
impl TaskListing for Embedded {
    async fn list(
        &self,
        state: TaskState,
        limit: usize,
        after: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        let (after_created, after_id) = match after {
            Some(cursor) => {
                let (created, id) = TaskPage::parse_cursor(cursor)?;
                (created, id.to_owned())
            }
            None => (i64::MIN, String::new()),
        };
        self.read(move |c| {
            let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
            let mut tasks: Vec<Task> = decode_rows(
                c,
                "SELECT record FROM tasks WHERE state = ?1 AND (created_at, id) > (?2, ?3)
                 ORDER BY created_at, id LIMIT ?4",
                params![state.as_str(), after_created, after_id, fetch],
            )?;
            let next = (tasks.len() > limit).then(|| {
                tasks.truncate(limit);
                tasks.last().map(TaskPage::cursor_after).unwrap_or_default()
            });
            Ok(TaskPage::by_creation(tasks, next))
        })
        .await
    }
}

#[async_trait]
impl LeaseIndex for Embedded {
    async fn expired(
        &self,
        now: Timestamp,
        limit: usize,
        from: &ExpiredCursor,
    ) -> Result<Expired, StoreError> {
        let (after_expires, after_id) = match from.progress(0) {
            ShardProgress::Unread => (i64::MIN, String::new()),
            ShardProgress::After(key) => (key.expires, key.task.to_string()),
            ShardProgress::Done => return Ok(Expired::default()),
        };
        let ended = self.leases.ended(now.0, &(after_expires, after_id), limit);
        let page_is_full = ended.len() == limit;
        self.read(move |c| {
            let mut expired = Expired::default();
            let mut last = None;
            for (end, id) in ended {
                let id = TaskId::parse(id).map_err(|e| StoreError::Corrupt(e.into()))?;
                last = Some(LeaseKey {
                    expires: end,
                    task: id.clone(),
                });
                // Read as committed now: a lease moved since, or given up, is not
                // expired any more.
                let row: Option<(Option<i64>, Stored, i64)> = query_row(
                    c,
                    "SELECT lease_expires, record, version FROM tasks WHERE id = ?1",
                    [id.as_str()],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )
                .optional()
                .map_err(unavailable)?;
                let Some((Some(lease), record, version)) = row else {
                    continue;
                };
                if lease > now.0 {
                    continue;
                }
                match record.decode() {
                    Ok(task) => expired.tasks.push(task),
                    // Garbled, or of a shape this version does not know.
                    Err(error) => {
                        tracing::error!(task_id = %id, %error, "a task record this version cannot read");
                        expired.unreadable.push(Unreadable {
                            id,
                            version: u64::try_from(version).ok(),
                        });
                    }
                }
            }
            // A page short of the limit is the last.
            expired.next = last.filter(|_| page_is_full).map(ExpiredCursor::after);
            Ok(expired)
        })
        .await
    }

    async fn quarantine(&self, record: &Unreadable) -> Result<(), StoreError> {
        let id = record.id.to_string();
        let version = record.version.and_then(|v| i64::try_from(v).ok());
        let (leases, quarantined) = (Arc::clone(&self.leases), id.clone());
        let work = move |c: &Connection| {
            execute(
                c,
                "UPDATE tasks SET lease_expires = NULL, leased = NULL
                     WHERE id = ?1 AND version IS ?2",
                params![id, version],
            )
            .map_err(unavailable)
        };
        // Off the sweep once committed; unless written since it was read, when its
        // lease is its writer's.
        self.write_then(work, move |updated| {
            if *updated == 1 {
                leases.set(&quarantined, None);
            }
        })
        .await
        .map(drop)
    }
}

#[async_trait]
impl GateStore for Embedded {
    async fn gate(&self, gate: &str, first: usize) -> Result<(Gate, Vec<Waiter>), StoreError> {
        self.read_gate(gate, first).await
    }

    async fn enqueue(&self, waiter: &Waiter) -> Result<(), StoreError> {
        self.put_in_line(waiter).await
    }

    async fn update_gate(
        &self,
        name: &str,
        gate: &Gate,
        taken: &[Waiter],
    ) -> Result<(), StoreError> {
        self.write_gate(name, gate, taken).await
    }
}

#[async_trait]
impl CursorKeyStore for Embedded {
    async fn cursor_key(&self, drawn: CursorKey) -> Result<CursorKey, StoreError> {
        self.write(move |c| {
            execute(
                c,
                "INSERT INTO secrets (name, value) VALUES ('cursor_key', ?1)
                 ON CONFLICT (name) DO NOTHING",
                [drawn.as_slice()],
            )
            .map_err(unavailable)?;
            let kept: Vec<u8> = query_row(
                c,
                "SELECT value FROM secrets WHERE name = 'cursor_key'",
                [],
                |row| row.get(0),
            )
            .map_err(unavailable)?;
            CursorKey::try_from(kept).map_err(|kept| {
                StoreError::Corrupt(format!("a cursor key of {} bytes", kept.len()).into())
            })
        })
        .await
    }
}

#[async_trait]
impl WorkflowStore for Embedded {
    async fn save_workflow(&self, workflow: &Workflow) -> Result<(), StoreError> {
        let (name, version, digest, source) = (
            workflow.name.clone(),
            workflow.version,
            workflow.digest(),
            workflow.source.clone(),
        );
        self.write(move |c| {
            execute(
                c,
                "INSERT INTO workflows (name, version, digest, source) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name, version) DO NOTHING",
                params![name, version, digest, source],
            )
            .map_err(unavailable)?;
            let stored: String = query_row(
                c,
                "SELECT digest FROM workflows WHERE name = ?1 AND version = ?2",
                params![name, version],
                |row| row.get(0),
            )
            .map_err(unavailable)?;
            if stored == digest {
                Ok(())
            } else {
                Err(StoreError::Conflict)
            }
        })
        .await
    }

    async fn load_workflow(&self, name: &str, version: u32) -> Result<Option<String>, StoreError> {
        let name = name.to_owned();
        self.read(move |c| {
            query_row(
                c,
                "SELECT source FROM workflows WHERE name = ?1 AND version = ?2",
                params![name, version],
                |row| row.get(0),
            )
            .optional()
            .map_err(unavailable)
        })
        .await
    }
}
