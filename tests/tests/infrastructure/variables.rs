//! The functions read exactly the variables `sas_lambda::config` declares, and the SAM
//! template and the CDK construct set exactly those, and the trace exporter's settings.

use std::cell::RefCell;
use std::collections::BTreeSet;

use sas_lambda::config::Config;
use sas_tests::ministack::FUNCTIONS;
use serde_json::Value;

use super::{declared, infra};

#[test]
fn the_functions_read_exactly_the_declared_variables() {
    let asked = RefCell::new(BTreeSet::new());
    Config::from_lookup(|name| {
        asked.borrow_mut().insert(name.to_owned());
        Some(match name {
            "SERVICE_URLS" => "{}".to_owned(),
            "LEASE_SHARDS"
            | "LEASE_BUCKET_SECONDS"
            | "TASK_RETENTION_DAYS"
            | "SUPERVISOR_BATCH" => "1".to_owned(),
            "AUTH_MODE" => "JWT".to_owned(),
            "INGESTION" => "BUFFERED".to_owned(),
            _ => "https://sqs.eu-west-1.amazonaws.com/1/value".to_owned(),
        })
    })
    .expect("a complete configuration");
    assert_eq!(asked.into_inner(), declared());
}

/// What the deployments set: what the configuration reads, and where traces go.
fn deployed() -> BTreeSet<String> {
    let exporter = sas_lambda::TRACE_EXPORT_SETTINGS.map(str::to_owned);
    declared().into_iter().chain(exporter).collect()
}

#[test]
fn the_sam_template_sets_exactly_those_variables() {
    let text = std::fs::read_to_string(infra("template.yaml")).expect("infra/template.yaml");
    let template: serde_norway::Value = serde_norway::from_str(&text).expect("YAML");
    let globals = template["Globals"]["Function"]["Environment"]["Variables"]
        .as_mapping()
        .expect("Globals.Function.Environment.Variables");
    let set: BTreeSet<String> = globals
        .keys()
        .map(|k| k.as_str().expect("a name").to_owned())
        .collect();
    assert_eq!(set, deployed());
    let resources = template["Resources"].as_mapping().expect("resources");
    let functions: Vec<_> = resources
        .iter()
        .filter(|(_, r)| r["Type"].as_str() == Some("AWS::Serverless::Function"))
        .collect();
    assert_eq!(functions.len(), FUNCTIONS.len());
    for (name, function) in functions {
        assert!(
            function["Properties"].get("Environment").is_none(),
            "{name:?} must not add to or change the environment of Globals"
        );
    }
}

#[test]
fn the_cdk_construct_sets_exactly_those_variables() {
    let path = infra("cdk/cdk.out/SchedulerAgentSupervisor.template.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "{} is missing: run ./tests/run, or infra/check, which synthesizes the CDK app",
            path.display()
        )
    });
    let template: Value = serde_json::from_str(&text).expect("JSON");
    let functions: Vec<&Value> = template["Resources"]
        .as_object()
        .expect("resources")
        .values()
        .filter(|r| r["Type"] == "AWS::Lambda::Function")
        .collect();
    assert_eq!(functions.len(), FUNCTIONS.len());
    for function in functions {
        let variables = function["Properties"]["Environment"]["Variables"]
            .as_object()
            .expect("variables");
        assert_eq!(
            variables.keys().cloned().collect::<BTreeSet<_>>(),
            deployed()
        );
    }
}
