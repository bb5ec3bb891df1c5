//! The spans of an agent's handling of one request: its call (`call AGENT`), under
//! the step's span the request came from, and each attempt (`attempt N`) under the
//! call, whose span the service's own spans join (its `traceparent`).

use sas_domain::messages::{AgentRequest, Outcome};
use sas_domain::task::spans::{FinishedSpan, SpanValue};
use sas_domain::time::Timestamp;
use sas_domain::trace::{SpanId, TraceContext};

use crate::ports::RemoteError;

/// What came of a call (`None`: the agent stays silent), as its span and its
/// latency's metric name it.
pub(super) const fn call_outcome(outcome: Option<&Outcome>) -> &'static str {
    match outcome {
        None => "silent",
        Some(Outcome::Succeeded { .. }) => "succeeded",
        Some(Outcome::Failed { .. }) => "failed",
        Some(Outcome::Unusable { .. }) => "unusable",
    }
}

/// The spans of one request, as its handling goes.
pub(super) struct CallSpans {
    /// The step's trace, as the request's message carried it.
    step: TraceContext,
    call: SpanId,
    started: Timestamp,
    attempts: Vec<FinishedSpan>,
}

impl CallSpans {
    /// A call begun at `started`, as `call`, under the step's span `step`.
    pub(super) const fn new(step: TraceContext, call: SpanId, started: Timestamp) -> Self {
        Self {
            step,
            call,
            started,
            attempts: Vec::new(),
        }
    }

    /// The trace an attempt `span` passes on to the service.
    pub(super) fn under(&self, span: SpanId) -> TraceContext {
        TraceContext {
            parent: span,
            ..self.step.clone()
        }
    }

    /// The trace the call's answer passes on: its span.
    pub(super) fn call_trace(&self) -> TraceContext {
        self.under(self.call)
    }

    /// Attempt `number`, as `span`, from `began` to `ended`, with `result` (`None`:
    /// not made, the circuit being open).
    pub(super) fn attempt<T>(
        &mut self,
        span: SpanId,
        number: u32,
        (began, ended): (Timestamp, Timestamp),
        result: Option<&Result<T, RemoteError>>,
    ) {
        let outcome = match result {
            None => "circuit_open",
            Some(Ok(_)) => "answered",
            Some(Err(RemoteError::Permanent(_))) => "refused",
            Some(Err(RemoteError::Unusable(_))) => "unusable",
            Some(Err(RemoteError::Transient(_) | RemoteError::RetryAfter { .. })) => "transient",
        };
        self.attempts.push(FinishedSpan {
            name: format!("attempt {number}"),
            trace_id: self.step.trace_id,
            span_id: span,
            parent: Some(self.call),
            start: began,
            end: ended.max(began),
            failed: outcome != "answered",
            attributes: vec![
                ("sas.attempt", SpanValue::Int(number.into())),
                ("sas.attempt.outcome", SpanValue::Text(outcome.into())),
            ],
            events: Vec::new(),
        });
    }

    /// The call's span, ended at `ended` with `outcome` (`None`: the agent stays
    /// silent), and its attempts'.
    pub(super) fn finish(
        mut self,
        request: &AgentRequest,
        outcome: Option<&Outcome>,
        ended: Timestamp,
    ) -> Vec<FinishedSpan> {
        let status = call_outcome(outcome);
        let failed = status != "succeeded";
        let text = |value: &str| SpanValue::Text(value.to_owned());
        let attempts = i64::try_from(self.attempts.len()).unwrap_or(i64::MAX);
        let call = FinishedSpan {
            name: format!("call {}", request.agent),
            trace_id: self.step.trace_id,
            span_id: self.call,
            parent: Some(self.step.parent),
            start: self.started,
            end: ended.max(self.started),
            failed,
            attributes: vec![
                ("sas.task.id", text(request.task_id.as_str())),
                ("sas.task.run", SpanValue::Int(request.run.into())),
                ("sas.step.name", text(&request.step_name)),
                ("sas.step.attempt", SpanValue::Int(request.attempt.into())),
                ("sas.agent", text(&request.agent)),
                ("sas.operation", text(request.operation.as_str())),
                ("sas.call.outcome", text(status)),
                ("sas.call.attempts", SpanValue::Int(attempts)),
            ],
            events: Vec::new(),
        };
        self.attempts.push(call);
        self.attempts
    }
}
