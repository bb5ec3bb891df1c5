//! Workflow definitions: data files, validated when loaded, kept by version.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use super::messages::Method;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The workflows that ship with the product, as (file name, text).
pub const BUILT_IN: [(&str, &str); 2] = [
    (
        "order-processing.json",
        include_str!("../workflows/order-processing.json"),
    ),
    (
        "drone-delivery.json",
        include_str!("../workflows/drone-delivery.json"),
    ),
];

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

/// The JSON type an input field must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    /// A JSON string.
    String,
    /// Any JSON number.
    Number,
    /// A JSON number without a fraction.
    Integer,
    /// `true` or `false`.
    Boolean,
    /// A JSON object.
    Object,
    /// A JSON array.
    Array,
}

impl FieldType {
    fn admits(self, value: &Value) -> bool {
        match self {
            Self::String => value.is_string(),
            Self::Number => value.is_number(),
            Self::Integer => value.is_i64() || value.is_u64(),
            Self::Boolean => value.is_boolean(),
            Self::Object => value.is_object(),
            Self::Array => value.is_array(),
        }
    }
}

/// How an agent retries a remote call within the step's complete-by time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Calls made at most, the first included.
    #[serde(default = "default_attempts")]
    pub attempts: u32,
    /// The backoff before the second call; it doubles for each call after.
    #[serde(default = "default_initial_backoff", with = "duration_text")]
    #[schemars(with = "String")]
    pub initial_backoff: Duration,
    /// The longest backoff.
    #[serde(default = "default_max_backoff", with = "duration_text")]
    #[schemars(with = "String")]
    pub max_backoff: Duration,
    /// Full jitter: each backoff is drawn uniformly from zero to its nominal value.
    #[serde(default = "default_true")]
    pub jitter: bool,
    /// The longest a single call may take; never past complete-by either way.
    #[serde(default, with = "optional_duration_text")]
    #[schemars(with = "Option<String>")]
    pub call_timeout: Option<Duration>,
}

/// What the supervisor does with a step whose complete-by time has passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Supervision {
    /// Failures (expired complete-by times) a step may have and still be retried;
    /// one more and the task is compensated and set to Error.
    #[serde(default = "default_threshold")]
    pub failure_threshold: u32,
    /// The wait before an ordinary retry.
    #[serde(default, with = "duration_text")]
    pub retry_delay: Duration,
    /// The wait before the last retry, when the failures reach the threshold,
    /// in the hope that the fault is resolved meanwhile.
    #[serde(default = "default_extended_wait", with = "duration_text")]
    pub extended_wait: Duration,
}

/// One step of a workflow, with every setting resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepDefinition {
    /// Unique within the workflow.
    pub name: String,
    /// The agent (remote service) that performs the step.
    pub agent: String,
    /// The service's operation the step calls.
    pub call: Endpoint,
    /// The operation that undoes the step, if it must be undone on failure.
    pub compensation: Option<Endpoint>,
    /// The step changes nothing at its service (a check, a read): it is run again
    /// freely, under a new idempotency key, by any resubmission, and never undone. A
    /// step that is not read-only and has no compensation has an effect that cannot
    /// be undone.
    pub read_only: bool,
    /// The time the step has to complete, from its dispatch.
    pub complete_by: Duration,
    /// The agent's retries.
    pub retry: RetryPolicy,
    /// The supervisor's recovery.
    pub supervision: Supervision,
    /// What the step sends its service, by field name, when the definition says: then
    /// the service sees only these, not the whole input and every earlier result.
    pub fields: Option<BTreeMap<String, FieldSource>>,
}

impl StepDefinition {
    /// Whether a failed task leaves nothing of the step in place: it has a
    /// compensation, or, read-only, no effect.
    #[must_use]
    pub fn is_undone_on_failure(&self) -> bool {
        self.read_only || self.compensation.is_some()
    }
}

