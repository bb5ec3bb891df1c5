//! The fuzz targets of what a task runs: every built-in workflow with its input and
//! the services' answers chosen, and workflow files and CEL conditions of any shape.

use std::sync::LazyLock;

use proptest::prelude::*;
use sas_domain::messages::Outcome;
use sas_domain::workflow::{Registry, Workflow};
use serde_json::{Value, json};

use super::drive::World;
use super::run::{any_json, changed, changes, fuzz};
use super::{inputs, runtime, test_workflows, workflow_files};

/// What a service may answer: any output, a refusal with any reason, an answer it
/// could not keep.
fn answers() -> impl Strategy<Value = Vec<Outcome>> {
    let outcome = prop_oneof![
        4 => any_json().prop_map(|output| Outcome::Succeeded { output }),
        1 => ".{0,40}".prop_map(|error| Outcome::Failed { error }),
        1 => ".{0,40}".prop_map(|error| Outcome::Unusable { error }),
    ];
    prop::collection::vec(outcome, 1..6)
}

#[test]
fn a_task_runs_to_its_end_and_is_shown_whatever_its_input_and_answers() {
    let strategy = (prop::sample::select(inputs()), changes(), answers());
    fuzz(
        "inputs and answers",
        300,
        strategy,
        |((workflow, input), changes, answers)| {
            let world = World::new(Registry::built_in());
            let ran = runtime().block_on(world.run(&workflow, changed(input, &changes), &answers));
            prop_assert!(ran.is_ok(), "{workflow}: {}", ran.err().unwrap_or_default());
            Ok(())
        },
    );
}

/// The workflow files the project ships and tests with, each under a name of its
/// own, so that one changed is a new workflow beside the built-in ones.
static WORKFLOW_FILES: LazyLock<Vec<Value>> = LazyLock::new(|| {
    let shipped = workflow_files("../shared/domain/workflows");
    (shipped.into_iter().chain(test_workflows()))
        .map(|(_, text)| {
            let mut file: Value = serde_json::from_str(&text).expect("JSON");
            file["name"] = json!("fuzzed");
            file
        })
        .collect()
});

/// Text near a CEL condition over `input` and `results`, and text of any kind.
fn condition() -> impl Strategy<Value = String> {
    let atom = prop::sample::select(
        &[
            "input.weight_kg",
            "input.customer_id",
            "results['check-account'].tier",
            "results.x",
            "input.parcels.size()",
            "1",
            "-9223372036854775808",
            "9223372036854775807",
            "1.0e308",
            "'gold'",
            "b'\\xff'",
            "true",
            "null",
            "[1, 2]",
            "{'a': 1}",
            "input.missing",
            "input.items.exists(i, i > 1)",
            "timestamp('2026-01-01T00:00:00Z')",
            "duration('1h')",
            "int('9999999999999999999')",
            "double(input.weight_kg)",
            "string(1)",
            "size(input)",
        ][..],
    );
    let operator = prop::sample::select(
        &[
            " == ", " != ", " < ", " > ", " + ", " - ", " * ", " / ", " % ", " && ", " || ",
            " in ", ".", "[", "(",
        ][..],
    );
    prop_oneof![
        3 => prop::collection::vec((atom, operator), 1..6).prop_map(|parts| {
            let mut text: String = parts.iter().map(|(a, o)| format!("{a}{o}")).collect();
            text.push_str(parts[0].0);
            text
        }),
        1 => ".{0,40}",
        1 => (1_usize..400).prop_map(|depth| format!("{}1{}", "(".repeat(depth), ")".repeat(depth))),
        1 => (1_usize..400).prop_map(|depth| format!("{}true", "!".repeat(depth))),
        1 => (1_usize..200).prop_map(|depth| format!("{}1{}", "[".repeat(depth), "]".repeat(depth))),
    ]
}

/// The changed files that loaded, and ran.
static LOADED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[test]
fn a_workflow_file_of_any_shape_is_refused_or_loaded_and_runs() {
    let file = (
        prop::sample::select(WORKFLOW_FILES.clone()),
        // Unchanged, a file tries its condition alone.
        prop_oneof![Just(Vec::new()), changes()],
        prop::option::of(condition()),
    );
    let input = prop_oneof![
        prop::sample::select(inputs()).prop_map(|(_, input)| input),
        any_json()
    ];
    let strategy = (file, input, answers());
    fuzz(
        "workflow files and conditions",
        300,
        strategy,
        |((file, changes, when), input, answers)| {
            let mut file = changed(file, &changes);
            if let Some(when) = when
                && let Some(step) = file
                    .get_mut("steps")
                    .and_then(|steps| steps.get_mut(1))
                    .and_then(Value::as_object_mut)
            {
                step.insert("when".into(), Value::from(when));
            }
            let text = file.to_string();
            if Workflow::parse("fuzzed.json", &text).is_err() {
                return Ok(());
            }
            let Ok(registry) = Registry::with_files([("fuzzed.json".to_owned(), text)]) else {
                return Ok(());
            };
            LOADED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let world = World::new(registry);
            let name = file["name"].as_str().unwrap_or_default().to_owned();
            let ran = runtime().block_on(world.run(&name, input, &answers));
            prop_assert!(ran.is_ok(), "{file}: {}", ran.err().unwrap_or_default());
            Ok(())
        },
    );
    let loaded = LOADED.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("fuzz workflow files and conditions: {loaded} loaded and ran");
    assert!(
        loaded > 0,
        "no changed file loaded: the target only tries the parser"
    );
}
