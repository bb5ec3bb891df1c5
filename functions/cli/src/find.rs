//! `sas tasks find`: tasks found by their search attributes, workflow and version,
//! state, creation time and error text (`GET /operator/search`).

use anyhow::Context;
use clap::Args;
use serde_json::Value;

use crate::client::Api;
use crate::{id, print, render};

/// What to find: every condition given must hold.
#[derive(Args)]
pub(crate) struct Find {
    /// An attribute's value, as NAME=VALUE; again for another.
    #[arg(long = "where", value_name = "NAME=VALUE")]
    attributes: Vec<String>,
    /// The workflow.
    #[arg(long)]
    workflow: Option<String>,
    /// Its version.
    #[arg(long = "workflow-version")]
    version: Option<u32>,
    /// The state (Pending, Processing, Compensating, Processed or Error).
    #[arg(long)]
    state: Option<String>,
    /// Created at or after this instant (RFC 3339).
    #[arg(long)]
    from: Option<String>,
    /// Created before this instant (RFC 3339).
    #[arg(long)]
    to: Option<String>,
    /// Text the task's error holds, in any case.
    #[arg(long)]
    error: Option<String>,
    /// At most this many a page.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Every page, not only the first.
    #[arg(long)]
    all: bool,
}

impl Find {
    /// The search's query string, without its cursor.
    fn query(&self) -> anyhow::Result<String> {
        let mut pairs = Vec::new();
        for condition in &self.attributes {
            let (name, value) = attribute_condition(condition)?;
            pairs.push((format!("attribute.{name}"), value.to_owned()));
        }
        let named = [
            ("workflow", self.workflow.clone()),
            ("version", self.version.map(|v| v.to_string())),
            ("state", self.state.clone()),
            ("from", self.from.clone()),
            ("to", self.to.clone()),
            ("error", self.error.clone()),
        ];
        pairs.extend(
            named
                .into_iter()
                .filter_map(|(k, v)| Some((k.to_owned(), v?))),
        );
        pairs.push(("limit".to_owned(), self.limit.to_string()));
        Ok(pairs
            .iter()
            .map(|(key, value)| format!("{}={}", id(key), id(value)))
            .collect::<Vec<_>>()
            .join("&"))
    }

    /// Asks the API, page after page with `--all`, and prints what it found.
    pub(crate) async fn run(self, api: &Api, json: bool) -> anyhow::Result<()> {
        let query = self.query()?;
        let mut answer = api
            .call("GET", &format!("/operator/search?{query}"), None)
            .await?;
        while self.all && !answer["next"].is_null() {
            let after = id(&render::text(&answer["next"]));
            let page = (api.call(
                "GET",
                &format!("/operator/search?{query}&after={after}"),
                None,
            ))
            .await?;
            if let (Some(tasks), Some(more)) =
                (answer["tasks"].as_array_mut(), page["tasks"].as_array())
            {
                tasks.extend(more.iter().cloned());
            }
            let examined =
                answer["examined"].as_u64().unwrap_or(0) + page["examined"].as_u64().unwrap_or(0);
            answer["examined"] = Value::from(examined);
            answer["next"] = page["next"].clone();
        }
        print(json, &answer, |a| {
            let found = a["tasks"].as_array().cloned().unwrap_or_default();
            let more = if a["next"].is_null() {
                ""
            } else {
                ", more: --all"
            };
            format!(
                "{}\n({} found, {} examined{more})",
                render::tasks(&found),
                found.len(),
                a["examined"]
            )
        });
        Ok(())
    }
}

/// A `--where NAME=VALUE`: the attribute's name, and its value.
pub(crate) fn attribute_condition(condition: &str) -> anyhow::Result<(&str, &str)> {
    condition
        .split_once('=')
        .with_context(|| format!("--where {condition}: must be NAME=VALUE"))
}
