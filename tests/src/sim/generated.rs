//! The seed's own workflows, generated at random, the longest they sleep, and the
//! services limited to so many calls at once.

use std::collections::BTreeMap;
use std::time::Duration;

use sas_domain::workflow::Workflow;
use serde_json::{Value, json};

/// The workflows of the seed's own: `generated`, a line of two to four items, each a
/// step, a parallel step of two or three branches (one of them, at most, with a
/// parallel step inside), or a step that starts children of `generated-kid` (a map
/// over `input.items`, or one child), or a wait (a timer, of seconds or of 20
/// minutes, or a callback without a service); and `generated-kid`, a line of one or
/// two steps. The steps are undone by a compensation, read-only, or neither, at
/// random; some calls wait for a callback after their service answers, with
/// heartbeats or not; some steps have a condition on the input. Every service is the
/// simulated remote. With them, the longest a task of `generated` sleeps
/// ([`sleeps_in_line`]): up to sixteen timers of 20 minutes one after another.
pub(super) fn generated_workflows(random: &mut fastrand::Rng) -> ([Workflow; 2], Duration) {
    fn step(random: &mut fastrand::Rng, names: &mut usize) -> Value {
        *names += 1;
        let name = format!("s{names}");
        let mut step = json!({"name": name, "agent": format!("svc{}", random.usize(1..4)), "call": format!("/{name}")});
        match random.usize(0..10) {
            0..=5 => step["compensation"] = json!(format!("/{name}/undo")),
            6..=7 => step["read_only"] = json!(true),
            _ => {}
        }
        if random.usize(0..8) == 0 {
            step["limit"] = json!({"max_concurrency": random.usize(1..3)});
        }
        if random.usize(0..6) == 0 {
            let timeout = random.usize(5..60);
            step["callback"] = json!({"timeout": format!("{timeout}s")});
            if random.bool() {
                step["callback"]["heartbeat"] = json!(format!("{}s", random.usize(2..timeout)));
            }
        }
        step
    }
    fn wait(random: &mut fastrand::Rng, names: &mut usize) -> Value {
        *names += 1;
        let name = format!("w{names}");
        match random.usize(0..5) {
            0..=1 => json!({"name": name, "sleep": format!("{}s", random.usize(1..30))}),
            2 => json!({"name": name, "sleep": "20m"}),
            _ => {
                json!({"name": name, "callback": {"timeout": format!("{}s", random.usize(5..60))}})
            }
        }
    }
    fn conditional(random: &mut fastrand::Rng, mut step: Value) -> Value {
        if random.usize(0..5) == 0 {
            step["when"] = json!(format!("size(input.items) >= {}", random.usize(0..4)));
        }
        step
    }
    fn children(random: &mut fastrand::Rng, names: &mut usize) -> Value {
        *names += 1;
        let name = format!("c{names}");
        if random.bool() {
            return json!({"name": name, "workflow": "generated-kid", "input": {"order_id": "input.order_id"}});
        }
        let tolerated = match random.usize(0..3) {
            0 => json!(0),
            1 => json!(1),
            _ => json!("50%"),
        };
        json!({"name": name, "map": {
            "items": "input.items", "workflow": "generated-kid",
            "max_concurrency": random.usize(1..4), "tolerated_failures": tolerated,
            "input": {"order_id": "item.key"},
        }})
    }
    fn sequence(
        random: &mut fastrand::Rng,
        names: &mut usize,
        len: usize,
        depth: u32,
    ) -> Vec<Value> {
        (0..len)
            .map(|_| match random.usize(0..8) {
                0..=1 if depth < 2 => {
                    *names += 1;
                    let name = format!("p{names}");
                    let branches: Vec<Value> = (0..random.usize(2..4))
                        .map(|_| {
                            let len = random.usize(1..3);
                            json!(sequence(random, names, len, depth + 1))
                        })
                        .collect();
                    json!({"name": name, "parallel": branches})
                }
                2 => children(random, names),
                3 => {
                    let wait = wait(random, names);
                    conditional(random, wait)
                }
                _ => {
                    let step = step(random, names);
                    conditional(random, step)
                }
            })
            .collect()
    }
    let defaults = json!({
        "complete_by": "10s",
        "retry": {"attempts": 3, "initial_backoff": "100ms", "max_backoff": "1s"},
        "supervisor": {"failure_threshold": 2, "retry_delay": "1s", "extended_wait": "20s"}
    });
    let mut names = 0;
    let len = random.usize(2..5);
    let steps = sequence(random, &mut names, len, 0);
    let sleeps = sleeps_in_line(&steps);
    let parent = json!({
        "name": "generated",
        "version": 1,
        "input": {"order_id": "string", "items": "array<object>"},
        "defaults": defaults,
        "steps": steps,
    });
    let len = random.usize(1..3);
    let kid = json!({
        "name": "generated-kid",
        "version": 1,
        "input": {"order_id": "string"},
        "defaults": defaults,
        "steps": (0..len).map(|_| step(random, &mut names)).collect::<Vec<_>>(),
    });
    let workflows = [parent, kid].map(|text| {
        Workflow::parse("generated.json", &text.to_string()).expect("a generated workflow is valid")
    });
    (workflows, sleeps)
}

/// The longest that a line of steps as written sleeps, one timer after another: a
/// parallel step's longest branch, whether or not its condition holds.
fn sleeps_in_line(steps: &[Value]) -> Duration {
    steps
        .iter()
        .map(|step| match (&step["parallel"], &step["sleep"]) {
            (Value::Array(branches), _) => branches
                .iter()
                .map(|branch| sleeps_in_line(branch.as_array().map_or(&[], Vec::as_slice)))
                .max()
                .unwrap_or_default(),
            (_, Value::String(sleep)) => {
                humantime::parse_duration(sleep).expect("a generated sleep is valid")
            }
            _ => Duration::ZERO,
        })
        .sum()
}

/// Some of the simulated services (and the drone's) limited to one to three calls at
/// once, at random.
pub(super) fn service_limits(random: &mut fastrand::Rng) -> BTreeMap<String, u32> {
    ["svc1", "svc2", "svc3", "drone"]
        .into_iter()
        .filter_map(|service| {
            let limited = random.bool();
            let max = random.u32(1..4);
            limited.then(|| (service.to_owned(), max))
        })
        .collect()
}
