//! The Amazon States Language against AWS Step Functions itself: every recorded case in
//! `../shared/asl-conformance/cases` (read where it lies, never copied) is run, and its
//! result compared with the one AWS gave. Prints `N passed, M failed`, the cases whose
//! only difference is the words of a cause, and each failure with its difference.
//!
//! `SAS_ASL_CONFORMANCE` names another directory of cases; `SAS_ASL_CASE` runs the
//! cases whose name contains it.

#[path = "conformance/compare.rs"]
mod compare;
#[path = "conformance/driver.rs"]
mod driver;

use std::path::PathBuf;

use serde_json::Value;

use compare::{Rules, Verdict, cause_value};
use driver::{Execution, Outcome};
use sas_asl::definition::StateMachine;

/// The share of cases that must pass: every one does today, so a case that stops
/// passing is a regression. (The bar is 97%.)
const REQUIRED_PERCENT: f64 = 100.0;

fn cases_dir() -> PathBuf {
    match std::env::var_os("SAS_ASL_CONFORMANCE") {
        Some(dir) => PathBuf::from(dir),
        None => {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/asl-conformance/cases")
        }
    }
}

fn judge(case: &Value) -> Verdict {
    let expect = &case["expect"];
    let rules = Rules::of(case);
    let status = expect["status"].as_str().unwrap_or_default();
    let machine = match StateMachine::from_value(&case["definition"]) {
        Ok(machine) => machine,
        Err(_) if status == "INVALID_DEFINITION" => return Verdict::Pass,
        Err(refusal) => return Verdict::Fail(format!("refused: {refusal}")),
    };
    if status == "INVALID_DEFINITION" {
        return Verdict::Fail("accepted a definition AWS refused".to_owned());
    }
    let lambdas = case
        .get("lambdas")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let outcome = Execution::run(&machine, case["input"].clone(), &lambdas);
    match (status, outcome) {
        ("SUCCEEDED", Outcome::Succeeded(output)) => {
            match rules.difference("/output", &expect["output"], Some(&output)) {
                None => Verdict::Pass,
                Some(difference) => Verdict::Fail(difference),
            }
        }
        ("FAILED", Outcome::Failed(failure)) => {
            let text = |value: Option<&Value>| {
                value.and_then(Value::as_str).unwrap_or_default().to_owned()
            };
            if text(expect.get("error")) != failure.error {
                return Verdict::Fail(format!(
                    "error {:?}, expected {:?}",
                    failure.error,
                    text(expect.get("error"))
                ));
            }
            let expected_cause = expect
                .get("cause")
                .cloned()
                .unwrap_or(Value::String(String::new()));
            let actual_cause = cause_value(&failure.cause);
            match rules.difference("/cause", &expected_cause, Some(&actual_cause)) {
                None => Verdict::Pass,
                Some(difference) => Verdict::CauseWords(difference),
            }
        }
        ("TIMED_OUT", Outcome::TimedOut) => Verdict::Pass,
        (expected, outcome) => Verdict::Fail(format!("{outcome:?}, expected {expected}")),
    }
}

#[test]
fn every_recorded_case_runs_as_aws_ran_it() {
    let dir = cases_dir();
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|error| {
        panic!(
            "the conformance cases are read from {} ({error}); they live beside the repository in \
             ../shared/asl-conformance, or set SAS_ASL_CONFORMANCE to their directory",
            dir.display()
        )
    });
    let only = std::env::var("SAS_ASL_CASE").ok();
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "json")
        })
        .filter(|path| {
            only.as_ref()
                .is_none_or(|only| path.to_string_lossy().contains(only.as_str()))
        })
        .collect();
    paths.sort();
    let (mut passed, mut cause_words, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    for path in &paths {
        let text = std::fs::read_to_string(path).expect("a readable case");
        let case: Value = serde_json::from_str(&text).expect("a case in JSON");
        let name = case["name"].as_str().unwrap_or_default().to_owned();
        match judge(&case) {
            Verdict::Pass => passed.push(name),
            Verdict::CauseWords(difference) => cause_words.push((name, difference)),
            Verdict::Fail(difference) => failed.push((name, difference)),
        }
    }
    for (name, difference) in &failed {
        println!("FAILED {name}\n    {difference}");
    }
    for (name, difference) in &cause_words {
        println!("CAUSE WORDS {name}\n    {difference}");
    }
    let total = paths.len();
    println!(
        "{} passed, {} failed ({} of the failures differ only in the words of a cause), of {total} cases",
        passed.len(),
        failed.len() + cause_words.len(),
        cause_words.len(),
    );
    assert!(total > 0, "no cases in {}", dir.display());
    let percent = passed.len() as f64 * 100.0 / total as f64;
    assert!(
        only.is_some() || percent >= REQUIRED_PERCENT,
        "{percent:.1}% of the cases passed, below the {REQUIRED_PERCENT}% required"
    );
}

/// The judge itself: a case of our own whose expected output is wrong fails, and the
/// same case with the right one passes; a refusal AWS did not make fails.
#[test]
fn the_judge_tells_a_wrong_result_from_a_right_one() {
    let case = |expected: Value| {
        serde_json::json!({
            "definition": {"StartAt": "P", "States": {"P": {"Type": "Pass", "Parameters": {"n.$": "States.MathAdd($.a, 1)"}, "End": true}}},
            "input": {"a": 41},
            "expect": {"status": "SUCCEEDED", "output": expected},
        })
    };
    assert_eq!(judge(&case(serde_json::json!({"n": 42}))), Verdict::Pass);
    assert!(matches!(
        judge(&case(serde_json::json!({"n": 43}))),
        Verdict::Fail(_)
    ));
    assert!(matches!(
        judge(&case(serde_json::json!({"n": 42, "m": 1}))),
        Verdict::Fail(_)
    ));
    let refused = serde_json::json!({
        "definition": {"StartAt": "P", "States": {"P": {"Type": "Pass", "Next": "Nowhere"}}},
        "input": {},
        "expect": {"status": "SUCCEEDED", "output": {}},
    });
    assert!(matches!(judge(&refused), Verdict::Fail(_)));
}
