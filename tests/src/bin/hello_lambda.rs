//! A hello-world Rust Lambda function, built as the real ones are: the yardstick of
//! their cold start (see `coldstart`).

use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| async move {
        Ok::<_, Error>(event.payload)
    }))
    .await
}
