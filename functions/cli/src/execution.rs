//! A state machine's task as `sas tasks execution` prints it: its states layer by
//! layer from its start (indented by layer), each one's visits and how its last went,
//! the path taken, the last input and output of each state visited, and its latest
//! events as Step Functions lists them.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::Value;

use crate::render::{table, terminal_safe, text};

/// The execution `view` (`GET /tasks/{id}/execution`) in text.
#[must_use]
pub fn execution(view: &Value) -> String {
    let states = view["states"].as_array().map_or(&[][..], Vec::as_slice);
    let rows = states.iter().map(|state| {
        let layer = state["layer"].as_u64().unwrap_or(0) as usize;
        let next: Vec<String> = (state["next"].as_array().into_iter().flatten())
            .map(text)
            .collect();
        [
            format!("{}{}", "  ".repeat(layer), text(&state["name"])),
            text(&state["type"]),
            text(&state["visits"]),
            text(&state["visited"]).replace('_', " "),
            next.join(", "),
        ]
    });
    let mut out = format!(
        "{}  {} v{}  {}\n\n{}\n",
        text(&view["id"]),
        text(&view["workflow"]),
        text(&view["version"]),
        text(&view["status"]),
        table(["STATE", "TYPE", "VISITS", "LAST VISIT", "NEXT"], rows)
    );
    let path: Vec<String> = (view["path"].as_array().into_iter().flatten())
        .map(text)
        .collect();
    let earlier = if view["whole"] == Value::Bool(true) {
        ""
    } else {
        "… → "
    };
    out.push_str(&format!("\npath: {earlier}{}\n", path.join(" → ")));
    for state in states
        .iter()
        .filter(|state| state["visits"].as_u64() > Some(0))
    {
        out.push_str(&format!(
            "\n{} ({})\n",
            text(&state["name"]),
            text(&state["type"])
        ));
        for field in ["input", "output"] {
            if let Some(value) = state.get(field) {
                out.push_str(&format!(
                    "  {field}: {}\n",
                    terminal_safe(&value.to_string(), false)
                ));
            }
        }
        if let Some(error) = state.get("error") {
            let cause = state.get("cause").map(text).unwrap_or_default();
            out.push_str(&format!("  error: {}: {cause}\n", text(error)));
        }
    }
    let events = view["events"].as_array().map_or(&[][..], Vec::as_slice);
    if !events.is_empty() {
        let rows = events.iter().map(|event| {
            let details = (event.as_object().into_iter().flatten())
                .find_map(|(field, details)| field.ends_with("EventDetails").then_some(details));
            [
                text(&event["id"]),
                text(&event["type"]),
                details.map_or_else(|| "-".to_owned(), |details| text(&details["name"])),
                at(&event["timestamp"]),
            ]
        });
        let listed = table(["ID", "EVENT", "STATE", "AT"], rows);
        out.push_str(&format!("\nevents, the latest first:\n{listed}\n"));
    }
    out
}

/// A time in epoch seconds, as Step Functions' events give it, in RFC 3339.
fn at(seconds: &Value) -> String {
    seconds
        .as_f64()
        .filter(|seconds| (0.0..1e11).contains(seconds))
        .map_or_else(
            || text(seconds),
            |seconds| {
                let at = UNIX_EPOCH + Duration::from_secs_f64(seconds);
                humantime::format_rfc3339_millis(at).to_string()
            },
        )
}
