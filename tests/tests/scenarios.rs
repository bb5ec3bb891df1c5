//! The pattern end to end on the embedded backend, through the HTTP API, with a
//! manual clock and the supervisor swept by the test.
//!
//! The tests, by theme, each a module of `scenarios/`: [`runs`], [`api`] and [`reads`].

#[path = "scenarios/api.rs"]
mod api;
#[path = "scenarios/reads.rs"]
mod reads;
#[path = "scenarios/runs.rs"]
mod runs;

use sas_tests::delivery_input;
use serde_json::{Value, json};

fn quick(notify: Option<&str>) -> Value {
    json!({ "workflow": "drone-delivery-quick", "input": delivery_input(), "notify": notify })
}
