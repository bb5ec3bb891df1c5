//! Workflow definitions: data files, validated when loaded, kept by version.

mod attributes;
mod condition;
pub(crate) mod file;
pub(crate) mod guard;
mod registry;
mod step;
#[cfg(test)]
mod tests;
pub(crate) mod values;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::machine::{self, Machine};
use crate::workflow::file::{WorkflowFile, locate};
use serde_json::Value;

pub use crate::kinds::children::{DEFAULT_MAX_CONCURRENCY, MAX_CONCURRENCY, Tolerance};
pub use crate::kinds::parallel::Branch;
pub use crate::kinds::{CallStep, CallbackSettings, ChildrenStep, SleepStep, StepKind, WaitStep};
pub use attributes::{
    Attribute, AttributeType, MAX_ATTRIBUTE_TEXT, MAX_ATTRIBUTES, attribute_text, is_attribute_name,
};
pub use condition::Condition;
pub use guard::Guard;
pub use registry::{Registry, RegistryError};
pub use step::{FieldType, RetryPolicy, StepDefinition, Supervision};
pub use values::{Endpoint, FieldSource, Results};

/// The workflows that ship with the product, as (file name, text).
pub const BUILT_IN: [(&str, &str); 7] = [
    (
        "order-processing.json",
        include_str!("../../workflows/order-processing.json"),
    ),
    (
        "drone-delivery.json",
        include_str!("../../workflows/drone-delivery.json"),
    ),
    (
        "drone-delivery-parallel.json",
        include_str!("../../workflows/drone-delivery-parallel.json"),
    ),
    (
        "ship-parcel.json",
        include_str!("../../workflows/ship-parcel.json"),
    ),
    (
        "parcel-order.json",
        include_str!("../../workflows/parcel-order.json"),
    ),
    ("refund.json", include_str!("../../workflows/refund.json")),
    (
        "drone-delivery-pickup.json",
        include_str!("../../workflows/drone-delivery-pickup.json"),
    ),
];

/// The attribute every execution of a state machine has: its machine's name.
pub const STATE_MACHINE_ATTRIBUTE: &str = "state_machine";

/// The longest wait before a retry: SQS cannot delay a message for longer.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(900);

/// A definition that cannot be used, located by file, step and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {}{field}: {message}", .step.as_ref().map(|s| format!("step '{s}': ")).unwrap_or_default())]
pub struct DefinitionError {
    /// The file the definition came from.
    pub file: String,
    /// The step at fault, when the fault is in a step.
    pub step: Option<String>,
    /// The field at fault, as a path such as `retry.attempts`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// A loaded, validated workflow definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workflow {
    /// The name tasks refer to.
    pub name: String,
    /// Bumped on every change; a task keeps the version it started with.
    pub version: u32,
    /// What the workflow does.
    pub description: String,
    /// Required input fields and their types.
    pub input: BTreeMap<String, FieldType>,
    /// How long a task may wait for a scheduler to pick it up before the supervisor
    /// sends it again.
    pub pickup_timeout: Duration,
    /// The steps that call services, in the order they are written (a parallel
    /// step's branches in turn), each with the steps it waits for.
    pub steps: Vec<StepDefinition>,
    /// The definition's canonical JSON text, as stored.
    pub source: String,
    /// The file it was read from, in errors.
    pub file: String,
    /// Of a Step Functions state machine: its definition, which says where a task
    /// goes from each state ([`crate::machine`]); its steps are its states that wait.
    pub machine: Option<Machine>,
    /// Its search attributes: what its tasks are found by.
    pub attributes: Vec<Attribute>,
}

