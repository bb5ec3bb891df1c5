//! The agent function, on the agent-request queue: calls the step's remote service
//! with retries and a circuit breaker, and answers only before complete-by.

use std::sync::Arc;

use aws_lambda_events::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use sas_shared::lambda::{self, Functions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let functions = Arc::new(Functions::from_env("agent").await?);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let functions = Arc::clone(&functions);
        async move {
            let agent = &functions.agent;
            Ok::<_, Error>(
                lambda::sqs_batch(event.payload, |body| async move {
                    agent.on_request(&body).await.map(drop)
                })
                .await,
            )
        }
    }))
    .await
}
