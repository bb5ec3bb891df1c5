//! The local HTTP server: every request goes to the same API handler the API
//! Gateway Lambda uses, so both behave alike. Two local-only routes let a user
//! read what AWS would deliver elsewhere: `GET /local/queues/{name}` takes the
//! messages of a caller's notification queue (none of the system's own queues, nor
//! their dead letters, which the operator routes show and leave) and
//! `GET /local/alerts` lists the operator alerts. When callers are authenticated, a
//! caller takes only its own notification queues' messages, and only an operator
//! the other callers'.
//!
//! Every route refuses what another site's page, open in the developer's browser,
//! could send it: a `Host` not one of the server's names (a name of theirs rebound
//! to 127.0.0.1), an `Origin` not its own, and a body not declared JSON (a form's,
//! or a fetch's the browser sends without asking the server first).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::HttpBody as _;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sas_api::{AMZ_JSON, ApiError, ApiRequest, ApiResponse, Caller, ErrorCode, TraceHeaders};
use sas_core::app::App;
use sas_core::ports::Consumer;
use sas_domain::ids::QueueName;
use sas_embedded::Embedded;

use crate::auth::Authentication;
use serde_json::{Value, json};

/// What the routes share.
#[derive(Clone)]
pub struct Shared {
    /// The actors.
    pub app: Arc<App>,
    /// The backend, for the local-only routes.
    pub backend: Arc<Embedded>,
    /// Who may call.
    pub authentication: Arc<Authentication>,
}

impl Shared {
    fn caller(&self, headers: &HeaderMap) -> Caller {
        let authorization = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        self.authentication.caller(authorization)
    }
}

/// The API's routes, and the local-only ones, of the server listening on `listening`.
pub fn router(shared: Shared, listening: SocketAddr) -> axum::Router {
    axum::Router::new()
        .route("/local/queues/{name}", get(take_messages))
        .route("/local/alerts", get(alerts))
        .fallback(serve_api)
        .with_state(shared)
        .layer(middleware::from_fn_with_state(
            OwnNames::of(listening),
            same_site,
        ))
}

/// The `host:port` names the server answers as: loopback's, and its address.
#[derive(Clone)]
struct OwnNames(Arc<[String]>);

impl OwnNames {
    fn of(listening: SocketAddr) -> Self {
        let port = listening.port();
        let mut names: Vec<String> = ["127.0.0.1", "localhost", "[::1]"]
            .iter()
            .map(|name| format!("{name}:{port}"))
            .collect();
        let own = listening.to_string();
        if !names.contains(&own) {
            names.push(own);
        }
        Self(names.into())
    }

    fn has(&self, authority: &str) -> bool {
        self.0
            .iter()
            .any(|name| name.eq_ignore_ascii_case(authority))
    }

    /// Why `request` may come from another site's page, if it may.
    fn refusal(&self, request: &Request) -> Option<ApiError> {
        let text = |name| {
            let value = request.headers().get(name)?;
            Some(value.to_str().unwrap_or("(not text)"))
        };
        let host = text(header::HOST).unwrap_or_default();
        if !self.has(host) {
            let message = format!(
                "host: '{host}' is not a name of this server ({})",
                self.0.join(", ")
            );
            return Some(ApiError::new(ErrorCode::MisdirectedRequest, message));
        }
        if let Some(origin) = text(header::ORIGIN)
            && !origin.strip_prefix("http://").is_some_and(|o| self.has(o))
        {
            let message = format!(
                "origin: '{origin}' is another site's; this API answers its own pages, \
                 and programs, which send no Origin"
            );
            return Some(ApiError::new(ErrorCode::Forbidden, message));
        }
        // A browser says where a request comes from even when it sends no Origin (a
        // GET from another site's <img>, which would take a caller's notifications).
        if let Some(site @ ("cross-site" | "same-site")) = text(SEC_FETCH_SITE) {
            let message =
                format!("sec-fetch-site: '{site}': this API answers its own pages, and programs");
            return Some(ApiError::new(ErrorCode::Forbidden, message));
        }
        let message = match text(header::CONTENT_TYPE) {
            Some(given) if !is_json(given) => {
                format!("content-type: '{given}' must be application/json")
            }
            None if request.body().size_hint().exact() != Some(0) => {
                "content-type: none given for a body; it must be application/json".to_owned()
            }
            _ => return None,
        };
        Some(ApiError::new(ErrorCode::UnsupportedMediaType, message))
    }
}

/// The header in which a browser says which site a request comes from.
const SEC_FETCH_SITE: header::HeaderName = header::HeaderName::from_static("sec-fetch-site");

