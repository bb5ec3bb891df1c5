//! A template's IAM as comparable JSON: policy statements, the alert topic's key,
//! each topic's and queue's resource policy, and each function's grants.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::{Deployed, MANAGED_POLICIES, POLLING, Platform, STREAM_READING};

impl Deployed {
    /// A policy statement as comparable JSON: its Sid (a label) left out, `*` as a
    /// principal written as IAM reads it.
    fn statement(&self, statement: &Value) -> Value {
        let principals: Vec<String> = match &statement["Principal"] {
            Value::Null => Vec::new(),
            Value::String(s) if s == "*" => vec!["AWS:*".to_owned()],
            Value::Object(kinds) => {
                let mut all: Vec<String> = kinds
                    .iter()
                    .flat_map(|(kind, who)| {
                        self.texts(who)
                            .into_iter()
                            .map(move |who| format!("{kind}:{who}"))
                    })
                    .collect();
                all.sort();
                all
            }
            other => panic!("{}: an unexpected principal {other}", self.name),
        };
        let conditions: Value = statement["Condition"]
            .as_object()
            .map(|operators| {
                operators
                    .iter()
                    .map(|(operator, keys)| {
                        let keys: serde_json::Map<String, Value> = keys
                            .as_object()
                            .expect("condition keys")
                            .iter()
                            .map(|(key, values)| (key.clone(), json!(self.texts(values))))
                            .collect();
                        (operator.clone(), Value::Object(keys))
                    })
                    .collect::<serde_json::Map<_, _>>()
                    .into()
            })
            .unwrap_or(Value::Null);
        json!({
            "effect": statement["Effect"],
            "principals": principals,
            "actions": self.texts(&statement["Action"]),
            "resources": self.texts(&statement["Resource"]),
            "conditions": conditions,
        })
    }

    fn statements(&self, document: &Value) -> Vec<Value> {
        let mut statements: Vec<Value> = document["Statement"]
            .as_array()
            .expect("statements")
            .iter()
            .map(|s| self.statement(s))
            .collect();
        statements.sort_by_key(Value::to_string);
        statements
    }

    /// The alert topic's encryption key, whether it rotates, and its policy.
    pub(super) fn topic_encryption(&self) -> Value {
        let topics: Vec<_> = self.of_type("AWS::SNS::Topic").collect();
        assert_eq!(topics.len(), 1, "{}: one topic", self.name);
        let key = &topics[0].1["Properties"]["KmsMasterKeyId"];
        assert!(
            !key.is_null(),
            "{}: the alert topic is not encrypted",
            self.name
        );
        let key = self.render(key);
        let key_id = key
            .strip_prefix("${")
            .and_then(|k| k.strip_suffix(".Arn}"))
            .unwrap_or_else(|| {
                panic!(
                    "{}: the alert topic's key is {key}, not a key of the stack's own \
                     (CloudWatch alarms cannot use the AWS-managed alias/aws/sns)",
                    self.name
                )
            });
        let (_, resource) = self.named(key_id);
        let properties = &resource["Properties"];
        json!({
            "key": key,
            "rotates": properties["EnableKeyRotation"],
            "policy": self.statements(&properties["KeyPolicy"]),
        })
    }

    /// Each topic's and queue's resource policy, by resource; a queue policy's
    /// statements keep only the resources that are that queue.
    pub(super) fn resource_policies(&self) -> BTreeMap<String, Vec<Value>> {
        let mut policies: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for (kind, list) in [
            ("AWS::SNS::TopicPolicy", "Topics"),
            ("AWS::SQS::QueuePolicy", "Queues"),
        ] {
            for (_, policy) in self.of_type(kind) {
                let properties = &policy["Properties"];
                for target in self.texts(&properties[list]) {
                    let arn = target.replace('}', ".Arn}");
                    let mine =
                        |resource: &String| kind == "AWS::SNS::TopicPolicy" || *resource == arn;
                    let entry = policies.entry(target.clone()).or_default();
                    for mut statement in self.statements(&properties["PolicyDocument"]) {
                        let resources: Vec<String> = self
                            .texts_of(&statement["resources"])
                            .into_iter()
                            .filter(mine)
                            .collect();
                        statement["resources"] = json!(resources);
                        entry.push(statement);
                    }
                    entry.sort_by_key(Value::to_string);
                }
            }
        }
        policies
    }

