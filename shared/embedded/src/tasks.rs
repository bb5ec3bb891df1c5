//! The tasks and their order data ([`TaskStore`]): a row each, replaced on condition
//! of its version, with the messages a decision sends in the same transaction.

use std::borrow::Cow;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use sas_core::ports::{Outgoing, StoreError, TaskStore};
use sas_domain::ids::TaskId;
use sas_domain::task::{Order, Task};

use crate::Embedded;
use crate::activities::OfferRow;
use crate::attributes::AttributeRows;
use crate::history::EventRows;
use crate::queues::insert_messages;
use crate::recent::Recent;
use crate::schema::{
    Compressed, Stored, Vocabulary, decode, encode, execute, query_row, unavailable,
};

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
    offer: OfferRow,
    attributes: AttributeRows,
    events: EventRows,
}

impl Replacement {
    /// `task`'s row; its attributes' rows written only where `recent` does not hold
    /// the version before it with the same attributes.
    fn of(task: &Task, recent: &Recent) -> Result<Self, StoreError> {
        let attributes = if recent.attributes_kept(task) {
            AttributeRows::unchanged()
        } else {
            AttributeRows::of(task)
        };
        Ok(Self {
            id: task.id.to_string(),
            version: stored_version(task),
            state: task.state.as_str(),
            lease: lease(task),
            leased: leased(task),
            record: Compressed::json(task, Vocabulary::of(task))?,
            offer: OfferRow::of(task),
            attributes,
            events: EventRows::of(task)?,
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
            self.offer.write(c, &self.id)?;
            self.attributes.write(c, &self.id)?;
            self.events.write(c, &self.id)
        } else {
            Err(StoreError::Conflict)
        }
    }
}

#[async_trait]
impl TaskStore for Embedded {
    async fn create(&self, task: &Task, order: &Order) -> Result<(), StoreError> {
        let record = Compressed::json(task, Vocabulary::of(task))?;
        let input = encode(&order.input)?;
        let (id, version, state, lease, created, leased) = (
            task.id.to_string(),
            stored_version(task),
            task.state.as_str(),
            lease(task),
            task.created_at.0,
            leased(task),
        );
        let (offer, events) = (OfferRow::of(task), EventRows::of(task)?);
        let attributes = AttributeRows::of(task);
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
            offer.write(c, &id)?;
            attributes.write(c, &id)?;
            events.write(c, &id)
        };
        self.write_keeping(work, Cow::Borrowed(task), Some(order))
            .await
    }

    async fn task(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        if let Some(task) = self.recent.task(id) {
            return Ok(Some(task));
        }
        let id = id.to_string();
        self.read(move |c| read_task(c, &id)).await
    }

    async fn task_with_order(&self, id: &TaskId) -> Result<Option<(Task, Order)>, StoreError> {
        if let Some(both) = self.recent.task_with_order(id) {
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
        self.update_and_send(Cow::Borrowed(task), Vec::new())
            .await
            .map(drop)
    }

    async fn update_with_order(&self, task: &Task, order: &Order) -> Result<(), StoreError> {
        let replacement = Replacement::of(task, &self.recent)?;
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
        self.write_keeping(work, Cow::Borrowed(task), Some(order))
            .await
    }

    async fn update_and_send(
        &self,
        task: Cow<'_, Task>,
        outbox: Vec<Outgoing>,
    ) -> Result<Vec<Outgoing>, StoreError> {
        let replacement = Replacement::of(&task, &self.recent)?;
        let rows = self.rows(outbox.iter().map(|o| (&o.queue, &o.message)));
        let now = self.clock.now().0;
        let work = move |c: &Connection| {
            replacement.write(c)?;
            insert_messages(c, rows, now)
        };
        let inserted = self.write_keeping(work, task, None).await?;
        self.publish(inserted).await;
        Ok(Vec::new())
    }
}
