//! The supervisor function, on its EventBridge schedule: recovers the tasks whose
//! complete-by time has passed, and starts the schedules' runs that have come; and
//! woken by a schedule's own wake-up, starts that schedule's.

use std::sync::Arc;

use lambda_runtime::{Error, LambdaEvent, service_fn};
use sas_lambda::events;
use serde_json::Value;

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
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let app = Arc::clone(&app);
        async move { Ok::<_, Error>(events::supervise(&app, batch, event.payload).await?) }
    }))
    .await
}
