//! Whether a Choice state's rule holds for the state's input.

use serde_json::Value;

use super::Scope;
use crate::Failure;
use crate::choice::{self, Against, ChoiceRule, Operator, Test};

/// Whether `rule` holds for the state's input.
pub(super) fn holds(rule: &ChoiceRule, scope: &Scope) -> Result<bool, Failure> {
    match &rule.test {
        Test::And(rules) => {
            for rule in rules {
                if !holds(rule, scope)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Test::Or(rules) => {
            for rule in rules {
                if holds(rule, scope)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Test::Not(rule) => Ok(!holds(rule, scope)?),
        Test::Condition(condition) => scope.condition(condition),
        Test::Compare {
            variable,
            operator,
            against,
        } => {
            let value = scope.select_optional(variable, "Variable")?;
            if *operator == Operator::IsPresent {
                return Ok(value.is_some() == literal_true(against));
            }
            let Some(value) = value else {
                return Err(Failure::runtime(format!(
                    "Invalid path '{variable}': The choice state's condition path references an undefined value."
                )));
            };
            let against = match against {
                Against::Literal(literal) => literal.clone(),
                Against::Path(path) => scope.select(path, "Path")?,
            };
            Ok(choice::compare(*operator, &value, &against))
        }
    }
}

fn literal_true(against: &Against) -> bool {
    matches!(against, Against::Literal(Value::Bool(true)))
}
