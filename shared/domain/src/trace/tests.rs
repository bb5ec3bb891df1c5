//! `traceparent` and `tracestate` read as W3C Trace Context reads them.

use super::*;

const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn a_traceparent_is_read_and_written_as_w3c_has_it() {
    let parent = TraceParent::parse(VALID).expect("valid");
    assert!(parent.sampled);
    assert_eq!(parent.span_id.to_string(), "00f067aa0ba902b7");
    assert_eq!(parent.to_string(), VALID);
    let unsampled = TraceParent::parse(&VALID.replace("-01", "-00")).expect("valid");
    assert!(!unsampled.sampled);
    // A later version is read by its first four fields.
    assert!(TraceParent::parse(&format!("{}-later", VALID.replacen("00", "01", 1))).is_some());
}

#[test]
fn a_traceparent_that_is_not_w3c_is_refused() {
    let refused = [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        "00-4bf92f3577b34da6a3ce929d0e0e47é-00f067aa0ba902b7-01",
    ];
    for text in refused {
        assert_eq!(TraceParent::parse(text), None, "{text:?}");
    }
}

#[test]
fn a_tracestate_is_kept_only_when_it_is_printable_and_within_bounds() {
    let state = |s: &str| TraceContext::of_headers(Some(VALID), Some(s)).and_then(|c| c.state);
    assert_eq!(
        state("congo=t61rcWkgMzE").as_deref(),
        Some("congo=t61rcWkgMzE")
    );
    assert_eq!(state("bad=\u{7}"), None);
    assert_eq!(state(&"a".repeat(513)), None);
    assert_eq!(TraceContext::of_headers(None, Some("a=b")), None);
}

#[test]
fn an_xray_trace_header_is_read_as_the_w3c_trace_it_maps_to() {
    let header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    let trace = TraceContext::of_xray(header).expect("valid");
    assert_eq!(
        trace.trace_id.to_string(),
        "5759e988bd862e3fe1be46a994272793"
    );
    assert_eq!(trace.parent.to_string(), "53995c3f42cd8ad8");
    assert!(trace.sampled);
    assert_eq!(trace.xray_header(), header, "written back as it came");
    let reordered = "Sampled=0;Lineage=a87bd80c:1|68fd508a:5;Parent=53995c3f42cd8ad8;Root=1-5759e988-bd862e3fe1be46a994272793";
    let trace = TraceContext::of_xray(reordered).expect("any order, other fields");
    assert!(!trace.sampled);
    let undecided = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=?";
    assert!(TraceContext::of_xray(undecided).expect("valid").sampled);
    for refused in [
        "Root=1-5759e988-bd862e3fe1be46a994272793",
        "Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
        "Root=1-5759e98-8bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
        "Root=1-5759e988-bd862e3fe1be46a99427279z;Parent=53995c3f42cd8ad8",
        "Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8",
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=0000000000000000",
        "",
    ] {
        assert_eq!(TraceContext::of_xray(refused), None, "{refused}");
    }
}

/// The ids are the first bytes of the SHA-256 of their parts, one a line (computed
/// apart, with Python's `hashlib`): a task in flight keeps its trace across versions.
#[test]
fn a_tasks_trace_and_span_ids_are_the_sha256_of_their_parts() {
    let task = TaskId::parse("order-7").expect("id");
    let created = Timestamp(1_700_000_000_123);
    let trace = own_trace(&task, created);
    assert_eq!(trace.to_string(), "4171cc54bda1c7f47748fcd27d836d62");
    assert_eq!(run_span(&task, created, 2).to_string(), "922f187ca4f136f3");
    let began = Timestamp(1_700_000_000_456);
    let step = step_span(&task, created, 2, 3, "compensate", began);
    assert_eq!(step.to_string(), "4326c1ba39182a07");
    let parent = SpanId::parse("00f067aa0ba902b7").expect("span");
    assert_eq!(state_span(parent, 41).to_string(), "4113049fa3579d25");
    let recovered = recovery_span(parent, Timestamp(1_700_000_000_789));
    assert_eq!(recovered.to_string(), "9eee5268737a3ca0");
}
