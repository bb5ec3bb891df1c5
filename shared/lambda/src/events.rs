//! Lambda's events translated into calls of the actors, and their outcomes back:
//! HTTP responses, partial batch failures, the sweep's report.

use aws_lambda_events::apigw::ApiGatewayRequestAuthorizer;
use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use aws_lambda_events::encodings::Body;
use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::http::{HeaderValue, header};
use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use base64::Engine as _;
use sas_api::{ApiError, ApiRequest, ApiResponse, Caller, ErrorCode, TraceHeaders};
use sas_core::app::{App, FiringReport, ScheduleFailure};
use sas_core::contain::{self, Panicked};
use sas_core::ports::{Chain, Metrics};
use sas_domain::ids::Owner;
use sas_domain::trace::TraceContext;
use serde_json::{Value, json};
use tracing::{Instrument, error, info_span, warn};

use crate::config::Authentication;
use crate::sqs::SendGate;

/// The submission function: an API Gateway HTTP API (payload 2.0) request, served
/// by the same handler as the local server, from the caller `authentication` finds.
pub async fn http(
    app: &App,
    authentication: &Authentication,
    request: ApiGatewayV2httpRequest,
) -> ApiGatewayV2httpResponse {
    let caller = caller(
        authentication,
        request.request_context.authorizer.as_ref(),
        request.route_key.as_deref().unwrap_or_default(),
    );
    let in_header = |name: &str| request.headers.get(name).and_then(|v| v.to_str().ok());
    let body = match (request.body, request.is_base64_encoded) {
        (None, _) => Vec::new(),
        (Some(text), false) => text.into_bytes(),
        (Some(text), true) => match base64::engine::general_purpose::STANDARD.decode(text) {
            Ok(bytes) => bytes,
            Err(_) => {
                let error = ApiError::new(ErrorCode::InvalidBody, "the body is not valid base64");
                return respond(ApiResponse::from(error));
            }
        },
    };
    respond(
        sas_api::handle(
            app,
            ApiRequest {
                caller: &caller,
                method: request.request_context.http.method.as_str(),
                path: request.raw_path.as_deref().unwrap_or("/"),
                query: request
                    .raw_query_string
                    .as_deref()
                    .filter(|q| !q.is_empty()),
                body: &body,
                target: in_header("x-amz-target"),
                trace: TraceHeaders::of(in_header),
            },
        )
        .await,
    )
}

/// The caller API Gateway's authorizer vouched for, on the route it matched
/// (`route`, its key: `GET /operator/tasks`). A request the mode expects an
/// authorizer on but that came without one (a route left open by mistake) is
/// refused, not served as anyone's. An IAM caller has the operator's rights only on
/// an operator route, which API Gateway authorized it for: IAM says nothing of the
/// others. With no authentication, Step Functions' protocol on the root is a
/// caller's, not an operator's.
fn caller(
    authentication: &Authentication,
    authorizer: Option<&ApiGatewayRequestAuthorizer>,
    route: &str,
) -> Caller {
    let known = match authentication {
        // Step Functions' protocol on the callers' root: its operator's operations are
        // on the operator's route, which IAM authorizes.
        Authentication::None if route == "POST /" => return Caller::Open,
        Authentication::None => return Caller::Anyone,
        Authentication::Jwt { operator_scope } => {
            authorizer.and_then(|a| a.jwt.as_ref()).and_then(|jwt| {
                let owner = Owner::new(jwt.claims.get("sub")?.as_str())?;
                let claimed = jwt
                    .claims
                    .get("scope")
                    .map(String::as_str)
                    .unwrap_or_default();
                let operator = jwt
                    .scopes
                    .iter()
                    .flatten()
                    .map(String::as_str)
                    .chain(claimed.split(' '))
                    .any(|scope| scope == operator_scope);
                Some((owner, operator))
            })
        }
        Authentication::Iam => authorizer
            .and_then(|a| a.iam.as_ref())
            .and_then(|iam| Owner::new(principal(iam.user_arn.as_deref()?)))
            .map(|owner| {
                let path = route.split_once(' ').map_or(route, |(_, path)| path);
                (owner, path.starts_with("/operator/"))
            }),
    };
    known.map_or(Caller::Unauthenticated, |(owner, operator)| Caller::Known {
        owner,
        operator,
    })
}

/// The owner an IAM caller's ARN stands for: an assumed role's sessions are one
/// owner (`arn:aws:sts::1:assumed-role/Role/session` is `...assumed-role/Role`),
/// as a service's sessions are named afresh each time it starts.
fn principal(arn: &str) -> &str {
    match arn.rsplit_once('/') {
        Some((role, _session)) if arn.contains(":assumed-role/") => role,
        _ => arn,
    }
}

