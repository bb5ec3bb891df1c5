//! Metrics kept for a test to read.

use std::sync::{Mutex, PoisonError};

use sas_core::ports::{Dimension, Metrics, Unit};

/// A value put, with its metric's name, its dimensions and its unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Put {
    /// The metric.
    pub name: &'static str,
    /// Its dimensions, by name and value.
    pub dimensions: Vec<(&'static str, String)>,
    /// The value...
    pub value: u64,
    /// ...in this unit.
    pub unit: Unit,
}

/// Every value put, in order.
#[derive(Debug, Default)]
pub struct Recorded(Mutex<Vec<Put>>);

impl Recorded {
    /// The values put of the metric `name`.
    #[must_use]
    pub fn of(&self, name: &str) -> Vec<Put> {
        let all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.iter().filter(|put| put.name == name).cloned().collect()
    }

    /// The sum of the values put of the metric `name`.
    #[must_use]
    pub fn sum(&self, name: &str) -> u64 {
        self.of(name).iter().map(|put| put.value).sum()
    }
}

impl Metrics for Recorded {
    fn put(&self, name: &'static str, dimensions: &[Dimension<'_>], value: u64, unit: Unit) {
        let put = Put {
            name,
            dimensions: dimensions
                .iter()
                .map(|(name, value)| (*name, (*value).to_owned()))
                .collect(),
            value,
            unit,
        };
        (self.0.lock().unwrap_or_else(PoisonError::into_inner)).push(put);
    }
}
