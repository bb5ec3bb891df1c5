//! The deployments set exactly the environment the functions read, and build the same
//! security, alarms and triggers: the SAM template (after its transform, as
//! `infra/check` writes it), and the CDK construct as `infra/check` synthesizes it.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use sas_lambda::config::{Config, VARIABLES};
use sas_tests::ministack::FUNCTIONS;
use serde_json::{Value, json};

fn infra(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../infra")
        .join(path)
}

fn declared() -> BTreeSet<String> {
    VARIABLES.iter().map(|v| (*v).to_owned()).collect()
}

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
    assert_eq!(set, declared());
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
            declared()
        );
    }
}

/// A CloudFormation template as deployed, read so that two templates of the same stack
/// written differently compare: the SAM template after its transform (`infra/check`
/// writes it with aws-sam-translator) and the CDK app's synthesized one. Every reference
/// is rendered as text with the resources named as in the SAM template (CDK's logical
/// ids less their `Sas` prefix and hash suffix) and each parameter at its default.
struct Deployed {
    resources: serde_json::Map<String, Value>,
    parameters: serde_json::Map<String, Value>,
    conditions: serde_json::Map<String, Value>,
    name: &'static str,
}

/// The AWS-managed policies the templates attach, by what they are for.
const MANAGED_POLICIES: [(&str, Platform); 3] = [
    ("AWSLambdaBasicExecutionRole", Platform::Logs),
    ("AWSXrayWriteOnlyAccess", Platform::Tracing),
    ("AWSLambdaSQSQueueExecutionRole", Platform::QueuePolling),
];

/// What Lambda itself needs of a function's role, granted by SAM with managed policies
/// and by CDK with statements of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Platform {
    Logs,
    Tracing,
    QueuePolling,
}

/// What the event-source mappings do with a role's permissions on their queues.
const POLLING: [&str; 5] = [
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueAttributes",
    "sqs:GetQueueUrl",
];

impl Deployed {
    fn load(path: &PathBuf, name: &'static str) -> Self {
        let text = std::fs::read_to_string(path).unwrap_or_else(|_| {
            panic!(
                "{} is missing: run ./tests/run, or infra/check, which writes it",
                path.display()
            )
        });
        let template: Value = serde_json::from_str(&text).expect("JSON");
        Self {
            resources: template["Resources"]
                .as_object()
                .expect("resources")
                .clone(),
            parameters: template["Parameters"]
                .as_object()
                .cloned()
                .unwrap_or_default(),
            conditions: template["Conditions"]
                .as_object()
                .cloned()
                .unwrap_or_default(),
            name,
        }
    }

    fn sam() -> Self {
        Self::load(&infra("sam.out/template.json"), "SAM")
    }

    /// The CDK app as `infra/check` synthesizes it into `output` (`cdk.out` with its
    /// defaults; a `cdk.out.<variant>` with the context of that variant).
    fn cdk(output: &str) -> Self {
        Self::load(
            &infra(&format!(
                "cdk/{output}/SchedulerAgentSupervisor.template.json"
            )),
            "CDK",
        )
    }

    /// The same template deployed with these parameters rather than their defaults.
    fn with(mut self, parameters: &[(&str, &str)]) -> Self {
        for (name, value) in parameters {
            let parameter = self
                .parameters
                .get_mut(*name)
                .unwrap_or_else(|| panic!("{}: no parameter {name}", self.name));
            parameter["Default"] = json!(value);
        }
        self
    }

