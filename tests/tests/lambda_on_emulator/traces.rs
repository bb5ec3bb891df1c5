//! A task's trace crosses the queues on the Lambda path: the messages the functions
//! send one another carry it as SQS message attributes; a submission continues its
//! caller's trace, W3C's or X-Ray's.

use std::time::Duration;

use sas_core::ports::Consumer;
use sas_domain::trace::TraceContext;
use sas_tests::aws::{Remote, Stack, api_event};
use serde_json::json;

use super::{POLICY, quick};

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// The trace of the first step's request to the agents, of a task submitted through
/// API Gateway with `headers`.
async fn first_requests_trace(headers: &[(&str, &str)]) -> TraceContext {
    let remote = Remote::start(true).await;
    let stack = Stack::start(&remote.url, POLICY).await;
    stack.leave_agent_requests();
    let mut event = api_event("PUT", "/tasks/traced", Some(&quick()));
    for (name, value) in headers {
        event["headers"][*name] = json!(value);
    }
    let (status, task) = stack.http_event(&stack.app, event).await;
    assert_eq!(status, 202, "{task}");
    stack.pump(false).await;
    let requests = Stack::queue(&stack.config.agent_request_queue_url);
    let received = stack
        .sqs
        .receive(&requests, 10, Duration::from_secs(2))
        .await
        .expect("receive");
    let [request] = &received[..] else {
        panic!("the first step's request: {received:#?}");
    };
    request
        .trace
        .clone()
        .expect("the request's trace attributes")
}

/// A submission in a caller's trace: the scheduler's request to the agents goes in
/// that trace, from the step's span, as the request's `traceparent` attribute (with
/// the caller's `tracestate`), which the agent function is handed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submissions_trace_goes_with_its_steps_request_to_the_agents() {
    let caller = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let trace =
        first_requests_trace(&[("traceparent", &caller), ("tracestate", "vendor=value")]).await;
    assert_eq!(
        trace.trace_id.to_string(),
        CALLER_TRACE,
        "the caller's trace"
    );
    assert_ne!(
        trace.parent.to_string(),
        CALLER_SPAN,
        "from the step's span"
    );
    assert!(trace.sampled);
    assert_eq!(trace.state.as_deref(), Some("vendor=value"));
}

/// A submission API Gateway passed with its X-Ray trace header (active tracing on the
/// stage) and no `traceparent`: its task continues that trace, under API Gateway's
/// segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_with_an_xray_trace_header_continues_that_trace() {
    let xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    let trace = first_requests_trace(&[("x-amzn-trace-id", xray)]).await;
    assert_eq!(
        trace.trace_id.to_string(),
        "5759e988bd862e3fe1be46a994272793",
        "X-Ray's trace, as W3C writes it"
    );
}
