//! A call of a service: its faults and its key checked, its effect applied once,
//! and its answer, with what the call carried.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

use crate::{Shared, error};

pub(crate) async fn call(
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
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok());
    let answer = |applied: rusqlite::Result<Value>, bytes| {
        applied.map(|mut answer| {
            answer["received"] = received.clone();
            answer["received_bytes"] = json!(body.len());
            if let Some(traceparent) = traceparent {
                answer["traceparent"] = json!(traceparent);
            }
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
