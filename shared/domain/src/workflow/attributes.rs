//! A workflow's search attributes: named values of its tasks' input and of its
//! steps' results, typed, kept in each task's record as it runs, so that tasks are
//! found by what they are about (`"customer": "input.customer_id"`).

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::workflow::step::FieldType;
use crate::workflow::values::{FieldSource, Results, Scope};

/// The most attributes a workflow declares.
pub const MAX_ATTRIBUTES: usize = 8;

/// The longest text an attribute keeps: a longer value is not kept.
pub const MAX_ATTRIBUTE_TEXT: usize = 256;

/// An attribute's type: a value of another type is not kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttributeType {
    /// Text, up to [`MAX_ATTRIBUTE_TEXT`] bytes.
    #[default]
    String,
    /// A number.
    Number,
    /// True or false.
    Boolean,
}

/// An attribute as a workflow file writes it: where its value comes from, alone
/// (a string attribute) or with its type.
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum AttributeFile {
    Path(String),
    Typed(TypedFile),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TypedFile {
    from: String,
    #[serde(rename = "type", default)]
    kind: AttributeType,
}

/// A search attribute, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    /// Its name.
    pub name: String,
    /// Where its value comes from.
    pub source: FieldSource,
    /// Its type.
    pub kind: AttributeType,
}

/// Whether `name` may name an attribute: a lowercase letter, then up to 31 lowercase
/// letters, digits and `_`.
#[must_use]
pub fn is_attribute_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && name.len() <= 32
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The attributes a file declares, each source checked against the input's fields and
/// the workflow's steps; the first refused as (field, reason).
pub(crate) fn resolve(
    declared: BTreeMap<String, AttributeFile>,
    input: &BTreeMap<String, FieldType>,
    steps: &HashSet<String>,
) -> Result<Vec<Attribute>, (String, String)> {
    if declared.len() > MAX_ATTRIBUTES {
        let reason = format!("at most {MAX_ATTRIBUTES} attributes");
        return Err(("attributes".to_owned(), reason));
    }
    let scope = Scope {
        step: "",
        input,
        earlier: steps,
        item: false,
    };
    (declared.into_iter())
        .map(|(name, written)| {
            let field = format!("attributes.{name}");
            if !is_attribute_name(&name) {
                let reason =
                    "a name is a lowercase letter, then up to 31 lowercase letters, digits and '_'";
                return Err((field, reason.to_owned()));
            }
            let (from, kind) = match written {
                AttributeFile::Path(from) => (from, AttributeType::String),
                AttributeFile::Typed(TypedFile { from, kind }) => (from, kind),
            };
            let source = FieldSource::parse(&from, &scope).map_err(|reason| (field, reason))?;
            Ok(Attribute { name, source, kind })
        })
        .collect()
}

/// An attribute's value as text, as a search names it: a string's text, a number's
/// or a boolean's JSON.
#[must_use]
pub fn attribute_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

impl Attribute {
    /// Its value in a task whose input is `input` and whose steps' results are
    /// `results`: `None` where it has none yet, or one not of its type.
    #[must_use]
    pub fn value(&self, input: &Value, results: &Results<'_>) -> Option<Value> {
        let value = self.source.lookup(input, results)?;
        let fits = match self.kind {
            AttributeType::String => value
                .as_str()
                .is_some_and(|t| t.len() <= MAX_ATTRIBUTE_TEXT),
            AttributeType::Number => value.is_number(),
            AttributeType::Boolean => value.is_boolean(),
        };
        fits.then(|| value.clone())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::task::{Step, StepState};
    use crate::time::Timestamp;
    use crate::workflow::Workflow;

    fn refund(attributes: serde_json::Value) -> Result<Workflow, String> {
        let text = json!({
            "name": "refund", "version": 1,
            "input": {"order_id": "string", "customer_id": "string", "amount": "number"},
            "steps": [
                {"name": "check-order", "agent": "orders", "call": "/orders/check"},
                {"name": "refund-payment", "agent": "payment", "call": "/refunds"}
            ],
            "attributes": attributes,
        });
        Workflow::parse("refund.json", &text.to_string()).map_err(|e| e.to_string())
    }

    #[test]
    fn attributes_come_from_the_input_and_the_results_each_of_its_type() {
        let workflow = refund(json!({
            "customer": "input.customer_id",
            "amount": {"from": "input.amount", "type": "number"},
            "region": "results.check-order.region",
            "priority": {"from": "results.check-order.priority", "type": "boolean"},
        }))
        .expect("valid");
        let input = json!({"order_id": "o-1", "customer_id": "c-7", "amount": 120});
        let (mut task, _, _) = crate::decide::submit(
            &workflow,
            crate::submission::Submission::new(
                crate::ids::TaskId::parse("t-1").expect("an id"),
                input.clone(),
            ),
            Timestamp(0),
        );
        assert_eq!(
            serde_json::to_value(&task.attributes).expect("json"),
            json!({"customer": "c-7", "amount": 120}),
            "kept from the submission on"
        );
        let mut checked = Step::new("check-order");
        checked.state = StepState::Processed;
        checked.output = Some(std::sync::Arc::new(
            json!({"region": "eu-west", "priority": "high"}),
        ));
        task.steps[0] = checked;
        assert_eq!(
            serde_json::to_value(workflow.attributes_of(&input, &task)).expect("json"),
            json!({"customer": "c-7", "amount": 120, "region": "eu-west"}),
            "a value not of its type (priority) is not kept"
        );
        let long = json!({"order_id": "o", "customer_id": "c".repeat(257), "amount": "lots"});
        assert!(
            !workflow
                .attributes_of(&long, &task)
                .contains_key("customer")
        );
        assert!(!workflow.attributes_of(&long, &task).contains_key("amount"));
    }

    #[test]
    fn an_attribute_refused_is_named_with_why() {
        let refused = |attributes| refund(attributes).expect_err("refused");
        let error = refused(json!({"customer": "input.customer"}));
        assert!(
            error.contains(
                "attributes.customer: 'input.customer': the input has no field 'customer'"
            ),
            "{error}"
        );
        let error = refused(json!({"region": "results.ship.region"}));
        assert!(
            error.contains("attributes.region: 'results.ship.region': 'ship' is not"),
            "{error}"
        );
        let error = refused(json!({"Customer": "input.customer_id"}));
        assert!(
            error.contains("attributes.Customer: a name is a lowercase letter"),
            "{error}"
        );
        let error = refused(json!({"amount": {"from": "input.amount", "type": "money"}}));
        assert!(error.contains("attributes"), "{error}");
        let many: serde_json::Map<_, _> = (0..9)
            .map(|i| (format!("a{i}"), json!("input.amount")))
            .collect();
        let error = refused(serde_json::Value::Object(many));
        assert!(
            error.contains("attributes: at most 8 attributes"),
            "{error}"
        );
    }
}
