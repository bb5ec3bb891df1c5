//! A distributed Map's items in batches (`ItemBatcher`): each child is given
//! `{"BatchInput", "Items"}`.

use serde_json::json;

use super::{machine, run, run_children};
use crate::machine::ServiceAnswer;
use crate::messages::{AgentResponse, Outcome};
use crate::task::TaskState;
use crate::time::Timestamp;

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

/// A distributed Map whose items are the rows of a CSV object in S3, caught when the
/// object cannot be read.
fn reading() -> crate::workflow::Workflow {
    machine(json!({
        "StartAt": "Each",
        "States": {
            "Each": {"Type": "Map", "End": true,
                     "ItemReader": {"Resource": "arn:aws:states:::s3:getObject",
                                    "ReaderConfig": {"InputType": "CSV", "MaxItems": 2},
                                    "Parameters": {"Bucket": "orders", "Key.$": "$.key"}},
                     "ItemSelector": {"id.$": "$$.Map.Item.Value.id"},
                     "Catch": [{"ErrorEquals": ["States.ItemReaderFailed"], "Next": "Unread"}],
                     "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED"},
                        "StartAt": "P", "States": {"P": {"Type": "Pass", "End": true}}}},
            "Unread": {"Type": "Pass", "End": true}
        }
    }))
}

#[test]
fn a_reader_reads_the_maps_items_from_s3_before_its_children_start() {
    let workflow = reading();
    let (_, order, claim) = super::started(&workflow, json!({"key": "today.csv"}));
    let task = claim.next.clone().expect("claimed");
    let read = super::dispatched(&claim).remove(0);
    assert_eq!(
        (read.agent.as_str(), read.path.as_str()),
        ("s3", "GetObject")
    );
    assert_eq!(read.step_name, "Each (ItemReader)");
    assert!(
        read.idempotency_key.ends_with("Each (ItemReader)#1"),
        "{}",
        read.idempotency_key
    );
    assert_eq!(
        read.payload.value(),
        json!({"Bucket": "orders", "Key": "today.csv"})
    );
    let object = json!("id,kg\no-1,2\no-2,3\no-3,4\n");
    let answer = super::services::service_answered(&read, object);
    let decision = crate::decide::on_response(&task, &workflow, &order, &answer, Timestamp(5));
    let (task, ids) = run_children(&workflow, &order, decision);
    assert_eq!(task.state, TaskState::Processed, "{:?}", run(&task));
    assert_eq!(
        run(&task).output.as_deref(),
        Some(&json!([{"id": "o-1"}, {"id": "o-2"}])),
        "the first two rows (MaxItems)"
    );
    assert_eq!(ids.len(), 2);
}

#[test]
fn an_object_that_is_not_there_or_does_not_read_fails_the_map_as_its_reader_failed() {
    let workflow = reading();
    let refusal =
        json!({"Error": "S3.NoSuchKeyException", "Cause": "The specified key does not exist."});
    let refused = Outcome::Failed {
        error: refusal.to_string(),
    };
    let not_text = Outcome::Succeeded {
        output: serde_json::to_value(ServiceAnswer {
            body: json!({"not": "text"}),
            status: 200,
            headers: Default::default(),
            status_text: None,
        })
        .expect("an answer"),
    };
    for (outcome, cause) in [(refused, "S3.NoSuchKeyException"), (not_text, "not text")] {
        let (_, order, claim) = super::started(&workflow, json!({"key": "k"}));
        let task = claim.next.clone().expect("claimed");
        let read = super::dispatched(&claim).remove(0);
        let answer = AgentResponse::answering(read, outcome);
        let decision = crate::decide::on_response(&task, &workflow, &order, &answer, Timestamp(5));
        let task = decision.next.expect("recorded");
        assert_eq!(task.state, TaskState::Processed, "caught: {:?}", run(&task));
        let output = run(&task).output.as_deref().cloned().unwrap_or_default();
        assert_eq!(
            output["Error"],
            json!("States.ItemReaderFailed"),
            "{output}"
        );
        assert!(
            output["Cause"].as_str().is_some_and(|c| c.contains(cause)),
            "{output}"
        );
    }
}