/// A service's operation: a method and a path, written `"PUT /drones"`, or `"/drones"`
/// for a POST. The path may name values of the input and of results, filled in when
/// the step is sent: `/packages/{results.create-package.id}/cancel`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The method.
    pub method: Method,
    /// The path, from '/', as written.
    pub path: String,
    /// The path's text and the values it names, in order.
    template: Vec<PathPart>,
}

/// A piece of a path template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PathPart {
    Text(String),
    Value(FieldSource),
}

impl Endpoint {
    /// The path with the values it names, each a string or a number, percent-encoded
    /// as a path segment.
    ///
    /// # Errors
    /// Naming the first value that is missing, or neither a string nor a number.
    pub fn fill(&self, input: &Value, results: &Results<'_>) -> Result<String, String> {
        const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
            .remove(b'-')
            .remove(b'_')
            .remove(b'.')
            .remove(b'~');
        let mut path = String::new();
        for part in &self.template {
            match part {
                PathPart::Text(text) => path.push_str(text),
                PathPart::Value(source) => {
                    let text = match source.value(input, results) {
                        Value::String(text) => text,
                        Value::Number(number) => number.to_string(),
                        Value::Null => return Err(format!("path: {{{source}}} has no value")),
                        _ => {
                            return Err(format!(
                                "path: {{{source}}} is neither a string nor a number"
                            ));
                        }
                    };
                    // A URL parser would move up a segment, or name the collection.
                    if matches!(text.as_str(), "" | "." | "..") {
                        return Err(format!(
                            "path: {{{source}}} is '{text}', which names no single resource"
                        ));
                    }
                    path.extend(percent_encoding::utf8_percent_encode(&text, SEGMENT));
                }
            }
        }
        Ok(path)
    }

    /// The operation `text` names, for the step of `scope`.
    fn parse(text: &str, scope: &Scope<'_>) -> Result<Self, String> {
        let (method, path) = match text.split_once(' ') {
            Some(("POST", path)) => (Method::Post, path),
            Some(("PUT", path)) => (Method::Put, path),
            Some(("PATCH", path)) => (Method::Patch, path),
            Some(("DELETE", path)) => (Method::Delete, path),
            Some((other, _)) => {
                return Err(format!(
                    "'{other}' is not a method (POST, PUT, PATCH or DELETE)"
                ));
            }
            None => (Method::Post, text),
        };
        if !path.starts_with('/') {
            return Err("must be a path starting with '/', after a method if any".into());
        }
        let mut template = Vec::new();
        let mut rest = path;
        while let Some(open) = rest.find('{') {
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| format!("'{}' has a '{{' without its '}}'", &rest[open..]))?;
            if open > 0 {
                template.push(PathPart::Text(rest[..open].to_owned()));
            }
            let name = &rest[open + 1..open + close];
            template.push(PathPart::Value(FieldSource::parse(name, scope)?));
            rest = &rest[open + close + 1..];
        }
        if rest.contains('}') {
            return Err(format!("'{rest}' has a '}}' without its '{{'"));
        }
        if !rest.is_empty() {
            template.push(PathPart::Text(rest.to_owned()));
        }
        Ok(Self {
            method,
            path: path.to_owned(),
            template,
        })
    }
}

impl std::fmt::Display for Endpoint {
    /// As a workflow file writes it: the path alone for a POST.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.method {
            Method::Post => f.write_str(&self.path),
            method => write!(f, "{} {}", method.as_str(), self.path),
        }
    }
}

/// Where a field a step sends comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldSource {
    /// A field of the task's input: `input.<field>`.
    Input(String),
    /// A value in a step's result (an earlier step's, or the step's own, which its
    /// compensation has): `results.<step>.<field>[.<field>...]`.
    Result {
        /// The step.
        step: String,
        /// The fields to follow in its result.
        path: Vec<String>,
    },
}

/// The outputs of a task's steps that have one, by step name, borrowed from the task.
pub type Results<'a> = std::collections::BTreeMap<&'a str, &'a Value>;

