//! Adapters of the ports.

pub mod embedded;
pub mod http_remote;
