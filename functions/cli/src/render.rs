//! What the command line prints for a person: tables, a task with its timeline.

use comfy_table::presets::NOTHING;
use comfy_table::{ContentArrangement, Table};
use serde_json::Value;

/// Cells of the text timeline.
const WIDTH: usize = 48;

/// A table with `header`, as wide as the terminal allows.
#[must_use]
pub fn table<const N: usize>(
    header: [&str; N],
    rows: impl IntoIterator<Item = [String; N]>,
) -> String {
    let mut table = Table::new();
    table
        .load_preset(NOTHING)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header);
    for row in rows {
        table.add_row(row);
    }
    let lines: Vec<String> = table
        .to_string()
        .lines()
        .map(|line| line.trim_end().to_owned())
        .collect();
    lines.join("\n")
}

/// A JSON value's text, without quotes for a string; `-` for null. Its control
/// characters are escaped, line ends too: it is a table's cell, or a line's field.
#[must_use]
pub fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(text) => terminal_safe(text, false),
        other => other.to_string(),
    }
}

/// `text` with its control characters escaped as Rust writes them (`\u{1b}`), and
/// the marks that reorder text (bidirectional overrides), but for line ends when
/// `lines`: a caller's text (an error, a step's output) shown to an operator can
/// neither drive the terminal (move its cursor, write its clipboard, hide a line)
/// nor show other than it holds.
#[must_use]
pub fn terminal_safe(text: &str, lines: bool) -> String {
    let mut safe = String::with_capacity(text.len());
    for c in text.chars() {
        let reorders = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if (c.is_control() && !(lines && c == '\n')) || reorders {
            safe.extend(c.escape_unicode());
        } else {
            safe.push(c);
        }
    }
    safe
}

/// A listing of tasks.
#[must_use]
pub fn tasks(tasks: &[Value]) -> String {
    if tasks.is_empty() {
        return "no task".into();
    }
    table(
        [
            "TASK", "STATE", "WORKFLOW", "RUN", "FAILURES", "UPDATED", "ERROR",
        ],
        tasks.iter().map(|t| {
            [
                text(&t["id"]),
                text(&t["state"]),
                format!(
                    "{} v{}",
                    text(&t["workflow"]["name"]),
                    t["workflow"]["version"]
                ),
                text(&t["run"]),
                text(&t["failure_count"]),
                text(&t["updated_at"]),
                text(&t["error"]),
            ]
        }),
    )
}

fn millis(time: &Value) -> Option<i64> {
    let text = time.as_str()?;
    let at = humantime::parse_rfc3339(text).ok()?;
    let since = at.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(since.as_millis()).ok()
}

/// The children of a step, by item, after their counts.
#[must_use]
pub fn children(page: &Value) -> String {
    let listed = page["tasks"].as_array().map_or(&[][..], Vec::as_slice);
    let rows = if listed.is_empty() {
        "no child started yet".into()
    } else {
        table(
            [
                "ITEM", "TASK", "STATE", "RUN", "FAILURES", "UPDATED", "ERROR",
            ],
            listed.iter().map(|t| {
                [
                    text(&t["parent"]["item"]),
                    text(&t["id"]),
                    text(&t["state"]),
                    text(&t["run"]),
                    text(&t["failure_count"]),
                    text(&t["updated_at"]),
                    text(&t["error"]),
                ]
            }),
        )
    };
    format!(
        "{}: {}\n{rows}",
        text(&page["step"]),
        counts(&page["counts"])
    )
}

/// A step's children in numbers: `5 children, 5 started: 3 succeeded, 1 failed, 1
/// running`; while the step is undone, how many of them are.
fn counts(children: &Value) -> String {
    let count = |key: &str| children[key].as_u64().unwrap_or(0);
    let running = children["running"].as_array().map_or(0, Vec::len);
    let mut out = format!(
        "{} children, {} started: {} succeeded, {} failed",
        count("total"),
        count("started"),
        count("succeeded"),
        count("failed")
    );
    if count("undo_started") > 0 {
        out += &format!(
            "; undo: {} undone, {} not undone, {running} being undone",
            count("undone"),
            count("not_undone")
        );
    } else {
        out += &format!(", {running} running");
    }
    out
}

