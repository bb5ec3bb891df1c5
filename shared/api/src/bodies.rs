//! The request bodies, and how a body is read: JSON, within its size, each field
//! of its type.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use sas_domain::ids::{QueueName, TaskId};
use sas_domain::task::TaskState;

use crate::error::{ApiError, ErrorCode};
use crate::{MAX_BATCH, MAX_BODY_BYTES};

/// A submission.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitBody {
    /// The workflow to run, by name (its latest version).
    pub(crate) workflow: String,
    /// The input, as the workflow defines it.
    pub(crate) input: Value,
    /// A queue of the caller's for the task's status changes.
    #[serde(default)]
    pub(crate) notify: Option<QueueName>,
    /// The task's id: for `POST /tasks`, instead of a generated one; for `PUT`,
    /// the id in the path again.
    #[serde(default)]
    pub(crate) id: Option<TaskId>,
    /// When the task may start (RFC 3339, `2026-12-01T09:00:00Z`): it is Pending
    /// until then, holding nothing.
    #[serde(default)]
    pub(crate) start_at: Option<String>,
    /// Where its calls wait for a limited service, which goes first: 1 (first) to 5;
    /// 3 when not given.
    #[serde(default)]
    pub(crate) priority: Option<u8>,
}

/// Up to [`MAX_BATCH`] submissions in one request.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchBody {
    /// The submissions, each the body of a `POST /tasks` (with its `id`, or one
    /// generated).
    #[schemars(with = "Vec<SubmitBody>", length(min = 1, max = MAX_BATCH))]
    pub(crate) tasks: Vec<Value>,
}

/// A resubmission: an empty body, or a new input.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResubmitBody {
    /// The input the new run takes, checked against the task's workflow version;
    /// the one it replaces is kept.
    #[serde(default)]
    pub(crate) input: Option<Value>,
}

/// A repair: patches of the task's input and of its steps' outputs, each a JSON Merge
/// Patch (an object) or a JSON Patch (an array of operations), and the step to run
/// again from, each if any: without them, a task in Error goes on from its failed
/// step.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RepairBody {
    /// What the repair says.
    #[serde(flatten)]
    pub(crate) patches: Patches,
    /// Answer what would be done, step by step, and do nothing.
    #[serde(default)]
    pub(crate) dry_run: bool,
}

impl BulkBody {
    /// The first field given of a repair (unless `repair`, a bulk repair's body) or of
    /// a move (unless `moving`), if any.
    pub(crate) fn foreign_field(&self, repair: bool, moving: bool) -> Option<&'static str> {
        let moves = [
            ("to_version", self.to_version.is_some()),
            ("renamed", !self.renamed.is_empty()),
        ];
        let repairs = self.repair.given().map(|field| (field, true));
        (repairs.filter(|_| !repair).into_iter())
            .chain(moves.into_iter().filter(|_| !moving))
            .find_map(|(field, given)| given.then_some(field))
    }
}

impl Patches {
    /// The first field given, if any.
    pub(crate) fn given(&self) -> Option<&'static str> {
        [
            ("input", self.input.is_some()),
            ("outputs", !self.outputs.is_empty()),
            ("from", self.from.is_some()),
            ("reason", self.reason.is_some()),
        ]
        .into_iter()
        .find_map(|(field, given)| given.then_some(field))
    }
}

/// A cancellation, a pause or a resumption: an empty body (or `{}`).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmptyBody {}

/// A callback, ending a step's wait: its result, or a refusal.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallbackBody {
    /// The step's result (a JSON object): it is Processed.
    #[serde(default)]
    pub(crate) output: Option<serde_json::Map<String, Value>>,
    /// A refusal: the step fails, and the task is undone as for any step's error.
    #[serde(default)]
    pub(crate) error: Option<String>,
}

