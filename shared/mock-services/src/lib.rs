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

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use rusqlite::{Connection, OptionalExtension, params};
use sas_domain::ids::stable_hash;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Faults injected into one service's calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    /// Added to every call, in milliseconds.
    #[serde(default)]
    pub latency_ms: u64,
    /// Share of calls (0..1) answered 503 without applying the effect.
    #[serde(default)]
    pub transient_error_rate: f64,
    /// Share of calls (0..1) refused with 422, for good, without applying the effect.
    #[serde(default)]
    pub permanent_error_rate: f64,
    /// The effect is applied, then the answer is held this long (past any deadline).
    #[serde(default)]
    pub hang_ms: u64,
    /// From now, every call fails with 503 for this long.
    #[serde(default)]
    pub outage_ms: u64,
    /// The effect is applied and the answer padded to this many bytes of JSON (a
    /// service answering more than a step's output may hold).
    #[serde(default)]
    pub answer_bytes: Option<usize>,
    /// The service takes only calls with this `X-Api-Key` header: any other is
    /// refused with 401, without applying the effect.
    #[serde(default)]
    pub api_key: Option<String>,
    /// The faults apply to this many calls, then clear; all calls when absent.
    #[serde(default)]
    pub times: Option<u32>,
}

struct Injected {
    faults: Faults,
    outage_until: Instant,
    remaining: Option<u32>,
}

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

/// What a service that requires a key made of a call's `X-Api-Key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The key it requires now: the call went on.
    Accepted,
    /// A key it required before and no longer takes (rotated): refused with 401.
    RefusedStale,
    /// No key, or one it never required: refused with 401.
    RefusedUnknown,
}

/// A call to a service that requires a key, as the service saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialCheck {
    /// The call's idempotency key.
    pub idempotency_key: String,
    /// Which of the keys the service has required the call presented: 1 for the first
    /// `api_key` set on it, 2 for the one after (its rotation), and so on; none when it
    /// presented none of them. The key itself is never recorded.
    pub presented: Option<usize>,
    /// What the service made of it.
    pub verdict: Verdict,
}

/// The keys a service has required, in the order set, and its calls' checks in the
/// order received.
#[derive(Default)]
struct Credentials {
    keys: Vec<String>,
    checks: Vec<CredentialCheck>,
}

/// The effects applied, where they are kept.
enum Record {
    /// In SQLite, fsynced before the answer, as a real service would.
    Durable(Mutex<Connection>),
    /// In memory, lost at exit: for benchmarks, where the remote side must cost nothing.
    Memory(Mutex<Applied>),
}

/// The effects applied, in the order they were, and their place by (service, key).
#[derive(Default)]
struct Applied {
    effects: Vec<Effect>,
    by_key: HashMap<(String, String), usize>,
}

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

/// A service's calls in progress, and the most there were at once.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Concurrency {
    /// Now.
    pub now: u64,
    /// The most at once since start.
    pub peak: u64,
}