/// One task: what it is, its steps with the current run's timeline, its history.
#[must_use]
pub fn task(task: &Value) -> String {
    let mut out = format!(
        "{}  {}  {} v{}  run {}  FailureCount {}\n",
        text(&task["id"]),
        text(&task["state"]),
        text(&task["workflow"]["name"]),
        task["workflow"]["version"],
        task["run"],
        task["failure_count"],
    );
    let parent = &task["parent"];
    if !parent.is_null() {
        out += &format!(
            "child of {}, step {}, item {}\n",
            text(&parent["task_id"]),
            text(&parent["step"]),
            parent["item"]
        );
    }
    // A state machine's execution, in Step Functions' words.
    if !task["status"].is_null() {
        out += &format!("execution: {}\n", text(&task["status"]));
    }
    if !task["output"].is_null() {
        out += &format!("output: {}\n", task["output"]);
    }
    if !task["error"].is_null() {
        out += &format!("error: {}\n", text(&task["error"]));
    }
    if !task["cause"].is_null() {
        out += &format!("cause: {}\n", text(&task["cause"]));
    }
    let not_undone: Vec<String> = task["not_undone"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    if !not_undone.is_empty() {
        out += &format!(
            "not undone: {} (its effect may be in place; a resubmission calls it again under the same key)\n",
            not_undone.join(", ")
        );
    }
    if !task["cancelled"].is_null() {
        out += &format!(
            "cancelled by {} at {}\n",
            text(&task["cancelled"]["by"]),
            text(&task["cancelled"]["at"])
        );
    }
    if !task["paused"].is_null() {
        out += &format!(
            "paused by {} at {} (sas tasks resume {})\n",
            text(&task["paused"]["by"]),
            text(&task["paused"]["at"]),
            text(&task["id"])
        );
    }
    if !task["start_at"].is_null() {
        out += &format!("starts at {}\n", text(&task["start_at"]));
    }
    out += &format!("submitted {}", text(&task["created_at"]));
    if !task["complete_by"].is_null() {
        out += &format!(", complete by {}", text(&task["complete_by"]));
    }
    out += "\n\n";
    let history = task["history"].as_array().cloned().unwrap_or_default();
    // The current run's events: from its resubmission or repair, if it had one.
    let run_starts = history
        .iter()
        .rposition(|e| e["event"] == "resubmitted" || e["event"] == "repaired")
        .map_or(0, |i| i + 1);
    let run = &history[run_starts..];
    let times: Vec<i64> = run.iter().filter_map(|e| millis(&e["at"])).collect();
    let start = times.iter().min().copied().unwrap_or(0);
    let end = times.iter().max().copied().unwrap_or(start).max(start + 1);
    let cell = |at: i64| {
        let offset = usize::try_from(at - start).unwrap_or(0) * (WIDTH - 1);
        offset / usize::try_from(end - start).unwrap_or(1).max(1)
    };
    let steps = task["steps"].as_array().cloned().unwrap_or_default();
    let lines: Vec<String> = steps
        .iter()
        .enumerate()
        .map(|(index, step)| {
            if step["children"].is_null() {
                timeline_row(run, index, &cell)
            } else {
                children_row(step, end, &cell)
            }
        })
        .collect();
    out += &table(
        [
            "STEP",
            "STATE",
            "ATTEMPT",
            "FAILURES",
            &format!("RUN {} ({} ms)", task["run"], end - start),
        ],
        steps.iter().zip(lines).map(|(step, line)| {
            [
                step_label(step),
                text(&step["state"]),
                text(&step["attempt"]),
                text(&step["failure_count"]),
                line,
            ]
        }),
    );
    out += "\n█ call  ▒ compensation  ✗ failed or timed out  · waiting for a retry\n";
    for step in steps.iter().filter(|s| !s["waiting"].is_null()) {
        let waiting = &step["waiting"];
        let name = text(&step["name"]);
        out += &match waiting["token"].as_str() {
            Some(token) => format!(
                "\n{name} waits for its callback until {}: sas callback {token} --output <file> (or --error <why>)\n",
                text(&waiting["until"])
            ),
            None => format!("\n{name} sleeps until {}\n", text(&waiting["until"])),
        };
    }
    for step in steps.iter().filter(|s| !s["children"].is_null()) {
        let name = text(&step["name"]);
        out += &format!(
            "\nchildren of {name}: {} (sas tasks children {} --step {name})\n",
            counts(&step["children"]),
            text(&task["id"])
        );
    }
    if !history.is_empty() {
        out += "\nhistory:\n";
        for event in &history {
            out += &format!("  {}  {}\n", text(&event["at"]), describe(event, &steps));
        }
    }
    out
}

/// One step's row of the timeline: each attempt's span, in cells.
fn timeline_row(run: &[Value], index: usize, cell: &impl Fn(i64) -> usize) -> String {
    let mut cells = vec![' '; WIDTH];
    let mut sent: Vec<&Value> = Vec::new();
    for event in run.iter().filter(|e| e["step"] == index) {
        let Some(at) = millis(&event["at"]) else {
            continue;
        };
        match event["event"].as_str() {
            Some("sent") => sent.push(event),
            Some("answered" | "expired") => {
                let opened = sent.iter().position(|s| {
                    s["attempt"] == event["attempt"] && s["operation"] == event["operation"]
                });
                let Some(opened) = opened.map(|i| sent.remove(i)) else {
                    continue;
                };
                let fill = if event["operation"] == "compensate" {
                    '▒'
                } else {
                    '█'
                };
                let from = millis(&opened["at"]).map_or(0, cell);
                let to = cell(at);
                for c in &mut cells[from..=to.max(from)] {
                    *c = fill;
                }
                if event["event"] == "expired" || event["outcome"] != "succeeded" {
                    cells[to] = '✗';
                }
                if let Some(retry) = millis(&event["retry_at"]) {
                    for c in cells
                        .iter_mut()
                        .take(cell(retry).min(WIDTH - 1) + 1)
                        .skip(to + 1)
                    {
                        *c = '·';
                    }
                }
            }
            _ => {}
        }
    }
    for opened in sent {
        let from = millis(&opened["at"]).map_or(0, cell);
        cells[from] = if opened["operation"] == "compensate" {
            '▒'
        } else {
            '█'
        };
    }
    cells.into_iter().collect::<String>().trim_end().to_owned()
}

/// The row of a step that starts children, which sends nothing itself: its span, from
/// its start (or its undoing's) to its end, or to `end` while it runs.
fn children_row(step: &Value, end: i64, cell: &impl Fn(i64) -> usize) -> String {
    let Some(from) = millis(&step["started_at"]) else {
        return String::new();
    };
    let state = step["state"].as_str().unwrap_or_default();
    let to = match state {
        "Processing" | "Compensating" => end,
        _ => millis(&step["finished_at"]).unwrap_or(end),
    };
    let from = cell(from).min(WIDTH - 1);
    let to = cell(to).clamp(from, WIDTH - 1);
    let fill = if state.starts_with("Compensat") {
        '▒'
    } else {
        '█'
    };
    let mut cells = vec![' '; from];
    cells.resize(to + 1, fill);
    if matches!(state, "Error" | "CompensationFailed") {
        cells[to] = '✗';
    }
    cells.into_iter().collect()
}

/// The name of the step an event names.
fn name(event: &Value, steps: &[Value]) -> String {
    event["step"]
        .as_u64()
        .and_then(|i| steps.get(usize::try_from(i).ok()?))
        .map_or_else(|| "?".to_owned(), |s| text(&s["name"]))
}

/// A step of a task, by name (null when it has none).
#[must_use]
pub fn step<'a>(task: &'a Value, name: &str) -> &'a Value {
    task["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["name"] == name))
        .unwrap_or(&Value::Null)
}