    /// A resource's name as the SAM template has it.
    fn canonical(id: &str) -> String {
        let hashed = id.len() > 11
            && id[id.len() - 8..]
                .chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase());
        match id.strip_prefix("Sas") {
            Some(rest) if hashed => rest[..rest.len() - 8].to_owned(),
            _ => id.to_owned(),
        }
    }

    /// The resource named `name` as the SAM template names it, with its logical id.
    fn named(&self, name: &str) -> (&String, &Value) {
        self.resources
            .iter()
            .find(|(id, _)| Self::canonical(id) == name)
            .unwrap_or_else(|| panic!("{}: no resource {name}", self.name))
    }

    /// Whether a resource is deployed with each parameter at its default: it has no
    /// condition, or its condition holds.
    fn is_deployed(&self, resource: &Value) -> bool {
        resource["Condition"]
            .as_str()
            .is_none_or(|name| self.holds(&self.conditions[name]))
    }

    /// The resources of a type that are deployed with each parameter at its default.
    fn of_type<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = (&'a String, &'a Value)> {
        self.resources
            .iter()
            .filter(move |(_, r)| r["Type"] == kind && self.is_deployed(r))
    }

    /// Each function's environment, its values as deployed.
    fn environments(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.of_type("AWS::Lambda::Function")
            .map(|(id, function)| {
                let variables = function["Properties"]["Environment"]["Variables"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, value)| (name.clone(), self.render(value)))
                    .collect();
                (Self::canonical(id), variables)
            })
            .collect()
    }

    /// What is deployed with each parameter at its default: each resource's type and
    /// name.
    fn deployed(&self) -> BTreeSet<String> {
        self.resources
            .iter()
            .filter(|(_, r)| self.is_deployed(r))
            .map(|(id, r)| {
                format!(
                    "{} {}",
                    r["Type"].as_str().unwrap_or("?"),
                    Self::canonical(id)
                )
            })
            .collect()
    }

    /// A name in a `Ref` or `${...}`: a pseudo parameter as written, a parameter as its
    /// default, a resource by its name.
    fn reference(&self, name: &str) -> String {
        if name.starts_with("AWS::") {
            format!("${{{name}}}")
        } else if let Some(parameter) = self.parameters.get(name) {
            self.render(&parameter["Default"])
        } else if let Some((resource, attribute)) = name.split_once('.') {
            format!("${{{}.{attribute}}}", Self::canonical(resource))
        } else {
            format!("${{{}}}", Self::canonical(name))
        }
    }

    /// Whether a condition holds, each parameter at its default.
    fn holds(&self, condition: &Value) -> bool {
        let arguments = |function: &str| condition.get(function).and_then(Value::as_array);
        if let Some(name) = condition.get("Condition").and_then(Value::as_str) {
            self.holds(&self.conditions[name])
        } else if let Some(operands) = arguments("Fn::Not") {
            !self.holds(&operands[0])
        } else if let Some(operands) = arguments("Fn::And") {
            operands.iter().all(|c| self.holds(c))
        } else if let Some(operands) = arguments("Fn::Or") {
            operands.iter().any(|c| self.holds(c))
        } else if let Some(operands) = arguments("Fn::Equals") {
            self.render(&operands[0]) == self.render(&operands[1])
        } else {
            panic!(
                "{}: a condition this comparison does not read: {condition}",
                self.name
            )
        }
    }

    /// The value as deployed with each parameter at its default: an `Fn::If`'s branch,
    /// `None` for `AWS::NoValue`.
    fn chosen<'v>(&self, value: &'v Value) -> Option<&'v Value> {
        let Some(branches) = value.get("Fn::If").and_then(Value::as_array) else {
            return (value.get("Ref").and_then(Value::as_str) != Some("AWS::NoValue"))
                .then_some(value);
        };
        let condition = &self.conditions[branches[0].as_str().expect("a condition's name")];
        self.chosen(&branches[if self.holds(condition) { 1 } else { 2 }])
    }

    /// A value as text, references resolved as [`Deployed::reference`] does.
    fn render(&self, value: &Value) -> String {
        match value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Null => String::new(),
            Value::Array(items) => {
                let items: Vec<String> = items.iter().map(|v| self.render(v)).collect();
                format!("[{}]", items.join(", "))
            }
            Value::Object(object) => {
                if let Some(name) = object.get("Ref").and_then(Value::as_str) {
                    self.reference(name)
                } else if let Some(get) = object.get("Fn::GetAtt") {
                    let (resource, attribute) = match get {
                        Value::String(s) => s.split_once('.').expect("Resource.Attribute"),
                        _ => (
                            get[0].as_str().expect("a resource"),
                            get[1].as_str().expect("an attribute"),
                        ),
                    };
                    format!("${{{}.{attribute}}}", Self::canonical(resource))
                } else if let Some(select) = object.get("Fn::Select") {
                    let index: usize = self.render(&select[0]).parse().expect("an index");
                    let items = match &select[1] {
                        Value::Array(items) => items.iter().map(|v| self.render(v)).collect(),
                        list => self
                            .render(list)
                            .split(',')
                            .map(str::to_owned)
                            .collect::<Vec<_>>(),
                    };
                    items[index].clone()
                } else if let Some(join) = object.get("Fn::Join") {
                    let separator = join[0].as_str().expect("a separator");
                    let parts: Vec<String> = join[1]
                        .as_array()
                        .expect("parts")
                        .iter()
                        .map(|v| self.render(v))
                        .collect();
                    parts.join(separator)
                } else if let Some(sub) = object.get("Fn::Sub") {
                    let (text, variables) = match sub {
                        Value::String(s) => (s.as_str(), None),
                        _ => (sub[0].as_str().expect("a string"), sub[1].as_object()),
                    };
                    let mut rendered = String::new();
                    let mut rest = text;
                    while let Some(start) = rest.find("${") {
                        rendered.push_str(&rest[..start]);
                        let end = rest[start..].find('}').expect("a closing brace") + start;
                        let name = &rest[start + 2..end];
                        match variables.and_then(|v| v.get(name)) {
                            Some(value) => rendered.push_str(&self.render(value)),
                            None => rendered.push_str(&self.reference(name)),
                        }
                        rest = &rest[end + 1..];
                    }
                    rendered.push_str(rest);
                    rendered
                } else {
                    let rendered: serde_json::Map<String, Value> = object
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::String(self.render(v))))
                        .collect();
                    Value::Object(rendered).to_string()
                }
            }
        }
    }

    /// A value that may be one item or a list of them, as sorted texts.
    fn texts(&self, value: &Value) -> Vec<String> {
        // Each value as deployed at the defaults: an `Fn::If`'s branch.
        let mut texts: Vec<String> = match self.chosen(value) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|v| self.chosen(v))
                .map(|v| self.render(v))
                .collect(),
            Some(other) => vec![self.render(other)],
        };
        texts.sort();
        texts
    }

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
    fn topic_encryption(&self) -> Value {
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
    fn resource_policies(&self) -> BTreeMap<String, Vec<Value>> {
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
    fn function_permissions(&self) -> BTreeMap<String, Value> {
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

    /// The queues (their ARNs) each function (its name) polls.
    fn event_source_queues(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut queues: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (_, mapping) in self.of_type("AWS::Lambda::EventSourceMapping") {
            let function = self.render(&mapping["Properties"]["FunctionName"]);
            let function = function
                .trim_start_matches("${")
                .trim_end_matches('}')
                .to_owned();
            queues
                .entry(function)
                .or_default()
                .insert(self.render(&mapping["Properties"]["EventSourceArn"]));
        }
        queues
    }

    /// The event-source mappings and the supervisor's schedule, as comparable JSON.
    fn triggers(&self) -> Vec<Value> {
        let mut triggers: Vec<Value> = self
            .of_type("AWS::Lambda::EventSourceMapping")
            .map(|(_, mapping)| {
                let p = &mapping["Properties"];
                json!({
                    "function": self.render(&p["FunctionName"]),
                    "queue": self.render(&p["EventSourceArn"]),
                    "batch_size": self.render(&p["BatchSize"]),
                    "batching_window": match &p["MaximumBatchingWindowInSeconds"] {
                        Value::Null => "0".to_owned(),
                        window => self.render(window),
                    },
                    "response_types": self.texts(&p["FunctionResponseTypes"]),
                    "max_concurrency": self.render(&p["ScalingConfig"]["MaximumConcurrency"]),
                    "enabled": match &p["Enabled"] { Value::Null => "true".to_owned(), e => self.render(e) },
                })
            })
            .chain(self.of_type("AWS::Scheduler::Schedule").map(|(_, schedule)| {
                let p = &schedule["Properties"];
                json!({
                    "schedule": self.render(&p["ScheduleExpression"]),
                    "target": self.render(&p["Target"]["Arn"]),
                    "retries": self.render(&p["Target"]["RetryPolicy"]["MaximumRetryAttempts"]),
                    "window": self.render(&p["FlexibleTimeWindow"]["Mode"]),
                    "state": match &p["State"] { Value::Null => "ENABLED".to_owned(), s => self.render(s) },
                })
            }))
            .collect();
        triggers.sort_by_key(Value::to_string);
        triggers
    }

    /// A metric: namespace, name, dimensions, statistic and period.
    fn metric(&self, metric: &Value, stat: &Value, period: &Value) -> String {
        let mut dimensions: Vec<String> = metric["Dimensions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| format!("{}={}", self.render(&d["Name"]), self.render(&d["Value"])))
            .collect();
        dimensions.sort();
        format!(
            "{}/{} {{{}}} {} {}s",
            self.render(&metric["Namespace"]),
            self.render(&metric["MetricName"]),
            dimensions.join(","),
            self.render(stat),
            self.render(period)
        )
    }

    /// The alarms, as comparable JSON: what each watches (a metric math expression as its
    /// function over the metrics it names), when it fires, and whom it notifies.
    fn alarms(&self) -> Vec<Value> {
        let mut alarms: Vec<Value> = self
            .of_type("AWS::CloudWatch::Alarm")
            .map(|(_, alarm)| {
                let p = &alarm["Properties"];
                let watches = match p["Metrics"].as_array() {
                    None => self.metric(p, &p["Statistic"], &p["Period"]),
                    Some(metrics) => {
                        let by_id: BTreeMap<&str, String> = metrics
                            .iter()
                            .filter(|m| m.get("MetricStat").is_some())
                            .map(|m| {
                                let stat = &m["MetricStat"];
                                (
                                    m["Id"].as_str().expect("an id"),
                                    self.metric(&stat["Metric"], &stat["Stat"], &stat["Period"]),
                                )
                            })
                            .collect();
                        let expression = metrics
                            .iter()
                            .find_map(|m| m["Expression"].as_str())
                            .expect("an expression");
                        let (function, ids) = expression.split_once('(').expect("FUNCTION([ids])");
                        let mut named: Vec<&str> = ids
                            .trim_matches(|c| "[]() ".contains(c))
                            .split(',')
                            .map(|id| by_id[id.trim()].as_str())
                            .collect();
                        named.sort_unstable();
                        format!("{function}({})", named.join(" ; "))
                    }
                };
                json!({
                    "watches": watches,
                    "comparison": p["ComparisonOperator"],
                    "threshold": p["Threshold"].as_f64(),
                    "periods": p["EvaluationPeriods"],
                    "missing": p["TreatMissingData"],
                    "actions": self.texts(&p["AlarmActions"]),
                    "ok_actions": self.texts(&p["OKActions"]),
                })
            })
            .collect();
        alarms.sort_by_key(Value::to_string);
        alarms
    }

    /// The queues a function reads that no alarm watches for the age of their oldest
    /// message.
    fn queues_without_an_age_alarm(&self) -> Vec<String> {
        let alarms = self.alarms();
        let watched = |queue: &str| {
            let age = format!("ApproximateAgeOfOldestMessage {{QueueName={queue}}}");
            alarms
                .iter()
                .any(|a| a["watches"].as_str().is_some_and(|w| w.contains(&age)))
        };
        self.event_source_queues()
            .into_values()
            .flatten()
            .map(|arn| arn.replace(".Arn}", ".QueueName}"))
            .filter(|queue| !watched(queue))
            .collect()
    }
}

/// Both build the same security, alarms and triggers, thirteen alarms, each notifying
/// the alert topic, and every queue a function reads watched for the age of its oldest
/// message (a consumer behind, throttled or failing).
fn assert_the_same_security_alarms_and_triggers(sam: &Deployed, cdk: &Deployed) {
    let encryption = sam.topic_encryption();
    assert_eq!(
        encryption["rotates"], true,
        "the alert key rotates: {encryption:#}"
    );
    let principals: BTreeSet<&str> = encryption["policy"]
        .as_array()
        .expect("statements")
        .iter()
        .flat_map(|s| s["principals"].as_array().expect("principals"))
        .map(|p| p.as_str().expect("a principal"))
        .collect();
    assert!(
        principals.contains("Service:cloudwatch.amazonaws.com"),
        "CloudWatch may use the alert key: {encryption:#}"
    );
    assert_eq!(encryption, cdk.topic_encryption(), "the alert topic's key");
    assert_eq!(
        sam.resource_policies(),
        cdk.resource_policies(),
        "the topic's and the queues' policies"
    );
    let (sam_functions, cdk_functions) = (sam.function_permissions(), cdk.function_permissions());
    assert_eq!(
        sam_functions.keys().collect::<Vec<_>>(),
        [
            "AgentFunction",
            "ReadFunction",
            "SchedulerFunction",
            "SubmissionFunction",
            "SupervisorFunction"
        ]
    );
    for (function, permissions) in &sam_functions {
        assert_eq!(
            Some(permissions),
            cdk_functions.get(function),
            "{function}'s permissions, SAM then CDK"
        );
    }
    assert_eq!(sam.triggers(), cdk.triggers(), "the functions' triggers");
    let sam_alarms = sam.alarms();
    assert_eq!(sam_alarms.len(), 13, "{sam_alarms:#?}");
    assert!(
        sam_alarms
            .iter()
            .all(|a| a["actions"] == json!(["${AlertTopic}"])),
        "every alarm notifies the alert topic: {sam_alarms:#?}"
    );
    // What the functions count for a person: tasks in Error, task records the
    // supervisor could not read and took off the leases, and calls still waiting for
    // a limit's slots.
    for counted in [
        "SchedulerAgentSupervisor/TasksInError {Function=scheduler}",
        "SchedulerAgentSupervisor/QuarantinedTasks {Function=supervisor}",
        "SchedulerAgentSupervisor/SlotWait {Function=supervisor}",
    ] {
        assert!(
            sam_alarms.iter().any(|a| a["watches"]
                .as_str()
                .is_some_and(|w| w.starts_with(counted))),
            "no alarm on {counted}: {sam_alarms:#?}"
        );
    }
    // A panic caught, in any function that handles outside input.
    for function in ["submission", "scheduler", "agent"] {
        let panics = format!("SchedulerAgentSupervisor/Panics {{Function={function}}}");
        assert!(
            sam_alarms
                .iter()
                .any(|a| a["watches"].as_str().is_some_and(|w| w.contains(&panics))),
            "no alarm on {panics}: {sam_alarms:#?}"
        );
    }
    for deployed in [sam, cdk] {
        let unwatched = deployed.queues_without_an_age_alarm();
        assert!(
            unwatched.is_empty(),
            "{}: no alarm on the age of the oldest message of {unwatched:?}",
            deployed.name
        );
    }
    assert_eq!(sam_alarms, cdk.alarms(), "the alarms");
}

#[test]
fn the_sam_template_and_the_cdk_construct_build_the_same_security_alarms_and_triggers() {
    assert_the_same_security_alarms_and_triggers(&Deployed::sam(), &Deployed::cdk("cdk.out"));
}

/// An update from buffered to direct ingestion keeps the ingest queue, its dead
/// letters, their alarms and the scheduler's consumer: the submissions a buffered stack
/// accepted are created after it, not deleted with their queue. Only the functions'
/// `INGESTION` changes.
#[test]
fn switching_ingestion_keeps_the_ingest_queue_and_its_consumer() {
    let modes = [
        (
            Deployed::sam(),
            Deployed::sam().with(&[("IngestionMode", "BUFFERED")]),
        ),
        (Deployed::cdk("cdk.out"), Deployed::cdk("cdk.out.buffered")),
    ];
    for (direct, buffered) in modes {
        let name = direct.name;
        let resources = direct.deployed();
        for queue in ["IngestQueue", "IngestDeadLetterQueue"] {
            assert!(
                resources.contains(&format!("AWS::SQS::Queue {queue}")),
                "{name}: no {queue} in direct ingestion: {resources:#?}"
            );
        }
        assert_eq!(resources, buffered.deployed(), "{name}: the resources");
        assert!(
            direct.event_source_queues()["SchedulerFunction"].contains("${IngestQueue.Arn}"),
            "{name}: the scheduler drains the ingest queue in direct ingestion"
        );
        assert_eq!(
            direct.triggers(),
            buffered.triggers(),
            "{name}: the triggers"
        );
        assert_eq!(direct.alarms(), buffered.alarms(), "{name}: the alarms");
        assert_eq!(
            direct.function_permissions(),
            buffered.function_permissions(),
            "{name}: the functions' permissions"
        );
        let (mut direct, mut buffered) = (direct.environments(), buffered.environments());
        assert_eq!(direct.len(), FUNCTIONS.len(), "{name}: {direct:#?}");
        for (function, environment) in &mut direct {
            let other = buffered.get_mut(function).expect("the same functions");
            assert_eq!(
                (environment.remove("INGESTION"), other.remove("INGESTION")),
                (Some("DIRECT".into()), Some("BUFFERED".into())),
                "{name}: {function}'s INGESTION"
            );
        }
        assert_eq!(direct, buffered, "{name}: the rest of the environments");
    }
}

#[test]
fn the_sam_template_and_the_cdk_construct_build_the_same_with_buffered_ingestion() {
    let sam = Deployed::sam().with(&[("IngestionMode", "BUFFERED")]);
    let cdk = Deployed::cdk("cdk.out.buffered");
    assert_the_same_security_alarms_and_triggers(&sam, &cdk);
}

/// The key of the services' secrets `infra/check` synthesizes the CDK app with
/// (`cdk.out.secrets-key`).
const SECRETS_KEY: &str =
    "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab";

#[test]
fn the_agent_may_decrypt_the_services_secrets_with_their_key_through_secrets_manager_and_ssm_only()
{
    let decrypts = |deployed: &Deployed| -> Vec<Value> {
        let agent = &deployed.function_permissions()["AgentFunction"];
        let grants = agent["grants"].as_array().expect("grants");
        grants
            .iter()
            .filter(|g| g.as_str().is_some_and(|g| g.starts_with("kms:")))
            .cloned()
            .collect()
    };
    assert_eq!(
        decrypts(&Deployed::sam()),
        [] as [Value; 0],
        "no key, no KMS"
    );
    let sam = Deployed::sam().with(&[("SecretsKmsKeyArn", SECRETS_KEY)]);
    let through = json!({"StringEquals": {"kms:ViaService": [
        "secretsmanager.${AWS::Region}.amazonaws.com",
        "ssm.${AWS::Region}.amazonaws.com",
    ]}});
    assert_eq!(
        decrypts(&sam),
        [json!(format!("kms:Decrypt {SECRETS_KEY} if {through}"))]
    );
    let cdk = Deployed::cdk("cdk.out.secrets-key");
    assert_the_same_security_alarms_and_triggers(&sam, &cdk);
}

impl Deployed {
    /// The function a route's target integration invokes, by its name.
    fn invoked(&self, target: &Value) -> String {
        let target = self.render(target);
        let integration = target
            .strip_prefix("integrations/${")
            .and_then(|t| t.strip_suffix('}'))
            .unwrap_or_else(|| panic!("{}: a route's target {target}", self.name));
        let (_, integration) = self.named(integration);
        let uri = self.render(&integration["Properties"]["IntegrationUri"]);
        uri.strip_prefix("${")
            .and_then(|u| u.strip_suffix(".Arn}"))
            .unwrap_or_else(|| panic!("{}: an integration of {uri}", self.name))
            .to_owned()
    }

    /// The API's routes, each with who may call it and the function it invokes, and
    /// the stage's throttling, with each parameter at its default.
    fn api(&self) -> Value {
        let mut routes: Vec<Value> = self
            .of_type("AWS::ApiGatewayV2::Route")
            .map(|(_, route)| {
                let p = &route["Properties"];
                json!({
                    "route": self.render(&p["RouteKey"]),
                    "function": self.invoked(&p["Target"]),
                    "authorization": self.chosen(&p["AuthorizationType"]).map(|t| self.render(t)),
                    // CDK writes no scopes as an empty list, SAM leaves them out.
                    "scopes": self
                        .chosen(&p["AuthorizationScopes"])
                        .map(|s| self.texts(s))
                        .filter(|s| !s.is_empty()),
                })
            })
            .collect();
        routes.sort_by_key(Value::to_string);
        let stages: Vec<Value> = self
            .of_type("AWS::ApiGatewayV2::Stage")
            .map(|(_, stage)| {
                let p = &stage["Properties"];
                let throttling = |settings: &Value| {
                    json!([
                        self.render(&settings["ThrottlingRateLimit"]),
                        self.render(&settings["ThrottlingBurstLimit"]),
                    ])
                };
                let per_route: serde_json::Map<String, Value> = p["RouteSettings"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(route, settings)| (route.clone(), throttling(settings)))
                    .collect();
                json!({
                    "stage": self.render(&p["StageName"]),
                    "default": throttling(&p["DefaultRouteSettings"]),
                    "routes": per_route,
                })
            })
            .collect();
        let reserved: Vec<String> = self
            .of_type("AWS::Lambda::Function")
            .filter_map(|(id, function)| {
                let reserved =
                    self.chosen(&function["Properties"]["ReservedConcurrentExecutions"])?;
                Some(format!("{}={}", Self::canonical(id), self.render(reserved)))
            })
            .collect();
        json!({ "routes": routes, "stages": stages, "reserved_concurrency": reserved })
    }
}

#[test]
fn the_sam_template_and_the_cdk_construct_build_the_same_api() {
    let (sam, cdk) = (Deployed::sam(), Deployed::cdk("cdk.out"));
    let api = sam.api();
    let routes = api["routes"].as_array().expect("routes");
    let deployed: BTreeSet<&str> = routes.iter().filter_map(|r| r["route"].as_str()).collect();
    let handled: Vec<String> = sas_api::ROUTES
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        deployed,
        handled.iter().map(String::as_str).collect(),
        "the gateway routes exactly what the handler answers"
    );
    for route in routes {
        let handled = sas_api::ROUTES
            .iter()
            .find(|r| route["route"] == format!("{} {}", r.method, r.path))
            .expect("a route the handler answers");
        let expected = if handled.is_public() {
            "NONE"
        } else {
            "AWS_IAM"
        };
        assert_eq!(
            route["authorization"], expected,
            "by default every route but the public ones needs IAM: {route}"
        );
        // Waits for a task's end hold an invocation each: on a function of their own,
        // they cannot take the concurrency reserved for submissions.
        let function = if handled.only_reads() {
            "ReadFunction"
        } else {
            "SubmissionFunction"
        };
        assert_eq!(route["function"], function, "{route}");
        // A route anyone may call costs an invocation a request: bounded on its own,
        // below the stage's, so that no anonymous caller can take the function's
        // reserved concurrency or run up its cost.
        if handled.is_public() {
            let throttled =
                &api["stages"][0]["routes"][route["route"].as_str().unwrap_or_default()];
            let default = &api["stages"][0]["default"];
            assert!(
                throttled.is_array() && throttled != default,
                "{route} has a throttle of its own: {throttled}"
            );
        }
    }
    let reserved = api["reserved_concurrency"]
        .as_array()
        .expect("reservations");
    for function in ["SubmissionFunction=100", "ReadFunction=100"] {
        assert!(
            reserved.iter().any(|r| r == function),
            "{function} reserved: {reserved:?}"
        );
    }
    assert_eq!(api, cdk.api(), "the API, SAM then CDK");
}
