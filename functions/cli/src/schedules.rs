//! `sas schedules`: workflows started on a cron expression or a period, created,
//! listed with their next runs, paused, resumed and deleted.

use clap::{Subcommand, ValueEnum};
use serde_json::{Value, json};

use crate::client::Api;
use crate::{id, print, read_json, render};

/// What happens to a run whose time comes while the last is still running.
#[derive(Clone, Copy, ValueEnum)]
#[value(rename_all = "snake_case")]
pub(crate) enum Overlap {
    /// It is not run.
    Skip,
    /// It runs once the running one ends; one at most.
    BufferOne,
    /// It runs all the same.
    AllowAll,
}

#[derive(Subcommand)]
pub(crate) enum Schedules {
    /// The schedules, with their next and last runs.
    List,
    /// A schedule: what it runs, when, its next runs and its last.
    Show { name: String },
    /// Creates a schedule, or replaces the definition of the one of that name (what
    /// it has run stays).
    Create {
        name: String,
        /// The workflow (or state machine) each run starts.
        #[arg(long)]
        workflow: String,
        /// Its version; the newest at each run by default.
        #[arg(long)]
        version: Option<u32>,
        /// A five-field cron expression (minute hour day-of-month month day-of-week).
        #[arg(long, required_unless_present = "every", conflicts_with = "every")]
        cron: Option<String>,
        /// A period instead (30s, 5m, 1h), from the schedule's creation.
        #[arg(long)]
        every: Option<String>,
        /// The IANA time zone the cron expression is read in.
        #[arg(long, default_value = "UTC")]
        time_zone: String,
        /// What happens to a run whose time comes while the last is running.
        #[arg(long, value_enum, default_value = "skip")]
        overlap: Overlap,
        /// How late a run may still start after downtime (a duration).
        #[arg(long, default_value = "1m")]
        catch_up_window: String,
        /// Each run's input: a JSON file, or - for standard input.
        #[arg(long, value_name = "FILE")]
        input: Option<String>,
    },
    /// Starts no run of a schedule until it is resumed.
    Pause { name: String },
    /// Goes on with a paused schedule from its next time; none of the pause's runs.
    Resume { name: String },
    /// Deletes a schedule; its runs go on.
    Delete { name: String },
}

impl Schedules {
    /// Asks the API, and prints what it answered.
    pub(crate) async fn run(self, api: &Api, json: bool) -> anyhow::Result<()> {
        let path = |name: &str| format!("/operator/schedules/{}", id(name));
        match self {
            Self::List => {
                let answer = api.call("GET", "/operator/schedules", None).await?;
                print(json, &answer, |a| {
                    render::table(
                        [
                            "NAME", "WORKFLOW", "WHEN", "OVERLAP", "STATE", "NEXT RUN", "LAST RUN",
                        ],
                        a["schedules"].as_array().into_iter().flatten().map(|s| {
                            [
                                render::text(&s["name"]),
                                render::text(&s["workflow"]),
                                when(s),
                                render::text(&s["overlap"]),
                                state(s),
                                render::text(&s["next_runs"][0]),
                                render::text(&s["last_run"]["task_id"]),
                            ]
                        }),
                    )
                });
            }
            Self::Show { name } => {
                let answer = api.call("GET", &path(&name), None).await?;
                print(json, &answer, shown);
            }
            Self::Create {
                name,
                workflow,
                version,
                cron,
                every,
                time_zone,
                overlap,
                catch_up_window,
                input,
            } => {
                let overlap = overlap.to_possible_value().map(|v| v.get_name().to_owned());
                let mut body = json!({
                    "workflow": workflow,
                    "time_zone": time_zone,
                    "overlap": overlap,
                    "catch_up_window": catch_up_window,
                });
                for (field, value) in [
                    ("cron", cron.map(Value::from)),
                    ("every", every.map(Value::from)),
                    ("version", version.map(Value::from)),
                ] {
                    if let Some(value) = value {
                        body[field] = value;
                    }
                }
                if let Some(file) = input {
                    body["input"] = read_json(&file)?;
                }
                let answer = api.call("PUT", &path(&name), Some(&body)).await?;
                print(json, &answer, shown);
            }
            Self::Pause { ref name } | Self::Resume { ref name } | Self::Delete { ref name } => {
                let (method, action, done) = match &self {
                    Self::Pause { .. } => ("POST", "/pause", "paused"),
                    Self::Resume { .. } => ("POST", "/resume", "resumed"),
                    _ => ("DELETE", "", "deleted (its runs go on)"),
                };
                let answer = api
                    .call(method, &format!("{}{action}", path(name)), None)
                    .await?;
                print(json, &answer, |a| match a["next_runs"][0].as_str() {
                    Some(next) => format!("{name} {done}: next run {next}"),
                    None => format!("{name} {done}"),
                });
            }
        }
        Ok(())
    }
}

/// When a schedule's runs fall, in a few words.
fn when(schedule: &Value) -> String {
    match schedule["cron"].as_str() {
        Some(cron) => format!("cron {cron} ({})", render::text(&schedule["time_zone"])),
        None => format!("every {}", render::text(&schedule["every"])),
    }
}

fn state(schedule: &Value) -> String {
    if schedule["paused"] == true {
        "paused".into()
    } else {
        "active".into()
    }
}

/// A schedule, a line a field, its next runs after.
fn shown(schedule: &Value) -> String {
    let mut lines = vec![
        format!("{}  {}", render::text(&schedule["name"]), state(schedule)),
        format!("  workflow   {}", render::text(&schedule["workflow"])),
        format!("  when       {}", when(schedule)),
        format!("  overlap    {}", render::text(&schedule["overlap"])),
        format!(
            "  catch up   {}",
            render::text(&schedule["catch_up_window"])
        ),
        format!(
            "  runs       {} started, {} skipped, {} missed",
            schedule["started"], schedule["skipped"], schedule["missed"]
        ),
    ];
    if let Some(last) = schedule.get("last_run") {
        lines.push(format!(
            "  last run   {} at {}",
            render::text(&last["task_id"]),
            render::text(&last["at"])
        ));
    }
    let next: Vec<String> = (schedule["next_runs"].as_array().into_iter().flatten())
        .map(render::text)
        .collect();
    if !next.is_empty() {
        lines.push(format!("  next runs  {}", next.join(", ")));
    }
    lines.join("\n")
}
