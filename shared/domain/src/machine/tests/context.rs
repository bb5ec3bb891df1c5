//! The context object a branch reads: `$$.Execution.Input` is the execution's input in
//! a Map's items and a Parallel's branches.

use serde_json::json;

use super::{machine, run, run_children};
use crate::task::TaskState;

#[test]
fn a_branch_reads_the_executions_input_not_its_own() {
    let workflow = machine(json!({
        "StartAt": "Each",
        "States": {
            "Each": {"Type": "Map", "ItemsPath": "$.items", "ResultPath": "$.each", "Next": "Both",
                     "ItemProcessor": {"StartAt": "Tag", "States": {
                        "Tag": {"Type": "Pass", "End": true,
                                "Parameters": {"tag.$": "$$.Execution.Input.tag", "v.$": "$"}}}}},
            "Both": {"Type": "Parallel", "End": true, "Branches": [
                {"StartAt": "Read", "States": {"Read": {"Type": "Pass", "End": true,
                    "Parameters": {"tag.$": "$$.Execution.Input.tag", "each.$": "$.each"}}}}]}
        }
    }));
    let (_, order, claim) = super::started(&workflow, json!({"items": [1, 2], "tag": "x"}));
    let (task, _) = run_children(&workflow, &order, claim);
    assert_eq!(task.state, TaskState::Processed, "{:?}", run(&task));
    assert_eq!(
        run(&task).output.as_deref(),
        Some(&json!([{"tag": "x", "each": [{"tag": "x", "v": 1}, {"tag": "x", "v": 2}]}]))
    );
}