fn respond(answer: ApiResponse) -> ApiGatewayV2httpResponse {
    let mut response = ApiGatewayV2httpResponse::default();
    response.status_code = i64::from(answer.status);
    let (content_type, body) = match answer.page {
        Some(page) => ("text/html; charset=utf-8", page.to_owned()),
        None => (
            answer.content_type.unwrap_or("application/json"),
            answer.body,
        ),
    };
    response
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Some(location) = answer.location.and_then(|l| HeaderValue::from_str(&l).ok()) {
        response.headers.insert(header::LOCATION, location);
    }
    response.body = Some(Body::Text(body));
    response
}

/// How the records of an SQS batch send their messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sends {
    /// Each as soon as it is ready (concurrent sends still share requests): for
    /// records whose work takes widely different times, the agent's remote calls,
    /// where waiting for the slowest would hold the others' answers.
    AsReady,
    /// Together: a record's send waits until every record still at work sends too
    /// ([`SendGate`]); for records whose work is alike, the scheduler's reads and
    /// writes: a request per ten messages.
    Together,
}

/// The name of the queue an SQS record came from: the end of its source's ARN.
#[must_use]
pub fn source_queue(record: &SqsMessage) -> &str {
    record
        .event_source_arn
        .as_deref()
        .and_then(|arn| arn.rsplit(':').next())
        .unwrap_or_default()
}

/// The scheduler and agent functions: handles every record of an SQS batch, each
/// in its own span, at once, and names only the failed ones, so that only they are
/// delivered again (and in the end dead-lettered). The handler is given the name of
/// the record's queue ([`source_queue`]), its body, and the trace its
/// `traceparent` and `tracestate` attributes name. A panic while handling a record
/// fails that record only, counted in `metrics` ([`contain`]). Needs
/// ReportBatchItemFailures.
pub async fn sqs_batch<H, F, E>(
    event: SqsEvent,
    sends: Sends,
    metrics: &dyn Metrics,
    handler: H,
) -> SqsBatchResponse
where
    H: Fn(String, String, Option<TraceContext>) -> F,
    F: Future<Output = Result<(), E>>,
    E: std::error::Error + 'static,
{
    let gate = (sends == Sends::Together).then(|| SendGate::new(event.records.len()));
    let handling = event.records.into_iter().map(|record| {
        let queue = source_queue(&record).to_owned();
        let id = record.message_id.unwrap_or_default();
        let receive_count = record
            .attributes
            .get("ApproximateReceiveCount")
            .cloned()
            .unwrap_or_default();
        let span = info_span!("message", message_id = %id, receive_count = %receive_count);
        let attribute = |name: &str| record.message_attributes.get(name)?.string_value.as_deref();
        let trace = TraceContext::of_headers(attribute("traceparent"), attribute("tracestate"));
        let body = record.body.unwrap_or_default();
        let handler = &handler;
        let outcome = contain::caught(metrics, "record", move || handler(queue, body, trace));
        let gate = gate.clone();
        async move {
            let outcome = match gate {
                Some(gate) => gate.handle(outcome).await,
                None => outcome.await,
            };
            match outcome {
                Ok(Ok(())) => None,
                Ok(Err(e)) => {
                    error!(error = %Chain(&e), "message failed; it will be delivered again");
                    Some(id)
                }
                Err(Panicked { .. }) => Some(id),
            }
        }
        .instrument(span)
    });
    let mut response = SqsBatchResponse::default();
    for id in futures_util::future::join_all(handling)
        .await
        .into_iter()
        .flatten()
    {
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = id;
        response.batch_item_failures.push(failure);
    }
    response
}

