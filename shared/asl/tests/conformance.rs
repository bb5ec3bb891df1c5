//! The Amazon States Language against AWS Step Functions itself: every recorded case in
//! `../shared/asl-conformance/cases` (read where it lies, never copied) is run through
//! the language's transitions, in memory, and its result compared with the one AWS gave.
//! Prints `N passed, M failed`, the cases whose only difference is the words of a cause,
//! and each failure with its difference. (`sas-local`'s `asl_conformance` test runs the
//! same cases through the engine.)
//!
//! `SAS_ASL_CONFORMANCE` names another directory of cases; `SAS_ASL_CASE` runs the
//! cases whose name contains it.

#[path = "conformance/cases.rs"]
mod cases;
#[path = "conformance/driver.rs"]
mod driver;

use serde_json::Value;

use cases::{Case, Verdict};
use driver::Execution;
use sas_asl::definition::StateMachine;

/// The share of cases that must pass: every one does today, so a case that stops
/// passing is a regression. (The bar is 97%.)
const REQUIRED_PERCENT: f64 = 100.0;

fn judge(case: &Case) -> Verdict {
    let machine = match StateMachine::from_value(&case.value["definition"]) {
        Ok(_) if case.status() == "INVALID_DEFINITION" => {
            return Verdict::Fail("accepted a definition AWS refused".to_owned());
        }
        Ok(machine) => machine,
        Err(_) if case.status() == "INVALID_DEFINITION" => return Verdict::Pass,
        Err(refusal) => return Verdict::Fail(format!("refused: {refusal}")),
    };
    let lambdas = case.lambdas();
    case.judge(&Execution::run(
        &machine,
        case.value["input"].clone(),
        &lambdas,
    ))
}

#[test]
fn every_recorded_case_runs_as_aws_ran_it() {
    let verdicts: Vec<(String, Verdict)> = cases::read_all()
        .into_iter()
        .map(|case| (case.name().to_owned(), judge(&case)))
        .collect();
    let percent = cases::report(&verdicts);
    assert!(
        percent >= REQUIRED_PERCENT,
        "{percent:.1}% of the cases passed, below the {REQUIRED_PERCENT}% required"
    );
}

/// The judge itself: a case of our own whose expected output is wrong fails, and the
/// same case with the right one passes; a refusal AWS did not make fails.
#[test]
fn the_judge_tells_a_wrong_result_from_a_right_one() {
    let case = |expected: Value| Case {
        value: serde_json::json!({
            "definition": {"StartAt": "P", "States": {"P": {"Type": "Pass", "Parameters": {"n.$": "States.MathAdd($.a, 1)"}, "End": true}}},
            "input": {"a": 41},
            "expect": {"status": "SUCCEEDED", "output": expected},
        }),
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
    let refused = Case {
        value: serde_json::json!({
            "definition": {"StartAt": "P", "States": {"P": {"Type": "Pass", "Next": "Nowhere"}}},
            "input": {},
            "expect": {"status": "SUCCEEDED", "output": {}},
        }),
    };
    assert!(matches!(judge(&refused), Verdict::Fail(_)));
}
