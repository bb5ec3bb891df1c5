//! Metrics as CloudWatch Embedded Metric Format lines, written to stdout, where
//! Lambda's log stream hands them to CloudWatch: no PutMetricData call in the hot path.

use std::time::{SystemTime, UNIX_EPOCH};

use sas_core::ports::{Dimension, Metrics, Unit};
use serde_json::json;

/// Counters and times as Embedded Metric Format lines on stdout.
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

    /// The EMF document for one value: aggregated by function (what the alarms
    /// watch), and by function and all its `dimensions`.
    #[must_use]
    pub fn line(
        &self,
        name: &str,
        dimensions: &[Dimension<'_>],
        (value, unit): (u64, Unit),
        at_millis: u128,
    ) -> serde_json::Value {
        let names: Vec<&str> = std::iter::once("Function")
            .chain(dimensions.iter().map(|(name, _)| *name))
            .collect();
        let mut line = json!({
            "_aws": {
                "Timestamp": at_millis,
                "CloudWatchMetrics": [{
                    "Namespace": self.namespace,
                    "Dimensions": [["Function"], names],
                    "Metrics": [{ "Name": name, "Unit": unit.as_str() }],
                }],
            },
            "Function": self.function,
            name: value,
        });
        for (dimension, value) in dimensions {
            line[*dimension] = json!(value);
        }
        line
    }
}

impl Metrics for EmfMetrics {
    fn put(&self, name: &'static str, dimensions: &[Dimension<'_>], value: u64, unit: Unit) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        println!("{}", self.line(name, dimensions, (value, unit), now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emf_line_declares_its_metric_and_dimensions() {
        let metrics = EmfMetrics::new("SAS".into(), "scheduler".into());
        let line = metrics.line(
            "TasksInError",
            &[("Workflow", "drone-delivery")],
            (1, Unit::Count),
            42,
        );
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
        let wait = metrics.line(
            "CallLatency",
            &[("Service", "drone"), ("Outcome", "succeeded")],
            (1500, Unit::Milliseconds),
            42,
        );
        assert_eq!(
            wait["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Function"], ["Function", "Service", "Outcome"]])
        );
        assert_eq!(
            (wait["Service"].as_str(), wait["Outcome"].as_str()),
            (Some("drone"), Some("succeeded"))
        );
        assert_eq!(
            wait["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"],
            "Milliseconds"
        );
        assert_eq!(wait["CallLatency"], 1500);
    }
}
