//! Which fields each state's `Type` takes, in each query language: a field outside its
//! list is refused, as Step Functions' schema refuses it.

use super::QueryLanguage;

const EVERY_STATE: &[&str] = &["Type", "Comment", "QueryLanguage"];
const FLOWING: &[&str] = &["Next", "End", "Assign"];
const JSONPATH_IO: &[&str] = &["InputPath", "OutputPath"];
const RESULT: &[&str] = &["ResultPath", "ResultSelector"];
const ERRORS: &[&str] = &["Retry", "Catch"];
const JSONATA_OUT: &[&str] = &["Output"];

/// The fields a state of `type_name` may have in `language`, or `None` for an unknown
/// type.
pub(super) fn allowed(type_name: &str, language: QueryLanguage) -> Option<Vec<&'static str>> {
    let jsonpath = language == QueryLanguage::JsonPath;
    let mut fields: Vec<&'static str> = EVERY_STATE.to_vec();
    let mut add = |list: &[&'static str]| fields.extend_from_slice(list);
    let (own, own_jsonpath, own_jsonata): (&[&str], &[&str], &[&str]) = match type_name {
        "Pass" => (&["Result"], &["Parameters", "ResultPath"], &[]),
        "Task" => (
            &[
                "Resource",
                "Credentials",
                "TimeoutSeconds",
                "HeartbeatSeconds",
            ],
            &["Parameters", "TimeoutSecondsPath", "HeartbeatSecondsPath"],
            &["Arguments"],
        ),
        "Choice" => (&["Choices", "Default", "Assign"], &[], &[]),
        "Wait" => (
            &["Seconds", "Timestamp"],
            &["SecondsPath", "TimestampPath"],
            &[],
        ),
        "Succeed" => (&[], &[], &[]),
        "Fail" => (&["Error", "Cause"], &["ErrorPath", "CausePath"], &[]),
        "Parallel" => (&["Branches"], &["Parameters"], &["Arguments"]),
        "Map" => (
            &[
                "ItemProcessor",
                "Iterator",
                "ItemSelector",
                "ItemReader",
                "ItemBatcher",
                "ResultWriter",
                "MaxConcurrency",
                "ToleratedFailurePercentage",
                "ToleratedFailureCount",
                "Label",
            ],
            &[
                "ItemsPath",
                "Parameters",
                "MaxConcurrencyPath",
                "ToleratedFailurePercentagePath",
                "ToleratedFailureCountPath",
            ],
            &["Items"],
        ),
        _ => return None,
    };
    add(own);
    add(if jsonpath { own_jsonpath } else { own_jsonata });
    if !matches!(type_name, "Succeed" | "Fail" | "Choice") {
        add(FLOWING);
    }
    if !matches!(type_name, "Fail") {
        add(if jsonpath { JSONPATH_IO } else { JSONATA_OUT });
    }
    if matches!(type_name, "Task" | "Parallel" | "Map") {
        add(ERRORS);
        if jsonpath {
            add(RESULT);
        }
    }
    Some(fields)
}
