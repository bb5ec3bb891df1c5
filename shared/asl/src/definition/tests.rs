use serde_json::json;

use super::{QueryLanguage, StateKind, StateMachine, Target};

fn refusal(definition: serde_json::Value) -> String {
    match StateMachine::from_value(&definition) {
        Ok(_) => panic!("accepted {definition}"),
        Err(refusal) => refusal.to_string(),
    }
}

#[test]
fn reads_a_machine_and_its_languages() {
    let machine = StateMachine::from_value(&json!({
        "QueryLanguage": "JSONata",
        "StartAt": "Call",
        "States": {
            "Call": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "Arguments": {"FunctionName": "f", "Payload": "{% $states.input %}"}, "Next": "Done"},
            "Done": {"Type": "Succeed"}
        }
    }))
    .expect("a valid machine");
    let call = machine.state("Call").expect("the state");
    assert_eq!(call.language, QueryLanguage::Jsonata);
    assert!(
        matches!(&call.kind, StateKind::Task(task) if task.resource.target == Target::LambdaInvoke)
    );
    assert_eq!(call.next.as_deref(), Some("Done"));
}

#[test]
fn refuses_a_missing_target_naming_it() {
    let refused = refusal(json!({"StartAt": "A", "States": {"A": {"Type": "Pass", "Next": "B"}}}));
    assert!(refused.contains("Missing 'Next' target: B"), "{refused}");
    assert!(refused.contains("/States/A"), "{refused}");
}

#[test]
fn refuses_a_field_the_type_does_not_take() {
    let refused =
        refusal(json!({"StartAt": "A", "States": {"A": {"Type": "Succeed", "Result": 1}}}));
    assert!(
        refused.contains("'Result'") && refused.contains("/States/A/Result"),
        "{refused}"
    );
    let refused = refusal(
        json!({"QueryLanguage": "JSONata", "StartAt": "A", "States": {"A": {"Type": "Pass", "InputPath": "$", "End": true}}}),
    );
    assert!(refused.contains("'InputPath'"), "{refused}");
}

#[test]
fn refuses_a_timestamp_that_is_not_rfc3339() {
    let refused = refusal(
        json!({"StartAt": "W", "States": {"W": {"Type": "Wait", "Timestamp": "2016-13-05T21:29:29Z", "End": true}}}),
    );
    assert!(
        refused.contains("RFC3339") && refused.contains("/States/W/Timestamp"),
        "{refused}"
    );
}

#[test]
fn refuses_an_unknown_resource_and_states_all_not_last() {
    let refused = refusal(
        json!({"StartAt": "T", "States": {"T": {"Type": "Task", "Resource": "arn:aws:states:::glue:startJobRun", "End": true}}}),
    );
    assert!(refused.contains("glue:startJobRun"), "{refused}");
    let refused = refusal(json!({"StartAt": "T", "States": {"T": {
        "Type": "Task", "Resource": "arn:aws:lambda:us-east-1:1:function:f", "End": true,
        "Retry": [{"ErrorEquals": ["States.ALL"]}, {"ErrorEquals": ["X"]}]
    }}}));
    assert!(refused.contains("States.ALL"), "{refused}");
}

#[test]
fn refuses_an_unreachable_state_and_a_bad_path() {
    let refused = refusal(
        json!({"StartAt": "A", "States": {"A": {"Type": "Succeed"}, "B": {"Type": "Succeed"}}}),
    );
    assert!(refused.contains("'B' is not reachable"), "{refused}");
    let refused = refusal(
        json!({"StartAt": "A", "States": {"A": {"Type": "Pass", "Parameters": {"x.$": "States.Nope()"}, "End": true}}}),
    );
    assert!(refused.contains("'x.$'"), "{refused}");
}

#[test]
fn refuses_a_name_used_twice_in_the_whole_machine() {
    let refused = refusal(json!({"StartAt": "Par", "States": {
        "Par": {"Type": "Parallel", "Next": "A", "Branches": [
            {"StartAt": "A", "States": {"A": {"Type": "Pass", "End": true}}}]},
        "A": {"Type": "Pass", "End": true}}}));
    assert!(refused.contains("DUPLICATE_STATE_NAME"), "{refused}");
    assert!(refused.contains("Duplicate State name: A"), "{refused}");
}

#[test]
fn finds_a_state_and_its_branch_anywhere() {
    let machine = StateMachine::from_value(&json!({"StartAt": "Par", "States": {
        "Par": {"Type": "Parallel", "End": true, "Branches": [
            {"StartAt": "A", "States": {"A": {"Type": "Pass", "End": true}}},
            {"StartAt": "Each", "States": {"Each": {"Type": "Map", "End": true,
                "ItemProcessor": {"StartAt": "B", "States": {"B": {"Type": "Pass", "End": true}}}}}}]}}}))
    .expect("a valid machine");
    assert_eq!(
        machine.find("B").map(|state| state.name.as_str()),
        Some("B")
    );
    assert_eq!(
        machine.branch("Par", 1).map(|b| b.start_at.as_str()),
        Some("Each")
    );
    assert_eq!(
        machine.branch("Each", 7).map(|b| b.start_at.as_str()),
        Some("B")
    );
    assert!(machine.branch("A", 0).is_none());
    let places: Vec<String> = machine.all_states().into_iter().map(|(at, _)| at).collect();
    assert!(
        places.contains(&"/States/Par/Branches/1/States/Each/ItemProcessor/States/B".to_owned())
    );
}

