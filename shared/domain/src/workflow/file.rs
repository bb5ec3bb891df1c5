//! The file format: a workflow's JSON, its defaults, and its resolution into a
//! [`Workflow`], each error located by step and field.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::flow::LimitFile;
use crate::workflow::children::{self, Children, MapFile};
use crate::workflow::parallel::{self, Branch};
use crate::workflow::step::{
    CallStep, FieldType, RetryPolicy, StepDefinition, StepKind, Supervision,
};
use crate::workflow::values::{Endpoint, FieldSource, PathPart, Scope};
use crate::workflow::waits::{self, CallbackSettings, Guard};
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
pub(super) type Fault = (Option<String>, String, String);

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
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct StepSettings {
    #[serde(default, with = "optional_duration_text")]
    complete_by: Option<Duration>,
    retry: Option<RetryPolicy>,
    supervisor: Option<Supervision>,
}

/// A step as written: one that calls a service (`agent`, `call` and their settings,
/// and a `callback` it waits for), a parallel step (`parallel`), a child workflow or
/// a map (`workflow`, `map`), a timer (`sleep`, `sleep_until`), or a step that waits
/// for its callback alone (`callback`); any of them with a condition (`when`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StepFile {
    pub(super) name: String,
    agent: Option<String>,
    call: Option<String>,
    compensation: Option<String>,
    read_only: Option<bool>,
    #[serde(default, with = "optional_duration_text")]
    complete_by: Option<Duration>,
    retry: Option<RetryPolicy>,
    supervisor: Option<Supervision>,
    fields: Option<BTreeMap<String, String>>,
    parallel: Option<Vec<Vec<StepFile>>>,
    workflow: Option<String>,
    pub(super) input: Option<BTreeMap<String, String>>,
    map: Option<MapFile>,
    pub(super) when: Option<String>,
    #[serde(default, with = "optional_duration_text")]
    pub(super) sleep: Option<Duration>,
    pub(super) sleep_until: Option<String>,
    pub(super) callback: Option<CallbackSettings>,
    limit: Option<LimitFile>,
}

impl StepFile {
    /// The settings of a step that starts children that this step names.
    pub(super) fn children_settings(&self) -> Vec<&'static str> {
        [
            ("workflow", self.workflow.is_some()),
            ("map", self.map.is_some()),
            ("input", self.input.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, named)| named.then_some(field))
        .collect()
    }

    /// The settings of a timer or a callback that this step names.
    pub(super) fn wait_settings(&self) -> Vec<&'static str> {
        [
            ("sleep", self.sleep.is_some()),
            ("sleep_until", self.sleep_until.is_some()),
            ("callback", self.callback.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, named)| named.then_some(field))
        .collect()
    }

    /// The settings of a call that this step names.
    pub(super) fn call_settings(&self) -> Vec<&'static str> {
        [
            ("agent", self.agent.is_some()),
            ("call", self.call.is_some()),
            ("compensation", self.compensation.is_some()),
            ("read_only", self.read_only.is_some()),
            ("complete_by", self.complete_by.is_some()),
            ("retry", self.retry.is_some()),
            ("supervisor", self.supervisor.is_some()),
            ("fields", self.fields.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, named)| named.then_some(field))
        .collect()
    }
}

/// The longest a workflow's or a step's name may be, in bytes: both are parts of the
/// keys of the state table (a limit's gate, an idempotency key, a child's id), which
/// DynamoDB bounds.
const MAX_NAME: usize = 64;

impl WorkflowFile {
    pub(super) fn resolve(self, source: String, file: &str) -> Result<Workflow, Fault> {
        let top = |field: &str, message: &str| (None, field.to_owned(), message.to_owned());
        if self.name.is_empty()
            || self.name.len() > MAX_NAME
            || !self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(top("name", "must be 1 to 64 letters, digits and '-'"));
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
        })
    }
}