/// Why a task's input does not fit its workflow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InputError {
    /// The offending field, as `input.<name>`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl Workflow {
    /// The values of its attributes in `task`, whose input is `input`: those it has,
    /// by name. An execution of a state machine has one more,
    /// [`STATE_MACHINE_ATTRIBUTE`]: its machine's name, by which `ListExecutions`
    /// finds those that succeeded.
    #[must_use]
    pub fn attributes_of(
        &self,
        input: &Value,
        task: &crate::task::Task,
    ) -> BTreeMap<String, Value> {
        let mut attributes = BTreeMap::new();
        if self.machine.is_some() && task.is_execution() {
            let name = Value::from(self.name.as_str());
            attributes.insert(STATE_MACHINE_ATTRIBUTE.to_owned(), name);
        }
        if self.attributes.is_empty() {
            return attributes;
        }
        let results = crate::decide::steps::results(task);
        attributes.extend(
            (self.attributes.iter())
                .filter_map(|a| Some((a.name.clone(), a.value(input, &results)?))),
        );
        attributes
    }

    /// The index of the step named `name` (a state machine's state that waits).
    #[must_use]
    pub fn step_index(&self, name: &str) -> Option<usize> {
        self.steps.iter().position(|step| step.name == name)
    }

    /// Checks that `input` is an object with every declared field, of its type (a
    /// state machine's, that it is JSON).
    ///
    /// # Errors
    /// The first field that is missing or mistyped.
    pub fn validate_input(&self, input: &Value) -> Result<(), InputError> {
        // A state machine takes any JSON, as Step Functions does.
        if self.machine.is_some() {
            return Ok(());
        }
        let Some(object) = input.as_object() else {
            return Err(InputError {
                field: "input".into(),
                message: "must be a JSON object".into(),
            });
        };
        for (name, kind) in &self.input {
            let field = format!("input.{name}");
            match object.get(name) {
                None => {
                    return Err(InputError {
                        field,
                        message: "is required".into(),
                    });
                }
                Some(value) if !kind.admits(value) => {
                    return Err(InputError {
                        field,
                        message: format!("must be of type {}", serde_json::json!(kind)),
                    });
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// The workflows its steps start as children, with the steps and the field
    /// (`workflow`, or `map.workflow`) that name them.
    pub fn child_workflows(&self) -> impl Iterator<Item = (&str, &str, &'static str)> {
        self.steps.iter().filter_map(|step| {
            let children = step.children()?;
            let field = if children.items.is_some() {
                "map.workflow"
            } else {
                "workflow"
            };
            Some((children.workflow.as_str(), step.name.as_str(), field))
        })
    }

    /// A digest of the definition's content, stored beside it, to catch a change
    /// without a version bump. Computed when asked: most start-ups never store one.
    #[must_use]
    pub fn digest(&self) -> String {
        crate::sha256_hex(&self.source)
    }

    /// Parses a definition stored under `name` (a workflow's or a state machine's,
    /// told apart by its content); `label` names it in errors.
    ///
    /// # Errors
    /// A [`DefinitionError`] naming the label, step and field at fault.
    pub fn parse_stored(name: &str, label: &str, text: &str) -> Result<Self, DefinitionError> {
        if machine::is_machine_text(text) {
            machine::named(name, label, text)
        } else {
            Self::parse(label, text)
        }
    }

    /// Parses and validates a definition; `file` names it in errors. A file named
    /// `NAME.asl.json` holds a Step Functions state machine.
    ///
    /// # Errors
    /// A [`DefinitionError`] naming the file, step and field at fault.
    pub fn parse(file: &str, text: &str) -> Result<Self, DefinitionError> {
        if machine::is_machine_file(file) {
            return machine::workflow(file, text);
        }
        let error = |step: Option<String>, field: &str, message: String| DefinitionError {
            file: file.to_owned(),
            step,
            field: field.to_owned(),
            message,
        };
        let value: Value =
            serde_json::from_str(text).map_err(|e| error(None, "(document)", e.to_string()))?;
        let document: WorkflowFile = serde_path_to_error::deserialize(&value).map_err(|e| {
            let (step, field) = locate(&value, e.path());
            error(step, &field, e.inner().to_string())
        })?;
        // Stored with its keys in their names' order, so that its digest does not
        // change with the order a file writes them in.
        let mut canonical = value.clone();
        canonical.sort_all_objects();
        document
            .resolve(canonical.to_string(), file)
            .map_err(|(step, field, message)| error(step, &field, message))
    }
}
