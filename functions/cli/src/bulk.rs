//! The bulk actions (`sas redrive`, `cancel-all`, `pause-all`, `resume-all`,
//! `repair-all`): a filter, and the action taken page after page under a batch, with a
//! progress line and the totals.

use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Map, Value, json};

use crate::client::Api;
use crate::{past_tense, print, render};

/// Which tasks a bulk action takes, its batch and its pace.
#[derive(Args)]
pub(crate) struct Bulk {
    /// Names the action: the same batch again takes no task twice.
    #[arg(long)]
    batch: Option<String>,
    /// Only this workflow's tasks.
    #[arg(long)]
    workflow: Option<String>,
    /// Only the tasks of this version of their workflow.
    #[arg(long)]
    workflow_version: Option<u32>,
    /// Only the tasks whose error has this text.
    #[arg(long)]
    error_contains: Option<String>,
    /// Only the tasks stopped at this step: failed there, or at work there.
    #[arg(long)]
    step: Option<String>,
    /// Only the tasks of this owner (the principal that submitted them).
    #[arg(long)]
    owner: Option<String>,
    /// Only the tasks whose search attribute NAME has VALUE; again for another.
    #[arg(long = "where", value_name = "NAME=VALUE")]
    attributes: Vec<String>,
    /// Only the tasks submitted at or after this (RFC 3339).
    #[arg(long)]
    created_after: Option<String>,
    /// Only the tasks submitted before this (RFC 3339).
    #[arg(long)]
    created_before: Option<String>,
    /// Which tasks: for cancel-all, Pending, Processing or Compensating; for
    /// pause-all and resume-all, Pending or Processing; for repair-all, Error or
    /// Processed.
    #[arg(long)]
    state: Option<String>,
    /// Tasks a second, so as not to flood the remote services.
    #[arg(long, default_value_t = 10)]
    per_second: u32,
}

/// A bulk action (`action`, with `fields` beside the filter's in its body), page after
/// page, with a progress line; its totals.
pub(crate) async fn run(
    api: &Api,
    action: &str,
    bulk: Bulk,
    fields: Map<String, Value>,
    json: bool,
) -> anyhow::Result<()> {
    let batch = bulk.batch.unwrap_or_else(|| {
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        format!(
            "cli-{}",
            now.replace([':', 'T', 'Z'], "-").trim_end_matches('-')
        )
    });
    let mut body = json!({ "batch": batch, "per_second": bulk.per_second });
    if let Some(version) = bulk.workflow_version {
        body["version"] = json!(version);
    }
    for (field, value) in fields {
        body[field] = value;
    }
    for condition in &bulk.attributes {
        let (name, value) = crate::find::attribute_condition(condition)?;
        body["attributes"][name] = json!(value);
    }
    for (field, value) in [
        ("workflow", bulk.workflow),
        ("error_contains", bulk.error_contains),
        ("step", bulk.step),
        ("owner", bulk.owner),
        ("created_after", bulk.created_after),
        ("created_before", bulk.created_before),
        ("state", bulk.state),
    ] {
        if let Some(value) = value {
            body[field] = json!(value);
        }
    }
    let done = past_tense(action);
    if !json {
        println!("batch {batch}: run again with --batch {batch} to go on after an interruption");
    }
    let progress = ProgressBar::new_spinner().with_style(
        ProgressStyle::with_template("{spinner} {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    progress.enable_steady_tick(Duration::from_millis(120));
    let mut totals = json!({ "batch": batch, "examined": 0, "matched": 0, "taken": 0, "skipped": 0, "refused": 0, "failed": 0 });
    loop {
        let page = api
            .call("POST", &format!("/operator/bulk/{action}"), Some(&body))
            .await?;
        if totals["refusal"].is_null() && !page["refusal"].is_null() {
            totals["refusal"] = page["refusal"].clone();
        }
        for key in [
            "examined", "matched", "taken", "skipped", "refused", "failed",
        ] {
            totals[key] =
                json!(totals[key].as_u64().unwrap_or(0) + page[key].as_u64().unwrap_or(0));
        }
        progress.set_message(format!(
            "{} examined, {} {done}, {} skipped, {} failed",
            totals["examined"], totals["taken"], totals["skipped"], totals["failed"]
        ));
        if page["next"].is_null() {
            break;
        }
        body["after"] = page["next"].clone();
    }
    progress.finish_and_clear();
    print(json, &totals, |t| {
        format!(
            "batch {}: {} examined, {} matched, {} {}, {} skipped (taken already, or moved on), {} failed{}",
            render::text(&t["batch"]),
            t["examined"],
            t["matched"],
            t["taken"],
            done,
            t["skipped"],
            t["failed"],
            match t["refusal"].as_str() {
                Some(why) => format!("\n{} refused; the first because {why}", t["refused"]),
                None => String::new(),
            }
        )
    });
    Ok(())
}
