//! The pattern's domain: state, workflow definitions, messages and decisions.

pub mod decide;
pub mod ids;
pub mod limits;
pub mod messages;
pub mod resilience;
pub mod services;
pub mod task;
pub mod workflow;
