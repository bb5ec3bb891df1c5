//! The seed's own Step Functions state machine, generated at random, and what an
//! execution of it that succeeds must come to.
//!
//! The machine is a line of two to five blocks, each counted on entry (a JSONata
//! `Pass` adding one to the variable `count`): a Task (a Lambda function's `Invoke`,
//! with `Retry`, `Catch`, `TimeoutSeconds` or a task token at random, or an
//! activity's task), a Wait, a
//! Choice loop over a Task (its iterations counted too), a Parallel of two or three
//! branches, or an inline Map over `$.items`. A `Catch` goes where the Task would
//! have gone, so an execution that succeeds has made every block's count whatever
//! failed on the way: its output is `{"count": N}`, N known in advance, and each
//! state that waits was visited a number of times known in advance. A transition
//! lost or made twice shows in one or the other.

use std::collections::BTreeMap;
use std::time::Duration;

use sas_domain::machine::Status;
use sas_domain::task::{Task, TaskState};
use sas_domain::workflow::Workflow;
use serde_json::{Map, Value, json};

use super::remote::Applied;

/// The generated machine's name (its file `generated-asl.asl.json`).
pub(super) const MACHINE: &str = "generated-asl";

/// The activity its Tasks on an activity name, which the simulation's worker polls.
pub(super) const ACTIVITY: &str = "sim-work";

/// The seed's state machine, what an execution of it that succeeds comes to, and
/// the longest its Waits sleep, one after another.
pub(super) struct GeneratedMachine {
    pub(super) workflow: Workflow,
    pub(super) expected: Expected,
    pub(super) sleeps: Duration,
}

/// What an execution of the generated machine that succeeds comes to.
#[derive(Debug, Default)]
pub(super) struct Expected {
    /// The `count` of its output.
    pub(super) count: u64,
    /// How many times it (or a branch's, an item's execution) visits each state that
    /// waits.
    pub(super) visits: BTreeMap<String, u32>,
}

/// The machine being written: its states, and what it will come to.
struct Writer<'r> {
    random: &'r mut fastrand::Rng,
    states: Map<String, Value>,
    count: u64,
    visits: BTreeMap<String, u32>,
    sleeps: Duration,
}

/// `state` going on to `next`, or ending where there is none.
fn linked(mut state: Value, next: Option<&str>) -> Value {
    match next {
        Some(next) => state["Next"] = json!(next),
        None => state["End"] = json!(true),
    }
    state
}

/// A JSONata Pass that assigns `assign` and goes on to `next`.
fn counting(assign: Value, next: &str) -> Value {
    json!({"Type": "Pass", "QueryLanguage": "JSONata", "Assign": assign, "Next": next})
}

