//! A step's condition (`when`): an expression in CEL, the Common Expression Language
//! of Kubernetes and Google's APIs, over `input` and `results`
//! (`results['check-account'].tier == 'gold'`), read by the `cel` crate. It is
//! compiled when its workflow loads, and must name no other variable.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::workflow::Results;

/// The variables a condition may name.
const VARIABLES: [&str; 2] = ["input", "results"];

/// A condition, compiled.
#[derive(Clone)]
pub struct Condition {
    source: String,
    program: Arc<cel::Program>,
}

impl Condition {
    /// Compiles `text`.
    ///
    /// # Errors
    /// The parser's message for text that is not CEL, or the variable it names that
    /// is neither `input` nor `results`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let program = cel::Program::compile(text)
            .map_err(|errors| format!("'{text}' is not a CEL expression: {errors}"))?;
        if let Some(unknown) = program
            .references()
            .variables()
            .into_iter()
            .find(|name| !VARIABLES.contains(name))
        {
            return Err(format!(
                "'{text}' names '{unknown}': a condition sees only input and results"
            ));
        }
        Ok(Self {
            source: text.to_owned(),
            program: Arc::new(program),
        })
    }

    /// The text it was compiled from.
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether it holds, for a task's `input` and the `results` of its steps.
    ///
    /// # Errors
    /// Its evaluation's failure (a field missing, say), or a value that is not a
    /// boolean.
    pub fn holds(&self, input: &Value, results: &Results<'_>) -> Result<bool, String> {
        let mut context = cel::Context::default();
        for (name, value) in [
            ("input", cel::to_value(input)),
            ("results", cel::to_value(results)),
        ] {
            context.add_variable_from_value(name, value.map_err(|error| error.to_string())?);
        }
        match self.program.execute(&context) {
            Ok(cel::Value::Bool(holds)) => Ok(holds),
            Ok(other) => Err(format!(
                "'{}' is {:?}, not a boolean",
                self.source,
                other.type_of()
            )),
            Err(error) => Err(format!("'{}': {error}", self.source)),
        }
    }
}

impl fmt::Debug for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Condition").field(&self.source).finish()
    }
}

impl PartialEq for Condition {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for Condition {}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn holds(text: &str, input: &Value, results: &[(&str, Value)]) -> Result<bool, String> {
        let results: Results<'_> = results.iter().map(|(name, value)| (*name, value)).collect();
        Condition::parse(text)?.holds(input, &results)
    }

    #[test]
    fn a_condition_reads_the_input_and_the_results_of_earlier_steps() {
        let input = json!({"amount": 250, "currency": "AUD", "ratio": 0.5});
        let account = [("check-account", json!({"tier": "gold"}))];
        for (text, expected) in [
            ("input.amount >= 100", true),
            ("input.amount < 100", false),
            ("input.ratio < 1.0 && input.currency == 'AUD'", true),
            ("results['check-account'].tier == 'gold'", true),
            ("results['check-account'].tier != 'gold'", false),
            ("has(input.coupon)", false),
            ("input.currency in ['AUD', 'NZD']", true),
        ] {
            assert_eq!(holds(text, &input, &account), Ok(expected), "{text}");
        }
    }

    #[test]
    fn a_condition_that_is_not_cel_or_names_another_variable_is_refused_at_load() {
        let refused = Condition::parse("input.amount >").expect_err("not CEL");
        assert!(refused.contains("is not a CEL expression"), "{refused}");
        let refused = Condition::parse("order.amount > 1").expect_err("unknown variable");
        assert_eq!(
            refused,
            "'order.amount > 1' names 'order': a condition sees only input and results"
        );
    }

    #[test]
    fn a_condition_that_fails_or_is_not_a_boolean_is_an_error_naming_it() {
        let input = json!({"amount": 5});
        let missing = holds("results['check'].tier == 'gold'", &input, &[]).expect_err("no key");
        assert!(
            missing.starts_with("'results['check'].tier == 'gold'': "),
            "{missing}"
        );
        let number = holds("input.amount", &input, &[]).expect_err("not a boolean");
        assert!(number.ends_with("not a boolean"), "{number}");
    }
}
