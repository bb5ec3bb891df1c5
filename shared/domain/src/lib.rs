//! The Scheduler Agent Supervisor pattern's domain, without I/O and without a clock:
//! what a task is and what happens to it.
//!
//! - the state: [`task`] (a task and its steps), [`ids`], [`time`];
//! - the workflow language: [`workflow`] (definitions as data, validated when loaded),
//!   [`kinds`] (each kind of step: its definition, checks, decisions and view) and
//!   [`services`] (the remote services' settings);
//! - [`schedule`]: workflows started on a cron expression or a period;
//! - what travels: [`messages`] (between the functions, and the agents' published
//!   contract) and [`submission`] (a caller's request, validated);
//! - the decisions: [`decide`], pure functions from a task and an event to the next
//!   task and the effects to carry out, which the actors in `sas-core` perform;
//! - the rules they share: [`limits`] (sizes), [`payload`] (values stored apart),
//!   [`resilience`] (backoff and the circuit breaker) and [`callback`] (the tokens
//!   that end a step's wait).

#![warn(missing_docs)]

pub mod callback;
pub mod decide;
pub mod flow;
pub mod ids;
pub mod kinds;
pub mod limits;
pub mod machine;
pub mod messages;
pub mod payload;
pub mod resilience;
pub mod schedule;
pub mod services;
pub mod submission;
pub mod task;
pub mod time;
pub mod trace;
pub mod workflow;

/// `value` as JSON text, written straight from it: not through a
/// `serde_json::Value`, whose map is built, written and dropped (a tenth of the
/// CPU of a task's steps when messages and answers went that way).
///
/// # Panics
///
/// Never for the types given here: plain data, with string keys only.
pub fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("plain data serializes")
}

/// `value`'s JSON, kept as written ([`to_json`]).
///
/// # Panics
///
/// Never for the types given here: plain data, with string keys only.
pub fn to_raw_json(value: &impl serde::Serialize) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(value).expect("plain data serializes")
}

/// The SHA-256 of `text`, in hex.
pub fn sha256_hex(text: impl AsRef<[u8]>) -> String {
    use sha2::Digest;

    hex::encode(sha2::Sha256::digest(text.as_ref()))
}
