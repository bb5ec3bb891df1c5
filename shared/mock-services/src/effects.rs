//! The side effects the services apply, once per idempotency key: kept in SQLite,
//! fsynced before the answer, or in memory.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};
use sas_domain::ids::stable_hash;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::MockServices;

/// A side effect a service applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Effect {
    /// The service.
    pub service: String,
    /// The idempotency key it was applied under.
    pub idempotency_key: String,
    /// The operation called.
    pub operation: String,
    /// Calls with that key: more than one means duplicates were absorbed.
    pub calls: u32,
    /// The answer, the same for every call with that key.
    pub response: Value,
}

/// The effects applied, where they are kept.
pub(crate) enum Record {
    /// In SQLite, fsynced before the answer, as a real service would.
    Durable(Mutex<Connection>),
    /// In memory, lost at exit: for benchmarks, where the remote side must cost nothing.
    Memory(Mutex<Applied>),
}

/// The effects applied, in the order they were, and their place by (service, key).
#[derive(Default)]
pub(crate) struct Applied {
    effects: Vec<Effect>,
    by_key: HashMap<(String, String), usize>,
}

impl MockServices {
    /// Applies an effect once per key; returns the answer of the first call.
    pub(crate) fn apply(
        &self,
        service: &str,
        key: &str,
        operation: &str,
    ) -> rusqlite::Result<Value> {
        match &self.record {
            Record::Durable(db) => apply_durably(
                &mut db.lock().unwrap_or_else(PoisonError::into_inner),
                service,
                key,
                operation,
            ),
            Record::Memory(applied) => Ok(applied
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .apply(service, key, operation)),
        }
    }
}

impl MockServices {
    /// The effects applied, in the order they were, optionally of one service.
    ///
    /// # Errors
    /// When the database fails.
    pub fn effects(&self, service: Option<&str>) -> rusqlite::Result<Vec<Effect>> {
        match &self.record {
            Record::Durable(db) => {
                durable_effects(&db.lock().unwrap_or_else(PoisonError::into_inner), service)
            }
            Record::Memory(applied) => Ok(applied
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .effects
                .iter()
                .filter(|e| service.is_none_or(|s| e.service == s))
                .cloned()
                .collect()),
        }
    }
}

impl Applied {
    fn apply(&mut self, service: &str, key: &str, operation: &str) -> Value {
        let Self { effects, by_key } = self;
        let index = *by_key
            .entry((service.to_owned(), key.to_owned()))
            .or_insert_with(|| {
                effects.push(Effect {
                    service: service.to_owned(),
                    idempotency_key: key.to_owned(),
                    operation: operation.to_owned(),
                    calls: 0,
                    response: first_answer(service, key, operation),
                });
                effects.len() - 1
            });
        let effect = &mut effects[index];
        effect.calls += 1;
        effect.response.clone()
    }
}

/// What a service answers the first call with a key, and every call with it after.
fn first_answer(service: &str, key: &str, operation: &str) -> Value {
    let id = format!("{service}-{:08x}", stable_hash(key));
    json!({ "service": service, "operation": operation, "id": id })
}

fn apply_durably(
    db: &mut Connection,
    service: &str,
    key: &str,
    operation: &str,
) -> rusqlite::Result<Value> {
    let tx = db.transaction()?;
    let known: Option<String> = tx
        .prepare_cached(
            "UPDATE effects SET calls = calls + 1 WHERE service = ?1 AND idempotency_key = ?2 RETURNING response",
        )?
        .query_row(params![service, key], |row| row.get(0))
        .optional()?;
    let response = if let Some(known) = known {
        serde_json::from_str(&known).unwrap_or(Value::Null)
    } else {
        let response = first_answer(service, key, operation);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        tx.prepare_cached(
            "INSERT INTO effects (service, idempotency_key, operation, calls, applied_at, response)
             VALUES (?1, ?2, ?3, 1, ?4, ?5)",
        )?
        .execute(params![
            service,
            key,
            operation,
            i64::try_from(now).unwrap_or(0),
            response.to_string()
        ])?;
        response
    };
    tx.commit()?;
    Ok(response)
}

fn durable_effects(db: &Connection, service: Option<&str>) -> rusqlite::Result<Vec<Effect>> {
    let mut select = db.prepare(
        "SELECT service, idempotency_key, operation, calls, response FROM effects
         WHERE ?1 IS NULL OR service = ?1 ORDER BY rowid",
    )?;
    let rows = select.query_map([service], |row| {
        Ok(Effect {
            service: row.get(0)?,
            idempotency_key: row.get(1)?,
            operation: row.get(2)?,
            calls: row.get(3)?,
            response: serde_json::from_str(&row.get::<_, String>(4)?).unwrap_or(Value::Null),
        })
    })?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use crate::MockServices;

    /// Both records apply an effect once per key, count every call, and list the
    /// effects in the order applied, by service when asked.
    #[test]
    fn an_effect_is_applied_once_per_key_in_either_record() {
        for durable in [true, false] {
            let data = tempfile::tempdir().expect("directory");
            let mock = MockServices::open(&data.path().join("mock.db"), 1, durable).expect("mock");
            let first = mock
                .apply("drone", "t1/0/pickup", "/pickup")
                .expect("apply");
            mock.apply("billing", "t1/0/charge", "/charge")
                .expect("apply");
            let again = mock.apply("drone", "t1/0/pickup", "/other").expect("apply");
            assert_eq!(
                first, again,
                "durable={durable}: a repeated key gets the first answer"
            );
            let all = mock.effects(None).expect("effects");
            let keys: Vec<(&str, u32)> = all
                .iter()
                .map(|e| (e.idempotency_key.as_str(), e.calls))
                .collect();
            assert_eq!(
                keys,
                [("t1/0/pickup", 2), ("t1/0/charge", 1)],
                "durable={durable}"
            );
            assert_eq!(all[0].operation, "/pickup", "durable={durable}");
            let billing = mock.effects(Some("billing")).expect("effects");
            assert_eq!(billing.len(), 1, "durable={durable}");
            assert_eq!(billing[0].service, "billing", "durable={durable}");
        }
    }
}
