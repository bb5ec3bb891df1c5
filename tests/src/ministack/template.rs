//! A template as MiniStack can deploy it: SAM's, the CDK app's synthesized one and
//! the CDK's bootstrap template, less what the emulator cannot deploy and plus what it
//! wrongly asks for.

use serde_norway::Value as Yaml;

use super::REGION;

/// A template as MiniStack can deploy it, SAM's (`infra/template.yaml`), the CDK app's
/// synthesized one and the CDK's bootstrap template alike: less what MiniStack cannot
/// deploy and plus what it wrongly asks for (the comment of [`crate::ministack`]), each
/// `MaximumConcurrency` given by a `!Ref` written as the number `parameters` give it (or
/// the parameter's default).
///
/// # Panics
/// When the template is not what the harness expects.
#[must_use]
pub fn emulator_template(source: &str, parameters: &[(&str, &str)]) -> String {
    serde_norway::to_string(&for_the_emulator(source, parameters)).expect("YAML")
}

/// [`emulator_template`] of a JSON template, as JSON (what the CDK's CLI reads).
///
/// # Panics
/// As [`emulator_template`].
#[must_use]
pub fn emulator_template_json(source: &str) -> String {
    serde_json::to_string_pretty(&for_the_emulator(source, &[])).expect("JSON")
}

fn for_the_emulator(source: &str, parameters: &[(&str, &str)]) -> Yaml {
    let mut template: Yaml = serde_norway::from_str(source).expect("the template's YAML");
    let defaults = template.get("Parameters").cloned().unwrap_or_default();
    let resources = template["Resources"]
        .as_mapping_mut()
        .expect("the template's resources");
    // MiniStack: "metric math is not supported", and the stack rolls back.
    resources.retain(|_, resource| {
        resource
            .get("Properties")
            .and_then(|p| p.get("Metrics"))
            .is_none()
    });
    // MiniStack is served over plain HTTP here: the policies' TLS-only denials would
    // refuse every call the functions make (MiniStack evaluates aws:SecureTransport).
    for resource in resources.values_mut() {
        let kind = resource["Type"].as_str().unwrap_or_default();
        let policies = [
            "AWS::SNS::TopicPolicy",
            "AWS::SQS::QueuePolicy",
            "AWS::S3::BucketPolicy",
        ];
        if !policies.contains(&kind) {
            continue;
        }
        let statements = resource["Properties"]["PolicyDocument"]["Statement"]
            .as_sequence_mut()
            .expect("a policy's statements");
        statements.retain(|s| {
            s.get("Condition")
                .and_then(|c| c.get("Bool"))
                .and_then(|b| b.get("aws:SecureTransport"))
                .is_none()
        });
    }
    resources.retain(|_, resource| {
        resource
            .get("Properties")
            .and_then(|p| p.get("PolicyDocument"))
            .is_none_or(|d| d["Statement"].as_sequence().is_some_and(|s| !s.is_empty()))
    });
    for resource in resources.values_mut() {
        emulator_fixes(resource, &defaults, parameters);
    }
    template
}

/// Within a resource: each policy statement allowing `sqs:SendMessage` allows
/// `sqs:SendMessageBatch` too (MiniStack asks for it; AWS authorises a batch send as
/// `sqs:SendMessage`); each allowing a `scheduler:` action allows it on the default
/// group's schedules too (MiniStack names a schedule's resource so, whatever its group); a `MaximumConcurrency: !Ref P` becomes P's number (MiniStack
/// stores a `!Ref`'s value as a string, which stops every SQS poller).
fn emulator_fixes(value: &mut Yaml, defaults: &Yaml, parameters: &[(&str, &str)]) {
    match value {
        Yaml::Mapping(mapping) => {
            if mapping.contains_key("Effect") {
                let actions = match mapping.get("Action") {
                    Some(Yaml::String(action)) => vec![action.clone()],
                    Some(Yaml::Sequence(actions)) => actions
                        .iter()
                        .map(|a| a.as_str().expect("an action").to_owned())
                        .collect(),
                    _ => Vec::new(),
                };
                // MiniStack authorises a schedule's calls as on `schedule/default/NAME`,
                // whatever its group; AWS as on `schedule/GROUP/NAME`.
                if actions.iter().any(|a| a.starts_with("scheduler:"))
                    && let Some(granted) = mapping.get("Resource").cloned()
                {
                    let default_group =
                        format!("arn:aws:scheduler:{REGION}:000000000000:schedule/default/*");
                    let resources = Yaml::Sequence(vec![granted, Yaml::String(default_group)]);
                    mapping.insert("Resource".into(), resources);
                }
                if actions.iter().any(|a| a == "sqs:SendMessage")
                    && !actions.iter().any(|a| a == "sqs:SendMessageBatch")
                {
                    let mut with_batch: Vec<Yaml> = actions.into_iter().map(Yaml::String).collect();
                    with_batch.push(Yaml::String("sqs:SendMessageBatch".into()));
                    mapping.insert("Action".into(), Yaml::Sequence(with_batch));
                }
            }
            if let Some(Yaml::Tagged(reference)) = mapping.get("MaximumConcurrency")
                && reference.tag == "Ref"
            {
                let name = reference.value.as_str().expect("a parameter's name");
                let number = parameters
                    .iter()
                    .find(|(given, _)| *given == name)
                    .map(|(_, value)| serde_norway::from_str(value).expect("a number"))
                    .unwrap_or_else(|| defaults[name]["Default"].clone());
                assert!(
                    number.is_number(),
                    "{name}'s value is no number: {number:?}"
                );
                mapping.insert("MaximumConcurrency".into(), number);
            }
            for nested in mapping.values_mut() {
                emulator_fixes(nested, defaults, parameters);
            }
        }
        Yaml::Sequence(items) => {
            for item in items {
                emulator_fixes(item, defaults, parameters);
            }
        }
        Yaml::Tagged(tagged) => emulator_fixes(&mut tagged.value, defaults, parameters),
        _ => {}
    }
}

