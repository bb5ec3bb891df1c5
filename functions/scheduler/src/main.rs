//! The scheduler function, on the scheduler queue and the agent-response queue:
//! claims tasks, records step results and sends the next step to an agent.

use std::sync::Arc;

use aws_lambda_events::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use sas_lambda::events::{self, Sends};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let app =
        Arc::new(sas_lambda::init(|config, sdk| sas_aws::app(config, sdk, "scheduler")).await);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let app = Arc::clone(&app);
        sas_lambda::flushing(async move {
            let app = &app;
            Ok::<_, Error>(
                events::sqs_batch(
                    event.payload,
                    Sends::Together,
                    app.metrics(),
                    |queue, body, _| async move {
                        app.on_scheduler_message(&queue, &body).await.map(drop)
                    },
                )
                .await,
            )
        })
    }))
    .await
}
