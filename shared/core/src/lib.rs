//! The actors of the Scheduler Agent Supervisor pattern, without I/O: they carry the
//! domain's decisions (`sas-domain`) out over ports.
//!
//! - [`ports`]: what the actors need from the outside world, named by role (a state
//!   store, queues, alerts, remote calls, metrics), each a trait; [`clock`] is the
//!   time's;
//! - [`app::App`]: submission, scheduler, supervisor and operator actions, each in a
//!   room of its own under [`app`];
//! - [`step_caller::StepCaller`]: the agent's work, one remote call with retries and a
//!   circuit breaker;
//! - [`contain`]: a panic while handling one request or message caught, counted and
//!   made that one's failure;
//! - [`offload`]: the tasks' large values stored apart from their records.
//!
//! No dependency here does I/O (no SQLite, HTTP client, AWS SDK or network): the
//! adapters implement the ports in their own crates (`sas-embedded`, `sas-aws`,
//! `sas-lambda`, `sas-http-remote`, `sas-testkit`) and depend on this one, never the
//! other way. The HTTP API over the actors is `sas-api`.

#![warn(missing_docs)]

pub mod app;
pub mod clock;
pub mod contain;
pub mod offload;
pub mod ports;
pub mod step_caller;
