//! Tasks' traces, exported over OTLP: the spans the engine tells as they finish
//! ([`sas_domain::task::spans`]), each with the ids and times the task's record
//! gives it, batched by OpenTelemetry's SDK and sent by its OTLP exporter, which
//! reads the standard settings (`OTEL_EXPORTER_OTLP_ENDPOINT`, `..._TRACES_ENDPOINT`,
//! `..._PROTOCOL` (`http/protobuf` or `http/json`), `..._HEADERS`, `..._TIMEOUT`)
//! and the resource's (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`).
//!
//! The spans go to the SDK's span processor directly rather than through a tracer:
//! a tracer draws every span's id at random, and a task's spans have ids derived
//! from the task, so that the process that ends a span and the one that made its
//! children agree on it without asking each other.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SpanData, SpanEvents, SpanLinks, SpanProcessor,
};
use tracing::warn;

use sas_core::ports::Spans;
use sas_domain::task::spans::{FinishedSpan, SpanValue};
use sas_domain::time::Timestamp;

/// Exports finished spans over OTLP, in batches, from a thread of its own.
pub struct Telemetry {
    processor: BatchSpanProcessor,
    scope: InstrumentationScope,
}

/// Whether the settings ask for traces to be exported: an OTLP endpoint named,
/// and traces neither turned off (`OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER=none`)
/// nor sent elsewhere than OTLP.
fn asked_for(setting: impl Fn(&str) -> Option<String>) -> bool {
    let endpoint = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .into_iter()
    .any(|name| setting(name).is_some_and(|v| !v.trim().is_empty()));
    let disabled = setting("OTEL_SDK_DISABLED").is_some_and(|v| v.trim() == "true");
    let exporter = setting("OTEL_TRACES_EXPORTER").unwrap_or_else(|| "otlp".into());
    endpoint && !disabled && exporter.trim() == "otlp"
}

impl Telemetry {
    /// The exporter the environment's settings ask for, as the service `service`
    /// (unless `OTEL_SERVICE_NAME` names it); `None` when they ask for none.
    ///
    /// # Errors
    /// When the settings name an exporter that cannot be built (an endpoint that
    /// is not a URL, a protocol this build has not).
    pub fn from_env(service: &str) -> Result<Option<Self>, String> {
        if !asked_for(|name| std::env::var(name).ok()) {
            return Ok(None);
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
            .map_err(|error| format!("the OTLP exporter cannot be built: {error}"))?;
        let mut processor = BatchSpanProcessor::builder(exporter).build();
        let mut resource = Resource::builder();
        if std::env::var("OTEL_SERVICE_NAME").is_err() {
            resource = resource.with_service_name(service.to_owned());
        }
        processor.set_resource(&resource.build());
        let scope = InstrumentationScope::builder("sas")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        Ok(Some(Self { processor, scope }))
    }

    /// Sends the spans taken so far, and waits until they are sent or refused:
    /// before a Lambda invocation ends, and before the process exits.
    pub fn flush(&self) {
        if let Err(error) = self.processor.force_flush() {
            warn!(%error, "spans not exported");
        }
    }

    /// Sends the spans taken so far and stops: at the process's end.
    pub fn shutdown(&self) {
        if let Err(error) = self.processor.shutdown_with_timeout(Duration::from_secs(5)) {
            warn!(%error, "spans not exported at shutdown");
        }
    }

    fn span_data(&self, span: FinishedSpan) -> SpanData {
        let flags = TraceFlags::SAMPLED;
        let trace_id = TraceId::from_bytes(span.trace_id.0);
        let context = SpanContext::new(
            trace_id,
            SpanId::from_bytes(span.span_id.0),
            flags,
            false,
            TraceState::default(),
        );
        let mut events = SpanEvents::default();
        events.events = (span.events.into_iter())
            .map(|(name, at)| Event::new(name, time(at), Vec::new(), 0))
            .collect();
        SpanData {
            span_context: context,
            parent_span_id: span
                .parent
                .map_or(SpanId::INVALID, |parent| SpanId::from_bytes(parent.0)),
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Owned(span.name),
            start_time: time(span.start),
            end_time: time(span.end),
            attributes: span
                .attributes
                .into_iter()
                .map(|(key, value)| KeyValue::new(key, attribute(value)))
                .collect(),
            dropped_attributes_count: 0,
            events,
            links: SpanLinks::default(),
            status: if span.failed {
                Status::error("")
            } else {
                Status::Unset
            },
            instrumentation_scope: self.scope.clone(),
        }
    }
}

impl Spans for Telemetry {
    fn finished(&self, spans: Vec<FinishedSpan>) {
        for span in spans {
            self.processor.on_end(self.span_data(span));
        }
    }
}

fn time(at: Timestamp) -> SystemTime {
    let millis = u64::try_from(at.0).unwrap_or(0);
    SystemTime::UNIX_EPOCH + Duration::from_millis(millis)
}

fn attribute(value: SpanValue) -> Value {
    match value {
        SpanValue::Text(text) => Value::from(text),
        SpanValue::Int(n) => Value::I64(n),
    }
}

#[cfg(test)]
mod tests {
    use super::asked_for;

    #[test]
    fn traces_are_exported_only_where_an_otlp_endpoint_is_named() {
        let with = |pairs: &[(&str, &str)]| {
            asked_for(|name| {
                (pairs.iter())
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| (*value).to_owned())
            })
        };
        assert!(!with(&[]));
        assert!(with(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://127.0.0.1:4318"
        )]));
        assert!(with(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://c:4318/v1/traces"
        )]));
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert!(!with(&[endpoint, ("OTEL_SDK_DISABLED", "true")]));
        assert!(!with(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]));
        assert!(with(&[endpoint, ("OTEL_SDK_DISABLED", "false")]));
    }
}
