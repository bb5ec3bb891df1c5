//! The supervisor function, on its EventBridge schedule: recovers the tasks whose
//! complete-by time has passed, and starts the schedules' runs that have come; woken
//! by a schedule's own wake-up, starts that schedule's; and on the table's stream,
//! deletes the values of the tasks DynamoDB deleted.

use std::sync::Arc;

use lambda_runtime::{Error, LambdaEvent, service_fn};
use sas_lambda::events;
use sas_lambda::payloads::S3Payloads;
use serde_json::Value;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let (app, batch, payloads) = sas_lambda::init(|config, sdk| {
        Ok((
            sas_aws::app(config, sdk, "supervisor")?,
            config.supervisor_batch,
            S3Payloads::new(sdk, config.payload_bucket.clone()),
        ))
    })
    .await;
    let (app, payloads) = (Arc::new(app), Arc::new(payloads));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let (app, payloads) = (Arc::clone(&app), Arc::clone(&payloads));
        sas_lambda::flushing(async move {
            if let Some(forgotten) =
                sas_aws::deletions::forget_deleted(&payloads, &event.payload).await
            {
                return Ok::<_, Error>(forgotten?);
            }
            Ok(events::supervise(&app, batch, event.payload).await?)
        })
    }))
    .await
}