/// `infra/template.yaml` as deployed to MiniStack: as `sam build` writes it (each
/// function's `CodeUri` its build directory, named by its logical id) and as
/// [`emulator_template`] adjusts it.
///
/// # Panics
/// When the template is not what the harness expects.
#[must_use]
pub fn deployable_template(source: &str, parameters: &[(&str, &str)]) -> String {
    let mut template = for_the_emulator(source, parameters);
    let resources = template["Resources"]
        .as_mapping_mut()
        .expect("the template's resources");
    for (name, resource) in resources.iter_mut() {
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let name = name.as_str().expect("a logical id").to_owned();
        let resource = resource.as_mapping_mut().expect("a function");
        resource.remove("Metadata");
        let properties = resource
            .get_mut("Properties")
            .and_then(Yaml::as_mapping_mut)
            .expect("a function's properties");
        properties.insert("CodeUri".into(), Yaml::String(name));
    }
    serde_norway::to_string(&template).expect("YAML")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::repository;
    use crate::ministack::FUNCTIONS;
    use serde_json::json;

    fn template() -> String {
        std::fs::read_to_string(repository().join("infra/template.yaml")).expect("template")
    }

    #[test]
    fn the_deployed_template_is_the_template_less_metric_math_and_tls_denials_plus_batch_sends() {
        let source = template();
        let deployed: Yaml = serde_norway::from_str(&deployable_template(
            &source,
            &[("AgentMaxConcurrency", "7")],
        ))
        .expect("YAML");
        let original: Yaml = serde_norway::from_str(&source).expect("YAML");
        let resources = deployed["Resources"].as_mapping().expect("resources");
        let removed: Vec<&str> = original["Resources"]
            .as_mapping()
            .expect("resources")
            .keys()
            .filter(|k| !resources.contains_key(*k))
            .map(|k| k.as_str().expect("id"))
            .collect();
        assert_eq!(
            removed,
            [
                "QueuesTlsOnly",
                "IngestQueuesTlsOnly",
                "PayloadBucketTlsOnly",
                "OldestMessageAlarm",
                "PanicsAlarm",
                "FunctionErrorsAlarm",
                "FunctionThrottlesAlarm"
            ]
        );
        let topic_policy = serde_json::to_string(
            &resources["AlertTopicPolicy"]["Properties"]["PolicyDocument"]["Statement"],
        )
        .expect("json");
        assert!(
            !topic_policy.contains("SecureTransport") && topic_policy.contains("cloudwatch"),
            "the topic's policy less its TLS-only denial: {topic_policy}"
        );
        for (logical_id, _) in FUNCTIONS {
            let properties = &resources[logical_id]["Properties"];
            assert_eq!(properties["CodeUri"].as_str(), Some(logical_id));
            for statement in properties["Policies"][0]["Statement"]
                .as_sequence()
                .expect("statements")
            {
                let actions = serde_json::to_string(&statement["Action"]).expect("json");
                assert_eq!(
                    actions.contains("\"sqs:SendMessage\""),
                    actions.contains("sqs:SendMessageBatch"),
                    "{logical_id}: {actions}"
                );
            }
        }
        assert_eq!(
            deployed["Resources"]["AlertTopic"], original["Resources"]["AlertTopic"],
            "tags such as !GetAtt survive"
        );
        // Numbers, the one given and the other's default.
        let concurrency = |value: &Yaml| serde_json::to_value(value).expect("JSON");
        assert_eq!(
            concurrency(
                &resources["AgentFunction"]["Properties"]["Events"]["Requests"]["Properties"]["ScalingConfig"]
                    ["MaximumConcurrency"]
            ),
            json!(7)
        );
        assert_eq!(
            concurrency(
                &resources["IngestEvents"]["Properties"]["ScalingConfig"]["MaximumConcurrency"]
            ),
            json!(2)
        );
    }
}