/// An event of a task's history, in words.
fn describe(event: &Value, steps: &[Value]) -> String {
    let step = || {
        let name = name(event, steps);
        let what = if event["operation"] == "compensate" {
            "compensation of"
        } else {
            "call of"
        };
        format!("{what} {name} (attempt {})", event["attempt"])
    };
    match event["event"].as_str().unwrap_or_default() {
        "sent" => format!(
            "{} sent, to complete by {}",
            step(),
            text(&event["complete_by"])
        ),
        "answered" => format!("{} {}", step(), text(&event["outcome"])),
        "expired" => match event["retry_at"].as_str() {
            Some(at) => format!("{} passed its complete-by: retried at {at}", step()),
            None => format!("{} passed its complete-by: given up", step()),
        },
        "cancelled" => format!("cancelled by {}", text(&event["by"])),
        "paused" => format!("paused by {}", text(&event["by"])),
        "resumed" => format!("resumed by {}", text(&event["by"])),
        "skipped" => format!("{} skipped: its condition did not hold", name(event, steps)),
        "waiting" => format!(
            "{} (attempt {}) waits until {}",
            name(event, steps),
            event["attempt"],
            text(&event["until"])
        ),
        "woke" => match event["by"].as_str() {
            Some(by) => format!("{}'s callback used by {by}", name(event, steps)),
            None => format!("{}'s timer ended", name(event, steps)),
        },
        "resubmitted" => format!("resubmitted: run {}", event["run"]),
        "moved" => format!(
            "moved by {} from version {} to {}",
            text(&event["by"]),
            event["from_version"],
            event["to_version"]
        ),
        "repaired" => match event["reason"].as_str() {
            Some(why) => format!(
                "repaired by {}: run {} ({why})",
                text(&event["by"]),
                event["run"]
            ),
            None => format!("repaired by {}: run {}", text(&event["by"]), event["run"]),
        },
        "state" => format!("entered {}", text(&event["state"])),
        other => other.to_owned(),
    }
}

