//! A step's conditions: its own `when`,
//! `"when": "results['check-account'].tier == 'gold'"`, and a parallel step's around
//! it. A step whose condition does not hold at its turn is Skipped.

use std::collections::HashSet;

use crate::workflow::Condition;
use crate::workflow::file::{Fault, StepFile};
use crate::workflow::values::Results;

/// A condition a step runs under: the step's own `when`, or a parallel step's around
/// it. It sees the results of the steps done before its place, and no others, so that
/// it holds the same however the branches beside it run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    /// The expression.
    pub condition: Condition,
    /// The steps whose results it sees, by name.
    pub sees: Vec<String>,
}

impl Guard {
    /// Whether it holds, for the task's input and the results of its steps so far.
    ///
    /// # Errors
    /// The expression's failure (a missing field, a value that is not a boolean).
    pub fn holds(&self, input: &serde_json::Value, results: &Results<'_>) -> Result<bool, String> {
        let seen: Results<'_> = results
            .iter()
            .filter(|(name, _)| self.sees.iter().any(|seen| seen == *name))
            .map(|(name, value)| (*name, *value))
            .collect();
        self.condition.holds(input, &seen)
    }
}

/// The guard of `step`'s `when`, if it has one, seeing the steps `known` done: the
/// only results it may read.
pub(super) fn guard(step: &StepFile, known: &HashSet<String>) -> Result<Option<Guard>, Fault> {
    let Some(text) = &step.when else {
        return Ok(None);
    };
    let refused = |message: String| step.fault("when", message);
    let condition = Condition::parse(text).map_err(refused)?;
    if let Some(unknown) = condition
        .results_named()
        .iter()
        .find(|name| !known.contains(*name))
    {
        return Err(refused(format!(
            "'{text}' reads the result of '{unknown}', which is not a step done before this one"
        )));
    }
    let mut sees: Vec<String> = known.iter().cloned().collect();
    sees.sort();
    Ok(Some(Guard { condition, sees }))
}
