//! A caller's request for a task, validated: what the submission function writes,
//! and what buffered ingestion carries to the scheduler.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::ids::{Owner, QueueName, TaskId};
use crate::task::ParentLink;
use crate::time::Timestamp;

/// A submission, validated.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Submission {
    /// The task's identifier.
    pub id: TaskId,
    /// The input, checked against the workflow.
    pub input: Value,
    /// The caller's notification queue.
    pub notify: Option<QueueName>,
    /// Who submitted it, when the API authenticates its callers; `id` is then scoped
    /// to it ([`TaskId::scoped`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// Of a child task: the step of its parent that started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// The versions of the child workflows the task may start, by name (its
    /// ancestors' pins, or the newest versions when it was submitted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pinned: BTreeMap<String, u32>,
    /// When the task may start: it is Pending until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<Timestamp>,
    /// Where its calls wait for a limited service, which goes first: 1 (first) to 5
    /// ([`crate::flow`]).
    #[serde(
        default = "crate::flow::default_priority",
        skip_serializing_if = "crate::flow::is_default_priority"
    )]
    pub priority: u8,
    /// Of an execution started through an alias of its state machine: the alias's
    /// name (Step Functions lists and describes an execution by it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// The trace it continues: its caller's `traceparent`, or its parent step's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::trace::TraceContext>,
}

impl Submission {
    /// `input` submitted as task `id` with nothing more asked: no owner, notification,
    /// parent, pins or start time, at the default priority.
    #[must_use]
    pub fn new(id: TaskId, input: Value) -> Self {
        Self {
            id,
            input,
            notify: None,
            owner: None,
            parent: None,
            pinned: BTreeMap::new(),
            start_at: None,
            priority: crate::flow::DEFAULT_PRIORITY,
            alias: None,
            trace: None,
        }
    }

    /// A digest of what was asked, the same for the same request sent again.
    #[must_use]
    pub fn fingerprint(&self, workflow: &str) -> String {
        /// What is digested, written from borrows: its fields in their names' order,
        /// as the JSON map it was first written from had them, so that the digests
        /// of tasks already stored still match.
        #[derive(serde::Serialize)]
        struct Canonical<'a> {
            input: &'a Value,
            notify: &'a Option<QueueName>,
            #[serde(skip_serializing_if = "crate::flow::is_default_priority")]
            priority: u8,
            #[serde(skip_serializing_if = "Option::is_none")]
            start_at: Option<Timestamp>,
            workflow: &'a str,
        }
        // Its objects' keys in their names' order, whatever order they came in (the
        // workspace's JSON maps keep their keys' order, which JSONata needs).
        let mut input = self.input.clone();
        input.sort_all_objects();
        let canonical = Canonical {
            input: &input,
            notify: &self.notify,
            priority: self.priority,
            start_at: self.start_at,
            workflow,
        };
        crate::sha256_hex(crate::to_json(&canonical))
    }
}
