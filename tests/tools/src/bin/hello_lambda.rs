//! A hello-world Rust Lambda function as `cargo lambda new` writes it (the runtime's
//! default log subscriber, `#[tokio::main]`), built as the real ones are: the yardstick
//! of their cold start (see `coldstart`).

use lambda_runtime::{Error, LambdaEvent, service_fn, tracing};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| async move {
        Ok::<_, Error>(event.payload)
    }))
    .await
}
