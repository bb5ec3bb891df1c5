//! A template's triggers and alarms as comparable JSON: the queues each function
//! polls, the event-source mappings and the schedule, the alarms and what they watch.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::Deployed;

impl Deployed {
    /// The queues (their ARNs) each function (its name) polls.
    pub(super) fn event_source_queues(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut queues: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let from_queues = self
            .of_type("AWS::Lambda::EventSourceMapping")
            .filter(|(_, mapping)| mapping["Properties"]["StartingPosition"].is_null());
        for (_, mapping) in from_queues {
            let function = self.render(&mapping["Properties"]["FunctionName"]);
            let function = function
                .trim_start_matches("${")
                .trim_end_matches('}')
                .to_owned();
            queues
                .entry(function)
                .or_default()
                .insert(self.render(&mapping["Properties"]["EventSourceArn"]));
        }
        queues
    }

    /// The event-source mappings and the supervisor's schedule, as comparable JSON.
    pub(super) fn triggers(&self) -> Vec<Value> {
        let mut triggers: Vec<Value> = self
            .of_type("AWS::Lambda::EventSourceMapping")
            .map(|(_, mapping)| {
                let p = &mapping["Properties"];
                json!({
                    "function": self.render(&p["FunctionName"]),
                    "queue": self.render(&p["EventSourceArn"]),
                    "batch_size": self.render(&p["BatchSize"]),
                    "batching_window": match &p["MaximumBatchingWindowInSeconds"] {
                        Value::Null => "0".to_owned(),
                        window => self.render(window),
                    },
                    "response_types": self.texts(&p["FunctionResponseTypes"]),
                    "max_concurrency": self.render(&p["ScalingConfig"]["MaximumConcurrency"]),
                    "enabled": match &p["Enabled"] { Value::Null => "true".to_owned(), e => self.render(e) },
                    "stream": {
                        "from": self.render(&p["StartingPosition"]),
                        "max_record_age": self.render(&p["MaximumRecordAgeInSeconds"]),
                        "bisect": self.render(&p["BisectBatchOnFunctionError"]),
                        "filters": (p["FilterCriteria"]["Filters"].as_array().into_iter().flatten())
                            .map(|f| serde_json::from_str(&self.render(&f["Pattern"])).unwrap_or(Value::Null))
                            .collect::<Vec<Value>>(),
                        "on_failure": self.render(&p["DestinationConfig"]["OnFailure"]["Destination"]),
                    },
                })
            })
            .chain(self.of_type("AWS::Scheduler::Schedule").map(|(_, schedule)| {
                let p = &schedule["Properties"];
                json!({
                    "schedule": self.render(&p["ScheduleExpression"]),
                    "target": self.render(&p["Target"]["Arn"]),
                    "retries": self.render(&p["Target"]["RetryPolicy"]["MaximumRetryAttempts"]),
                    "window": self.render(&p["FlexibleTimeWindow"]["Mode"]),
                    "state": match &p["State"] { Value::Null => "ENABLED".to_owned(), s => self.render(s) },
                })
            }))
            .collect();
        triggers.sort_by_key(Value::to_string);
        triggers
    }

    /// A metric: namespace, name, dimensions, statistic and period.
    fn metric(&self, metric: &Value, stat: &Value, period: &Value) -> String {
        let mut dimensions: Vec<String> = metric["Dimensions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| format!("{}={}", self.render(&d["Name"]), self.render(&d["Value"])))
            .collect();
        dimensions.sort();
        format!(
            "{}/{} {{{}}} {} {}s",
            self.render(&metric["Namespace"]),
            self.render(&metric["MetricName"]),
            dimensions.join(","),
            self.render(stat),
            self.render(period)
        )
    }

    /// The alarms, as comparable JSON: what each watches (a metric math expression as its
    /// function over the metrics it names), when it fires, and whom it notifies.
    pub(super) fn alarms(&self) -> Vec<Value> {
        let mut alarms: Vec<Value> = self
            .of_type("AWS::CloudWatch::Alarm")
            .map(|(_, alarm)| {
                let p = &alarm["Properties"];
                let watches = match p["Metrics"].as_array() {
                    None => self.metric(p, &p["Statistic"], &p["Period"]),
                    Some(metrics) => {
                        let by_id: BTreeMap<&str, String> = metrics
                            .iter()
                            .filter(|m| m.get("MetricStat").is_some())
                            .map(|m| {
                                let stat = &m["MetricStat"];
                                (
                                    m["Id"].as_str().expect("an id"),
                                    self.metric(&stat["Metric"], &stat["Stat"], &stat["Period"]),
                                )
                            })
                            .collect();
                        let expression = metrics
                            .iter()
                            .find_map(|m| m["Expression"].as_str())
                            .expect("an expression");
                        let (function, ids) = expression.split_once('(').expect("FUNCTION([ids])");
                        let mut named: Vec<&str> = ids
                            .trim_matches(|c| "[]() ".contains(c))
                            .split(',')
                            .map(|id| by_id[id.trim()].as_str())
                            .collect();
                        named.sort_unstable();
                        format!("{function}({})", named.join(" ; "))
                    }
                };
                json!({
                    "watches": watches,
                    "comparison": p["ComparisonOperator"],
                    "threshold": p["Threshold"].as_f64(),
                    "periods": p["EvaluationPeriods"],
                    "missing": p["TreatMissingData"],
                    "actions": self.texts(&p["AlarmActions"]),
                    "ok_actions": self.texts(&p["OKActions"]),
                })
            })
            .collect();
        alarms.sort_by_key(Value::to_string);
        alarms
    }

    /// The queues a function reads that no alarm watches for the age of their oldest
    /// message.
    pub(super) fn queues_without_an_age_alarm(&self) -> Vec<String> {
        let alarms = self.alarms();
        let watched = |queue: &str| {
            let age = format!("ApproximateAgeOfOldestMessage {{QueueName={queue}}}");
            alarms
                .iter()
                .any(|a| a["watches"].as_str().is_some_and(|w| w.contains(&age)))
        };
        self.event_source_queues()
            .into_values()
            .flatten()
            .map(|arn| arn.replace(".Arn}", ".QueueName}"))
            .filter(|queue| !watched(queue))
            .collect()
    }
}