/// A distributed Map that tolerates a failed child and exports its results to S3.
fn writing(config: serde_json::Value) -> crate::workflow::Workflow {
    machine(json!({
        "StartAt": "Each",
        "States": {
            "Each": {"Type": "Map", "End": true, "ToleratedFailureCount": 1,
                     "ResultWriter": {"Resource": "arn:aws:states:::s3:putObject",
                                      "Parameters": {"Bucket": "out", "Prefix.$": "$.prefix"},
                                      "WriterConfig": config},
                     "ItemsPath": "$.items",
                     "Catch": [{"ErrorEquals": ["States.ResultWriterFailed"], "Next": "Unwritten"}],
                     "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED"},
                        "StartAt": "Odd?", "States": {
                            "Odd?": {"Type": "Choice", "Default": "Yes", "Choices": [
                                {"Variable": "$", "NumericEquals": 1, "Next": "No"}]},
                            "No": {"Type": "Fail", "Error": "Odd", "Cause": "one"},
                            "Yes": {"Type": "Pass", "Parameters": {"n.$": "$"}, "End": true}}}},
            "Unwritten": {"Type": "Pass", "End": true}
        }
    }))
}

#[test]
fn a_writer_exports_the_results_by_status_then_the_map_names_its_manifest() {
    let workflow = writing(json!({"Transformation": "COMPACT", "OutputType": "JSONL"}));
    let (_, order, claim) =
        super::started(&workflow, json!({"items": [0, 1, 2], "prefix": "runs"}));
    let (task, children, effects) = super::run_children_then(&[&workflow], &order, claim);
    assert_eq!(children.len(), 3);
    let write = super::dispatches(&effects).remove(0);
    assert_eq!(
        (write.agent.as_str(), write.path.as_str()),
        ("s3", "PutObject")
    );
    assert_eq!(write.step_name, "Each (ResultWriter)");
    let request = write.payload.value();
    let objects = request["Objects"].as_array().expect("objects");
    let keys: Vec<&str> = objects.iter().filter_map(|o| o["Key"].as_str()).collect();
    let run_id = keys[0]
        .strip_prefix("runs/")
        .and_then(|key| key.strip_suffix("/SUCCEEDED_0.json"))
        .expect("the run's folder");
    assert_eq!(run_id.len(), 36, "a UUID: {run_id}");
    assert_eq!(
        keys,
        [
            format!("runs/{run_id}/SUCCEEDED_0.json"),
            format!("runs/{run_id}/FAILED_0.json"),
            format!("runs/{run_id}/manifest.json"),
        ]
    );
    assert_eq!(objects[0]["Body"], "{\"n\":0}\n{\"n\":2}");
    let failed: serde_json::Value =
        serde_json::from_str(objects[1]["Body"].as_str().expect("text")).expect("a line");
    assert_eq!(failed["Status"], "FAILED");
    assert_eq!(failed["Error"], "Odd");
    assert_eq!(failed["Input"], "1");
    let child = &children[1].id;
    assert!(
        failed["ExecutionArn"]
            .as_str()
            .is_some_and(|arn| arn.ends_with(&format!(":execution:{}/Each:{child}", workflow.name))),
        "{failed}"
    );
    let answer = super::services::service_answered(&write, json!({"Keys": keys}));
    let decision = crate::decide::on_response(&task, &workflow, &order, &answer, Timestamp(9));
    let task = decision.next.expect("recorded");
    assert_eq!(task.state, TaskState::Processed, "{:?}", run(&task));
    let output = run(&task).output.as_deref().cloned().unwrap_or_default();
    assert_eq!(
        output["ResultWriterDetails"],
        json!({"Bucket": "out", "Key": format!("runs/{run_id}/manifest.json")})
    );
    let arn = output["MapRunArn"].as_str().unwrap_or_default();
    assert!(
        arn.ends_with(&format!(":mapRun:{}/Each:{run_id}", workflow.name)),
        "{arn}"
    );

    // S3's refusal is the writer's failure, which the Map's catcher takes.
    let (_, order, claim) = super::started(&workflow, json!({"items": [0], "prefix": "p"}));
    let (task, _, effects) = super::run_children_then(&[&workflow], &order, claim);
    let write = super::dispatches(&effects).remove(0);
    let refusal = json!({"Error": "S3.AccessDenied", "Cause": "Access Denied"});
    let refused = Outcome::Failed {
        error: refusal.to_string(),
    };
    let answer = AgentResponse::answering(write, refused);
    let decision = crate::decide::on_response(&task, &workflow, &order, &answer, Timestamp(9));
    let task = decision.next.expect("recorded");
    let output = run(&task).output.as_deref().cloned().unwrap_or_default();
    assert_eq!(output["Error"], "States.ResultWriterFailed", "{output}");
    assert!(
        output["Cause"]
            .as_str()
            .is_some_and(|c| c.contains("S3.AccessDenied")),
        "{output}"
    );
}

