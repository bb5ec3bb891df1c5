//! `sas`: the operator's command line over the API, the local server's or a
//! deployment's, and a caller's to submit tasks. A readable table by default,
//! `--json` for scripts.

mod bulk;
mod client;
mod execution;
mod find;
mod moving;
mod render;
mod repair;
mod schedules;

use std::io::Read as _;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Map, Value, json};

use client::{Api, Auth};
use sas_domain::ids::TaskId;

/// See and act on the tasks of a Scheduler Agent Supervisor deployment.
#[derive(Parser)]
#[command(name = "sas", version)]
struct Cli {
    /// The API: the local server, or a deployment's URL.
    #[arg(
        long,
        env = "SAS_API",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    api: String,
    /// A bearer token for the API (AuthMode=JWT, or sas-local with tokens).
    #[arg(long, env = "SAS_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    /// Sign requests with SigV4 for this region (AuthMode=IAM), with the keys in
    /// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
    #[arg(
        long,
        env = "SAS_SIGV4_REGION",
        global = true,
        conflicts_with = "token"
    )]
    sigv4: Option<String>,
    /// Print the API's JSON, for scripts.
    #[arg(long, global = true)]
    json: bool,
    /// Use the caller's own routes rather than the operator's: your tasks, by your ids.
    #[arg(long, global = true)]
    mine: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Tasks: submit, list, find, show, value, execution, watch, children, resubmit, repair,
    /// move, cancel, pause, resume, complete.
    #[command(subcommand)]
    Tasks(Tasks),
    /// Resubmit every task in Error a filter matches, paced, with a progress bar;
    /// run again with the same --batch after an interruption to go on.
    Redrive(bulk::Bulk),
    /// Cancel every running task a filter matches, paced.
    CancelAll(bulk::Bulk),
    /// Repair every task in Error (or Processed, with --state) a filter matches, each
    /// as the patches say, paced; run again with the same --batch to go on.
    RepairAll {
        #[command(flatten)]
        bulk: bulk::Bulk,
        #[command(flatten)]
        patches: repair::Patches,
    },
    /// Move every task a filter matches (Processing by default; Pending or Error with
    /// --state) onto another version of its workflow, paced, under a batch.
    MoveAll {
        #[command(flatten)]
        bulk: bulk::Bulk,
        #[command(flatten)]
        target: moving::Target,
    },
    /// Pause every running task a filter matches (Processing by default), paced.
    PauseAll(bulk::Bulk),
    /// Resume every paused task a filter matches (Pending by default: a paused task
    /// with no step out waits Pending), paced.
    ResumeAll(bulk::Bulk),
    /// Ends a step's wait with its callback token: its output, or an error; or sends
    /// a heartbeat.
    Callback {
        /// The token, from the call's payload, the task (`sas tasks show`) or its
        /// notification.
        token: String,
        #[command(flatten)]
        outcome: Outcome,
        /// Say the holder is alive instead: the step's complete-by moves a heartbeat on.
        #[arg(long, conflicts_with_all = ["output", "error"])]
        heartbeat: bool,
    },
    /// The dead-letter queues: list, show, redrive.
    #[command(subcommand)]
    Dlq(Dlq),
    /// Schedules: workflows started on a cron expression or a period (list, show,
    /// create, pause, resume, delete).
    #[command(subcommand)]
    Schedules(schedules::Schedules),
    /// The workflows, as their steps.
    Workflows,
    /// The services the workflows call, what limits their calls, and each limit's
    /// calls in flight and waiting now.
    Services {
        /// Show the gates of limits kept per key (`"key": "input.customer_id"`) for
        /// this key's value.
        #[arg(long)]
        key: Option<String>,
    },
}