/// A step's name, with the branches of parallel steps it is in: `check-account
/// [checks ‖ 1]`.
fn step_label(step: &Value) -> String {
    let mut label = text(&step["name"]);
    for branch in step["within"].as_array().into_iter().flatten() {
        let position = branch["branch"].as_u64().unwrap_or(0) + 1;
        label += &format!(" [{} ‖ {position}]", text(&branch["parallel"]));
    }
    label
}

/// The workflows, each as its steps.
#[must_use]
pub fn workflows(workflows: &[Value]) -> String {
    let mut out = String::new();
    for w in workflows {
        out += &format!(
            "{} v{}: {}\n",
            text(&w["name"]),
            w["version"],
            text(&w["description"])
        );
        out += &table(
            ["#", "STEP", "AGENT", "DOES", "BUDGET", "UNDO"],
            w["steps"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
                .map(|(i, s)| {
                    [
                        (i + 1).to_string(),
                        step_label(s),
                        text(&s["agent"]),
                        text(&s["does"]),
                        text(&s["complete_by"]),
                        text(&s["undo"]),
                    ]
                }),
        );
        out += "\n\n";
    }
    out
}

/// The services, each limit on a row: what it holds, its calls in flight and
/// waiting, and its rate.
#[must_use]
pub fn services(services: &[Value]) -> String {
    let mut rows = Vec::new();
    for service in services {
        let name = text(&service["service"]);
        let limits = service["limits"].as_array().map_or(&[][..], Vec::as_slice);
        if limits.is_empty() {
            rows.push([
                name,
                "not limited".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]);
            continue;
        }
        for limit in limits {
            rows.push(limit_row(&name, limit));
        }
    }
    let keyed_unread = rows.iter().any(|row| row[2].ends_with(" each key"));
    let mut out = table(
        [
            "SERVICE",
            "LIMITED BY",
            "IN FLIGHT",
            "WAITING",
            "LONGEST WAIT",
            "RATE",
        ],
        rows,
    );
    if keyed_unread {
        out += "\n\nA limit kept per key has a gate for each key: `sas services --key <value>` shows one.";
    }
    out
}

/// One limit of service `service`, as a row of [`services`].
fn limit_row(service: &str, limit: &Value) -> [String; 6] {
    let of = text(&limit["of"]);
    let mut by = match of.strip_prefix("step:") {
        Some(step) => format!("step {step}"),
        None => "its settings".into(),
    };
    if let Some(key) = limit["key"].as_str() {
        by += &format!(", per {key}");
    }
    let gate = &limit["gate"];
    let max = limit["max_concurrency"]
        .as_u64()
        .map_or_else(String::new, |max| format!("/{max}"));
    let rate = limit["per_second"].as_f64().map_or_else(
        || "-".into(),
        |per_second| {
            let tokens = gate["tokens"].as_f64().map_or_else(String::new, |tokens| {
                format!(", {} free now", tokens.floor())
            });
            format!("{per_second}/s, burst {}{tokens}", limit["burst"])
        },
    );
    if gate.is_null() {
        let each = format!("-{max} each key");
        return [service.to_owned(), by, each, "-".into(), "-".into(), rate];
    }
    let more = if gate["more_waiting"].as_bool() == Some(true) {
        "+"
    } else {
        ""
    };
    let longest = gate["longest_wait_ms"].as_u64().map_or_else(
        || "-".into(),
        |ms| humantime::format_duration(std::time::Duration::from_secs(ms / 1000)).to_string(),
    );
    [
        service.to_owned(),
        by,
        format!("{}{max}", gate["in_flight"]),
        format!("{}{more}", gate["waiting"]),
        longest,
        rate,
    ]
}
