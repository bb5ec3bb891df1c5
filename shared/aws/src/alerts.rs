//! Operator alerts on SNS.

use async_trait::async_trait;
use aws_sdk_sns::Client;
use aws_sdk_sns::types::MessageAttributeValue;
use aws_types::SdkConfig;

use sas_core::ports::{AlertError, Alerts};
use sas_domain::messages::Alert;
use sas_domain::trace::TraceContext;
use sas_lambda::sdk::{SdkClient, sdk_client};

/// Alerts published to an SNS topic.
pub struct SnsAlerts {
    client: SdkClient<Client>,
    topic_arn: String,
}

impl SnsAlerts {
    /// Alerts to the topic `topic_arn`.
    #[must_use]
    pub fn new(sdk: &SdkConfig, topic_arn: String) -> Self {
        Self {
            client: sdk_client(sdk, Client::new),
            topic_arn,
        }
    }
}

#[async_trait]
impl Alerts for SnsAlerts {
    async fn raise(&self, alert: &Alert) -> Result<(), AlertError> {
        let subject: String = format!("Task {} of {} is in Error", alert.task_id, alert.workflow)
            .chars()
            .take(100)
            .collect();
        let mut publish = self
            .client
            .publish()
            .topic_arn(&self.topic_arn)
            .subject(subject)
            .message(sas_domain::to_json(alert));
        for (name, value) in alert.trace.iter().flat_map(TraceContext::headers) {
            let attribute = MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()
                .map_err(|e| AlertError(Box::new(e)))?;
            publish = publish.message_attributes(name, attribute);
        }
        publish.send().await.map_err(|e| AlertError(Box::new(e)))?;
        Ok(())
    }
}