/// Whether a body is declared JSON: `application/json`, or Step Functions'
/// protocol's (which a page cannot send without asking the server first either).
fn is_json(content_type: &str) -> bool {
    content_type.split(';').next().is_some_and(|media| {
        let media = media.trim();
        media.eq_ignore_ascii_case("application/json") || media.eq_ignore_ascii_case(AMZ_JSON)
    })
}

/// Answers a request only if another site's page cannot have sent it.
async fn same_site(State(names): State<OwnNames>, request: Request, next: Next) -> Response {
    match names.refusal(&request) {
        Some(refused) => to_http(refused.into()),
        None => next.run(request).await,
    }
}

fn json(status: StatusCode, body: &Value) -> Response {
    (status, Json(body)).into_response()
}

async fn serve_api(State(shared): State<Shared>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    // One byte over the limit is enough for the API to name the problem.
    let limit = sas_api::body_limit(parts.uri.path());
    let Ok(bytes) = axum::body::to_bytes(body, limit + 1).await else {
        let message = format!("the body is over the limit of {limit} bytes");
        return to_http(ApiError::new(ErrorCode::BodyTooLarge, message).into());
    };
    let caller = shared.caller(&parts.headers);
    let in_header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let response = sas_api::handle(
        &shared.app,
        ApiRequest {
            caller: &caller,
            method: parts.method.as_str(),
            path: parts.uri.path(),
            query: parts.uri.query(),
            body: &bytes,
            target: in_header("x-amz-target"),
            trace: TraceHeaders::of(in_header),
        },
    )
    .await;
    to_http(response)
}

fn to_http(response: ApiResponse) -> Response {
    let status = StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Some(page) = response.page {
        return (status, axum::response::Html(page)).into_response();
    }
    let content_type = response.content_type.unwrap_or("application/json");
    let mut http = (
        status,
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        response.body,
    )
        .into_response();
    if let Some(location) = response
        .location
        .and_then(|l| HeaderValue::from_str(&l).ok())
    {
        http.headers_mut().insert(header::LOCATION, location);
    }
    http
}

/// Refuses a caller the local-only routes are not for: `ok` says whether one
/// known is.
fn refuse(caller: &Caller, ok: bool) -> Option<Response> {
    let code = match caller {
        Caller::Anyone => return None,
        Caller::Open => ErrorCode::Forbidden,
        Caller::Known { operator: true, .. } => return None,
        Caller::Known { .. } if ok => return None,
        Caller::Known { .. } => ErrorCode::NotFound,
        Caller::Unauthenticated => ErrorCode::Unauthenticated,
    };
    Some(to_http(ApiError::new(code, "not for this caller").into()))
}

async fn take_messages(
    State(shared): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Ok(queue) = QueueName::parse(&name) else {
        let refused = ApiError::new(
            ErrorCode::InvalidField,
            "name: queue names are letters, digits, '-' and '_'",
        );
        return to_http(refused.on("name").into());
    };
    let caller = shared.caller(&headers);
    let owns = matches!(&caller, Caller::Known { owner, .. }
        if queue.as_str().ends_with(&format!("-{}", owner.tag())));
    if let Some(refused) = refuse(&caller, owns) {
        return refused;
    }
    if shared.app.is_own_queue(&queue) {
        // Taken, they would be lost: an accepted submission in `ingest`, a task's
        // step in the others, what an operator redrives in a dead-letter queue.
        let refused = ApiError::new(
            ErrorCode::InvalidField,
            format!(
                "name: '{queue}' is one of the system's own queues, whose messages this \
                 route would take; its dead letters are read, and left, at \
                 GET /operator/dead-letters"
            ),
        );
        return to_http(refused.on("name").into());
    }
    let received = match shared.backend.receive(&queue, 10, Duration::ZERO).await {
        Ok(received) => received,
        Err(e) => return to_http(ApiError::unavailable(&e).into()),
    };
    let mut messages = Vec::with_capacity(received.len());
    for message in received {
        let _ = shared.backend.delete(&queue, &message.receipt).await;
        messages.push(serde_json::from_str(&message.body).unwrap_or(Value::String(message.body)));
    }
    json(StatusCode::OK, &json!({ "messages": messages }))
}

async fn alerts(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(refused) = refuse(&shared.caller(&headers), false) {
        return refused;
    }
    match shared.backend.alerts().await {
        Ok(alerts) => json(StatusCode::OK, &json!({ "alerts": alerts })),
        Err(e) => to_http(ApiError::unavailable(&e).into()),
    }
}

/// Serves `router` on `listener` until the process ends.
pub fn spawn(
    listener: tokio::net::TcpListener,
    router: axum::Router,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router.into_make_service()).await {
            tracing::error!(error = %e, "server stopped");
        }
    })
}
