//! A distributed Map's results as its `ResultWriter` gives them: each child's end kept
//! as it comes ([`Writing`]), then, once all have ended, the results shaped as the
//! Map's output, or exported to S3 by the writer's step (an S3 call of its own,
//! after the children), the Map's output then where the manifest is.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use sas_asl::Failure;
use sas_asl::definition::{ResultWriter, State, StateKind, StateMachine};
use sas_asl::run::writer::{self, Child, MapRun};

use super::{Branches, VisitWork, WRITE_RESULTS};
use crate::decide::change::Change;
use crate::task::Order;
use crate::time::Timestamp;
use crate::workflow::Workflow;

/// What a Map with a `ResultWriter` keeps of its children for it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Writing {
    /// The request it exports with (`Bucket`, `Prefix`), worked out when the Map was
    /// entered; none where it only shapes its output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<Value>,
    /// Each child's end, by its place, once it ended.
    #[serde(default)]
    pub ends: Vec<Option<ItemEnd>>,
}

/// How a child of a Map with a `ResultWriter` ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemEnd {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    pub stopped_at: Timestamp,
}

impl Change {
    /// The output of the Map `state` at step `index` whose writer only shapes it, once
    /// its children have ended; `None` where it has no such writer.
    pub(super) fn shaped_results(&self, index: usize, state: &State) -> Option<Value> {
        self.with_results(index, state, |writer, export, run, children| {
            export
                .is_none()
                .then(|| writer::shaped(writer, run, children))
        })
        .flatten()
    }

    /// Whether the visit of the Map at hand exports its results once its children
    /// have ended.
    pub(super) fn exports_results(&self) -> bool {
        writing(&self.task).is_some_and(|(_, writing)| writing.export.is_some())
    }

    /// The children of the Map `state` at step `index` have ended and its writer
    /// exports: its writer's step sent the objects to put, or the Map fails with
    /// `States.ResultWriterFailed` (through its `Retry` and `Catch`).
    pub(super) fn export_results(
        &mut self,
        workflow: &Workflow,
        machine: &StateMachine,
        order: &Order,
        state: &State,
        input: &Value,
        index: usize,
    ) {
        let objects = self
            .with_results(index, state, |writer, export, run, children| {
                export.map(|request| writer::export(writer, request, run, children))
            })
            .flatten()
            .unwrap_or_else(|| {
                Err(Failure::runtime(
                    "a Map's results exported without a writer",
                ))
            });
        // Its children's part of the history is written while they are its work.
        self.work_ended(state, &Ok(Value::Null), false);
        match objects {
            Ok(request) => {
                let work = VisitWork::Service {
                    operation: WRITE_RESULTS.to_owned(),
                    request: Arc::new(request),
                    timeout_seconds: None,
                    heartbeat_seconds: None,
                };
                self.begin_visit(workflow, state, work);
            }
            Err(failure) => self.leave(workflow, machine, order, state, input, Err(failure)),
        }
    }

    /// `then` on the writer of the Map `state` at step `index`, where it exports (its
    /// request), its run, and each child as the writer sees it; `None` where the
    /// visit has no writer.
    fn with_results<T>(
        &self,
        index: usize,
        state: &State,
        then: impl FnOnce(&ResultWriter, Option<&Value>, &MapRun, &[Child]) -> T,
    ) -> Option<T> {
        let (branches, writing) = writing(&self.task)?;
        let StateKind::Map(map) = &state.kind else {
            return None;
        };
        let writer = map.result_writer.as_ref()?;
        let (names, run) = self.map_run(index, state);
        let children = children(branches, writing, &names, &run);
        Some(then(
            writer,
            writing.export.as_ref(),
            &run.borrowed(),
            &children,
        ))
    }

    /// The Map's run, and its children's names: its id drawn from the task, the state
    /// and the visit's round, so that an export sent again writes the same keys.
    fn map_run(&self, index: usize, state: &State) -> (Vec<String>, OwnedMapRun) {
        let of = self.branches_of(index);
        let round = writing(&self.task).map_or(0, |(branches, _)| branches.round);
        let d = crate::sha256_hex(format!("{}/{}/{round}", self.task.id, state.name));
        let id = format!(
            "{}-{}-{}-{}-{}",
            &d[..8],
            &d[8..12],
            &d[12..16],
            &d[16..20],
            &d[20..32]
        );
        let label = format!("{}/{}", self.task.workflow.name, state.name);
        let total = writing(&self.task).map_or(0, |(branches, _)| branches.inputs.len());
        let names = (0..total)
            .map(|item| {
                let item = u32::try_from(item).unwrap_or(u32::MAX);
                of.parent.child(&of.step_name, item).local().to_owned()
            })
            .collect();
        let run = OwnedMapRun {
            arn: format!(
                "arn:aws:states:{}:{}:mapRun:{label}:{id}",
                super::place(),
                super::account()
            ),
            machine_arn: super::machine_arn(&label),
            label,
            id,
        };
        (names, run)
    }
}

/// A [`MapRun`] with its own text.
struct OwnedMapRun {
    arn: String,
    id: String,
    machine_arn: String,
    /// `MACHINE/STATE`: what its children's execution ARNs name.
    label: String,
}

impl OwnedMapRun {
    fn borrowed(&self) -> MapRun<'_> {
        MapRun {
            arn: &self.arn,
            id: &self.id,
            machine_arn: &self.machine_arn,
        }
    }
}

/// The Map's children and what its writer kept of them, where its visit has a writer.
fn writing(task: &crate::task::Task) -> Option<(&Branches, &Writing)> {
    match task.machine.as_ref()?.work.as_ref()? {
        VisitWork::Branches(branches) => Some((branches, branches.writing.as_deref()?)),
        _ => None,
    }
}

/// Each child as the writer sees it.
fn children<'a>(
    branches: &'a Branches,
    writing: &Writing,
    names: &[String],
    run: &OwnedMapRun,
) -> Vec<Child<'a>> {
    (branches.inputs.iter().zip(&branches.outputs))
        .zip(names)
        .enumerate()
        .map(|(item, ((input, output), name))| {
            let end = writing.ends.get(item).and_then(Option::as_ref);
            Child {
                execution_arn: super::execution_arn(&run.label, name),
                name: name.clone(),
                input,
                output,
                failed: end.is_some_and(|end| end.failed),
                start_date: end
                    .and_then(|end| end.started_at)
                    .map(Timestamp::to_rfc3339),
                stop_date: end.map(|end| end.stopped_at.to_rfc3339()),
            }
        })
        .collect()
}
