//! The parallel step: `{"name": "checks", "parallel": [[<steps>], [<steps>], ...]}`,
//! branches of steps run at the same time, the step ending when every branch has.
//!
//! A workflow's steps are kept flat, one record each, and a parallel step has no
//! record of its own: resolving it gives each step of a branch the steps it waits for
//! ([`StepDefinition::after`](super::StepDefinition::after)), the first of a branch
//! waiting for what the parallel step waits for, and the step after the parallel
//! step waiting for the last of every branch; and each step the branches it is in
//! ([`Branch`]), for the views.

use std::collections::HashSet;

use schemars::JsonSchema;
use serde::Serialize;

use crate::kinds::foreign_setting;
use crate::workflow::Guard;
use crate::workflow::file::{Fault, Resolver, StepFile};

/// A branch of a parallel step that a step is in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Branch {
    /// The parallel step's name.
    pub parallel: String,
    /// The branch's position in it, from 0.
    pub branch: usize,
}

/// Resolves parallel step `step` with its `branches`, run once the steps `after` are
/// done, the steps named `known` done by then, inside the branches `within`, under
/// the conditions `guards` (its own `when` among them, which every step of its
/// branches checks): the steps a step after it waits for (the last of each branch)
/// and the steps known done once it has ended (those of every branch, beside `known`).
pub(crate) fn resolve(
    resolver: &mut Resolver<'_>,
    step: &StepFile,
    branches: Vec<Vec<StepFile>>,
    after: &[usize],
    known: &HashSet<String>,
    within: &[Branch],
    guards: &[Guard],
) -> Result<(Vec<usize>, HashSet<String>), Fault> {
    let at = |field: &str, message: &str| step.fault(field, message);
    if let Some(field) = foreign_setting(step, &[]) {
        return Err(at(
            field,
            "a parallel step calls nothing and starts nothing itself: its branches' steps do",
        ));
    }
    if branches.is_empty() {
        return Err(at("parallel", "must list at least one branch"));
    }
    let mut ends = Vec::new();
    let mut known_after = known.clone();
    for (index, branch) in branches.into_iter().enumerate() {
        if branch.is_empty() {
            return Err(at(
                &format!("parallel[{index}]"),
                "a branch must have at least one step",
            ));
        }
        let mut inside = within.to_vec();
        inside.push(Branch {
            parallel: step.name.clone(),
            branch: index,
        });
        let (branch_ends, branch_known) =
            resolver.sequence(branch, after.to_vec(), known.clone(), &inside, guards)?;
        ends.extend(branch_ends);
        known_after.extend(branch_known);
    }
    Ok((ends, known_after))
}