#[derive(Subcommand)]
enum Tasks {
    /// Submits a task, as its caller (`PUT /tasks/{id}`); with --wait, waits for its
    /// end and shows it.
    Submit {
        /// The workflow it runs.
        workflow: String,
        /// Its input: a JSON object, from this file ('-' for standard input); `{}`
        /// without it. One too large for a request's body (over 48 KiB) is uploaded
        /// first and named by its reference.
        #[arg(long)]
        input: Option<String>,
        /// Its id: the same submission again is the same task. Generated without it,
        /// and named in an error, so that a submission whose answer was lost can be
        /// sent again with it as the same task.
        #[arg(long)]
        id: Option<String>,
        /// 1 (first) to 5; 3 without it.
        #[arg(long)]
        priority: Option<u8>,
        /// Wait up to this long (20s at most) for its end, and show it then.
        #[arg(long)]
        wait: Option<String>,
    },
    /// Tasks in a state.
    List {
        /// Pending, Processing, Compensating or Error.
        #[arg(long, default_value = "Error")]
        state: String,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Tasks found by their attributes (--where NAME=VALUE), workflow, state, time
    /// and error text.
    Find(find::Find),
    /// A task, its steps on a timeline, and its history.
    Show { id: String },
    /// Follows a task until it ends, a line at each change.
    Watch {
        id: String,
        /// Give up after this long.
        #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
    /// A value of a task kept apart, as its view names it by reference
    /// (`{"$payload": {"sha256": ...}}`): its JSON, on standard output.
    Value {
        id: String,
        /// The value's SHA-256, as its reference names it.
        sha256: String,
    },
    /// A state machine's task as its state graph: each state's visits and how its
    /// last went, the path taken, each state's last input and output.
    Execution { id: String },
    /// The child tasks a step started (a map's, a child workflow's), by item.
    Children {
        id: String,
        /// The step; may be left out when the task has one that starts children.
        #[arg(long)]
        step: Option<String>,
        /// At most this many a page.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Every page, not only the first.
        #[arg(long)]
        all: bool,
    },
    /// Runs a task in Error again.
    Resubmit {
        id: String,
        /// A new input, from this JSON file ('-' for standard input).
        #[arg(long)]
        input: Option<String>,
    },
    /// Patches a task's input or its steps' outputs, or runs it again from a step,
    /// and goes on in a new run: the steps whose work did not change are kept.
    Repair(repair::Repair),
    /// Moves a task onto another version of its workflow, each step carried to the
    /// step it maps to.
    Move(moving::Move),
    /// Stops a task and undoes its done steps.
    Cancel { id: String },
    /// Starts no new step of a task until it is resumed; its running step finishes.
    Pause { id: String },
    /// Goes on with a paused task where it stopped.
    Resume { id: String },
    /// Ends a step's wait for its callback without the token: approves it with an
    /// output, or refuses it with an error.
    Complete {
        id: String,
        /// The step that waits.
        step: String,
        #[command(flatten)]
        outcome: Outcome,
    },
}

/// How a step's wait ends.
#[derive(Args)]
#[group(multiple = false)]
struct Outcome {
    /// Its output: a JSON object, from this file ('-' for standard input).
    #[arg(long)]
    output: Option<String>,
    /// Its refusal: the step fails and the task is undone.
    #[arg(long)]
    error: Option<String>,
}

impl Outcome {
    /// The body of a callback; an empty output without either.
    fn body(self) -> anyhow::Result<Value> {
        Ok(match (self.output, self.error) {
            (_, Some(error)) => json!({ "error": error }),
            (Some(path), None) => json!({ "output": read_json(&path)? }),
            (None, None) => json!({ "output": {} }),
        })
    }
}

#[derive(Subcommand)]
enum Dlq {
    /// Each dead-letter queue and how many messages it holds.
    List,
    /// The messages of one: scheduler, agent-requests, agent-responses, or ingest
    /// (buffered ingestion's accepted submissions).
    Show { queue: String },
    /// Sends messages back to their queue: those named, or up to --max.
    Redrive {
        queue: String,
        /// A message's id (from `sas dlq show`); may be given again.
        #[arg(long = "id")]
        ids: Vec<String>,
        /// How many, when no id is given.
        #[arg(long, default_value_t = 10)]
        max: usize,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cli = Cli::parse();
    if let Err(error) = run(cli).await {
        eprintln!(
            "sas: {}",
            render::terminal_safe(&format!("{error:#}"), true)
        );
        std::process::exit(1);
    }
}

/// What an id may not hold as it is in a path: all but its own characters (a child
/// task's id has `~`).
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// An id (a task's, a queue's, a step's) as a segment of a path or a query's value.
fn id(text: &str) -> String {
    utf8_percent_encode(text, PATH_SEGMENT).to_string()
}

/// Prints `answer` as JSON with `--json`, else as `human` renders it.
fn print(json: bool, answer: &Value, human: impl FnOnce(&Value) -> String) {
    if json {
        println!("{answer:#}");
    } else {
        println!("{}", render::terminal_safe(human(answer).trim_end(), true));
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let auth = match (cli.token, cli.sigv4) {
        (Some(token), _) => Auth::Bearer(token),
        (None, Some(region)) => Auth::sigv4(region)?,
        (None, None) => Auth::None,
    };
    let api = Api::new(&cli.api, auth);
    let tasks = if cli.mine {
        "/tasks"
    } else {
        "/operator/tasks"
    };
    match cli.command {
        Command::Tasks(Tasks::Submit {
            workflow,
            input,
            id: task,
            priority,
            wait,
        }) => {
            let input = match input {
                Some(path) => submitted_input(&api, &path).await?,
                None => json!({}),
            };
            let mut body = json!({ "workflow": workflow, "input": input });
            if let Some(priority) = priority {
                body["priority"] = json!(priority);
            }
            let generated = task.is_none();
            let task = task.unwrap_or_else(|| TaskId::generate().to_string());
            let query = wait.map_or_else(String::new, |wait| format!("?wait={}", id(&wait)));
            let path = format!("/tasks/{}{query}", id(&task));
            let answer = api.call("PUT", &path, Some(&body)).await;
            let answer = if generated {
                answer.with_context(|| {
                    format!("task {task} (--id {task} sends it again as the same task)")
                })?
            } else {
                answer?
            };
            print(cli.json, &answer, |a| match a["status"].as_str() {
                // Buffered ingestion: only queued, the task created later.
                Some(status) => format!("{} {status}", render::text(&a["id"])),
                None => render::task(a),
            });
        }
        Command::Tasks(Tasks::List { state, limit }) => {
            let answer = api
                .call("GET", &format!("{tasks}?state={state}&limit={limit}"), None)
                .await?;
            print(cli.json, &answer, |a| {
                let listed = a["tasks"].as_array().cloned().unwrap_or_default();
                let more = if a["next"].is_null() {
                    ""
                } else {
                    "\n(more: raise --limit)"
                };
                format!("{}{more}", render::tasks(&listed))
            });
        }
        Command::Tasks(Tasks::Find(find)) => find.run(&api, cli.json).await?,
        Command::Tasks(Tasks::Show { id: task }) => {
            let answer = api
                .call("GET", &format!("{tasks}/{}", id(&task)), None)
                .await?;
            print(cli.json, &answer, render::task);
        }
        Command::Tasks(Tasks::Value { id: task, sha256 }) => {
            let path = format!("{tasks}/{}/payloads/{}", id(&task), id(&sha256));
            let value = api.call("GET", &path, None).await?;
            println!("{value}");
        }
        Command::Tasks(Tasks::Execution { id: task }) => {
            let answer = api
                .call("GET", &format!("{tasks}/{}/execution", id(&task)), None)
                .await?;
            print(cli.json, &answer, execution::execution);
        }
        Command::Tasks(Tasks::Watch { id: task, timeout }) => {
            watch(&api, &format!("{tasks}/{}", id(&task)), timeout, cli.json).await?;
        }
        Command::Tasks(Tasks::Children {
            id: task,
            step,
            limit,
            all,
        }) => {
            let path = format!("{tasks}/{}/children", id(&task));
            let answer = children(&api, &path, step.as_deref(), limit, all).await?;
            print(cli.json, &answer, |a| {
                let more = if a["next"].is_null() {
                    ""
                } else {
                    "\n(more: --all, or raise --limit)"
                };
                format!("{}{more}", render::children(a))
            });
        }
        Command::Tasks(Tasks::Resubmit { id: task, input }) => {
            let body = input.map(|path| read_input(&path)).transpose()?;
            let answer = api
                .call(
                    "POST",
                    &format!("{tasks}/{}/resubmit", id(&task)),
                    body.as_ref(),
                )
                .await?;
            print(cli.json, &answer, |a| {
                format!(
                    "{} resubmitted: run {}, {}",
                    render::text(&a["id"]),
                    a["run"],
                    render::text(&a["state"])
                )
            });
        }
        Command::Tasks(Tasks::Repair(repair)) => repair.run(&api, cli.json).await?,
        Command::Tasks(Tasks::Move(moving)) => moving.run(&api, cli.json).await?,
        Command::Tasks(Tasks::Cancel { id: task }) => {
            act(&api, tasks, &task, "cancel", cli.json).await?
        }
        Command::Tasks(Tasks::Pause { id: task }) => {
            act(&api, tasks, &task, "pause", cli.json).await?
        }
        Command::Tasks(Tasks::Resume { id: task }) => {
            act(&api, tasks, &task, "resume", cli.json).await?
        }
        Command::Tasks(Tasks::Complete {
            id: task,
            step,
            outcome,
        }) => {
            let path = format!("{tasks}/{}/steps/{}/complete", id(&task), id(&step));
            let answer = api.call("POST", &path, Some(&outcome.body()?)).await?;
            print(cli.json, &answer, |a| {
                format!(
                    "{} {step}: {}",
                    render::text(&a["id"]),
                    render::text(&render::step(a, &step)["state"])
                )
            });
        }
        Command::Callback {
            token,
            outcome,
            heartbeat,
        } => {
            let (path, body) = if heartbeat {
                (format!("/callbacks/{}/heartbeat", id(&token)), json!({}))
            } else {
                (format!("/callbacks/{}", id(&token)), outcome.body()?)
            };
            let answer = api.call("POST", &path, Some(&body)).await?;
            print(cli.json, &answer, |a| match a["complete_by"].as_str() {
                Some(until) => format!(
                    "{}: {}, waiting until {until}",
                    render::text(&a["step"]),
                    render::text(&a["state"])
                ),
                None => format!(
                    "{}: {}",
                    render::text(&a["step"]),
                    render::text(&a["state"])
                ),
            });
        }
        Command::Redrive(bulk) => bulk::run(&api, "resubmit", bulk, Map::new(), cli.json).await?,
        Command::CancelAll(bulk) => bulk::run(&api, "cancel", bulk, Map::new(), cli.json).await?,
        Command::MoveAll { bulk, target } => {
            bulk::run(&api, "move", bulk, target.fields("to_version")?, cli.json).await?
        }
        Command::RepairAll { bulk, patches } => {
            bulk::run(&api, "repair", bulk, patches.fields()?, cli.json).await?
        }
        Command::PauseAll(bulk) => bulk::run(&api, "pause", bulk, Map::new(), cli.json).await?,
        Command::ResumeAll(bulk) => bulk::run(&api, "resume", bulk, Map::new(), cli.json).await?,
        Command::Dlq(Dlq::List) => {
            let answer = api.call("GET", "/operator/dead-letters", None).await?;
            print(cli.json, &answer, |a| {
                render::table(
                    ["QUEUE", "SOURCE", "MESSAGES"],
                    a["queues"].as_array().into_iter().flatten().map(|q| {
                        [
                            render::text(&q["queue"]),
                            render::text(&q["source"]),
                            render::text(&q["messages"]),
                        ]
                    }),
                )
            });
        }
        Command::Dlq(Dlq::Show { queue }) => {
            let answer = api
                .call(
                    "GET",
                    &format!("/operator/dead-letters/{}", id(&queue)),
                    None,
                )
                .await?;
            print(cli.json, &answer, |a| {
                render::table(
                    ["MESSAGE", "TASK", "BODY"],
                    a["messages"].as_array().into_iter().flatten().map(|m| {
                        [
                            render::text(&m["id"]),
                            render::text(&m["task_id"]),
                            render::text(&m["body"]),
                        ]
                    }),
                )
            });
        }
        Command::Dlq(Dlq::Redrive { queue, ids, max }) => {
            let body = if ids.is_empty() {
                json!({ "max": max })
            } else {
                json!({ "ids": ids })
            };
            let answer = api
                .call(
                    "POST",
                    &format!("/operator/dead-letters/{}/redrive", id(&queue)),
                    Some(&body),
                )
                .await?;
            print(cli.json, &answer, |a| {
                format!(
                    "{} message(s) sent back to {}",
                    a["redriven"],
                    render::text(&a["queue"])
                )
            });
        }
        Command::Schedules(schedules) => schedules.run(&api, cli.json).await?,
        Command::Services { key } => {
            let query = key.map_or_else(String::new, |key| format!("?key={}", id(&key)));
            let answer = api
                .call("GET", &format!("/operator/services{query}"), None)
                .await?;
            print(cli.json, &answer, |a| {
                render::services(a["services"].as_array().map_or(&[], Vec::as_slice))
            });
        }
        Command::Workflows => {
            let answer = api.call("GET", "/workflows", None).await?;
            print(cli.json, &answer, |a| {
                render::workflows(a["workflows"].as_array().map_or(&[], Vec::as_slice))
            });
        }
    }
    Ok(())
}

/// A JSON input from a file, or standard input for '-'.
fn read_input(path: &str) -> anyhow::Result<Value> {
    Ok(json!({ "input": read_json(path)? }))
}

/// The most bytes of an input sent in a submission's body (of 64 KiB); a larger one is
/// uploaded first.
const INLINE_INPUT: usize = 48 * 1024;

/// A submission's input from file `path` ('-' for standard input): its JSON, or, when
/// too large for a request's body, the reference of the value uploaded.
async fn submitted_input(api: &Api, path: &str) -> anyhow::Result<Value> {
    let text = read_text(path)?;
    let input = parsed(path, &text)?;
    if text.len() <= INLINE_INPUT {
        return Ok(input);
    }
    api.upload(text.into_bytes())
        .await
        .with_context(|| format!("cannot upload {path}"))
}

/// The JSON in file `path` ('-' for standard input).
fn read_json(path: &str) -> anyhow::Result<Value> {
    parsed(path, &read_text(path)?)
}

fn parsed(path: &str, text: &str) -> anyhow::Result<Value> {
    serde_json::from_str(text).with_context(|| format!("{path} is not JSON"))
}

/// The text of file `path` ('-' for standard input).
fn read_text(path: &str) -> anyhow::Result<String> {
    if path == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))
    }
}

/// An action on one task (cancel, pause, resume), and what it means, said after it.
async fn act(api: &Api, tasks: &str, task: &str, action: &str, json: bool) -> anyhow::Result<()> {
    let path = format!("{tasks}/{}/{action}", id(task));
    let answer = api.call("POST", &path, None).await?;
    let done = past_tense(action);
    let meaning = match action {
        "cancel" => "(its done steps are being undone)",
        "pause" => "(it starts no new step until resumed)",
        _ => "(it goes on where it stopped)",
    };
    print(json, &answer, |a| {
        format!(
            "{} {done}: {} {meaning}",
            render::text(&a["id"]),
            render::text(&a["state"])
        )
    });
    Ok(())
}

/// What an action on tasks did, as a word.
fn past_tense(action: &str) -> &'static str {
    match action {
        "cancel" => "cancelled",
        "pause" => "paused",
        "resume" => "resumed",
        "repair" => "repaired",
        "move" => "moved",
        _ => "resubmitted",
    }
}