#[test]
fn a_state_that_may_read_the_context_object_is_told_apart() {
    let machine = StateMachine::from_value(&json!({"StartAt": "A", "States": {
        "A": {"Type": "Pass", "Parameters": {"id.$": "$$.Execution.Id"}, "Next": "B"},
        "B": {"Type": "Pass", "QueryLanguage": "JSONata", "Output": "{% $states.input.x %}", "Next": "C"},
        "C": {"Type": "Pass", "QueryLanguage": "JSONata", "Output": "{% $states.context.State.Name %}", "Next": "D"},
        "D": {"Type": "Pass", "QueryLanguage": "JSONata", "Output": "{% $states %}", "Next": "E"},
        "E": {"Type": "Pass", "End": true}}}))
    .expect("a valid machine");
    let reads = |name: &str| machine.state(name).expect("the state").reads_context;
    assert_eq!(
        ["A", "B", "C", "D", "E"].map(reads),
        [true, false, true, true, false]
    );
}

#[test]
fn an_item_batcher_is_a_distributed_maps_with_a_limit() {
    let map = |mode: &str, batcher: serde_json::Value| {
        json!({"StartAt": "M", "States": {"M": {"Type": "Map", "End": true,
            "ItemBatcher": batcher,
            "ItemProcessor": {"ProcessorConfig": {"Mode": mode},
                "StartAt": "P", "States": {"P": {"Type": "Pass", "End": true}}}}}})
    };
    let accepted = StateMachine::from_value(&map(
        "DISTRIBUTED",
        json!({"MaxItemsPerBatchPath": "$.size", "BatchInput": {"at.$": "$.at"}}),
    ))
    .expect("a batcher");
    let Some(StateKind::Map(state)) = accepted.state("M").map(|state| &state.kind) else {
        panic!("a Map");
    };
    assert!(state.item_batcher.is_some());
    let inline = refusal(map("INLINE", json!({"MaxItemsPerBatch": 2})));
    assert!(
        inline.contains("only supported in a DISTRIBUTED Map"),
        "{inline}"
    );
    assert!(inline.contains("/States/M/ItemBatcher"), "{inline}");
    let unbounded = refusal(map("DISTRIBUTED", json!({"BatchInput": {}})));
    assert!(
        unbounded.contains("MaxItemsPerBatch or MaxInputBytesPerBatch"),
        "{unbounded}"
    );
    let unknown = refusal(map("DISTRIBUTED", json!({"MaxItems": 2})));
    assert!(
        unknown.contains("/States/M/ItemBatcher/MaxItems"),
        "{unknown}"
    );
}

#[test]
fn a_result_writer_exports_to_s3_shapes_or_both_and_nothing_else() {
    use super::{OutputType, Transformation};
    let map = |writer: serde_json::Value| {
        json!({"StartAt": "M", "States": {"M": {"Type": "Map", "End": true,
            "ResultWriter": writer,
            "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED"},
                "StartAt": "P", "States": {"P": {"Type": "Pass", "End": true}}}}}})
    };
    let writer_of = |writer: serde_json::Value| {
        let machine = StateMachine::from_value(&map(writer)).expect("a writer");
        let Some(StateKind::Map(state)) = machine.state("M").map(|state| state.kind.clone()) else {
            panic!("a Map");
        };
        state.result_writer.expect("its writer")
    };
    let exported = writer_of(json!({"Resource": "arn:aws:states:::s3:putObject",
                                    "Parameters": {"Bucket": "b", "Prefix.$": "$.p"}}));
    assert_eq!(
        exported.export,
        Some(json!({"Bucket": "b", "Prefix.$": "$.p"}))
    );
    assert_eq!(exported.transformation, Transformation::None);
    let shaped = writer_of(json!({"WriterConfig": {"Transformation": "FLATTEN",
                                                   "OutputType": "JSONL"}}));
    assert_eq!(
        (shaped.export, shaped.transformation, shaped.output_type),
        (None, Transformation::Flatten, OutputType::JsonLines)
    );
    for (writer, says) in [
        (
            json!({}),
            "a Resource and its Parameters, a WriterConfig, or both",
        ),
        (
            json!({"Resource": "arn:aws:states:::s3:putObject"}),
            "needs its Parameters",
        ),
        (
            json!({"Resource": "arn:aws:states:::s3:getObject", "Parameters": {}}),
            "/States/M/ResultWriter/Resource",
        ),
        (
            json!({"WriterConfig": {"Transformation": "SQUASH"}}),
            "'SQUASH' is not a Transformation",
        ),
        (
            json!({"WriterConfig": {"Format": "JSON"}}),
            "/States/M/ResultWriter/WriterConfig/Format",
        ),
    ] {
        let refused = refusal(map(writer.clone()));
        assert!(refused.contains(says), "{writer}: {refused}");
    }
}
