//! The agent function, on the agent-request queue: calls the step's remote service
//! with retries and a circuit breaker, and answers only before complete-by.

use std::sync::Arc;

use aws_lambda_events::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use sas_agent::step_caller;
use sas_lambda::events::{self, Sends};
use sas_lambda::metrics::EmfMetrics;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let agent = Arc::new(
        sas_lambda::init(|config, sdk| {
            let metrics = Arc::new(EmfMetrics::new(
                config.metrics_namespace.clone(),
                "agent".into(),
            ));
            Ok((step_caller(config, sdk, metrics.clone())?, metrics))
        })
        .await,
    );
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let agent = Arc::clone(&agent);
        sas_lambda::flushing(async move {
            let (agent, metrics) = &*agent;
            Ok::<_, Error>(
                events::sqs_batch(
                    event.payload,
                    Sends::AsReady,
                    metrics.as_ref(),
                    |_, body, trace| async move {
                        agent.on_request(&body, trace.as_ref()).await.map(drop)
                    },
                )
                .await,
            )
        })
    }))
    .await
}
