//! The pattern's domain: state, workflow definitions, messages and decisions.

pub mod agent;
pub mod decide;
pub mod ids;
pub mod limits;
pub mod messages;
pub mod task;
pub mod workflow;
