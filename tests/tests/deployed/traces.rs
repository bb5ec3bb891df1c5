//! The deployed functions export their spans where the template's
//! `TraceExportEndpoint` points, and a task's trace crosses them over SQS.

use sas_tests::ministack::Deployment;
use sas_tests::otlp::{Receiver, attribute, named, one_tree, the};
use serde_json::json;

use super::readme_delivery;

/// A delivery submitted in a caller's trace comes out of the deployed functions as
/// one trace: each function exported its spans (the template's `TraceExportEndpoint`),
/// and each agent's call is under its step's span, which the scheduler's request
/// carried to the agent function over SQS.
pub(super) async fn one_trace_across_the_functions(stack: &Deployment, receiver: &Receiver) {
    const CALLER: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{CALLER}-00f067aa0ba902b7-01");
    let put = stack
        .call_with(
            "PUT",
            "/tasks/traced-1",
            Some(&readme_delivery()),
            &[("traceparent", &traceparent)],
        )
        .await;
    assert_eq!(put.status, 202, "{}", put.body);
    let spans = receiver
        .spans_when(|spans| {
            let calls = spans
                .iter()
                .filter(|s| (s["name"].as_str()).is_some_and(|name| name.starts_with("call ")));
            !named(spans, "task").is_empty() && calls.count() == 5
        })
        .await;
    assert!(one_tree(&spans), "one trace, one tree: {spans:#?}");
    let run = the(&spans, "task");
    assert_eq!(run["traceId"], CALLER);
    assert_eq!(
        run["parentSpanId"], "00f067aa0ba902b7",
        "under the caller's span"
    );
    for (step, agent) in [
        ("check-account", "account"),
        ("create-delivery", "delivery"),
    ] {
        let step = the(&spans, &format!("step {step}"));
        let call = the(&spans, &format!("call {agent}"));
        assert_eq!(
            call["parentSpanId"], step["spanId"],
            "{agent}'s call under its step"
        );
        assert_eq!(
            attribute(call, "sas.call.outcome"),
            Some(&json!("succeeded"))
        );
    }
}
