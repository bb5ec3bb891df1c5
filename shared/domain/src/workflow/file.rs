//! The file format: a workflow's JSON, its defaults, and its resolution into a
//! [`Workflow`], each error located by step and field.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::flow::LimitFile;
use crate::kinds::children::MapFile;
use crate::kinds::parallel::{self, Branch};
use crate::kinds::{self, CallbackSettings};
use crate::workflow::attributes::{self, AttributeFile};
use crate::workflow::guard::{self, Guard};
use crate::workflow::step::{FieldType, RetryPolicy, StepDefinition, Supervision};
use crate::workflow::{MAX_RETRY_WAIT, Workflow};
use serde_json::Value;

/// Splits a serde path into the step it is in (by name; the innermost, for a step in
/// a parallel step's branch) and the field within.
pub(super) fn locate(value: &Value, path: &serde_path_to_error::Path) -> (Option<String>, String) {
    use serde_path_to_error::Segment;
    let segments: Vec<&Segment> = path.iter().collect();
    if let [Segment::Map { key }, Segment::Seq { index }, rest @ ..] = segments.as_slice()
        && key == "steps"
    {
        let (mut step, mut index, mut rest) = (&value["steps"], *index, rest);
        while let [
            Segment::Map { key },
            Segment::Seq { index: branch },
            Segment::Seq { index: inner },
            inner_rest @ ..,
        ] = rest
            && key == "parallel"
        {
            step = &step[index]["parallel"][*branch];
            (index, rest) = (*inner, inner_rest);
        }
        let name = step[index]["name"]
            .as_str()
            .map_or_else(|| format!("#{}", index + 1), str::to_owned);
        let field = rest
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(".");
        let field = if field.is_empty() {
            "(step)".to_owned()
        } else {
            field
        };
        return (Some(name), field);
    }
    let field = path.to_string();
    (
        None,
        if field == "." {
            "(document)".to_owned()
        } else {
            field
        },
    )
}

/// A definition's fault: the step (by name), the field and what is wrong.
pub(crate) type Fault = (Option<String>, String, String);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WorkflowFile {
    name: String,
    version: u32,
    #[serde(default)]
    description: String,
    #[serde(default)]
    input: BTreeMap<String, FieldType>,
    #[serde(default = "default_pickup_timeout", with = "duration_text")]
    pickup_timeout: Duration,
    #[serde(default)]
    defaults: StepSettings,
    steps: Vec<StepFile>,
    #[serde(default)]
    attributes: BTreeMap<String, AttributeFile>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct StepSettings {
    #[serde(default, with = "optional_duration_text")]
    pub(crate) complete_by: Option<Duration>,
    pub(crate) retry: Option<RetryPolicy>,
    pub(crate) supervisor: Option<Supervision>,
}

/// A step as written: one that calls a service (`agent`, `call` and their settings,
/// and a `callback` it waits for), a parallel step (`parallel`), a child workflow or
/// a map (`workflow`, `map`), a timer (`sleep`, `sleep_until`), or a step that waits
/// for its callback alone (`callback`); any of them with a condition (`when`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StepFile {
    pub(crate) name: String,
    pub(crate) agent: Option<String>,
    pub(crate) call: Option<String>,
    pub(crate) compensation: Option<String>,
    pub(crate) read_only: Option<bool>,
    #[serde(default, with = "optional_duration_text")]
    pub(crate) complete_by: Option<Duration>,
    pub(crate) retry: Option<RetryPolicy>,
    pub(crate) supervisor: Option<Supervision>,
    pub(crate) fields: Option<BTreeMap<String, String>>,
    pub(crate) parallel: Option<Vec<Vec<StepFile>>>,
    pub(crate) workflow: Option<String>,
    pub(crate) input: Option<BTreeMap<String, String>>,
    pub(crate) map: Option<MapFile>,
    pub(crate) when: Option<String>,
    #[serde(default, with = "optional_duration_text")]
    pub(crate) sleep: Option<Duration>,
    pub(crate) sleep_until: Option<String>,
    pub(crate) callback: Option<CallbackSettings>,
    pub(crate) limit: Option<LimitFile>,
}