#[test]
fn a_writer_without_a_resource_shapes_the_maps_output_and_puts_nothing() {
    let workflow = machine(json!({
        "StartAt": "Each",
        "States": {
            "Each": {"Type": "Map", "End": true,
                     "ResultWriter": {"WriterConfig": {"Transformation": "FLATTEN"}},
                     "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED"},
                        "StartAt": "Twice", "States": {"Twice": {"Type": "Pass", "End": true,
                            "Parameters": {"both.$": "States.Array($, $)"},
                            "OutputPath": "$.both"}}}}
        }
    }));
    let (_, order, claim) = super::started(&workflow, json!(["a", "b"]));
    let (task, _) = run_children(&workflow, &order, claim);
    assert_eq!(task.state, TaskState::Processed, "{:?}", run(&task));
    assert_eq!(
        run(&task).output.as_deref(),
        Some(&json!(["a", "a", "b", "b"]))
    );
    assert!(workflow.step_index("Each (ResultWriter)").is_none());
}

#[test]
fn a_reader_of_a_listing_gives_each_object_under_the_prefix_as_an_item() {
    let workflow = machine(json!({
        "StartAt": "Each",
        "States": {
            "Each": {"Type": "Map", "End": true,
                     "ItemReader": {"Resource": "arn:aws:states:::s3:listObjectsV2",
                                    "Parameters": {"Bucket": "photos", "Prefix.$": "$.day"}},
                     "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED"},
                        "StartAt": "Key", "States": {"Key": {"Type": "Pass", "End": true,
                            "OutputPath": "$.Key"}}}}
        }
    }));
    let (_, order, claim) = super::started(&workflow, json!({"day": "2026-12-04/"}));
    let task = claim.next.clone().expect("claimed");
    let list = super::dispatched(&claim).remove(0);
    assert_eq!(
        (
            list.agent.as_str(),
            list.path.as_str(),
            list.step_name.as_str()
        ),
        ("s3", "ListObjectsV2", "Each (ItemReader)")
    );
    assert_eq!(
        list.payload.value(),
        json!({"Bucket": "photos", "Prefix": "2026-12-04/"})
    );
    let listed =
        json!([{"Key": "2026-12-04/a.jpg", "Size": 3}, {"Key": "2026-12-04/b.jpg", "Size": 4}]);
    let answer = super::services::service_answered(&list, json!(listed.to_string()));
    let decision = crate::decide::on_response(&task, &workflow, &order, &answer, Timestamp(5));
    let (task, _) = run_children(&workflow, &order, decision);
    assert_eq!(
        run(&task).output.as_deref(),
        Some(&json!(["2026-12-04/a.jpg", "2026-12-04/b.jpg"]))
    );
    // A listing's items are its objects: it takes no InputType.
    let refused = crate::workflow::Workflow::parse(
        "m.asl.json",
        &json!({"StartAt": "M", "States": {"M": {"Type": "Map", "End": true,
            "ItemReader": {"Resource": "arn:aws:states:::s3:listObjectsV2",
                           "ReaderConfig": {"InputType": "CSV"}, "Parameters": {"Bucket": "b"}},
            "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED"},
                "StartAt": "P", "States": {"P": {"Type": "Pass", "End": true}}}}}})
        .to_string(),
    )
    .expect_err("refused");
    assert_eq!(refused.field, "/States/M/ItemReader/ReaderConfig/InputType");
}