/// What a step's values may name: the workflow's input fields, and the results of the
/// step itself and of the steps before it.
struct Scope<'a> {
    step: &'a str,
    input: &'a BTreeMap<String, FieldType>,
    earlier: &'a HashSet<String>,
}

impl FieldSource {
    /// The source `text` names, for the step of `scope`.
    fn parse(text: &str, scope: &Scope<'_>) -> Result<Self, String> {
        let Scope {
            step,
            input,
            earlier,
        } = scope;
        let parts: Vec<&str> = text.split('.').collect();
        match parts.as_slice() {
            ["input", field] if input.contains_key(*field) => Ok(Self::Input((*field).to_owned())),
            ["input", field] => Err(format!(
                "'{text}': the input has no field '{field}' (it declares: {})",
                input.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
            ["results", source, path @ ..] if !path.is_empty() && !path.contains(&"") => {
                if *source == *step || earlier.contains(*source) {
                    Ok(Self::Result {
                        step: (*source).to_owned(),
                        path: path.iter().map(|p| (*p).to_owned()).collect(),
                    })
                } else {
                    Err(format!(
                        "'{text}': '{source}' is not this step or a step before it"
                    ))
                }
            }
            _ => Err(format!(
                "'{text}': must be input.<field> or results.<step>.<field>"
            )),
        }
    }

    /// The value it names, given the task's input and the steps' results; null when
    /// a result has no such value.
    #[must_use]
    pub fn value(&self, input: &Value, results: &Results<'_>) -> Value {
        match self {
            Self::Input(field) => input.get(field).cloned().unwrap_or(Value::Null),
            Self::Result { step, path } => path
                .iter()
                .try_fold(results.get(step.as_str()).copied(), |value, field| {
                    Some(value?.get(field))
                })
                .flatten()
                .cloned()
                .unwrap_or(Value::Null),
        }
    }
}

impl std::fmt::Display for FieldSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Input(field) => write!(f, "input.{field}"),
            Self::Result { step, path } => write!(f, "results.{step}.{}", path.join(".")),
        }
    }
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
    /// The steps, in order.
    pub steps: Vec<StepDefinition>,
    /// The definition's canonical JSON text, as stored.
    pub source: String,
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
    /// Checks that `input` is an object with every declared field, of its type.
    ///
    /// # Errors
    /// The first field that is missing or mistyped.
    pub fn validate_input(&self, input: &Value) -> Result<(), InputError> {
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

    /// A digest of the definition's content, stored beside it, to catch a change
    /// without a version bump. Computed when asked: most start-ups never store one.
    #[must_use]
    pub fn digest(&self) -> String {
        sha256_hex(&self.source)
    }

    /// Parses and validates a definition; `file` names it in errors.
    ///
    /// # Errors
    /// A [`DefinitionError`] naming the file, step and field at fault.
    pub fn parse(file: &str, text: &str) -> Result<Self, DefinitionError> {
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
        document
            .resolve(value.to_string())
            .map_err(|(step, field, message)| error(step, &field, message))
    }
}