/// Prints a line each time the task changes, until it ends.
async fn watch(api: &Api, path: &str, timeout: Duration, json: bool) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut seen = None;
    loop {
        let task = api.call("GET", path, None).await?;
        if seen != Some(task["version"].clone()) {
            seen = Some(task["version"].clone());
            if json {
                println!("{task}");
            } else {
                let steps: Vec<String> = task["steps"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|s| format!("{}:{}", render::text(&s["name"]), render::text(&s["state"])))
                    .collect();
                println!(
                    "{}  {:<12} {}",
                    render::text(&task["updated_at"]),
                    render::text(&task["state"]),
                    steps.join(" ")
                );
            }
        }
        if matches!(task["state"].as_str(), Some("Processed" | "Error")) {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the task did not end within {}",
            humantime::format_duration(timeout)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The children of a step at `path` (`.../tasks/{id}/children`): a page of `limit`,
/// or with `all` every page, as one answer.
async fn children(
    api: &Api,
    path: &str,
    step: Option<&str>,
    limit: usize,
    all: bool,
) -> anyhow::Result<Value> {
    let query = |step: Option<&str>| {
        let step = step.map(|name| format!("&step={}", id(name)));
        format!("{path}?limit={limit}{}", step.unwrap_or_default())
    };
    let mut answer = api.call("GET", &query(step), None).await?;
    while all && !answer["next"].is_null() {
        // The later pages name the step the first one found.
        let next = format!(
            "{}&after={}",
            query(answer["step"].as_str()),
            render::text(&answer["next"])
        );
        let page = api.call("GET", &next, None).await?;
        if let (Some(tasks), Some(more)) =
            (answer["tasks"].as_array_mut(), page["tasks"].as_array())
        {
            tasks.extend(more.iter().cloned());
        }
        answer["counts"] = page["counts"].clone();
        answer["next"] = page["next"].clone();
    }
    Ok(answer)
}
