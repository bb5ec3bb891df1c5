//! The Scheduler Agent Supervisor pattern: its domain (task and step state,
//! workflow definitions, decisions), its ports, the actors that use them, and the
//! adapters (an embedded durable backend here; AWS services beside it).

#![warn(missing_docs)]

pub mod adapters;
pub mod agent;
pub mod api;
pub mod app;
pub mod domain;
#[cfg(feature = "aws")]
pub mod lambda;
pub mod ports;
pub mod time;