/// A call in progress: counted while it lives.
struct InFlight<'a> {
    mock: &'a MockServices,
    service: String,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(count) = self
            .mock
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&self.service)
        {
            count.now -= 1;
        }
    }
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

    /// Sets a service's faults. A new `api_key` is the service's next key: the ones
    /// before it are stale.
    pub fn set_faults(&self, service: &str, faults: Faults) {
        if let Some(key) = &faults.api_key {
            let mut all = self
                .credentials
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let keys = &mut all.entry(service.to_owned()).or_default().keys;
            if keys.last() != Some(key) {
                keys.retain(|k| k != key);
                keys.push(key.clone());
            }
        }
        let injected = Injected {
            outage_until: Instant::now() + Duration::from_millis(faults.outage_ms),
            remaining: faults.times,
            faults,
        };
        self.faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(service.to_owned(), injected);
    }

    /// Calls in progress per service, and the most there were at once.
    #[must_use]
    pub fn concurrency(&self) -> HashMap<String, Concurrency> {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Counts a call of `counted` (a service, or a service and a customer) in
    /// progress until the guard is dropped.
    fn enter(&self, counted: String) -> InFlight<'_> {
        let mut all = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let count = all.entry(counted.clone()).or_default();
        count.now += 1;
        count.peak = count.peak.max(count.now);
        InFlight {
            mock: self,
            service: counted,
        }
    }

    /// Requests received per service since start, failed ones included.
    #[must_use]
    pub fn calls(&self) -> HashMap<String, u64> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The checks of the keys of the calls to each service that required one, in the
    /// order the calls were received.
    #[must_use]
    pub fn credential_checks(&self) -> HashMap<String, Vec<CredentialCheck>> {
        self.credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(service, credentials)| (service.clone(), credentials.checks.clone()))
            .collect()
    }

    /// Checks the key `given` of a call of `service` with idempotency key `key`
    /// against the one it requires, and records what it made of it; whether the call
    /// may go on.
    fn check_credential(
        &self,
        service: &str,
        required: &str,
        given: Option<&str>,
        key: &str,
    ) -> bool {
        let mut all = self
            .credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let credentials = all.entry(service.to_owned()).or_default();
        let presented = given.and_then(|given| credentials.keys.iter().position(|k| k == given));
        let verdict = match (given, presented) {
            (Some(given), _) if given == required => Verdict::Accepted,
            (_, Some(_)) => Verdict::RefusedStale,
            (_, None) => Verdict::RefusedUnknown,
        };
        credentials.checks.push(CredentialCheck {
            idempotency_key: key.to_owned(),
            presented: presented.map(|index| index + 1),
            verdict,
        });
        verdict == Verdict::Accepted
    }

    /// Counts a call of `service` and returns the faults to apply to it, and
    /// whether the service is in an outage.
    fn take_faults(&self, service: &str) -> Option<(Faults, bool)> {
        *self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(service.to_owned())
            .or_default() += 1;
        let mut all = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        let injected = all.get_mut(service)?;
        if let Some(remaining) = injected.remaining.as_mut() {
            if *remaining == 0 {
                return None;
            }
            *remaining -= 1;
        }
        Some((
            injected.faults.clone(),
            Instant::now() < injected.outage_until,
        ))
    }

    fn chance(&self, rate: f64) -> bool {
        rate > 0.0
            && self
                .random
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .f64()
                < rate
    }

    /// Applies an effect once per key; returns the answer of the first call.
    fn apply(&self, service: &str, key: &str, operation: &str) -> rusqlite::Result<Value> {
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

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

async fn call(
    State(mock): State<Shared>,
    UrlPath((service, operation)): UrlPath<(String, String)>,
    method: axum::http::Method,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "an Idempotency-Key header is required",
        );
    };
    // Recorded as a workflow writes it: the path alone for a POST.
    let operation = if method == axum::http::Method::POST {
        format!("/{operation}")
    } else {
        format!("{method} /{operation}")
    };
    let _in_flight = mock.enter(service.clone());
    let _for_customer =
        customer_of(&body).map(|customer| mock.enter(format!("{service}/{customer}")));
    let received = received(&body);
    let answer = |applied: rusqlite::Result<Value>, bytes| {
        applied.map(|mut answer| {
            answer["received"] = received.clone();
            padded(answer, bytes)
        })
    };
    let mut answer_bytes = None;
    if let Some((faults, in_outage)) = mock.take_faults(&service) {
        answer_bytes = faults.answer_bytes;
        if in_outage {
            return error(StatusCode::SERVICE_UNAVAILABLE, "outage injected");
        }
        let given = headers.get("x-api-key").and_then(|v| v.to_str().ok());
        let refused = faults
            .api_key
            .as_deref()
            .is_some_and(|required| !mock.check_credential(&service, required, given, &key));
        if refused {
            return error(
                StatusCode::UNAUTHORIZED,
                "a valid X-Api-Key header is required",
            );
        }
        tokio::time::sleep(Duration::from_millis(faults.latency_ms)).await;
        if mock.chance(faults.permanent_error_rate) {
            return error(StatusCode::UNPROCESSABLE_ENTITY, "permanent error injected");
        }
        if mock.chance(faults.transient_error_rate) {
            return error(StatusCode::SERVICE_UNAVAILABLE, "transient error injected");
        }
        if faults.hang_ms > 0 {
            let applied = mock.apply(&service, &key, &operation);
            tokio::time::sleep(Duration::from_millis(faults.hang_ms)).await;
            return respond(answer(applied, None));
        }
    }
    respond(answer(mock.apply(&service, &key, &operation), answer_bytes))
}

