//! Counters and times, for dashboards and alarms.

use std::time::Duration;

/// What a metric's values measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Things that happened, summed.
    Count,
    /// Times, in milliseconds.
    Milliseconds,
}

impl Unit {
    /// Its name in CloudWatch.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Count => "Count",
            Self::Milliseconds => "Milliseconds",
        }
    }
}

/// A metric's dimension: its name and value (`("Service", "drone")`).
pub type Dimension<'a> = (&'static str, &'a str);

/// Counters and times, for dashboards and alarms (CloudWatch metrics in AWS).
pub trait Metrics: Send + Sync {
    /// Records `value`, in `unit`, of the metric `name`, with its `dimensions`.
    fn put(&self, name: &'static str, dimensions: &[Dimension<'_>], value: u64, unit: Unit);

    /// Adds `value` to the counter `name`, with one dimension.
    fn count(&self, name: &'static str, dimension: Dimension<'_>, value: u64) {
        self.put(name, &[dimension], value, Unit::Count);
    }

    /// Records a time of the metric `name`, with its `dimensions`.
    fn time(&self, name: &'static str, dimensions: &[Dimension<'_>], time: Duration) {
        let millis = u64::try_from(time.as_millis()).unwrap_or(u64::MAX);
        self.put(name, dimensions, millis, Unit::Milliseconds);
    }
}

/// Metrics that go nowhere, where nobody reads them.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoMetrics;

impl Metrics for NoMetrics {
    fn put(&self, _: &'static str, _: &[Dimension<'_>], _: u64, _: Unit) {}
}
