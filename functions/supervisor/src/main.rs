//! The supervisor function, on its EventBridge schedule: recovers the tasks whose
//! complete-by time has passed.

use std::sync::Arc;

use aws_lambda_events::eventbridge::EventBridgeEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use sas_shared::lambda::{self, Functions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let functions = Arc::new(Functions::from_env("supervisor").await?);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<EventBridgeEvent>| {
        let functions = Arc::clone(&functions);
        async move { Ok::<_, Error>(lambda::sweep(&functions, event.payload).await?) }
    }))
    .await
}
