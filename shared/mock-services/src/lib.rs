//! Mock remote services for the workflow steps, with fault injection per service.
//! Each records the side effects it applied per idempotency key and how often each key
//! was called, so that one can see the duplicates the pattern absorbs: durably, or for
//! benchmarks in memory.
//!
//! Routes: `POST /{service}/{operation...}` (the services), `GET /effects`,
//! `GET /calls` (requests received per service, failed ones included),
//! `GET /credentials` (per service that requires a key, each call's key as the service
//! saw it: the current one, a stale one, or another), `GET /faults`,
//! `PUT /faults/{service}`, `DELETE /faults/{service}`.
//!
//! An axum router over SQLite (or memory), used by `sas-local` (`cargo run -p sas-local`
//! serves them) and by the tests; no Lambda function links it.
//!
//! Here: [`MockServices`], their state; `faults` (what is injected into a service's
//! calls), `effects` (the side effects applied, once per key), `credentials` (the
//! keys a service requires, and each call's check), `counts` (calls received and in
//! progress), `call` (a service's call, through all of them) and `routes` (the
//! router and the routes that read and set the state).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

mod call;
mod counts;
mod credentials;
mod effects;
mod faults;
mod routes;

pub use counts::Concurrency;
pub use credentials::{CredentialCheck, Verdict};
pub use effects::Effect;
pub use faults::Faults;
pub use routes::router;

use credentials::Credentials;
use effects::Record;
use faults::Injected;

/// The mock services' state.
pub struct MockServices {
    record: Record,
    faults: Mutex<HashMap<String, Injected>>,
    calls: Mutex<HashMap<String, u64>>,
    /// Calls in progress per service, and the most there were at once.
    in_flight: Mutex<HashMap<String, Concurrency>>,
    credentials: Mutex<HashMap<String, Credentials>>,
    random: Mutex<fastrand::Rng>,
}

/// The mock services, shared by their routes.
pub type Shared = Arc<MockServices>;

impl MockServices {
    /// With `durable`, opens (or creates) the effects database at `path`, and every
    /// effect is fsynced before the answer; else the effects are kept in memory.
    ///
    /// # Errors
    /// When the database cannot be opened.
    pub fn open(path: &Path, seed: u64, durable: bool) -> rusqlite::Result<Shared> {
        let record = if durable {
            let db = Connection::open(path)?;
            db.execute_batch(
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
                 CREATE TABLE IF NOT EXISTS effects (
                    service TEXT NOT NULL, idempotency_key TEXT NOT NULL, operation TEXT NOT NULL,
                    calls INTEGER NOT NULL, applied_at INTEGER NOT NULL, response TEXT NOT NULL,
                    PRIMARY KEY (service, idempotency_key));",
            )?;
            Record::Durable(Mutex::new(db))
        } else {
            Record::Memory(Mutex::default())
        };
        Ok(Arc::new(Self {
            record,
            faults: Mutex::new(HashMap::new()),
            calls: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashMap::new()),
            credentials: Mutex::new(HashMap::new()),
            random: Mutex::new(fastrand::Rng::with_seed(seed)),
        }))
    }
}

/// A service's error answer: `status`, with `{"error": message}`.
fn error(status: axum::http::StatusCode, message: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}