impl Writer<'_> {
    /// A Task `name` calling a function, visited `times` by a successful run, then
    /// `next`; caught to `next` at random where there is one.
    fn task(
        &mut self,
        states: &mut Map<String, Value>,
        name: &str,
        times: u32,
        next: Option<&str>,
    ) {
        let random = &mut *self.random;
        let mut payload = json!({"state": name});
        let mut task = json!({
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke",
            "ResultPath": "$.last",
        });
        if random.usize(0..8) == 0 {
            // An activity's task: taken by the simulation's worker, its token used by
            // the holder, or left to time out.
            task["Resource"] = json!(format!(
                "arn:aws:states:us-east-1:000000000000:activity:{ACTIVITY}"
            ));
            let timeout = random.u64(5..60);
            task["TimeoutSeconds"] = json!(timeout);
            if random.bool() {
                task["HeartbeatSeconds"] = json!(random.u64(2..timeout));
            }
            task["Parameters"] = payload.clone();
        } else if random.usize(0..5) == 0 {
            // A task token, used by the simulation's holder or left to time out.
            task["Resource"] = json!("arn:aws:states:::lambda:invoke.waitForTaskToken");
            payload["callback_token.$"] = json!("$$.Task.Token");
            let timeout = random.u64(5..60);
            task["TimeoutSeconds"] = json!(timeout);
            if random.bool() {
                task["HeartbeatSeconds"] = json!(random.u64(2..timeout));
            }
        } else if random.usize(0..4) == 0 {
            task["TimeoutSeconds"] = json!(random.u64(5..60));
        }
        if task.get("Parameters").is_none() {
            task["Parameters"] =
                json!({"FunctionName": format!("svc{}", random.usize(1..4)), "Payload": payload});
        }
        if random.usize(0..3) > 0 {
            task["Retry"] = json!([{"ErrorEquals": ["States.ALL"], "IntervalSeconds": random.u64(1..4),
                                    "MaxAttempts": random.u64(1..4), "BackoffRate": 2.0}]);
        }
        if let Some(next) = next.filter(|_| random.bool()) {
            task["Catch"] =
                json!([{"ErrorEquals": ["States.ALL"], "ResultPath": "$.caught", "Next": next}]);
        }
        states.insert(name.to_owned(), linked(task, next));
        self.visits.insert(name.to_owned(), times);
    }

    /// A Wait `name` of a few seconds, then `next`.
    fn wait(
        &mut self,
        states: &mut Map<String, Value>,
        name: &str,
        times: u32,
        next: Option<&str>,
    ) {
        let seconds = self.random.u64(1..30);
        self.sleeps += Duration::from_secs(seconds) * times;
        let wait = json!({"Type": "Wait", "Seconds": seconds});
        states.insert(name.to_owned(), linked(wait, next));
        self.visits.insert(name.to_owned(), times);
    }

    /// A branch (of a Parallel, or a Map's items): one or two Tasks, a Wait at times.
    fn branch(&mut self, prefix: &str) -> Value {
        let mut states = Map::new();
        let names: Vec<String> = (0..self.random.usize(1..3))
            .map(|i| format!("{prefix}{i}"))
            .collect();
        for (i, name) in names.iter().enumerate() {
            let next = names.get(i + 1).map(String::as_str);
            match self.random.usize(0..4) {
                0 => self.wait(&mut states, name, 1, next),
                _ => self.task(&mut states, name, 1, next),
            }
        }
        json!({"StartAt": names[0], "States": states})
    }

    /// Block `k`'s body, entered at `b{k}`, going on to `next`; its count added.
    fn block(&mut self, k: usize, next: &str) {
        let mut states = std::mem::take(&mut self.states);
        let body = format!("x{k}");
        self.count += 1;
        let counted = json!({"count": "{% $count + 1 %}"});
        states.insert(format!("b{k}"), counting(counted, &body));
        match self.random.usize(0..8) {
            0..=2 => self.task(&mut states, &body, 1, Some(next)),
            3 => self.wait(&mut states, &body, 1, Some(next)),
            4..=5 => {
                // A loop: the Task, then the iteration counted, then the Choice.
                let iterations = self.random.u32(1..4);
                let (task, again) = (format!("t{k}"), format!("again{k}"));
                let index = format!("i{k}");
                states.insert(body, counting(json!({index.clone(): 0}), &task));
                let step = format!("step{k}");
                self.task(&mut states, &task, iterations, Some(&step));
                let counted = json!({
                    index.clone(): format!("{{% ${index} + 1 %}}"),
                    "count": "{% $count + 1 %}",
                });
                states.insert(step, counting(counted, &again));
                let condition = format!("{{% ${index} < {iterations} %}}");
                states.insert(
                    again,
                    json!({"Type": "Choice", "QueryLanguage": "JSONata",
                           "Choices": [{"Condition": condition, "Next": task}], "Default": next}),
                );
                self.count += u64::from(iterations);
            }
            6 => {
                let branches: Vec<Value> = (0..self.random.usize(2..4))
                    .map(|j| self.branch(&format!("p{k}b{j}s")))
                    .collect();
                let parallel =
                    json!({"Type": "Parallel", "Branches": branches, "ResultPath": null});
                self.visits.insert(body.clone(), 1);
                states.insert(body, linked(parallel, Some(next)));
            }
            _ => {
                let mut processor = self.branch(&format!("m{k}s"));
                processor["ProcessorConfig"] = json!({"Mode": "INLINE"});
                let map = json!({"Type": "Map", "ItemsPath": "$.items", "ResultPath": null,
                                 "MaxConcurrency": self.random.usize(1..4), "ItemProcessor": processor});
                self.visits.insert(body.clone(), 1);
                states.insert(body, linked(map, Some(next)));
            }
        }
        self.states = states;
    }
}

