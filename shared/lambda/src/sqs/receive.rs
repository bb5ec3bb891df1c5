//! Receiving and deleting ([`Consumer`]), for the tests and any consumer that is not
//! a Lambda function's event-source mapping.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::MessageSystemAttributeName;

use sas_core::ports::{Consumer, Delivery, QueueError};
use sas_domain::ids::QueueName;
use sas_domain::trace::TraceContext;

use super::{Sqs, failed};

#[async_trait]
impl Consumer for Sqs {
    async fn receive(
        &self,
        queue: &QueueName,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        let url = self.url(queue).await?;
        let output = self
            .client
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(i32::try_from(max.clamp(1, 10)).unwrap_or(10))
            .wait_time_seconds(i32::try_from(wait.as_secs().min(20)).unwrap_or(20))
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_attribute_names("traceparent")
            .message_attribute_names("tracestate")
            .send()
            .await
            .map_err(|e| failed(queue, e))?;
        Ok(output
            .messages()
            .iter()
            .map(|m| Delivery {
                id: m.message_id().unwrap_or_default().to_owned(),
                body: m.body().unwrap_or_default().to_owned(),
                receive_count: m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(1),
                receipt: m.receipt_handle().unwrap_or_default().to_owned(),
                trace: {
                    let attribute = |name: &str| {
                        let attributes = m.message_attributes()?;
                        attributes.get(name)?.string_value()
                    };
                    TraceContext::of_headers(attribute("traceparent"), attribute("tracestate"))
                },
            })
            .collect())
    }

    async fn delete(&self, queue: &QueueName, receipt: &str) -> Result<(), QueueError> {
        let url = self.url(queue).await?;
        self.delete_at(&url, receipt, queue).await
    }
}
