//! Steps that start child tasks: a child workflow,
//! `{"name": "ship", "workflow": "ship-parcel", "input": {"parcel": "input.parcel_id"}}`,
//! and a map, one child per item of an array,
//! `{"name": "deliver-each", "map": {"items": "input.parcels", "workflow": "ship-parcel",
//! "max_concurrency": 20, "tolerated_failures": "5%"}}`.
//!
//! A child is a task of its own, with an id derived from its parent's
//! ([`TaskId::child`](crate::ids::TaskId::child)); the step keeps counts of its
//! children, never a record of each, so that a map over many thousands of items fits
//! a task's record.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::{CallbackSettings, Kind, KindView, LeaseEnd, Reads, Summary, UndoOnFailure};
use crate::decide::Effect;
use crate::decide::change::Change;
use crate::task::{Order, Step, StepState};
use crate::workflow::{FieldSource, Workflow};

mod decide;
mod load;

pub use decide::{never_started, on_child_ended, rerun_child, stop_as_child};
pub(crate) use load::{MapFile, Named, resolve};

/// A map's children at once when its definition does not say.
pub const DEFAULT_MAX_CONCURRENCY: u32 = 10;

/// The most children a map runs at once: the items running are kept in its record.
pub const MAX_CONCURRENCY: u32 = 1000;

/// A step that starts child tasks: one (a child workflow) or one per item (a map).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildrenStep {
    /// The workflow each child runs (its version pinned when the task was submitted).
    pub workflow: String,
    /// Of a map: where its items are, an array in the input or an earlier result.
    /// `None` for a child workflow, which starts one child.
    pub items: Option<FieldSource>,
    /// The child's input, by field. Without it, a map's child takes its item (an
    /// object) and a child workflow's takes its parent's input.
    pub input: Option<BTreeMap<String, FieldSource>>,
    /// The most children running at once.
    pub max_concurrency: u32,
    /// The children that may fail without failing the step.
    pub tolerated_failures: Tolerance,
}

/// The children of a map that may fail without failing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tolerance {
    /// A count.
    Count(u32),
    /// A share of the items, in hundredths of a percent (`"2.5%"` is 250).
    Basis(u32),
}

impl Tolerance {
    /// The failures allowed among `total` children.
    #[must_use]
    pub fn allowed(self, total: u32) -> u32 {
        match self {
            Self::Count(count) => count,
            Self::Basis(basis) => {
                u32::try_from(u64::from(total) * u64::from(basis) / 10_000).unwrap_or(u32::MAX)
            }
        }
    }
}

impl std::fmt::Display for Tolerance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Count(count) => write!(f, "{count}"),
            Self::Basis(basis) => write!(f, "{}%", f64::from(*basis) / 100.0),
        }
    }
}

impl Kind for ChildrenStep {
    fn start(&self, change: &mut Change, workflow: &Workflow, order: &Order, index: usize) {
        change.start_children(workflow, order, index);
    }

    fn undo(&self, change: &mut Change, workflow: &Workflow, _: &Order, index: usize) {
        change.undo_children(workflow, index);
    }

    /// Its children running are stopped: their ends, in Error, end the step; those
    /// Processed are left for its undo, at its cap.
    fn cancel(&self, change: &mut Change, index: usize) {
        let step: &Step = &change.task.steps[index];
        if let (Some(children), StepState::Processing) = (&step.children, step.state)
            && !children.running.is_empty()
        {
            let items = children.running.clone();
            let of = change.children_of(self, index);
            change.effects.push(Effect::StopChildren {
                of,
                items,
                undo: false,
            });
        }
    }

    fn lease_ended(&self, _: &Step) -> LeaseEnd<'_> {
        LeaseEnd::ChildrenWatched
    }

    fn undo_on_failure(&self) -> UndoOnFailure {
        UndoOnFailure::Undone
    }

    fn callback(&self) -> Option<&CallbackSettings> {
        None
    }

    /// A map's items and its children's fields; a child workflow without fields
    /// takes its parent's input.
    fn reads(&self) -> Reads<'_> {
        let fields = self.input.iter().flat_map(BTreeMap::values);
        let mut reads = Reads::only(self.items.iter().chain(fields));
        reads.input = self.items.is_none() && self.input.is_none();
        reads
    }

    fn service(&self) -> Option<&str> {
        Some(&self.workflow)
    }

    fn view(&self) -> KindView {
        let input = self.input.as_ref().map(super::sources);
        match &self.items {
            None => KindView::ChildWorkflow(ChildWorkflowView {
                workflow: self.workflow.clone(),
                input,
            }),
            Some(items) => KindView::Map(MapView {
                map: serde_json::json!({
                    "items": items.to_string(),
                    "workflow": self.workflow,
                    "max_concurrency": self.max_concurrency,
                    "tolerated_failures": match self.tolerated_failures {
                        Tolerance::Count(count) => serde_json::json!(count),
                        basis @ Tolerance::Basis(_) => serde_json::json!(basis.to_string()),
                    },
                    "input": input,
                }),
            }),
        }
    }

    fn summary(&self) -> Summary {
        let (kind, does) = match &self.items {
            None => ("child_workflow", format!("workflow: {}", self.workflow)),
            Some(items) => ("map", format!("map: {} over {items}", self.workflow)),
        };
        Summary {
            kind,
            does,
            undo: Some("the children's own".to_owned()),
        }
    }
}

/// What a caller sees of a child workflow.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ChildWorkflowView {
    /// The workflow its child runs.
    pub workflow: String,
    /// Its child's input, by field, if mapped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<serde_json::Map<String, Value>>,
}

/// What a caller sees of a map.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MapView {
    /// Its items, workflow, concurrency, tolerated failures and input.
    pub map: Value,
}
