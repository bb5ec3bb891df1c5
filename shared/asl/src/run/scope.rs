//! What an expression sees while a state runs: `$` (or `$states.input`), the context
//! object, the variables in scope, and for JSONata the result or the error; and the
//! evaluation of payload templates in either language against it.

use serde_json::{Map, Value, json};

use crate::definition::QueryLanguage;
use crate::jsonata::{self, Problem};
use crate::{Failure, errors, intrinsics, path};

pub struct Scope<'a> {
    pub language: QueryLanguage,
    /// `$` in a JSONPath, `$states.input` in JSONata.
    pub input: &'a Value,
    pub context: &'a Value,
    pub variables: &'a Map<String, Value>,
    /// `$states.result` (JSONata) once the state's work is done.
    pub result: Option<&'a Value>,
    /// `$states.errorOutput` (JSONata) in a catcher.
    pub error_output: Option<&'a Value>,
}

impl<'a> Scope<'a> {
    pub fn new(
        language: QueryLanguage,
        input: &'a Value,
        context: &'a Value,
        variables: &'a Map<String, Value>,
    ) -> Self {
        Self {
            language,
            input,
            context,
            variables,
            result: None,
            error_output: None,
        }
    }

    /// The same scope with `$` standing for another value (a JSONPath result).
    pub fn with_input<'b>(&'b self, input: &'b Value) -> Scope<'b> {
        Scope { input, ..*self }
    }

    fn variable(&self) -> impl Fn(&str) -> Option<Value> + '_ {
        |name| self.variables.get(name).cloned()
    }

    /// A JSONPath's value, `None` where it selects nothing.
    pub fn select_optional(&self, query: &str, field: &str) -> Result<Option<Value>, Failure> {
        match path::select(query, self.input, self.context, &self.variable()) {
            Ok(value) => Ok(Some(value)),
            Err(path::PathError::NoMatch) => Ok(None),
            Err(path::PathError::Invalid(reason)) => Err(Failure::runtime(format!(
                "The JSONPath '{query}' specified for the field '{field}' is invalid: {reason}"
            ))),
        }
    }

    /// A JSONPath's value; selecting nothing is `States.Runtime`, as Step Functions
    /// reports it.
    pub fn select(&self, query: &str, field: &str) -> Result<Value, Failure> {
        self.select_optional(query, field)?.ok_or_else(|| {
            Failure::runtime(format!(
                "The JSONPath '{query}' specified for the field '{field}' could not be found in the input '{}'",
                self.input
            ))
        })
    }

    /// A JSONPath's value for `InputPath` and `OutputPath`, whose failures Step
    /// Functions words as Jayway does (`Invalid path '$.a' : Missing property in path
    /// $['a']`).
    pub fn select_or_explain(&self, query: &str, field: &str) -> Result<Value, Failure> {
        match self.select_optional(query, field)? {
            Some(value) => Ok(value),
            None => Err(Failure::runtime(format!(
                "Invalid path '{query}' : {}",
                path::explain(query, self.input, self.context, &self.variable())
                    .unwrap_or_else(|| "No results for path".to_owned())
            ))),
        }
    }

    /// A JSONPath payload template (`Parameters`, `ResultSelector`, `ItemSelector`,
    /// JSONPath's `Assign`): keys ending `.$` take a path's or an intrinsic's value.
    pub fn template(&self, template: &Value) -> Result<Value, Failure> {
        match template {
            Value::Object(fields) => {
                let mut out = Map::new();
                for (key, value) in fields {
                    match (key.strip_suffix(".$"), value) {
                        (Some(name), Value::String(text)) => {
                            out.insert(name.to_owned(), self.dynamic(text, key)?);
                        }
                        _ => {
                            out.insert(key.clone(), self.template(value)?);
                        }
                    }
                }
                Ok(Value::Object(out))
            }
            Value::Array(items) => items.iter().map(|item| self.template(item)).collect(),
            other => Ok(other.clone()),
        }
    }

    /// A `.$` field's value (or a Fail state's `ErrorPath`, `CausePath`): an intrinsic
    /// function's or a path's.
    pub(crate) fn dynamic(&self, text: &str, field: &str) -> Result<Value, Failure> {
        if intrinsics::is_intrinsic(text) {
            let call = intrinsics::parsed(text).map_err(Failure::runtime)?;
            intrinsics::evaluate(&call, self.input, self.context, &self.variable())
        } else {
            self.select(text, field)
        }
    }

    /// `$states` as JSONata sees it here.
    fn states(&self) -> Value {
        let mut states = json!({"input": self.input, "context": self.context});
        if let Some(result) = self.result {
            states["result"] = result.clone();
        }
        if let Some(error_output) = self.error_output {
            states["errorOutput"] = error_output.clone();
        }
        states
    }

    /// A JSONata field's value: every `{% %}` string inside it evaluated. `field`
    /// names it in a failure's cause (`Output/FunctionResult`).
    pub fn jsonata(&self, value: &Value, field: &str) -> Result<Value, Failure> {
        self.jsonata_with(&self.states(), value, field)
    }

    fn jsonata_with(&self, states: &Value, value: &Value, field: &str) -> Result<Value, Failure> {
        match value {
            Value::String(text) => match jsonata::expression(text) {
                Some(expression) => self.evaluate_expression(states, expression, field),
                None => Ok(value.clone()),
            },
            Value::Object(fields) => {
                let mut out = Map::new();
                for (key, value) in fields {
                    let inner = format!("{field}/{key}");
                    out.insert(key.clone(), self.jsonata_with(states, value, &inner)?);
                }
                Ok(Value::Object(out))
            }
            Value::Array(items) => items
                .iter()
                .map(|item| self.jsonata_with(states, item, field))
                .collect(),
            other => Ok(other.clone()),
        }
    }

    /// A bare JSONata expression's value (a field that holds one `{% %}` string, its
    /// marks already taken off at load).
    pub fn expression(&self, expression: &str, field: &str) -> Result<Value, Failure> {
        self.evaluate_expression(&self.states(), expression, field)
    }

    fn evaluate_expression(
        &self,
        states: &Value,
        expression: &str,
        field: &str,
    ) -> Result<Value, Failure> {
        let failure = |what: String| {
            Failure::new(
                errors::QUERY_EVALUATION_ERROR,
                format!(
                    "The JSONata expression '{expression}' specified for the field '{field}' {what}"
                ),
            )
        };
        match jsonata::evaluate(expression, states, self.variables) {
            Ok(Some(value)) => Ok(value),
            Ok(None) => Err(failure("returned nothing (undefined).".to_owned())),
            Err(Problem::Unsupported) => {
                Err(failure("returned an unsupported result type.".to_owned()))
            }
            Err(Problem::Threw(message)) => Err(failure(format!(
                "threw an error during evaluation. {message}"
            ))),
        }
    }

    /// A value of either language: JSONata's `{% %}` or a JSONPath template.
    pub fn evaluate(&self, value: &Value, field: &str) -> Result<Value, Failure> {
        match self.language {
            QueryLanguage::Jsonata => self.jsonata(value, field),
            QueryLanguage::JsonPath => self.template(value),
        }
    }

    /// JSONata's `Condition` of a choice rule.
    pub fn condition(&self, condition: &Value) -> Result<bool, Failure> {
        match self.jsonata(condition, "Condition")? {
            Value::Bool(holds) => Ok(holds),
            other => Err(Failure::new(
                errors::QUERY_EVALUATION_ERROR,
                format!("The Condition field evaluated to a non-boolean value: {other}"),
            )),
        }
    }
}