/// Resolves a workflow's steps, flat, each with the steps it waits for.
pub(super) struct Resolver<'a> {
    input: &'a BTreeMap<String, FieldType>,
    defaults: &'a StepSettings,
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
    pub(super) fn sequence(
        &mut self,
        sequence: Vec<StepFile>,
        mut after: Vec<usize>,
        mut known: HashSet<String>,
        within: &[Branch],
        guards: &[Guard],
    ) -> Result<(Vec<usize>, HashSet<String>), Fault> {
        for mut step in sequence {
            let at = |field: &str, message: &str| {
                (
                    Some(step.name.clone()),
                    field.to_owned(),
                    message.to_owned(),
                )
            };
            if step.name.is_empty() || step.name.len() > MAX_NAME {
                return Err(at("name", "must be 1 to 64 bytes long"));
            }
            if !self.names.insert(step.name.clone()) {
                return Err(at("name", "is used by another step"));
            }
            let mut when = guards.to_vec();
            when.extend(waits::guard(&step, &known)?);
            if let Some(branches) = step.parallel.take() {
                (after, known) =
                    parallel::resolve(self, &step, branches, &after, &known, within, &when)?;
                continue;
            }
            let children = match (step.workflow.take(), step.map.take()) {
                (Some(_), Some(_)) => {
                    return Err((
                        Some(step.name),
                        "workflow".into(),
                        "a step is a child workflow or a map, not both".into(),
                    ));
                }
                (Some(workflow), None) => Some(Children::Workflow(workflow)),
                (None, Some(map)) => Some(Children::Map(map)),
                (None, None) => None,
            };
            let calls = step.parallel.is_none()
                && children.is_none()
                && step.sleep.is_none()
                && step.sleep_until.is_none()
                && step.agent.is_some();
            if step.limit.is_some() && !calls {
                return Err(at("limit", "only a step that calls a service has a limit"));
            }
            let kind = match children {
                Some(children) => children::resolve(&step, children, self.input, &known)?,
                None => match waits::resolve_sleep(&step, self.input, &known)? {
                    Some(sleep) => sleep,
                    None => match (&step.agent, step.callback.clone()) {
                        (None, Some(callback)) => {
                            waits::resolve_wait(&step, callback, self.supervision(&step)?)?
                        }
                        _ => StepKind::Call(Box::new(self.call(&step, &known)?)),
                    },
                },
            };
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

    /// Resolves a step that calls a service, once the steps named `known` are done
    /// (their results there to name).
    fn call(&self, step: &StepFile, known: &HashSet<String>) -> Result<CallStep, Fault> {
        let at = |field: &str, message: &str| {
            (
                Some(step.name.clone()),
                field.to_owned(),
                message.to_owned(),
            )
        };
        let (Some(agent), Some(call)) = (&step.agent, &step.call) else {
            let missing = if step.agent.is_none() {
                "agent"
            } else {
                "call"
            };
            return Err(at(
                missing,
                "a step names the service it calls (agent, call), or is parallel branches, a child workflow or a map",
            ));
        };
        let scope = Scope {
            step: &step.name,
            input: self.input,
            earlier: known,
            item: false,
        };
        let fields = match &step.fields {
            None => None,
            Some(fields) => Some(
                fields
                    .iter()
                    .map(|(field, source)| {
                        FieldSource::parse(source, &scope)
                            .map(|source| (field.clone(), source))
                            .map_err(|message| at(&format!("fields.{field}"), &message))
                    })
                    .collect::<Result<BTreeMap<_, _>, _>>()?,
            ),
        };
        if agent.is_empty() {
            return Err(at("agent", "must not be empty"));
        }
        let call = Endpoint::parse(call, &scope).map_err(|message| at("call", &message))?;
        if let Some(own) = call.template.iter().find_map(|part| match part {
            PathPart::Value(source @ FieldSource::Result { step: of, .. }) if *of == step.name => {
                Some(source)
            }
            _ => None,
        }) {
            return Err(at(
                "call",
                &format!("{{{own}}}: a call has no result of its own yet (its compensation has)"),
            ));
        }
        let compensation = step
            .compensation
            .as_deref()
            .map(|text| Endpoint::parse(text, &scope))
            .transpose()
            .map_err(|message| at("compensation", &message))?;
        let read_only = step.read_only.unwrap_or(false);
        if read_only && compensation.is_some() {
            return Err(at(
                "compensation",
                "a read-only step changes nothing, so has nothing to undo",
            ));
        }
        if step.input.is_some() {
            return Err(at(
                "input",
                "only a child workflow has an input; a call sends its fields",
            ));
        }
        let complete_by = step
            .complete_by
            .or(self.defaults.complete_by)
            .unwrap_or(Duration::from_secs(30));
        if complete_by.is_zero() {
            return Err(at("complete_by", "must be more than zero"));
        }
        let retry = step
            .retry
            .clone()
            .or_else(|| self.defaults.retry.clone())
            .unwrap_or_else(default_retry);
        if retry.attempts == 0 {
            return Err(at("retry.attempts", "must be at least 1"));
        }
        if retry.max_backoff < retry.initial_backoff {
            return Err(at(
                "retry.max_backoff",
                "must not be less than initial_backoff",
            ));
        }
        let supervision = self.supervision(step)?;
        if let Some(callback) = &step.callback {
            waits::check_callback(step, callback)?;
        }
        Ok(CallStep {
            agent: agent.clone(),
            call,
            compensation,
            read_only,
            complete_by,
            retry,
            supervision,
            fields,
            callback: step.callback.clone(),
            limit: step
                .limit
                .clone()
                .map(LimitFile::check)
                .transpose()
                .map_err(|(field, message)| at(&format!("limit.{field}"), &message))?,
            service_limit: None,
        })
    }

    /// What the supervisor does with `step` when it times out: its own setting, or
    /// the workflow's default.
    fn supervision(&self, step: &StepFile) -> Result<Supervision, Fault> {
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
                return Err((
                    Some(step.name.clone()),
                    field.to_owned(),
                    "must be at most 15m (the longest SQS delay)".to_owned(),
                ));
            }
        }
        Ok(supervision)
    }
}

pub(super) fn default_attempts() -> u32 {
    3
}
pub(super) fn default_initial_backoff() -> Duration {
    Duration::from_millis(100)
}
pub(super) fn default_max_backoff() -> Duration {
    Duration::from_secs(2)
}
pub(super) fn default_true() -> bool {
    true
}
pub(super) fn default_threshold() -> u32 {
    3
}
pub(super) fn default_extended_wait() -> Duration {
    Duration::from_secs(30)
}
fn default_pickup_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_retry() -> RetryPolicy {
    RetryPolicy {
        attempts: default_attempts(),
        initial_backoff: default_initial_backoff(),
        max_backoff: default_max_backoff(),
        jitter: true,
        call_timeout: None,
    }
}
fn default_supervision() -> Supervision {
    Supervision {
        failure_threshold: default_threshold(),
        retry_delay: Duration::ZERO,
        extended_wait: default_extended_wait(),
    }
}

/// Durations written as text: "250ms", "30s", "2m".
pub(super) mod duration_text {
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

pub(super) mod optional_duration_text {
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
