//! The API, behind API Gateway (HTTP API, payload 2.0): submits, reads, lists and
//! resubmits tasks, with the same routes and answers as the local server. Deployed
//! twice: as the submission function, and as the read function, which the gateway
//! sends only the routes that only read, under a role that only reads.

use std::sync::Arc;

use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use sas_lambda::events;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let served = Arc::new(
        sas_lambda::init(|config, sdk| {
            let app = sas_aws::app(config, sdk, "submission")?;
            Ok((app, config.authentication.clone()))
        })
        .await,
    );
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<ApiGatewayV2httpRequest>| {
            let served = Arc::clone(&served);
            sas_lambda::flushing(async move {
                let (app, authentication) = &*served;
                Ok::<_, Error>(events::http(app, authentication, event.payload).await)
            })
        },
    ))
    .await
}