/// A bulk action's call: which tasks, and which page of them.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkBody {
    /// Names the action: called again with the same batch (after an interruption,
    /// from any page or from the start), it takes no task twice. Letters, digits,
    /// '-', '_' and '.', up to 64.
    pub(crate) batch: String,
    /// The tasks' state: Error to resubmit (the default); Pending, Processing or
    /// Compensating to cancel (Processing by default).
    #[serde(default)]
    pub(crate) state: Option<TaskState>,
    /// Only the tasks of this workflow.
    #[serde(default)]
    pub(crate) workflow: Option<String>,
    /// Only the tasks submitted at or after this (RFC 3339).
    #[serde(default)]
    pub(crate) created_after: Option<String>,
    /// Only the tasks submitted before this (RFC 3339).
    #[serde(default)]
    pub(crate) created_before: Option<String>,
    /// Only the tasks whose error has this text.
    #[serde(default)]
    pub(crate) error_contains: Option<String>,
    /// Where to go on from: the `next` of the call before.
    #[serde(default)]
    pub(crate) after: Option<String>,
    /// How many tasks this call lists, 1 to 100 (default 100).
    #[serde(default)]
    pub(crate) limit: Option<usize>,
    /// How many tasks it takes a second, 1 to 1000 (default 10), so as not to flood
    /// the remote services; one call lasts at most 15 s of pauses.
    #[serde(default)]
    pub(crate) per_second: Option<u32>,
    /// Only the tasks of this version of their workflow.
    #[serde(default)]
    pub(crate) version: Option<u32>,
    /// Only the tasks stopped at this step: failed there, or at work there.
    #[serde(default)]
    pub(crate) step: Option<String>,
    /// Only the tasks of this owner (the principal that submitted them).
    #[serde(default)]
    pub(crate) owner: Option<String>,
    /// Only the tasks whose search attributes have these values, by name
    /// (`{"customer": "c-1"}`; a number or a boolean matches its text).
    #[serde(default)]
    pub(crate) attributes: BTreeMap<String, Value>,
    /// A bulk repair's: what each task's repair says, as [`RepairBody`] has it.
    #[serde(flatten)]
    pub(crate) repair: Patches,
    /// A bulk move's: the version each task moves to.
    #[serde(default)]
    pub(crate) to_version: Option<u32>,
    /// A bulk move's: the steps the new version names otherwise, as [`MoveBody`]
    /// has them.
    #[serde(default)]
    pub(crate) renamed: BTreeMap<String, String>,
}

/// A move onto another version of the task's workflow.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveBody {
    /// The version to move to.
    pub(crate) version: u32,
    /// The steps of the task's version that the new one names otherwise: old name to
    /// new. A step not named keeps its name.
    #[serde(default)]
    pub(crate) renamed: BTreeMap<String, String>,
    /// Answer what would become of each step, and move nothing.
    #[serde(default)]
    pub(crate) dry_run: bool,
}

/// What a repair says of a task, beside the task: patches of its input and of its
/// steps' outputs (each a JSON Merge Patch, an object, or a JSON Patch, an array of
/// operations), the step to run again from, and why; each if any.
#[derive(Deserialize, JsonSchema, Default)]
pub struct Patches {
    /// A patch of the input, checked against the task's workflow version once applied.
    #[serde(default)]
    pub(crate) input: Option<Value>,
    /// Patches of steps' outputs, by step name. A step not finished is given the
    /// output, and taken as done.
    #[serde(default)]
    pub(crate) outputs: BTreeMap<String, Value>,
    /// A step to run again, with every step after it; of a state machine's
    /// execution, a state it entered, run again with the input it entered it with
    /// (which `input` then patches).
    #[serde(default)]
    pub(crate) from: Option<String>,
    /// Why, kept in the task's history and told with its notifications.
    #[serde(default)]
    pub(crate) reason: Option<String>,
}

/// A JSON object body of type `T`; an empty body is `{}` when `empty_ok`.
pub(crate) fn parse_json<T: DeserializeOwned>(body: &[u8], empty_ok: bool) -> Result<T, ApiError> {
    let body = if empty_ok && body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    typed(json_object(body, MAX_BODY_BYTES)?)
}

/// The body as a JSON object, if it is one of at most `limit` bytes.
pub(crate) fn json_object(body: &[u8], limit: usize) -> Result<Value, ApiError> {
    if body.len() > limit {
        return Err(ApiError::new(
            ErrorCode::BodyTooLarge,
            format!("the body is {} bytes; the limit is {limit}", body.len()),
        ));
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidJson,
            format!("the body is not valid JSON: {e}"),
        )
    })?;
    if !value.is_object() {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            "the body must be a JSON object",
        ));
    }
    Ok(value)
}

/// A JSON value as `T`, or an error naming the field that does not fit.
pub(crate) fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(&value).map_err(|e| {
        let message = e.inner().to_string();
        let path = e.path().to_string();
        let field = if path == "." {
            message.split('`').nth(1).unwrap_or("body").to_owned()
        } else {
            path
        };
        ApiError::new(ErrorCode::InvalidField, format!("{field}: {message}")).on(&field)
    })
}

/// A redrive: the messages to send back.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveBody {
    /// The messages, by their ids in the dead-letter queue; when absent, up to `max`.
    #[serde(default)]
    pub(crate) ids: Option<Vec<String>>,
    /// The most to send back, 1 to 100: by default every one named, or 10 when none is.
    #[serde(default)]
    pub(crate) max: Option<usize>,
}
