//! A distributed Map's results as its `ResultWriter` gives them: each child's result
//! shaped as `WriterConfig.Transformation` says, then either the state's result, or
//! exported to S3 under `Prefix/<map run's id>/` (a file of the results of each
//! status, `SUCCEEDED_0.json`, `FAILED_0.json`, and `manifest.json` naming them),
//! the state's result then where the manifest is.

use serde_json::{Value, json};

use super::Visit;
use crate::definition::{OutputType, ResultWriter, StateKind, Transformation};
use crate::{Failure, errors};

/// A child of the Map, as its results tell it.
pub struct Child<'a> {
    /// Its execution's ARN and name.
    pub execution_arn: String,
    pub name: String,
    pub input: &'a Value,
    /// Its output, or its `{"Error", "Cause"}` where it failed.
    pub output: &'a Value,
    pub failed: bool,
    /// When it started and stopped (RFC 3339), where known.
    pub start_date: Option<String>,
    pub stop_date: Option<String>,
}

/// The Map's run: its ARN, the id its results are written under, and the ARN its
/// children's executions name as their machine's.
pub struct MapRun<'a> {
    pub arn: &'a str,
    pub id: &'a str,
    pub machine_arn: &'a str,
}

/// The request of the writer of the Map being visited, worked out on its input: the
/// bucket and prefix it exports to. `None` where it exports nothing.
pub fn export_request(visit: &Visit) -> Result<Option<Value>, Failure> {
    let StateKind::Map(map) = &visit.state.kind else {
        return Ok(None);
    };
    let Some(export) = map.result_writer.as_ref().and_then(|w| w.export.as_ref()) else {
        return Ok(None);
    };
    let effective = visit.effective_input()?;
    super::reader::request(visit, &effective, export).map(Some)
}

/// The Map's result where its writer exports nothing: its children's results shaped,
/// in their order.
#[must_use]
pub fn shaped(writer: &ResultWriter, run: &MapRun, children: &[Child]) -> Value {
    let mut results = Vec::with_capacity(children.len());
    for child in children {
        shape(writer.transformation, run, child, &mut results);
    }
    Value::Array(results)
}

/// What the writer puts for an export to `request`'s bucket: the file of each status
/// that has results, then the manifest, as `{"Bucket", "MapRunArn", "Objects":
/// [{"Key", "Body"}]}` (the manifest last, so that it names only files put).
///
/// # Errors
/// `States.ResultWriterFailed` where the request names no bucket.
pub fn export(
    writer: &ResultWriter,
    request: &Value,
    run: &MapRun,
    children: &[Child],
) -> Result<Value, Failure> {
    let failed = |cause: &str| Failure::new(errors::RESULT_WRITER_FAILED, cause);
    let bucket = match request.get("Bucket") {
        Some(Value::String(bucket)) if !bucket.is_empty() => bucket,
        _ => return Err(failed("The ResultWriter's request must name a Bucket")),
    };
    let prefix = match request.get("Prefix") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(prefix)) if prefix.is_empty() || prefix.ends_with('/') => prefix.clone(),
        Some(Value::String(prefix)) => format!("{prefix}/"),
        Some(_) => return Err(failed("The ResultWriter's Prefix must be a string")),
    };
    let folder = format!("{prefix}{}/", run.id);
    let mut objects = Vec::new();
    // Every status is listed; none is ever pending once the children have ended.
    let mut files = serde_json::Map::from_iter([("PENDING".to_owned(), json!([]))]);
    for (status, failed) in [("SUCCEEDED", false), ("FAILED", true)] {
        let mut results = Vec::new();
        for child in children.iter().filter(|child| child.failed == failed) {
            shape(writer.transformation, run, child, &mut results);
        }
        let mut listed = Vec::new();
        if !results.is_empty() {
            let key = format!("{folder}{status}_0.json");
            let body = match writer.output_type {
                OutputType::Json => crate::json_text(&Value::Array(results)),
                OutputType::JsonLines => (results.iter().map(crate::json_text))
                    .collect::<Vec<_>>()
                    .join("\n"),
            };
            listed.push(json!({"Key": key, "Size": body.len()}));
            objects.push(json!({"Key": key, "Body": body}));
        }
        files.insert(status.to_owned(), Value::Array(listed));
    }
    let manifest = json!({
        "DestinationBucket": bucket,
        "MapRunArn": run.arn,
        "ResultFiles": files,
    });
    objects.push(
        json!({"Key": format!("{folder}manifest.json"), "Body": crate::json_text(&manifest)}),
    );
    Ok(json!({"Bucket": bucket, "MapRunArn": run.arn, "Objects": objects}))
}

/// The Map's result once the objects of `request` ([`export`]) are put: its run's
/// ARN, and where the manifest is.
#[must_use]
pub fn exported(request: &Value) -> Value {
    let manifest = request
        .pointer("/Objects")
        .and_then(Value::as_array)
        .and_then(|objects| objects.last())
        .and_then(|object| object.get("Key"))
        .cloned()
        .unwrap_or(Value::Null);
    json!({
        "MapRunArn": request.get("MapRunArn").cloned().unwrap_or(Value::Null),
        "ResultWriterDetails": {
            "Bucket": request.get("Bucket").cloned().unwrap_or(Value::Null),
            "Key": manifest,
        },
    })
}

