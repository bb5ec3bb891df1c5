//! The Scheduler Agent Supervisor pattern without I/O: what the other crates build on.
//!
//! - [`domain`]: task and step state, workflow definitions, messages, and the
//!   decisions (pure functions from a task and an event to the next task and the
//!   effects to carry out);
//! - [`ports`]: what the actors need from the outside world, named by role (a state
//!   store, queues, alerts, remote calls, metrics), each a trait;
//! - the actors, which carry decisions out over the ports: [`app::App`] (submission,
//!   scheduler, supervisor and operator actions) and [`step_caller::StepCaller`] (the
//!   agent's work: one remote call with retries and a circuit breaker);
//! - [`api`]: the HTTP API without a transport, which the local server and the API
//!   Gateway function both serve;
//! - [`time`]: timestamps and the clock port.
//!
//! No dependency here does I/O (no SQLite, HTTP client, AWS SDK or network): the
//! adapters implement the ports in their own crates (`sas-embedded`, `sas-aws`,
//! `sas-lambda`, `sas-http-remote`, `sas-testkit`) and depend on this one, never the
//! other way.

#![warn(missing_docs)]

pub mod api;
pub mod app;
pub mod domain;
pub mod ports;
pub mod step_caller;
pub mod time;

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
