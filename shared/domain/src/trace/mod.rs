//! Traces, as W3C Trace Context has them: the trace a task's spans belong to, and the
//! ids of its spans, derived from the task itself so that every process (the
//! scheduler that writes a step's end, the agent that makes its call) names the same
//! span without asking another ([`crate::task::spans`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::TaskId;
use crate::time::Timestamp;

/// A trace's id: 16 bytes, not all zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId(pub [u8; 16]);

/// A span's id: 8 bytes, not all zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(pub [u8; 8]);

/// The first bytes of the SHA-256 of `parts`, one per line, none all zero.
fn derived<const N: usize>(parts: &[&str]) -> [u8; N] {
    use sha2::Digest;

    let mut digest = sha2::Sha256::new();
    for part in parts {
        digest.update(part.as_bytes());
        digest.update(b"\n");
    }
    let mut bytes = [0; N];
    bytes.copy_from_slice(&digest.finalize()[..N]);
    if bytes.iter().all(|&b| b == 0) {
        bytes[N - 1] = 1;
    }
    bytes
}

/// `bytes` (16 at most) in lowercase hex, written at once.
fn write_hex(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    let mut digits = [0; 32];
    let digits = digits.get_mut(..2 * bytes.len()).ok_or(fmt::Error)?;
    hex::encode_to_slice(bytes, digits).map_err(|_| fmt::Error)?;
    f.write_str(std::str::from_utf8(digits).map_err(|_| fmt::Error)?)
}

/// `text` as N bytes of lowercase hex, not all zero.
fn parse_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.is_ascii() {
        return None;
    }
    let mut bytes = [0; N];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = hex_byte(&text[2 * i..2 * i + 2])?;
    }
    bytes.iter().any(|&b| b != 0).then_some(bytes)
}

/// Two lowercase hex digits, as a byte.
fn hex_byte(text: &str) -> Option<u8> {
    let lowercase = text
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (text.len() == 2 && lowercase)
        .then(|| u8::from_str_radix(text, 16).ok())
        .flatten()
}

macro_rules! hex_id {
    ($id:ident, $n:literal) => {
        impl $id {
            /// Its hex digits, as W3C Trace Context writes it.
            #[must_use]
            pub fn parse(text: &str) -> Option<Self> {
                parse_hex::<$n>(text).map(Self)
            }
        }

        impl fmt::Display for $id {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write_hex(f, &self.0)
            }
        }

        impl Serialize for $id {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $id {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                Self::parse(&text).ok_or_else(|| {
                    serde::de::Error::custom(concat!("not a ", stringify!($id), " in hex"))
                })
            }
        }
    };
}

hex_id!(TraceId, 16);
hex_id!(SpanId, 8);

/// A `traceparent` header's value: a trace, the span a message or a request comes
/// from, and whether the trace is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace.
    pub trace_id: TraceId,
    /// The span it comes from: the parent of the spans its receiver makes.
    pub span_id: SpanId,
    /// Whether the trace is recorded (the flags' lowest bit).
    pub sampled: bool,
}

impl TraceParent {
    /// A `traceparent` value, as W3C Trace Context reads it: version `00` exactly, a
    /// later version by its first four fields (version `ff` is invalid).
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let fields = text.get(..55)?;
        let rest = &text[55..];
        let mut parts = fields.split('-');
        let version = parts.next()?;
        let (trace_id, span_id, flags) = (parts.next()?, parts.next()?, parts.next()?);
        let (version, flags) = (hex_byte(version)?, hex_byte(flags)?);
        let fits = match version {
            0 => rest.is_empty(),
            0xff => false,
            _ => rest.is_empty() || rest.starts_with('-'),
        };
        if !fits {
            return None;
        }
        Some(Self {
            trace_id: TraceId::parse(trace_id)?,
            span_id: SpanId::parse(span_id)?,
            sampled: flags & 1 == 1,
        })
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flags = u8::from(self.sampled);
        write!(f, "00-{}-{}-{flags:02x}", self.trace_id, self.span_id)
    }
}

/// The most of a `tracestate` kept: W3C Trace Context's own bound.
const MAX_TRACE_STATE: usize = 512;

/// The trace a task continues, kept in its record: its caller's (a submission's
/// `traceparent`), or its parent step's, for a child task. A task without one is
/// the root of a trace of its own, whose id is derived from the task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    /// The trace.
    pub trace_id: TraceId,
    /// The span the task's spans descend from.
    pub parent: SpanId,
    /// Whether the trace is recorded.
    pub sampled: bool,
    /// The caller's `tracestate`, passed on as it came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

