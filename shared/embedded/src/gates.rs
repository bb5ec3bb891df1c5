//! The gates of flow control ([`sas_domain::flow`]): each gate's state a row,
//! versioned, and its line a row per call, in the order of their positions.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

use sas_core::ports::{GateStore, StoreError};
use sas_domain::flow::{Gate, Waiter};

use crate::Embedded;
use crate::schema::{decode, encode, execute, query_row, unavailable};

#[async_trait]
impl GateStore for Embedded {
    async fn gate(&self, gate: &str, first: usize) -> Result<(Gate, Vec<Waiter>), StoreError> {
        let gate = gate.to_owned();
        let fetch = i64::try_from(first).unwrap_or(i64::MAX);
        self.read(move |c| {
            let state: Option<(i64, String)> = query_row(
                c,
                "SELECT version, state FROM gates WHERE name = ?1",
                params![gate],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(unavailable)?;
            let state = match state {
                Some((version, text)) => Gate {
                    version: u64::try_from(version).unwrap_or_default(),
                    ..decode(&text)?
                },
                None => Gate::default(),
            };
            let mut select = c
                .prepare_cached(
                    "SELECT waiter FROM gate_lines WHERE gate = ?1
                     ORDER BY position, call LIMIT ?2",
                )
                .map_err(unavailable)?;
            let line = select
                .query_map(params![gate, fetch], |row| row.get::<_, String>(0))
                .map_err(unavailable)?
                .map(|text| decode(&text.map_err(unavailable)?))
                .collect::<Result<Vec<Waiter>, _>>()?;
            Ok((state, line))
        })
        .await
    }

    async fn enqueue(&self, waiter: &Waiter) -> Result<(), StoreError> {
        let Some(gate) = waiter.gate().map(|g| g.name.clone()) else {
            return Ok(());
        };
        let (position, call, text) = (
            waiter.admission.position.0,
            waiter.admission.call.id(),
            encode(waiter)?,
        );
        self.write(move |c| {
            execute(
                c,
                "INSERT INTO gate_lines (gate, position, call, waiter) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (gate, position, call) DO NOTHING",
                params![gate, position, call, text],
            )
            .map_err(unavailable)?;
            Ok(())
        })
        .await
    }

    async fn update_gate(
        &self,
        name: &str,
        gate: &Gate,
        taken: &[Waiter],
    ) -> Result<(), StoreError> {
        let name = name.to_owned();
        let read = i64::try_from(gate.version).unwrap_or(i64::MAX);
        let text = encode(&Gate {
            version: 0,
            ..gate.clone()
        })?;
        let taken: Vec<(i64, String)> = taken
            .iter()
            .map(|w| (w.admission.position.0, w.admission.call.id()))
            .collect();
        self.write(move |c| {
            let written = if read == 0 {
                execute(
                    c,
                    "INSERT INTO gates (name, version, state) VALUES (?1, 1, ?2)
                     ON CONFLICT (name) DO NOTHING",
                    params![name, text],
                )
            } else {
                execute(
                    c,
                    "UPDATE gates SET version = version + 1, state = ?2
                     WHERE name = ?1 AND version = ?3",
                    params![name, text, read],
                )
            }
            .map_err(unavailable)?;
            if written == 0 {
                return Err(StoreError::Conflict);
            }
            for (position, call) in taken {
                execute(
                    c,
                    "DELETE FROM gate_lines WHERE gate = ?1 AND position = ?2 AND call = ?3",
                    params![name, position, call],
                )
                .map_err(unavailable)?;
            }
            Ok(())
        })
        .await
    }
}
