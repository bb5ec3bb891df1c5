//! A task's order: its input, stored beside its record and read only when a step
//! needs it, and the inputs it had before an edited resubmission.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::TaskId;

use super::Task;

/// The order (business) data of a task, kept beside its state and written in the
/// same transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    /// The task it belongs to.
    pub task_id: TaskId,
    /// The input of the current run: shared with the cache of values kept apart
    /// (a map's ten thousand items are read at each child's end, not copied).
    pub input: Arc<Value>,
    /// The inputs an edited resubmission replaced, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<EarlierInput>,
}

impl Order {
    /// Whether it is older than `task`: the input of the task's last edited
    /// resubmission is not yet in it. A read of a task's two items that is not
    /// consistent may find the task's after that write and the order's before.
    #[must_use]
    pub fn predates(&self, task: &Task) -> bool {
        task.resubmissions
            .iter()
            .rev()
            .find(|resubmission| resubmission.edited)
            .is_some_and(|edited| {
                !self
                    .earlier
                    .iter()
                    .any(|earlier| earlier.until_run + 1 == edited.run)
            })
    }
}

/// An input a resubmission replaced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EarlierInput {
    /// The last run that had it.
    pub until_run: u32,
    /// The input.
    pub input: Value,
}