/// Adds `child`'s results, shaped by `transformation`, to `results`. A failed child's
/// is its description whatever the transformation, as in Step Functions.
fn shape(transformation: Transformation, run: &MapRun, child: &Child, results: &mut Vec<Value>) {
    match transformation {
        _ if child.failed => results.push(described(run, child)),
        Transformation::None => results.push(described(run, child)),
        Transformation::Compact => results.push(child.output.clone()),
        Transformation::Flatten => match child.output {
            Value::Array(items) => results.extend(items.iter().cloned()),
            output => results.push(output.clone()),
        },
    }
}

/// `child`'s execution described as Step Functions exports it.
fn described(run: &MapRun, child: &Child) -> Value {
    let mut described = json!({
        "ExecutionArn": child.execution_arn,
        "Input": crate::json_text(child.input),
        "InputDetails": {"Included": true},
        "Name": child.name,
        "RedriveCount": 0,
        "StateMachineArn": run.machine_arn,
        "Status": if child.failed { "FAILED" } else { "SUCCEEDED" },
    });
    if child.failed {
        for field in ["Error", "Cause"] {
            if let Some(text) = child.output.get(field) {
                described[field] = text.clone();
            }
        }
    } else {
        described["Output"] = Value::String(crate::json_text(child.output));
        described["OutputDetails"] = json!({"Included": true});
    }
    for (field, date) in [
        ("StartDate", &child.start_date),
        ("StopDate", &child.stop_date),
    ] {
        if let Some(date) = date {
            described[field] = Value::String(date.clone());
        }
    }
    described
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(transformation: Transformation, output_type: OutputType) -> ResultWriter {
        ResultWriter {
            export: None,
            transformation,
            output_type,
        }
    }

    const RUN: MapRun = MapRun {
        arn: "arn:aws:states:us-east-1:000000000000:mapRun:m/Each:7",
        id: "7",
        machine_arn: "arn:aws:states:us-east-1:000000000000:stateMachine:m/Each",
    };

    fn child<'a>(name: &str, input: &'a Value, output: &'a Value, failed: bool) -> Child<'a> {
        Child {
            execution_arn: format!("arn:aws:states:us-east-1:000000000000:execution:m/Each:{name}"),
            name: name.to_owned(),
            input,
            output,
            failed,
            start_date: Some("2026-12-04T10:00:00.000Z".to_owned()),
            stop_date: None,
        }
    }

    #[test]
    fn results_are_shaped_as_the_transformation_says_a_failed_childs_described() {
        let (one, two) = (json!(1), json!(2));
        let (list, failure) = (json!(["a", "b"]), json!({"Error": "E", "Cause": "c"}));
        let children = [
            child("c-0", &one, &list, false),
            child("c-1", &two, &failure, true),
        ];
        let flat = shaped(
            &writer(Transformation::Flatten, OutputType::Json),
            &RUN,
            &children,
        );
        assert_eq!(flat[0], "a");
        assert_eq!(flat[1], "b");
        assert_eq!(flat[2]["Status"], "FAILED");
        assert_eq!(flat[2]["Error"], "E");
        assert_eq!(flat[2]["Input"], "2");
        let compact = shaped(
            &writer(Transformation::Compact, OutputType::Json),
            &RUN,
            &children,
        );
        assert_eq!(compact[0], list);
        let none = shaped(
            &writer(Transformation::None, OutputType::Json),
            &RUN,
            &children,
        );
        assert_eq!(none[0]["Output"], "[\"a\",\"b\"]");
        assert_eq!(none[0]["StartDate"], "2026-12-04T10:00:00.000Z");
        assert_eq!(none[0]["StateMachineArn"], RUN.machine_arn);
        assert!(none[0].get("StopDate").is_none());
    }

    #[test]
    fn an_export_puts_a_file_a_status_then_the_manifest_naming_them() {
        let (one, two, three) = (
            json!(1),
            json!({"ok": true}),
            json!({"Error": "E", "Cause": "c"}),
        );
        let children = [
            child("c-0", &one, &two, false),
            child("c-1", &one, &three, true),
            child("c-2", &one, &two, false),
        ];
        let lines = writer(Transformation::Compact, OutputType::JsonLines);
        let request = json!({"Bucket": "out", "Prefix": "runs"});
        let put = export(&lines, &request, &RUN, &children).expect("exported");
        let objects = put["Objects"].as_array().expect("objects");
        assert_eq!(objects.len(), 3);
        assert_eq!(objects[0]["Key"], "runs/7/SUCCEEDED_0.json");
        assert_eq!(objects[0]["Body"], "{\"ok\":true}\n{\"ok\":true}");
        assert_eq!(objects[1]["Key"], "runs/7/FAILED_0.json");
        let manifest: Value =
            serde_json::from_str(objects[2]["Body"].as_str().expect("text")).expect("JSON");
        assert_eq!(manifest["DestinationBucket"], "out");
        assert_eq!(manifest["MapRunArn"], RUN.arn);
        assert_eq!(manifest["ResultFiles"]["SUCCEEDED"][0]["Size"], 23);
        assert_eq!(manifest["ResultFiles"]["PENDING"], json!([]));
        assert_eq!(
            exported(&put),
            json!({"MapRunArn": RUN.arn,
                   "ResultWriterDetails": {"Bucket": "out", "Key": "runs/7/manifest.json"}})
        );
        // A prefix that ends with '/' is not given another; none is none.
        let bare = export(&lines, &json!({"Bucket": "out"}), &RUN, &[]).expect("exported");
        assert_eq!(bare["Objects"][0]["Key"], "7/manifest.json");
        let failure = export(&lines, &json!({"Prefix": "p"}), &RUN, &[]).expect_err("no bucket");
        assert_eq!(failure.error, errors::RESULT_WRITER_FAILED);
    }
}