/// The SHA-256 of `text`, in hex.
pub(crate) fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Splits a serde path into the step it is in (by name) and the field within.
fn locate(value: &Value, path: &serde_path_to_error::Path) -> (Option<String>, String) {
    use serde_path_to_error::Segment;
    let segments: Vec<&Segment> = path.iter().collect();
    if let [Segment::Map { key }, Segment::Seq { index }, rest @ ..] = segments.as_slice()
        && key == "steps"
    {
        let name = value["steps"][*index]["name"]
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

type Fault = (Option<String>, String, String);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkflowFile {
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StepFile {
    name: String,
    agent: String,
    call: String,
    compensation: Option<String>,
    #[serde(default)]
    read_only: bool,
    #[serde(default, with = "optional_duration_text")]
    complete_by: Option<Duration>,
    retry: Option<RetryPolicy>,
    supervisor: Option<Supervision>,
    fields: Option<BTreeMap<String, String>>,
}

impl WorkflowFile {
    fn resolve(self, source: String) -> Result<Workflow, Fault> {
        let top = |field: &str, message: &str| (None, field.to_owned(), message.to_owned());
        if self.name.is_empty()
            || !self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(top("name", "must be non-empty letters, digits and '-'"));
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
        let mut names = HashSet::new();
        let mut steps = Vec::with_capacity(self.steps.len());
        for step in self.steps {
            let at = |field: &str, message: &str| {
                (
                    Some(step.name.clone()),
                    field.to_owned(),
                    message.to_owned(),
                )
            };
            if step.name.is_empty() {
                return Err(at("name", "must not be empty"));
            }
            if names.contains(&step.name) {
                return Err(at("name", "is used by an earlier step"));
            }
            let scope = Scope {
                step: &step.name,
                input: &self.input,
                earlier: &names,
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
            if step.agent.is_empty() {
                return Err(at("agent", "must not be empty"));
            }
            let call =
                Endpoint::parse(&step.call, &scope).map_err(|message| at("call", &message))?;
            if let Some(own) = call.template.iter().find_map(|part| match part {
                PathPart::Value(source @ FieldSource::Result { step: of, .. })
                    if *of == step.name =>
                {
                    Some(source)
                }
                _ => None,
            }) {
                return Err(at(
                    "call",
                    &format!(
                        "{{{own}}}: a call has no result of its own yet (its compensation has)"
                    ),
                ));
            }
            let compensation = step
                .compensation
                .as_deref()
                .map(|text| Endpoint::parse(text, &scope))
                .transpose()
                .map_err(|message| at("compensation", &message))?;
            if step.read_only && compensation.is_some() {
                return Err(at(
                    "compensation",
                    "a read-only step changes nothing, so has nothing to undo",
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
                    return Err(at(field, "must be at most 15m (the longest SQS delay)"));
                }
            }
            names.insert(step.name.clone());
            steps.push(StepDefinition {
                name: step.name,
                agent: step.agent,
                call,
                compensation,
                read_only: step.read_only,
                complete_by,
                retry,
                supervision,
                fields,
            });
        }
        Ok(Workflow {
            name: self.name,
            version: self.version,
            description: self.description,
            input: self.input,
            pickup_timeout: self.pickup_timeout,
            steps,
            source,
        })
    }
}

fn default_attempts() -> u32 {
    3
}
fn default_initial_backoff() -> Duration {
    Duration::from_millis(100)
}
fn default_max_backoff() -> Duration {
    Duration::from_secs(2)
}
fn default_true() -> bool {
    true
}
fn default_threshold() -> u32 {
    3
}
fn default_extended_wait() -> Duration {
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
mod duration_text {
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

mod optional_duration_text {
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

/// Why a workflow could not be found or registered.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A definition file is invalid.
    #[error(transparent)]
    Definition(#[from] DefinitionError),
    /// A definition directory could not be read.
    #[error("cannot read workflow definitions in {path}: {source}")]
    Io {
        /// The directory or file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Two definitions claim the same name and version with different content.
    #[error(
        "workflow '{name}' version {version} is defined twice with different content; bump the version"
    )]
    Changed {
        /// The workflow's name.
        name: String,
        /// The version defined twice.
        version: u32,
    },
}

/// The known workflows, every version; the newest version of a name is the one
/// new tasks start with.
#[derive(Debug, Default)]
pub struct Registry {
    versions: RwLock<HashMap<(String, u32), Arc<Workflow>>>,
    latest: RwLock<HashMap<String, Arc<Workflow>>>,
}

impl Registry {
    /// The built-in workflows.
    ///
    /// # Panics
    /// Never: the built-in definitions are checked by this crate's tests.
    #[must_use]
    pub fn built_in() -> Self {
        Self::with_files(Vec::new()).expect("the built-in workflows are valid")
    }

    /// The built-in workflows, plus definitions read from files, as (file name, text)
    /// pairs: reading them is the caller's (the edges': the local process, a Lambda
    /// function at its start).
    ///
    /// # Errors
    /// The first invalid definition, or one that changes a known version.
    pub fn with_files(
        files: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, RegistryError> {
        let registry = Self::default();
        for (file, text) in BUILT_IN {
            registry.add(Workflow::parse(file, text)?)?;
        }
        for (file, text) in files {
            registry.add(Workflow::parse(&file, &text)?)?;
        }
        Ok(registry)
    }

    /// Adds a definition; the same name and version again must have the same content.
    ///
    /// # Errors
    /// [`RegistryError::Changed`] when it differs from a known definition of that version.
    pub fn add(&self, workflow: Workflow) -> Result<Arc<Workflow>, RegistryError> {
        let key = (workflow.name.clone(), workflow.version);
        let mut versions = self
            .versions
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(known) = versions.get(&key) {
            if known.source != workflow.source {
                return Err(RegistryError::Changed {
                    name: key.0,
                    version: key.1,
                });
            }
            return Ok(Arc::clone(known));
        }
        let workflow = Arc::new(workflow);
        versions.insert(key, Arc::clone(&workflow));
        let mut latest = self
            .latest
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let newer = latest
            .get(&workflow.name)
            .is_none_or(|w| w.version < workflow.version);
        if newer {
            latest.insert(workflow.name.clone(), Arc::clone(&workflow));
        }
        Ok(workflow)
    }

    /// The version new tasks of `name` start with.
    #[must_use]
    pub fn latest(&self, name: &str) -> Option<Arc<Workflow>> {
        self.latest
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// A given version, if this registry has it.
    #[must_use]
    pub fn version(&self, name: &str, version: u32) -> Option<Arc<Workflow>> {
        self.versions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(name.to_owned(), version))
            .cloned()
    }

    /// Every known definition.
    #[must_use]
    pub fn all(&self) -> Vec<Arc<Workflow>> {
        self.versions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_workflows_load() {
        let registry = Registry::built_in();
        let drone = registry.latest("drone-delivery").expect("drone delivery");
        let names: Vec<_> = drone.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "check-account",
                "create-package",
                "check-transport",
                "schedule-drone",
                "create-delivery"
            ]
        );
        assert!(drone.steps[3].compensation.is_some());
        assert!(drone.steps[1].compensation.is_some());
        assert_eq!(
            registry
                .latest("order-processing")
                .expect("order")
                .steps
                .len(),
            1
        );
    }

    fn parse_error(text: &str) -> String {
        Workflow::parse("wf.json", text)
            .expect_err("invalid")
            .to_string()
    }

    /// A workflow with input `order_id` and steps `a`, then `b` with `fields`.
    fn mapped(fields: &str) -> String {
        format!(
            r#"{{"name":"w","version":1,"input":{{"order_id":"string"}},"steps":[
                {{"name":"a","agent":"x","call":"/a"}},
                {{"name":"b","agent":"y","call":"/b","compensation":"/b/undo","fields":{fields}}}]}}"#
        )
    }

    #[test]
    fn a_steps_fields_name_the_input_or_a_result_of_this_step_or_one_before() {
        let workflow = Workflow::parse(
            "wf.json",
            &mapped(
                r#"{"order":"input.order_id","drone":"results.a.drone.id","mine":"results.b.id"}"#,
            ),
        )
        .expect("valid");
        let fields = workflow.steps[1].fields.as_ref().expect("fields");
        assert_eq!(fields["order"], FieldSource::Input("order_id".into()));
        assert_eq!(fields["drone"].to_string(), "results.a.drone.id");
        let a = serde_json::json!({"drone": {"id": 7}});
        let results = Results::from([("a", &a)]);
        let input = serde_json::json!({"order_id": "o-1", "secret": "s"});
        assert_eq!(fields["order"].value(&input, &results), "o-1");
        assert_eq!(fields["drone"].value(&input, &results), 7);
        assert_eq!(
            fields["mine"].value(&input, &results),
            Value::Null,
            "a result not there yet is null"
        );
        assert_eq!(
            workflow.steps[0].fields, None,
            "no mapping: everything is sent"
        );

        for (fields, expected) in [
            (
                r#"{"x":"input.customer"}"#,
                "wf.json: step 'b': fields.x: 'input.customer': the input has no field 'customer' (it declares: order_id)",
            ),
            (
                r#"{"x":"results.c.id"}"#,
                "wf.json: step 'b': fields.x: 'results.c.id': 'c' is not this step or a step before it",
            ),
            (
                r#"{"x":"results.a"}"#,
                "wf.json: step 'b': fields.x: 'results.a': must be input.<field> or results.<step>.<field>",
            ),
            (
                r#"{"x":"order_id"}"#,
                "wf.json: step 'b': fields.x: 'order_id': must be input.<field> or results.<step>.<field>",
            ),
        ] {
            assert_eq!(parse_error(&mapped(fields)), expected);
        }
    }

    #[test]
    fn a_path_names_values_of_the_input_and_results_filled_and_encoded_when_sent() {
        let text = mapped(r#"{}"#).replace(
            r#""compensation":"/b/undo""#,
            r#""compensation":"DELETE /drones/{results.b.id}/for/{input.order_id}""#,
        );
        let workflow = Workflow::parse("wf.json", &text).expect("valid");
        let undo = workflow.steps[1]
            .compensation
            .as_ref()
            .expect("compensation");
        let b = serde_json::json!({"id": "d 7/x"});
        let results = Results::from([("b", &b)]);
        let input = serde_json::json!({"order_id": 42});
        assert_eq!(
            undo.fill(&input, &results).as_deref(),
            Ok("/drones/d%207%2Fx/for/42"),
            "each value a path segment"
        );
        let none = Results::new();
        assert_eq!(
            undo.fill(&input, &none),
            Err("path: {results.b.id} has no value".to_owned())
        );
        for value in ["", ".", ".."] {
            let b = serde_json::json!({"id": value});
            assert_eq!(
                undo.fill(&input, &Results::from([("b", &b)])),
                Err(format!(
                    "path: {{results.b.id}} is '{value}', which names no single resource"
                )),
                "no request leaves its path"
            );
        }
        let b = serde_json::json!({"id": "%2e%2e"});
        assert_eq!(
            undo.fill(&input, &Results::from([("b", &b)])).as_deref(),
            Ok("/drones/%252e%252e/for/42"),
            "an encoded dot is text, encoded again"
        );

        for (call, expected) in [
            (
                "/a/{results.b.id}",
                "call: {results.b.id}: a call has no result of its own yet (its compensation has)",
            ),
            (
                "/a/{input.nope}",
                "call: 'input.nope': the input has no field 'nope' (it declares: order_id)",
            ),
            (
                "/a/{input.order_id",
                "call: '{input.order_id' has a '{' without its '}'",
            ),
            ("/a/x}", "call: '/a/x}' has a '}' without its '{'"),
        ] {
            let text = mapped(r#"{}"#).replace(r#""call":"/b""#, &format!(r#""call":"{call}""#));
            assert_eq!(parse_error(&text), format!("wf.json: step 'b': {expected}"));
        }
    }

    #[test]
    fn an_operation_is_a_post_unless_a_method_is_named() {
        let text = r#"{"name":"w","version":1,"steps":[
            {"name":"a","agent":"x","call":"PUT /packages","compensation":"DELETE /packages/1"},
            {"name":"b","agent":"y","call":"/b"}]}"#;
        let workflow = Workflow::parse("wf.json", text).expect("valid");
        let a = &workflow.steps[0];
        assert_eq!(
            (a.call.method, a.call.path.as_str()),
            (Method::Put, "/packages")
        );
        let undo = a.compensation.as_ref().expect("compensation");
        assert_eq!(
            (undo.method, undo.to_string().as_str()),
            (Method::Delete, "DELETE /packages/1")
        );
        assert_eq!(workflow.steps[1].call.method, Method::Post);
        assert_eq!(
            workflow.steps[1].call.to_string(),
            "/b",
            "written as the file has it"
        );
        let text = r#"{"name":"w","version":1,"steps":[{"name":"a","agent":"x","call":"GET /a"}]}"#;
        assert_eq!(
            parse_error(text),
            "wf.json: step 'a': call: 'GET' is not a method (POST, PUT, PATCH or DELETE)"
        );
        let text = r#"{"name":"w","version":1,"steps":[{"name":"a","agent":"x","call":"PUT a"}]}"#;
        assert_eq!(
            parse_error(text),
            "wf.json: step 'a': call: must be a path starting with '/', after a method if any"
        );
    }

    #[test]
    fn errors_name_the_file_the_step_and_the_field() {
        let step = r#"{"name":"a","agent":"x","call":"/a","retry":{"attempts":0}}"#;
        let text = format!(r#"{{"name":"w","version":1,"steps":[{step}]}}"#);
        assert_eq!(
            parse_error(&text),
            "wf.json: step 'a': retry.attempts: must be at least 1"
        );

        let text = r#"{"name":"w","version":1,"steps":[{"name":"b","agent":"x","call":"/a","complete_by":"soon"}]}"#;
        let message = parse_error(text);
        assert!(
            message.starts_with("wf.json: step 'b': complete_by: 'soon' is not a duration"),
            "{message}"
        );

        let text =
            r#"{"name":"w","version":1,"steps":[{"name":"c","agent":"x","call":"/a","colour":1}]}"#;
        assert!(
            parse_error(text).contains("step 'c'"),
            "{}",
            parse_error(text)
        );

        let text = r#"{"name":"w","steps":[]}"#;
        assert!(
            parse_error(text).contains("missing field `version`"),
            "{}",
            parse_error(text)
        );

        let text = r#"{"name":"w","version":1,"steps":[{"name":"d","agent":"x","call":"/a"},{"name":"d","agent":"y","call":"/b"}]}"#;
        assert_eq!(
            parse_error(text),
            "wf.json: step 'd': name: is used by an earlier step"
        );

        assert!(parse_error("{").starts_with("wf.json: (document): EOF"));
    }

    #[test]
    fn a_version_cannot_change_without_a_bump() {
        let registry = Registry::default();
        let v1 = r#"{"name":"w","version":1,"steps":[{"name":"a","agent":"x","call":"/a"}]}"#;
        let v1_changed =
            r#"{"name":"w","version":1,"steps":[{"name":"a","agent":"x","call":"/b"}]}"#;
        let v2 = r#"{"name":"w","version":2,"steps":[{"name":"a","agent":"x","call":"/b"}]}"#;
        registry
            .add(Workflow::parse("1", v1).expect("valid"))
            .expect("new");
        registry
            .add(Workflow::parse("1", v1).expect("valid"))
            .expect("same content");
        assert!(matches!(
            registry.add(Workflow::parse("1b", v1_changed).expect("valid")),
            Err(RegistryError::Changed { .. })
        ));
        registry
            .add(Workflow::parse("2", v2).expect("valid"))
            .expect("bumped");
        assert_eq!(registry.latest("w").expect("w").version, 2);
        assert_eq!(
            registry.version("w", 1).expect("kept").steps[0].call.path,
            "/a"
        );
    }

    #[test]
    fn input_fields_are_checked_by_name_and_type() {
        let registry = Registry::built_in();
        let drone = registry.latest("drone-delivery").expect("drone");
        let error = drone
            .validate_input(&serde_json::json!({}))
            .expect_err("missing");
        assert_eq!(error.field, "input.customer_id");
        let error = drone
            .validate_input(&serde_json::json!({"customer_id": 7, "pickup": "a", "dropoff": "b", "weight_kg": 1}))
            .expect_err("mistyped");
        assert_eq!(
            error.to_string(),
            "input.customer_id: must be of type \"string\""
        );
    }
}
