//! The four Lambda functions on DynamoDB, SQS and SNS (moto), fed real-shaped
//! API Gateway, SQS and EventBridge events by a loop that plays Lambda's
//! event-source mappings and EventBridge's schedule.
//!
//! The tests, by theme, each a module of `lambda_on_emulator/`: [`runs`], [`traces`],
//! [`unreadable`] and [`limits`]; this file holds what they share.

#[path = "lambda_on_emulator/limits.rs"]
mod limits;
#[path = "lambda_on_emulator/runs.rs"]
mod runs;
#[path = "lambda_on_emulator/traces.rs"]
mod traces;
#[path = "lambda_on_emulator/unreadable.rs"]
mod unreadable;

use std::time::Duration;

use sas_tests::aws::QueuePolicy;
use sas_tests::delivery_input;
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(30);

fn quick() -> Value {
    json!({ "workflow": "drone-delivery-quick", "input": delivery_input() })
}

const POLICY: QueuePolicy = QueuePolicy {
    visibility_seconds: 1,
    max_receive_count: 3,
};
