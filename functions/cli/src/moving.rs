//! `sas tasks move` and `sas move-all`: tasks moved onto another version of their
//! workflow; with `--dry-run`, what would become of each step.

use anyhow::Context;
use clap::Args;
use serde_json::{Map, Value, json};

use crate::client::Api;
use crate::{id, print, render};

/// Where a move takes tasks.
#[derive(Args)]
pub(crate) struct Target {
    /// The version to move to.
    #[arg(long, value_name = "VERSION")]
    to_version: u32,
    /// A step the new version names otherwise, as OLD=NEW; again for another.
    #[arg(long = "rename", value_name = "OLD=NEW")]
    renamed: Vec<String>,
}

impl Target {
    /// The fields of a move's body (a task's, or a bulk move's), the version under
    /// `version_field`.
    pub(crate) fn fields(&self, version_field: &str) -> anyhow::Result<Map<String, Value>> {
        let mut renamed = Map::new();
        for pair in &self.renamed {
            let (old, new) = pair
                .split_once('=')
                .with_context(|| format!("--rename {pair}: must be OLD=NEW"))?;
            renamed.insert(old.to_owned(), json!(new));
        }
        let mut fields = Map::new();
        fields.insert(version_field.into(), json!(self.to_version));
        fields.insert("renamed".into(), Value::Object(renamed));
        Ok(fields)
    }
}

/// A task to move, and where.
#[derive(Args)]
pub(crate) struct Move {
    id: String,
    #[command(flatten)]
    target: Target,
    /// Show what would become of each step, and move nothing.
    #[arg(long)]
    dry_run: bool,
}

impl Move {
    /// Asks the API for the move (or its dry run), and prints what it did.
    pub(crate) async fn run(self, api: &Api, json: bool) -> anyhow::Result<()> {
        let mut body = self.target.fields("version")?;
        body.insert("dry_run".into(), json!(self.dry_run));
        let path = format!("/operator/tasks/{}/move", id(&self.id));
        let answer = api.call("POST", &path, Some(&Value::Object(body))).await?;
        if self.dry_run {
            print(json, &answer, |a| plan(&self.id, &a["plan"]));
        } else {
            print(json, &answer, |task| {
                format!(
                    "{} moved to {} v{}: {}",
                    render::text(&task["id"]),
                    render::text(&task["workflow"]["name"]),
                    task["workflow"]["version"],
                    render::text(&task["state"])
                )
            });
        }
        Ok(())
    }
}

/// A dry run's answer: each step, and what it becomes.
fn plan(task: &str, plan: &Value) -> String {
    let mut lines = vec![format!(
        "{task}: version {} to {}",
        plan["from_version"], plan["to_version"]
    )];
    for step in plan["moved"].as_array().into_iter().flatten() {
        let (from, to) = (render::text(&step["from"]), render::text(&step["to"]));
        let becomes = if from == to {
            String::new()
        } else {
            format!(" -> {to}")
        };
        lines.push(format!(
            "  {from}{becomes}  {}",
            render::text(&step["state"])
        ));
    }
    for (field, what) in [("new", "new"), ("dropped", "dropped")] {
        for step in plan[field].as_array().into_iter().flatten() {
            lines.push(format!("  {}  {what}", render::text(step)));
        }
    }
    lines.join("\n")
}
