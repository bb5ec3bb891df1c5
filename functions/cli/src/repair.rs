//! `sas tasks repair`: a task's input or its steps' outputs patched, or a step to run
//! it again from, and the task on in a new run; with `--dry-run`, what would be done.

use anyhow::Context;
use clap::Args;
use serde_json::{Map, Value, json};

use crate::client::Api;
use crate::{id, print, read_json, render};

/// What to repair in a task, and why.
#[derive(Args)]
pub(crate) struct Repair {
    id: String,
    #[command(flatten)]
    patches: Patches,
    /// Show what would be kept, undone and run again, and change nothing.
    #[arg(long)]
    dry_run: bool,
}

/// What a repair says of a task: patches, a step to run again from, why.
#[derive(Args)]
pub(crate) struct Patches {
    /// A patch of its input: a JSON Merge Patch (an object) or a JSON Patch (an
    /// array of operations), inline or from @FILE ('@-' for standard input).
    #[arg(long, value_name = "PATCH")]
    input: Option<String>,
    /// A patch of a step's recorded output, as STEP=PATCH; again for another step. A
    /// step not finished is given the output, and taken as done.
    #[arg(long = "output", value_name = "STEP=PATCH")]
    outputs: Vec<String>,
    /// Run the task again from this step, with every step after it.
    #[arg(long, value_name = "STEP")]
    from: Option<String>,
    /// Why: kept in the task's history, and told with its notifications.
    #[arg(long)]
    reason: Option<String>,
}

/// A patch given inline, or from `@FILE`.
fn patch(text: &str) -> anyhow::Result<Value> {
    match text.strip_prefix('@') {
        Some(path) => read_json(path),
        None => serde_json::from_str(text).with_context(|| format!("'{text}' is not JSON")),
    }
}

impl Patches {
    /// The fields of a repair's body (a task's, or a bulk repair's) they give.
    pub(crate) fn fields(&self) -> anyhow::Result<Map<String, Value>> {
        let mut outputs = Map::new();
        for output in &self.outputs {
            let (step, text) = output
                .split_once('=')
                .with_context(|| format!("--output {output}: must be STEP=PATCH"))?;
            outputs.insert(step.to_owned(), patch(text)?);
        }
        let mut fields = Map::new();
        if let Some(input) = &self.input {
            fields.insert("input".into(), patch(input)?);
        }
        if !outputs.is_empty() {
            fields.insert("outputs".into(), Value::Object(outputs));
        }
        for (field, text) in [("from", &self.from), ("reason", &self.reason)] {
            if let Some(text) = text {
                fields.insert(field.into(), json!(text));
            }
        }
        Ok(fields)
    }
}

impl Repair {
    fn body(&self) -> anyhow::Result<Value> {
        let mut body = self.patches.fields()?;
        body.insert("dry_run".into(), json!(self.dry_run));
        Ok(Value::Object(body))
    }

    /// Asks the API for the repair (or its dry run), and prints what it did.
    pub(crate) async fn run(self, api: &Api, json: bool) -> anyhow::Result<()> {
        let path = format!("/operator/tasks/{}/repair", id(&self.id));
        let answer = api.call("POST", &path, Some(&self.body()?)).await?;
        if self.dry_run {
            print(json, &answer, |a| plan(&self.id, &a["plan"]));
        } else {
            print(json, &answer, repaired);
        }
        Ok(())
    }
}

/// A dry run's answer: what becomes of each step.
fn plan(task: &str, plan: &Value) -> String {
    let mut lines = vec![format!("{task}: the repair would")];
    for (field, what) in [
        ("patched", "set the output of"),
        ("kept", "keep"),
        ("undone_first", "undo first"),
        ("run_again", "run again"),
        ("same_key", "call under the same key"),
    ] {
        let steps = steps(&plan[field]);
        if !steps.is_empty() {
            lines.push(format!("  {what:<24}{steps}"));
        }
    }
    lines.join("\n")
}

/// A repair's answer, the task: its new run, and what runs again.
fn repaired(task: &Value) -> String {
    let repair = &task["resubmissions"]
        .as_array()
        .and_then(|all| all.last())
        .map_or(Value::Null, |last| last["repair"].clone());
    format!(
        "{} repaired: run {}, {}; runs again: {}",
        render::text(&task["id"]),
        task["run"],
        render::text(&task["state"]),
        match steps(&repair["run_again"]) {
            none if none.is_empty() => "none".to_owned(),
            some => some,
        }
    )
}

/// Step names, comma-separated.
fn steps(names: &Value) -> String {
    let names = names.as_array().map(Vec::as_slice).unwrap_or_default();
    let names: Vec<String> = names.iter().map(render::text).collect();
    names.join(", ")
}
