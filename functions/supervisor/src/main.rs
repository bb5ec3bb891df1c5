//! The supervisor function, on its EventBridge schedule: recovers the tasks whose
//! complete-by time has passed.

use std::sync::Arc;

use aws_lambda_events::eventbridge::EventBridgeEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use sas_lambda::events;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let (app, batch) = sas_lambda::init(|config, sdk| {
        Ok((
            sas_aws::app(config, sdk, "supervisor")?,
            config.supervisor_batch,
        ))
    })
    .await;
    let app = Arc::new(app);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<EventBridgeEvent>| {
        let app = Arc::clone(&app);
        async move { Ok::<_, Error>(events::sweep(&app, batch, event.payload).await?) }
    }))
    .await
}