/// The supervisor function, woken by its own EventBridge schedule or by a schedule's
/// wake-up (`{"schedule": NAME}`, [`App::fire_schedule`]). Its own: one pass over the
/// expired leases, `batch` tasks per query ([`App::sweep`]), then the schedules whose
/// runs have come ([`App::fire_schedules`]), their report under `schedules` where
/// there was one to fire.
///
/// # Errors
/// [`ScheduleFailure`] when the expired leases or the schedules cannot be read, or a
/// woken schedule's runs cannot be started; the next wake-up or sweep tries again.
pub async fn supervise(app: &App, batch: usize, payload: Value) -> Result<Value, ScheduleFailure> {
    if let Some(name) = payload.get("schedule").and_then(Value::as_str) {
        let span = info_span!("wake-up", schedule = name);
        return match app.fire_schedule(name).instrument(span).await {
            Ok(runs) => Ok(json!({ "schedule": name, "runs": runs })),
            Err(ScheduleFailure::Missing(_)) => {
                warn!(
                    schedule = name,
                    "woken for a schedule that is not there (deleted); nothing started"
                );
                Ok(json!({ "schedule": name, "runs": 0 }))
            }
            Err(error) => Err(error),
        };
    }
    let event: EventBridgeEvent<Value> = serde_json::from_value(payload).unwrap_or_default();
    let span = info_span!("sweep", event_id = event.id.as_deref().unwrap_or_default());
    let report = app.sweep(batch).instrument(span).await?;
    let mut answer = json!(report);
    let fired = app.fire_schedules().await?;
    if fired != FiringReport::default() {
        answer["schedules"] = json!(fired);
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authorizer(value: Value) -> ApiGatewayRequestAuthorizer {
        serde_json::from_value(value).expect("an authorizer context")
    }

    fn known(owner: &str, operator: bool) -> Caller {
        Caller::Known {
            owner: Owner::new(owner).expect("owner"),
            operator,
        }
    }

    #[test]
    fn the_caller_is_what_the_authorizer_vouched_for_and_nobody_without_one() {
        let jwt = Authentication::Jwt {
            operator_scope: "sas/operator".into(),
        };
        let token = |scope: &str, scopes: Value| {
            authorizer(json!({ "jwt": {
                "claims": { "sub": "alice", "scope": scope, "exp": "1900000000" },
                "scopes": scopes,
            }}))
        };
        assert_eq!(
            caller(&jwt, Some(&token("orders/read", json!(null))), "GET /tasks"),
            known("alice", false)
        );
        assert_eq!(
            caller(
                &jwt,
                Some(&token("orders/read sas/operator", json!(null))),
                "GET /tasks"
            ),
            known("alice", true)
        );
        assert_eq!(
            caller(
                &jwt,
                Some(&token("", json!(["sas/operator"]))),
                "GET /tasks"
            ),
            known("alice", true)
        );
        let no_sub = authorizer(json!({ "jwt": { "claims": { "sub": "" } } }));
        assert_eq!(
            caller(&jwt, Some(&no_sub), "GET /tasks"),
            Caller::Unauthenticated
        );
        assert_eq!(caller(&jwt, None, "GET /tasks"), Caller::Unauthenticated);

        let iam = |arn: &str| authorizer(json!({ "iam": { "userArn": arn } }));
        let on = |route: &str, authorizer: &ApiGatewayRequestAuthorizer| {
            caller(&Authentication::Iam, Some(authorizer), route)
        };
        assert_eq!(
            on(
                "GET /operator/tasks",
                &iam("arn:aws:sts::1:assumed-role/Orders/i-0abc")
            ),
            known("arn:aws:sts::1:assumed-role/Orders", true),
            "an assumed role's sessions are one owner"
        );
        assert_eq!(
            on("GET /tasks/{id}", &iam("arn:aws:iam::1:user/ci")),
            known("arn:aws:iam::1:user/ci", false),
            "an operator only where API Gateway authorized one"
        );
        assert_eq!(
            on("GET /me", &iam("arn:aws:iam::1:user/ci")),
            known("arn:aws:iam::1:user/ci", false)
        );
        assert_eq!(
            on("POST /operator/bulk/cancel", &token("", json!(null))),
            Caller::Unauthenticated,
            "a JWT where IAM is expected is no one"
        );
        assert_eq!(
            caller(&Authentication::None, None, "GET /operator/tasks"),
            Caller::Anyone
        );
        assert_eq!(
            caller(&Authentication::None, None, "POST /"),
            Caller::Open,
            "Step Functions' operator operations are on the operator's route"
        );
        assert_eq!(
            on(
                "POST /operator/stepfunctions",
                &iam("arn:aws:iam::1:user/ci")
            ),
            known("arn:aws:iam::1:user/ci", true)
        );
        assert_eq!(
            on("POST /", &iam("arn:aws:iam::1:user/ci")),
            known("arn:aws:iam::1:user/ci", false)
        );
    }

    /// A batch of three records, named by their bodies.
    fn batch(bodies: [&str; 3]) -> SqsEvent {
        let records = bodies
            .iter()
            .map(|body| json!({ "messageId": body, "body": body, "attributes": {},
                                "messageAttributes": {}, "eventSourceARN": "arn:aws:sqs:eu-west-1:1:q" }))
            .collect::<Vec<_>>();
        serde_json::from_value(json!({ "Records": records })).expect("an SQS event")
    }

    #[tokio::test]
    async fn a_record_whose_handling_panics_fails_alone_and_the_batch_goes_on() {
        for sends in [Sends::AsReady, Sends::Together] {
            let handled = std::sync::Mutex::new(Vec::new());
            let response = sqs_batch(
                batch(["first", "poison", "last"]),
                sends,
                &sas_core::ports::NoMetrics,
                |_, body, _| {
                    let handled = &handled;
                    async move {
                        tokio::task::yield_now().await;
                        assert_ne!(body, "poison", "a defect met by one record");
                        handled.lock().expect("not poisoned").push(body);
                        Ok::<_, std::io::Error>(())
                    }
                },
            )
            .await;
            let failed: Vec<_> = response
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.as_str())
                .collect();
            assert_eq!(failed, ["poison"], "{sends:?}");
            assert_eq!(*handled.lock().expect("not poisoned"), ["first", "last"]);
        }
    }
}