/// The customer a call is for, when its body carries the input's `customer_id`.
fn customer_of(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Body {
        input: Option<Customer>,
    }
    #[derive(Deserialize)]
    struct Customer {
        customer_id: Option<String>,
    }
    serde_json::from_slice::<Body>(body)
        .ok()?
        .input?
        .customer_id
}

/// What a call carried, by field: the body's fields, and a step's mapped `fields`
/// as `fields.<name>`, sorted (the same for every call with a key, whose body is).
/// Read for the names alone: the values are skipped, not built.
fn received(body: &[u8]) -> Value {
    let fields: BTreeMap<String, Names> = serde_json::from_slice(body).unwrap_or_default();
    let mapped = fields.get("fields").map(|mapped| &mapped.0);
    let mut names: Vec<String> = fields.keys().cloned().collect();
    names.extend(
        mapped
            .into_iter()
            .flatten()
            .map(|name| format!("fields.{name}")),
    );
    names.sort();
    json!(names)
}

/// A JSON value's field names when it is an object (none otherwise), its values
/// skipped.
struct Names(Vec<String>);

impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NamesVisitor)
    }
}

struct NamesVisitor;

impl<'de> serde::de::Visitor<'de> for NamesVisitor {
    type Value = Names;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Names, A::Error> {
        let mut names = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            map.next_value::<IgnoredAny>()?;
            names.push(name);
        }
        Ok(Names(names))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Names, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Names(Vec::new()))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Names, E> {
        Ok(Names(Vec::new()))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Names, E> {
        Ok(Names(Vec::new()))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Names, E> {
        Ok(Names(Vec::new()))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Names, E> {
        Ok(Names(Vec::new()))
    }

    fn visit_str<E>(self, _: &str) -> Result<Names, E> {
        Ok(Names(Vec::new()))
    }

    fn visit_unit<E>(self) -> Result<Names, E> {
        Ok(Names(Vec::new()))
    }
}

/// The answer with a `padding` field that makes its JSON `bytes` long, when given
/// and longer than the answer.
fn padded(mut answer: Value, bytes: Option<usize>) -> Value {
    if let Some(bytes) = bytes {
        answer["padding"] = json!("");
        let unpadded = answer.to_string().len();
        answer["padding"] = json!("x".repeat(bytes.saturating_sub(unpadded)));
    }
    answer
}

fn respond(applied: rusqlite::Result<Value>) -> Response {
    match applied {
        Ok(body) => Json(body).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

#[derive(Deserialize)]
struct EffectsQuery {
    service: Option<String>,
}

async fn effects(State(mock): State<Shared>, Query(query): Query<EffectsQuery>) -> Response {
    match mock.effects(query.service.as_deref()) {
        Ok(effects) => Json(json!({ "effects": effects })).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// `GET /calls?of=`: what was counted of `of` alone (a service, or
/// `service/customer`), or of everything: counts per customer grow with the customers.
#[derive(serde::Deserialize)]
struct CallsQuery {
    of: Option<String>,
}

async fn calls(State(mock): State<Shared>, Query(query): Query<CallsQuery>) -> Json<Value> {
    let (mut calls, mut concurrency) = (mock.calls(), mock.concurrency());
    if let Some(of) = &query.of {
        calls.retain(|counted, _| counted == of);
        concurrency.retain(|counted, _| counted == of);
    }
    Json(json!({ "calls": calls, "concurrency": concurrency }))
}

/// Per service that requires a key: how many calls it accepted, refused with a stale
/// key and refused with none or another, and each call's check in order.
async fn credentials(State(mock): State<Shared>) -> Json<Value> {
    let services: BTreeMap<String, Value> = mock
        .credential_checks()
        .into_iter()
        .map(|(service, checks)| {
            let count = |verdict| checks.iter().filter(|c| c.verdict == verdict).count();
            let counts = json!({
                "accepted": count(Verdict::Accepted),
                "refused_stale": count(Verdict::RefusedStale),
                "refused_unknown": count(Verdict::RefusedUnknown),
                "checks": checks,
            });
            (service, counts)
        })
        .collect();
    Json(json!({ "credentials": services }))
}

async fn list_faults(State(mock): State<Shared>) -> Json<Value> {
    let all = mock.faults.lock().unwrap_or_else(PoisonError::into_inner);
    let faults: HashMap<&String, &Faults> = all.iter().map(|(k, v)| (k, &v.faults)).collect();
    Json(json!({ "faults": faults }))
}

async fn set_faults(
    State(mock): State<Shared>,
    UrlPath(service): UrlPath<String>,
    body: axum::body::Bytes,
) -> Response {
    match serde_json::from_slice::<Faults>(&body) {
        Ok(faults) => {
            mock.set_faults(&service, faults.clone());
            Json(json!({ "service": service, "faults": faults })).into_response()
        }
        Err(e) => error(StatusCode::BAD_REQUEST, &format!("invalid faults: {e}")),
    }
}

async fn clear_faults(State(mock): State<Shared>, UrlPath(service): UrlPath<String>) -> StatusCode {
    mock.faults
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&service);
    StatusCode::NO_CONTENT
}

/// The mock services' routes.
pub fn router(mock: Shared) -> axum::Router {
    axum::Router::new()
        .route("/effects", get(effects))
        .route("/calls", get(calls))
        .route("/credentials", get(credentials))
        .route("/faults", get(list_faults))
        .route("/faults/{service}", put(set_faults).delete(clear_faults))
        .route(
            "/{service}/{*operation}",
            post(call).put(call).patch(call).delete(call),
        )
        .with_state(mock)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service that requires a key records each call's: the current key taken, a
    /// rotated one refused as stale, none or another refused as unknown; the keys
    /// numbered in the order set, never recorded themselves.
    #[test]
    fn a_service_tells_a_stale_key_from_an_unknown_one() {
        let data = tempfile::tempdir().expect("directory");
        let mock = MockServices::open(&data.path().join("mock.db"), 1, false).expect("mock");
        let keyed = |key: &str| Faults {
            api_key: Some(key.into()),
            ..Faults::default()
        };
        mock.set_faults("drone", keyed("k1"));
        assert!(mock.check_credential("drone", "k1", Some("k1"), "t/0"));
        mock.set_faults("drone", keyed("k2"));
        mock.set_faults("drone", keyed("k2"));
        assert!(!mock.check_credential("drone", "k2", Some("k1"), "t/1"));
        assert!(mock.check_credential("drone", "k2", Some("k2"), "t/1"));
        assert!(!mock.check_credential("drone", "k2", Some("other"), "t/2"));
        assert!(!mock.check_credential("drone", "k2", None, "t/2"));
        let checks = &mock.credential_checks()["drone"];
        let seen: Vec<(&str, Option<usize>, Verdict)> = checks
            .iter()
            .map(|c| (c.idempotency_key.as_str(), c.presented, c.verdict))
            .collect();
        assert_eq!(
            seen,
            [
                ("t/0", Some(1), Verdict::Accepted),
                ("t/1", Some(1), Verdict::RefusedStale),
                ("t/1", Some(2), Verdict::Accepted),
                ("t/2", None, Verdict::RefusedUnknown),
                ("t/2", None, Verdict::RefusedUnknown),
            ]
        );
        let serialized = serde_json::to_string(checks).expect("JSON");
        assert!(
            !serialized.contains("k1") && !serialized.contains("k2"),
            "{serialized}"
        );
    }

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
