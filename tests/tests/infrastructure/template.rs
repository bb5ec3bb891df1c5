//! A template read as deployed: loaded (SAM's, the CDK app's, with parameters), its
//! resources by name, its conditions held, its values and references rendered as text.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::{Value, json};

use super::{Deployed, infra};

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

    pub(super) fn sam() -> Self {
        Self::load(&infra("sam.out/template.json"), "SAM")
    }

    /// The CDK app as `infra/check` synthesizes it into `output` (`cdk.out` with its
    /// defaults; a `cdk.out.<variant>` with the context of that variant).
    pub(super) fn cdk(output: &str) -> Self {
        Self::load(
            &infra(&format!(
                "cdk/{output}/SchedulerAgentSupervisor.template.json"
            )),
            "CDK",
        )
    }

    /// The same template deployed with these parameters rather than their defaults.
    pub(super) fn with(mut self, parameters: &[(&str, &str)]) -> Self {
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
    pub(super) fn canonical(id: &str) -> String {
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
    pub(super) fn named(&self, name: &str) -> (&String, &Value) {
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
    pub(super) fn of_type<'a>(
        &'a self,
        kind: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a Value)> {
        self.resources
            .iter()
            .filter(move |(_, r)| r["Type"] == kind && self.is_deployed(r))
    }

    /// Each function's environment, its values as deployed.
    pub(super) fn environments(&self) -> BTreeMap<String, BTreeMap<String, String>> {
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
    pub(super) fn deployed(&self) -> BTreeSet<String> {
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
    pub(super) fn chosen<'v>(&self, value: &'v Value) -> Option<&'v Value> {
        let Some(branches) = value.get("Fn::If").and_then(Value::as_array) else {
            return (value.get("Ref").and_then(Value::as_str) != Some("AWS::NoValue"))
                .then_some(value);
        };
        let condition = &self.conditions[branches[0].as_str().expect("a condition's name")];
        self.chosen(&branches[if self.holds(condition) { 1 } else { 2 }])
    }

    /// A value as text, references resolved as [`Deployed::reference`] does.
    pub(super) fn render(&self, value: &Value) -> String {
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
    pub(super) fn texts(&self, value: &Value) -> Vec<String> {
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
}
