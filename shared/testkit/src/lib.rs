//! What the tests of every crate share: [`memory::Memory`], an in-memory backend (the
//! simulator's, with deliveries in any order); [`ManualClock`], a clock that moves
//! only when told to; and [`conformance`], the suite every adapter of the state store
//! and the queues runs on itself, so that all of them behave as the actors expect AWS
//! to; [`metrics::Recorded`], the metrics put, for a test to read; and [`moto`], a
//! moto server for the AWS adapters' tests.
//!
//! Depends on `sas-core` only; production crates take it as a dev-dependency.

pub mod clock;
pub mod conformance;
pub mod memory;
pub mod metrics;
pub mod moto;

pub use clock::ManualClock;

use serde_json::{Value, json};

/// A valid input of the drone-delivery workflow.
#[must_use]
pub fn delivery_input() -> Value {
    json!({"customer_id": "c-1", "pickup": "Sydney", "dropoff": "Bondi", "weight_kg": 1.5})
}
