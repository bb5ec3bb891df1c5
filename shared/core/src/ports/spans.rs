//! Spans of tasks' traces, told once they have ended ([`sas_domain::task::spans`]).

use sas_domain::task::spans::FinishedSpan;

/// Where finished spans go: an OpenTelemetry exporter, or a test's list.
pub trait Spans: Send + Sync {
    /// Takes `spans` to export, at best: a span lost is no error of a task's, and
    /// this never waits on the exporter.
    fn finished(&self, spans: Vec<FinishedSpan>);
}
