//! The messages, by audience: [`agent`], the agents' published contract;
//! [`internal`], what the functions send one another; [`notify`], what callers and
//! operators are told.

pub mod agent;
pub mod internal;
pub mod notify;

pub use agent::{AgentMessage, AgentRequest, AgentResponse, Method, Operation, Outcome, Payload};
pub use internal::{Buffered, ChildEnded, SchedulerMessage};
pub use notify::{Alert, CallbackWait, Notification};
