//! A distributed Map's items in batches (`ItemBatcher`): each child is given
//! `{"BatchInput", "Items"}`.

use serde_json::json;

use super::{machine, run, run_children};
use crate::task::TaskState;

#[test]
fn a_batcher_gives_each_child_as_many_items_as_fit_its_limits() {
    let workflow = machine(json!({
        "StartAt": "Each",
        "States": {
            "Each": {"Type": "Map", "ItemsPath": "$.items", "End": true,
                     "ItemSelector": {"v.$": "$$.Map.Item.Value"},
                     "ItemBatcher": {"MaxItemsPerBatchPath": "$.size",
                                     "MaxInputBytesPerBatch": 70,
                                     "BatchInput": {"from.$": "$.from"}},
                     "ItemProcessor": {
                        "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
                        "StartAt": "Count", "States": {"Count": {"Type": "Pass", "End": true,
                            "Parameters": {"n.$": "States.ArrayLength($.Items)",
                                           "from.$": "$.BatchInput.from"}}}}}
        }
    }));
    let items = json!(["a", "b", "c", "d", "e", "ffffffffffffffffffff"]);
    let (_, order, claim) =
        super::started(&workflow, json!({"items": items, "size": 2, "from": "x"}));
    let (task, ids) = run_children(&workflow, &order, claim);
    assert_eq!(task.state, TaskState::Processed, "{:?}", run(&task));
    // Two a batch, but the long item is alone: with the fifth its batch passes 70 bytes.
    assert_eq!(
        run(&task).output.as_deref(),
        Some(&json!([{"n": 2, "from": "x"}, {"n": 2, "from": "x"},
                     {"n": 1, "from": "x"}, {"n": 1, "from": "x"}]))
    );
    assert_eq!(ids.len(), 4);
}

#[test]
fn an_item_larger_than_a_batch_fails_the_map() {
    let workflow = machine(json!({
        "StartAt": "Each",
        "States": {
            "Each": {"Type": "Map", "End": true,
                     "ItemBatcher": {"MaxInputBytesPerBatch": 20},
                     "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED"},
                        "StartAt": "P", "States": {"P": {"Type": "Pass", "End": true}}}}
        }
    }));
    let (_, _, claim) = super::started(&workflow, json!(["a much longer item than twenty"]));
    let task = claim.next.expect("the task");
    assert_eq!(task.state, TaskState::Error);
    assert_eq!(run(&task).error.as_deref(), Some("States.Runtime"));
    assert!(
        run(&task)
            .cause
            .as_deref()
            .is_some_and(|c| c.contains("MaxInputBytesPerBatch")),
        "{:?}",
        run(&task).cause
    );
}