impl TraceContext {
    /// The context of a request's `traceparent` and `tracestate` headers; `None`
    /// without a valid `traceparent`. A `tracestate` that is not printable text
    /// within W3C's bound is left out, as the standard allows.
    #[must_use]
    pub fn of_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        let parent = TraceParent::parse(traceparent?)?;
        let state = tracestate
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= MAX_TRACE_STATE)
            .filter(|s| s.bytes().all(|b| (0x20..0x7f).contains(&b)))
            .map(str::to_owned);
        Some(Self::under(parent, state))
    }

    /// Continuing `parent`, with `state`.
    #[must_use]
    pub const fn under(parent: TraceParent, state: Option<String>) -> Self {
        Self {
            trace_id: parent.trace_id,
            parent: parent.span_id,
            sampled: parent.sampled,
            state,
        }
    }

    /// What carries it, by W3C Trace Context's names: `traceparent`, and
    /// `tracestate` if it has one (a request's headers, a message's attributes).
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, String)> {
        let state = self.state.clone().map(|state| ("tracestate", state));
        std::iter::once(("traceparent", self.traceparent().to_string())).chain(state)
    }

    /// The context of an X-Ray trace header (`X-Amzn-Trace-Id`:
    /// `Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`),
    /// its fields in any order; `None` without a valid `Root` and `Parent`. A
    /// `Sampled` other than `0` (`1`, `?`, none) is taken as sampled.
    #[must_use]
    pub fn of_xray(header: &str) -> Option<Self> {
        let field = |name: &str| {
            header.split(';').find_map(|field| {
                let (key, value) = field.split_once('=')?;
                (key.trim() == name).then(|| value.trim())
            })
        };
        let (time, unique) = field("Root")?.strip_prefix("1-")?.split_once('-')?;
        if (time.len(), unique.len()) != (8, 24) {
            return None;
        }
        let trace_id = TraceId::parse(&format!("{time}{unique}").to_ascii_lowercase())?;
        let parent = SpanId::parse(&field("Parent")?.to_ascii_lowercase())?;
        Some(Self {
            trace_id,
            parent,
            sampled: field("Sampled") != Some("0"),
            state: None,
        })
    }

    /// It as X-Ray's trace header has it: the same 128 bits, the first 32 its
    /// "time" part, as AWS's W3C propagation maps them.
    #[must_use]
    pub fn xray_header(&self) -> String {
        let id = self.trace_id.to_string();
        let sampled = u8::from(self.sampled);
        format!(
            "Root=1-{}-{};Parent={};Sampled={sampled}",
            &id[..8],
            &id[8..],
            self.parent
        )
    }

    /// Its `traceparent`: the span it continues.
    #[must_use]
    pub const fn traceparent(&self) -> TraceParent {
        TraceParent {
            trace_id: self.trace_id,
            span_id: self.parent,
            sampled: self.sampled,
        }
    }
}

/// Where a span of a task was started: the task, by id and creation (an id used
/// again after its task expired names another task), and its run.
fn task_parts(task_id: &TaskId, created_at: Timestamp) -> [String; 2] {
    [task_id.to_string(), created_at.0.to_string()]
}

/// The trace of a task that continues none: one of its own, derived from it.
#[must_use]
pub fn own_trace(task_id: &TaskId, created_at: Timestamp) -> TraceId {
    let [id, created] = task_parts(task_id, created_at);
    TraceId(derived(&["trace", &id, &created]))
}

/// The span of a task's run `run`: from the run's start to its end.
#[must_use]
pub fn run_span(task_id: &TaskId, created_at: Timestamp, run: u32) -> SpanId {
    let [id, created] = task_parts(task_id, created_at);
    SpanId(derived(&["run", &id, &created, &run.to_string()]))
}

/// The span of the supervisor's finding, at `at`, that the lease of the operation
/// `step` (a [`step_span`]) had expired.
#[must_use]
pub fn recovery_span(step: SpanId, at: Timestamp) -> SpanId {
    SpanId(derived(&["recover", &step.to_string(), &at.0.to_string()]))
}

/// The span of a state machine's visit of a state that no step stands for (a Pass, a
/// Choice), under its run's span `run`, by the history event that entered it.
#[must_use]
pub fn state_span(run: SpanId, entered_event: u64) -> SpanId {
    SpanId(derived(&[
        "state",
        &run.to_string(),
        &entered_event.to_string(),
    ]))
}

/// The span of an operation of a task's step (`operation`: its call, or its
/// compensation), by when it began: the scheduler writes it when the operation ends,
/// and what it sends meanwhile (its agent's request, its children) comes from it.
#[must_use]
pub fn step_span(
    task_id: &TaskId,
    created_at: Timestamp,
    run: u32,
    step: usize,
    operation: &str,
    began: Timestamp,
) -> SpanId {
    let [id, created] = task_parts(task_id, created_at);
    let (run, step, began) = (run.to_string(), step.to_string(), began.0.to_string());
    SpanId(derived(&[
        "step", &id, &created, &run, &step, operation, &began,
    ]))
}

#[cfg(test)]
mod tests;