    fn texts_of(&self, value: &Value) -> Vec<String> {
        value
            .as_array()
            .expect("texts")
            .iter()
            .map(|v| v.as_str().expect("a text").to_owned())
            .collect()
    }

    /// Each function's grants as (action, resource) pairs, less what the platform needs
    /// (listed apart) and less its event sources' polling (checked apart: the function's
    /// role may poll each of its queues).
    pub(super) fn function_permissions(&self) -> BTreeMap<String, Value> {
        let sources = self.event_source_queues();
        let mut functions = BTreeMap::new();
        for (id, function) in self.of_type("AWS::Lambda::Function") {
            let name = Self::canonical(id);
            let role = self.render(&function["Properties"]["Role"]);
            let role_id = role
                .strip_prefix("${")
                .and_then(|r| r.strip_suffix(".Arn}"))
                .expect("a role of the stack");
            let (role_logical, role) = self.named(role_id);
            let mut documents: Vec<&Value> = role["Properties"]["Policies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| self.chosen(p))
                .map(|p| &p["PolicyDocument"])
                .collect();
            for (_, policy) in self.of_type("AWS::IAM::Policy") {
                let roles = &policy["Properties"]["Roles"];
                if roles
                    .as_array()
                    .is_some_and(|r| r.iter().any(|r| r["Ref"] == role_logical.as_str()))
                {
                    documents.push(&policy["Properties"]["PolicyDocument"]);
                }
            }
            let mut platform = BTreeSet::new();
            for managed in self.texts(&role["Properties"]["ManagedPolicyArns"]) {
                let (_, what) = MANAGED_POLICIES
                    .iter()
                    .find(|(policy, _)| managed.ends_with(&format!("/{policy}")))
                    .unwrap_or_else(|| {
                        panic!("{}: an unknown managed policy {managed}", self.name)
                    });
                platform.insert(*what);
            }
            let mine = sources.get(&name).cloned().unwrap_or_default();
            let mut grants = BTreeSet::new();
            let mut polls = BTreeSet::new();
            for document in documents {
                for statement in self.statements(document) {
                    assert_eq!(
                        statement["effect"], "Allow",
                        "{}: {name} has a statement this comparison does not read: {statement}",
                        self.name
                    );
                    let condition = match &statement["conditions"] {
                        Value::Null => String::new(),
                        conditions => format!(" if {conditions}"),
                    };
                    for action in self.texts_of(&statement["actions"]) {
                        for resource in self.texts_of(&statement["resources"]) {
                            if action.starts_with("logs:") {
                                platform.insert(Platform::Logs);
                            } else if action.starts_with("xray:") {
                                platform.insert(Platform::Tracing);
                            } else if STREAM_READING.contains(&action.as_str()) {
                                platform.insert(Platform::StreamReading);
                            } else if POLLING.contains(&action.as_str()) && mine.contains(&resource)
                            {
                                if action == "sqs:ReceiveMessage" {
                                    polls.insert(resource.clone());
                                }
                            } else {
                                grants.insert(format!("{action} {resource}{condition}"));
                            }
                        }
                    }
                }
            }
            if platform.contains(&Platform::QueuePolling) {
                // Any queue: the managed policy's statements are on "*".
                polls.extend(mine.iter().cloned());
            }
            platform.remove(&Platform::QueuePolling);
            assert_eq!(
                polls, mine,
                "{}: {name} may receive from exactly its event sources' queues",
                self.name
            );
            functions.insert(
                name,
                json!({"grants": grants, "platform": format!("{platform:?}")}),
            );
        }
        functions
    }
}