/// The seed's state machine.
pub(super) fn generated_machine(random: &mut fastrand::Rng) -> GeneratedMachine {
    let mut writer = Writer {
        random,
        states: Map::new(),
        count: 0,
        visits: BTreeMap::new(),
        sleeps: Duration::ZERO,
    };
    let blocks = writer.random.usize(2..6);
    writer
        .states
        .insert("start".into(), counting(json!({"count": 0}), "b0"));
    for k in 0..blocks {
        let next = if k + 1 < blocks {
            format!("b{}", k + 1)
        } else {
            "done".to_owned()
        };
        writer.block(k, &next);
    }
    let done = json!({"Type": "Pass", "QueryLanguage": "JSONata",
                      "Output": {"count": "{% $count %}"}, "End": true});
    writer.states.insert("done".into(), done);
    let text = json!({"StartAt": "start", "States": writer.states}).to_string();
    let workflow = Workflow::parse(&format!("{MACHINE}.asl.json"), &text)
        .expect("a generated state machine is valid");
    GeneratedMachine {
        workflow,
        expected: Expected {
            count: writer.count,
            visits: writer.visits,
        },
        sleeps: writer.sleeps,
    }
}

impl super::Sim {
    /// A state machine's execution once settled: its status says its task's state; one
    /// of the generated machine that succeeded counted every block and visited each
    /// state as often as the machine says; and no call was made for a visit its
    /// record never reached (each visit is written before its call is sent). A
    /// resubmitted execution runs again from its start under its new run's keys,
    /// as a new execution would: its earlier run's calls are its earlier run's.
    pub(super) fn check_machine_at_end(
        &self,
        task: &Task,
        applied: &BTreeMap<(String, String), Applied>,
    ) {
        let Some(run) = task.machine.as_deref() else {
            // Cancelled before its first state was entered.
            return;
        };
        let violation = |what: String| self.world.violation(format!("task {} {what}", task.id));
        let succeeded = run.status == Status::Succeeded;
        if succeeded != (task.state == TaskState::Processed) || run.status == Status::Running {
            violation(format!(
                "{:?} with its execution {:?}",
                task.state, run.status
            ));
        }
        let ours = format!("{}/{}/", task.id, task.run);
        for ((_, key), effect) in applied {
            let Some((state, visit)) = key
                .strip_prefix(&ours)
                .and_then(|_| effect.step.split_once('#'))
            else {
                continue;
            };
            let reached = run.visit(state);
            if visit.parse::<u32>().is_ok_and(|visit| visit > reached) {
                violation(format!(
                    "called {state} for visit {visit}, its record at visit {reached}"
                ));
            }
        }
        if !succeeded || &*task.workflow.name != MACHINE {
            return;
        }
        for (state, visits) in &run.visits {
            let expected = self.machine.visits.get(state).copied().unwrap_or_default();
            if *visits != expected {
                violation(format!("visited {state} {visits} times, not {expected}"));
            }
        }
        let count = run.output.as_deref().map(|output| output["count"].clone());
        if task.parent.is_none() && count != Some(json!(self.machine.count)) {
            let expected = self.machine.count;
            violation(format!(
                "succeeded counting {count:?} blocks and loops, not {expected}"
            ));
        }
    }
}
