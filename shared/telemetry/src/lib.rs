//! Tasks' traces, exported over OTLP: the spans the engine tells as they finish
//! ([`sas_domain::task::spans`]), each with the ids and times the task's record
//! gives it, sent in batches by OpenTelemetry's OTLP/HTTP exporter, which reads the
//! standard settings (`OTEL_EXPORTER_OTLP_ENDPOINT`, `..._TRACES_ENDPOINT`,
//! `..._PROTOCOL` (`http/protobuf` or `http/json`), `..._HEADERS`) and the resource's
//! (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`).
//!
//! The spans go to the exporter as the SDK's `SpanData` directly rather than through
//! a tracer: a tracer draws every span's id at random, and a task's spans have ids
//! derived from the task, so that the process that ends a span and the one that made
//! its children agree on it without asking each other. They are sent from the
//! caller's Tokio runtime ([`Telemetry::flush`]), over the hyper client the AWS SDK
//! links already: a Lambda function sends an invocation's spans before it answers
//! (Lambda freezes it between invocations), the local process every
//! `OTEL_BSP_SCHEDULE_DELAY` ([`Telemetry::flush_every`]).

use std::borrow::Cow;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_otlp::{SpanExporter, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use tracing::warn;

use sas_core::ports::Spans;
use sas_domain::task::spans::{FinishedSpan, SpanValue};
use sas_domain::time::Timestamp;

/// Exports finished spans over OTLP, in batches.
pub struct Telemetry {
    exporter: SpanExporter,
    scope: InstrumentationScope,
    /// The spans taken and not yet sent, at most `limits.queue`.
    pending: Mutex<Vec<SpanData>>,
    limits: Limits,
}

/// The batching's settings, as OpenTelemetry's `OTEL_BSP_*` name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Limits {
    /// `OTEL_BSP_MAX_QUEUE_SIZE`: spans kept waiting; more are dropped.
    queue: usize,
    /// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`: spans a request.
    batch: usize,
    /// `OTEL_BSP_SCHEDULE_DELAY`: how often the local process sends.
    delay: Duration,
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`: the longest a request may take.
    timeout: Duration,
}

impl Limits {
    fn of(setting: impl Fn(&str) -> Option<String>) -> Self {
        let number = |name: &str, default: u64| {
            setting(name)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|&n| n > 0)
                .unwrap_or(default)
        };
        let timeout = [
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ]
        .into_iter()
        .find_map(|name| setting(name)?.trim().parse::<u64>().ok())
        .unwrap_or(10_000);
        Self {
            queue: usize::try_from(number("OTEL_BSP_MAX_QUEUE_SIZE", 2048)).unwrap_or(2048),
            batch: usize::try_from(number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)).unwrap_or(512),
            delay: Duration::from_millis(number("OTEL_BSP_SCHEDULE_DELAY", 5000)),
            timeout: Duration::from_millis(timeout),
        }
    }
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
    /// is not a URL, a protocol this build has not), or the system's certificates
    /// cannot be read.
    pub fn from_env(service: &str) -> Result<Option<Self>, String> {
        let setting = |name: &str| std::env::var(name).ok();
        if !asked_for(setting) {
            return Ok(None);
        }
        let limits = Limits::of(setting);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|error| format!("the system's certificates cannot be read: {error}"))?
            .https_or_http()
            .enable_http1()
            .build();
        let mut exporter = SpanExporter::builder()
            .with_http()
            .with_http_client(HyperClient::new(connector, limits.timeout, None))
            .build()
            .map_err(|error| format!("the OTLP exporter cannot be built: {error}"))?;
        let mut resource = Resource::builder();
        if setting("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(service.to_owned());
        }
        exporter.set_resource(&resource.build());
        let scope = InstrumentationScope::builder("sas")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        Ok(Some(Self {
            exporter,
            scope,
            pending: Mutex::new(Vec::new()),
            limits,
        }))
    }

    /// Sends the spans taken so far, a batch a request; a batch the collector
    /// refuses or does not answer is logged and dropped (a span lost is no error of
    /// a task's).
    pub async fn flush(&self) {
        let pending = std::mem::take(&mut *self.pending());
        for batch in pending.chunks(self.limits.batch) {
            if let Err(error) = self.exporter.export(batch.to_vec()).await {
                warn!(%error, spans = batch.len(), "spans not exported");
            }
        }
    }

    /// Sends the spans taken every `OTEL_BSP_SCHEDULE_DELAY`, on the caller's
    /// runtime, until the task it returns is aborted.
    #[must_use]
    pub fn flush_every(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let telemetry = Arc::clone(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(telemetry.limits.delay);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                telemetry.flush().await;
            }
        })
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<SpanData>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn span_data(&self, span: FinishedSpan) -> SpanData {
        let context = SpanContext::new(
            TraceId::from_bytes(span.trace_id.0),
            SpanId::from_bytes(span.span_id.0),
            TraceFlags::SAMPLED,
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
        let data: Vec<SpanData> = spans.into_iter().map(|s| self.span_data(s)).collect();
        let mut pending = self.pending();
        let room = self.limits.queue.saturating_sub(pending.len());
        if data.len() > room {
            warn!(
                dropped = data.len() - room,
                "spans dropped: the export is behind"
            );
        }
        pending.extend(data.into_iter().take(room));
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
    use std::time::Duration;

    use super::{Limits, asked_for};

    fn settings(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = (pairs.iter())
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            (pairs.iter())
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        }
    }

    #[test]
    fn traces_are_exported_only_where_an_otlp_endpoint_is_named() {
        let with = |pairs: &[(&str, &str)]| asked_for(settings(pairs));
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

    #[test]
    fn the_batching_follows_the_bsp_settings_and_their_defaults() {
        let defaults = Limits::of(settings(&[]));
        assert_eq!(
            defaults,
            Limits {
                queue: 2048,
                batch: 512,
                delay: Duration::from_secs(5),
                timeout: Duration::from_secs(10),
            }
        );
        let set = Limits::of(settings(&[
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "0"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ]));
        assert_eq!(set.delay, Duration::from_millis(100));
        assert_eq!(set.batch, 512, "a batch of none is no setting");
        assert_eq!(set.timeout, Duration::from_millis(2500));
    }
}