impl StepFile {
    /// A fault of this step: at `field`, what is wrong.
    pub(crate) fn fault(&self, field: &str, message: impl Into<String>) -> Fault {
        (Some(self.name.clone()), field.to_owned(), message.into())
    }

    /// The settings of one kind or another that this step names, in the order a
    /// step's faults are told: a call's, a child workflow's or a map's, a timer's or
    /// a callback's.
    pub(crate) fn settings_named(&self) -> impl Iterator<Item = &'static str> {
        [
            ("agent", self.agent.is_some()),
            ("call", self.call.is_some()),
            ("compensation", self.compensation.is_some()),
            ("read_only", self.read_only.is_some()),
            ("complete_by", self.complete_by.is_some()),
            ("retry", self.retry.is_some()),
            ("supervisor", self.supervisor.is_some()),
            ("fields", self.fields.is_some()),
            ("workflow", self.workflow.is_some()),
            ("map", self.map.is_some()),
            ("input", self.input.is_some()),
            ("sleep", self.sleep.is_some()),
            ("sleep_until", self.sleep_until.is_some()),
            ("callback", self.callback.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, named)| named.then_some(field))
    }
}

/// The longest a workflow's or a step's name may be, in bytes: both are parts of the
/// keys of the state table (a limit's gate, an idempotency key, a child's id), which
/// DynamoDB bounds.
const MAX_NAME: usize = 64;

impl WorkflowFile {
    pub(super) fn resolve(self, source: String, file: &str) -> Result<Workflow, Fault> {
        let top = |field: &str, message: &str| (None, field.to_owned(), message.to_owned());
        if !is_workflow_name(&self.name) {
            return Err(top("name", NAME_RULE));
        }
        if self.version == 0 {
            return Err(top("version", "must be at least 1"));
        }
        if self.steps.is_empty() {
            return Err(top("steps", "must list at least one step"));
        }
        if self.pickup_timeout.is_zero() {
            return Err(top("pickup_timeout", "must be more than zero"));
        }
        let mut resolver = Resolver {
            input: &self.input,
            defaults: &self.defaults,
            names: HashSet::new(),
            steps: Vec::new(),
        };
        resolver.sequence(self.steps, Vec::new(), HashSet::new(), &[], &[])?;
        let attributes = attributes::resolve(self.attributes, &self.input, &resolver.names)
            .map_err(|(field, reason)| (None, field, reason))?;
        let steps = resolver.steps;
        Ok(Workflow {
            name: self.name,
            version: self.version,
            description: self.description,
            input: self.input,
            pickup_timeout: self.pickup_timeout,
            steps,
            source,
            file: file.to_owned(),
            machine: None,
            attributes,
        })
    }
}

/// Resolves a workflow's steps, flat, each with the steps it waits for.
pub(crate) struct Resolver<'a> {
    pub(crate) input: &'a BTreeMap<String, FieldType>,
    pub(crate) defaults: &'a StepSettings,
    /// Every step's name so far, parallel steps' included: names are unique across the
    /// whole workflow.
    names: HashSet<String>,
    steps: Vec<StepDefinition>,
}

