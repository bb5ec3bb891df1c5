//! The mock services' router, and the routes that read their state (effects, calls,
//! credentials' checks) and set their faults.

use std::collections::{BTreeMap, HashMap};
use std::sync::PoisonError;

use axum::Json;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::call::call;
use crate::{Faults, Shared, Verdict, error};

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
        // A call carries a task's input and outputs, of any size a value may have.
        .layer(axum::extract::DefaultBodyLimit::max(
            2 * sas_domain::limits::MAX_VALUE,
        ))
        .with_state(mock)
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
    // In their names' order: a person reads them.
    let calls: BTreeMap<_, _> = calls.into_iter().collect();
    let concurrency: BTreeMap<_, _> = concurrency.into_iter().collect();
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
