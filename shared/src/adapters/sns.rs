//! Operator alerts on SNS, and metrics as CloudWatch Embedded Metric Format lines
//! (written to stdout, where Lambda's log stream hands them to CloudWatch: no
//! PutMetricData call in the hot path).

use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use aws_sdk_sns::Client;
use aws_sdk_sns::error::DisplayErrorContext;
use aws_types::SdkConfig;
use serde_json::json;

use super::{SdkClient, sdk_client};
use crate::domain::messages::Alert;
use crate::ports::{AlertError, Alerts, Metrics};

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
        self.client
            .publish()
            .topic_arn(&self.topic_arn)
            .subject(subject)
            .message(json!(alert).to_string())
            .send()
            .await
            .map_err(|e| AlertError(DisplayErrorContext(e).to_string()))?;
        Ok(())
    }
}

/// Counters as Embedded Metric Format lines on stdout.
pub struct EmfMetrics {
    namespace: String,
    function: String,
}

impl EmfMetrics {
    /// Metrics in `namespace`, dimensioned by `function` as well.
    #[must_use]
    pub fn new(namespace: String, function: String) -> Self {
        Self {
            namespace,
            function,
        }
    }

    /// The EMF document for one count.
    #[must_use]
    pub fn line(
        &self,
        name: &str,
        dimension: (&str, &str),
        value: u64,
        at_millis: u128,
    ) -> serde_json::Value {
        let mut line = json!({
            "_aws": {
                "Timestamp": at_millis,
                "CloudWatchMetrics": [{
                    "Namespace": self.namespace,
                    // Aggregated by function (what the alarms watch), and by function and dimension.
                    "Dimensions": [["Function"], ["Function", dimension.0]],
                    "Metrics": [{ "Name": name, "Unit": "Count" }],
                }],
            },
            "Function": self.function,
            name: value,
        });
        line[dimension.0] = json!(dimension.1);
        line
    }
}

impl Metrics for EmfMetrics {
    fn count(&self, name: &'static str, dimension: (&'static str, &str), value: u64) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        println!("{}", self.line(name, dimension, value, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emf_line_declares_its_metric_and_dimensions() {
        let metrics = EmfMetrics::new("SAS".into(), "scheduler".into());
        let line = metrics.line("TasksInError", ("Workflow", "drone-delivery"), 1, 42);
        assert_eq!(
            line["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Function"], ["Function", "Workflow"]])
        );
        assert_eq!(
            line["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"],
            "TasksInError"
        );
        assert_eq!(
            (line["TasksInError"].as_u64(), line["Workflow"].as_str()),
            (Some(1), Some("drone-delivery"))
        );
        assert_eq!(line["Function"], "scheduler");
    }
}