impl Resolver<'_> {
    /// Resolves `sequence`, its first step waiting for the steps `after`, the steps
    /// named `known` done by then, inside the branches `within` under the conditions
    /// `guards` (of the parallel steps around it): the steps a step after it waits
    /// for, and the steps known done once it has ended.
    pub(crate) fn sequence(
        &mut self,
        sequence: Vec<StepFile>,
        mut after: Vec<usize>,
        mut known: HashSet<String>,
        within: &[Branch],
        guards: &[Guard],
    ) -> Result<(Vec<usize>, HashSet<String>), Fault> {
        for mut step in sequence {
            let at = |field: &str, message: &str| step.fault(field, message);
            if step.name.is_empty() || step.name.len() > MAX_NAME {
                return Err(at("name", "must be 1 to 64 bytes long"));
            }
            if !self.names.insert(step.name.clone()) {
                return Err(at("name", "is used by another step"));
            }
            let mut when = guards.to_vec();
            when.extend(guard::guard(&step, &known)?);
            if let Some(branches) = step.parallel.take() {
                (after, known) =
                    parallel::resolve(self, &step, branches, &after, &known, within, &when)?;
                continue;
            }
            let kind = kinds::load(&mut step, self, &known)?;
            known.insert(step.name.clone());
            self.steps.push(StepDefinition {
                name: step.name,
                kind,
                after,
                within: within.to_vec(),
                when,
            });
            after = vec![self.steps.len() - 1];
        }
        Ok((after, known))
    }

    /// What the supervisor does with `step` when it times out: its own setting, or
    /// the workflow's default.
    pub(crate) fn supervision(&self, step: &StepFile) -> Result<Supervision, Fault> {
        let supervision = step
            .supervisor
            .clone()
            .or_else(|| self.defaults.supervisor.clone())
            .unwrap_or_else(default_supervision);
        for (field, wait) in [
            ("supervisor.retry_delay", supervision.retry_delay),
            ("supervisor.extended_wait", supervision.extended_wait),
        ] {
            if wait > MAX_RETRY_WAIT {
                return Err(step.fault(field, "must be at most 15m (the longest SQS delay)"));
            }
        }
        Ok(supervision)
    }
}

/// What a workflow's name may be.
pub(crate) const NAME_RULE: &str = "must be 1 to 64 letters, digits and '-'";

/// Whether `name` may name a workflow: 1 to 64 letters, digits and '-'.
pub(crate) fn is_workflow_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

pub(crate) fn default_attempts() -> u32 {
    3
}
pub(crate) fn default_initial_backoff() -> Duration {
    Duration::from_millis(100)
}
pub(crate) fn default_max_backoff() -> Duration {
    Duration::from_secs(2)
}
pub(crate) fn default_true() -> bool {
    true
}
pub(crate) fn default_threshold() -> u32 {
    3
}
pub(crate) fn default_extended_wait() -> Duration {
    Duration::from_secs(30)
}
fn default_pickup_timeout() -> Duration {
    Duration::from_secs(30)
}
pub(crate) fn default_retry() -> RetryPolicy {
    RetryPolicy {
        attempts: default_attempts(),
        initial_backoff: default_initial_backoff(),
        max_backoff: default_max_backoff(),
        jitter: true,
        call_timeout: None,
    }
}
pub(crate) fn default_supervision() -> Supervision {
    Supervision {
        failure_threshold: default_threshold(),
        retry_delay: Duration::ZERO,
        extended_wait: default_extended_wait(),
    }
}

/// Durations written as text: "250ms", "30s", "2m".
pub(crate) mod duration_text {
    use super::{Deserialize, Deserializer, Duration};
    use serde::Serializer;

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&humantime::format_duration(*value).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        humantime::parse_duration(&text).map_err(|e| {
            <D::Error as serde::de::Error>::custom(format!(
                "'{text}' is not a duration such as \"500ms\" or \"30s\": {e}"
            ))
        })
    }
}

pub(crate) mod optional_duration_text {
    use super::{Deserialize, Deserializer, Duration};
    use serde::Serializer;

    #[allow(clippy::ref_option)] // serde's `with` passes a reference to the field
    pub fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => super::duration_text::serialize(d, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        struct Wrapped(#[serde(with = "super::duration_text")] Duration);
        Ok(Option::<Wrapped>::deserialize(deserializer)?.map(|Wrapped(d)| d))
    }
}
