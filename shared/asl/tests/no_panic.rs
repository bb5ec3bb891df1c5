//! No input brings the language down: definitions, paths, intrinsic functions and
//! JSONata expressions of any shape are refused or evaluated, never a panic.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use sas_asl::definition::StateMachine;
use sas_asl::{intrinsics, jsonata, path};

/// Text drawn mostly from the characters these languages give meaning to.
fn syntax() -> impl Strategy<Value = String> {
    proptest::string::string_regex(r"[$.@\[\]()?*:,'\\ {}%a-z0-9<>=!&|\-_\x22States]{0,40}")
        .expect("a valid pattern")
}

/// JSON of any shape, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|n| json!(n)),
        syntax().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    syntax(),
                    Just("Type".to_owned()),
                    Just("Next".to_owned()),
                    Just("End".to_owned()),
                    Just("States".to_owned()),
                    Just("StartAt".to_owned()),
                ],
                inner,
                0..6
            )
            .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn a_path_is_selected_or_refused(text in syntax(), input in json_value()) {
        let _ = path::select(&text, &input, &json!({}), &|_| None);
        let _ = path::place(input, &text, json!(1));
    }

    #[test]
    fn an_intrinsic_is_evaluated_or_refused(body in syntax(), input in json_value()) {
        for text in [format!("States.{body}"), format!("States.Format({body})"), format!("States.Array({body})")] {
            if let Ok(call) = intrinsics::parse(&text) {
                let _ = intrinsics::evaluate(&call, &input, &json!({}), &|_| None);
            }
        }
    }

    #[test]
    fn a_jsonata_expression_is_evaluated_or_refused(text in syntax(), input in json_value()) {
        let _ = jsonata::evaluate(&text, &json!({"input": input}), &Map::new());
    }

    #[test]
    fn a_definition_is_read_or_refused(definition in json_value()) {
        let _ = StateMachine::from_value(&definition);
        let _ = StateMachine::parse(&definition.to_string());
    }

    #[test]
    fn a_machine_of_one_state_of_any_fields_is_read_or_refused(
        kind in prop_oneof![Just("Pass"), Just("Task"), Just("Choice"), Just("Wait"), Just("Map"), Just("Parallel"), Just("Fail")],
        fields in json_value(),
    ) {
        let mut state = match fields {
            Value::Object(fields) => fields,
            _ => serde_json::Map::new(),
        };
        state.insert("Type".to_owned(), json!(kind));
        let _ = StateMachine::from_value(&json!({"StartAt": "S", "States": {"S": state}}));
    }
}
