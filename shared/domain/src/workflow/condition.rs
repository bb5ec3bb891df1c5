//! A step's condition (`when`): an expression in CEL, the Common Expression Language
//! of Kubernetes and Google's APIs, over `input` and `results`
//! (`results['check-account'].tier == 'gold'`), read by the `cel` crate. It is
//! compiled when its workflow loads, and must name no other variable.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use cel::common::ast::operators::INDEX;
use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};

use serde_json::Value;

use crate::workflow::Results;

/// The variables a condition may name.
const VARIABLES: [&str; 2] = ["input", "results"];

/// How deep a condition's brackets (`()`, `[]`, `{}`) may nest in its text, and its
/// operations in what it compiles to. The parser recurses through a dozen rules a
/// bracket, and the evaluator once an operation, on the stack of the thread that
/// loads or decides: deeper, a condition could overflow it (measured in a debug
/// build on a 2 MiB thread: 13 brackets, or 60 additions in a row), which no error
/// reports and which ends the process.
const MAX_BRACKETS: usize = 8;
const MAX_DEPTH: usize = 24;

/// The longest a condition may be, in bytes: the parser turns a long run of one
/// operator into a tree by recursion too (30,000 additions overflow it).
const MAX_BYTES: usize = 1024;

/// A condition, compiled.
#[derive(Clone)]
pub struct Condition {
    source: String,
    program: Arc<cel::Program>,
    results: BTreeSet<String>,
}

impl Condition {
    /// Compiles `text`.
    ///
    /// # Errors
    /// The parser's message for text that is not CEL, or the variable it names that
    /// is neither `input` nor `results`.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.len() > MAX_BYTES {
            return Err(format!(
                "a condition of {} bytes: a condition may be {MAX_BYTES} bytes long",
                text.len()
            ));
        }
        let brackets = bracket_depth(text);
        if brackets > MAX_BRACKETS {
            return Err(format!(
                "'{text}' nests brackets {brackets} deep: a condition may nest them {MAX_BRACKETS} deep"
            ));
        }
        let program = cel::Program::compile(text)
            .map_err(|errors| format!("'{text}' is not a CEL expression: {errors}"))?;
        let mut names = Names::default();
        names
            .collect(program.expression(), &mut Vec::new(), 0)
            .map_err(|TooDeep| {
                format!(
                    "'{text}' nests its operations over {MAX_DEPTH} deep (a long run of \
                     additions, say): split it into steps' results, or shorten it"
                )
            })?;
        if let Some(unknown) = names
            .variables
            .iter()
            .find(|name| !VARIABLES.contains(&name.as_str()))
        {
            return Err(format!(
                "'{text}' names '{unknown}': a condition sees only input and results"
            ));
        }
        Ok(Self {
            source: text.to_owned(),
            program: Arc::new(program),
            results: names.results,
        })
    }

    /// The text it was compiled from.
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The steps whose results it reads: `results['name']` or `results.name`.
    #[must_use]
    pub fn results_named(&self) -> &BTreeSet<String> {
        &self.results
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

/// What an expression names: the variables it reads (not those a macro binds, as
/// `i` in `input.items.exists(i, i.sku == 'x')`), and the steps whose results it reads.
#[derive(Default)]
struct Names {
    variables: BTreeSet<String>,
    results: BTreeSet<String>,
}

impl Names {
    /// Gathers the names of `expression`, `depth` operations deep, where the variables
    /// `bound` are a macro's; refused past [`MAX_DEPTH`].
    fn collect<'e>(
        &mut self,
        expression: &'e IdedExpr,
        bound: &mut Vec<&'e str>,
        depth: usize,
    ) -> Result<(), TooDeep> {
        if depth > MAX_DEPTH {
            return Err(TooDeep);
        }
        let depth = depth + 1;
        let is_results = |e: &IdedExpr, bound: &[&str]| matches!(&e.expr, Expr::Ident(name) if name == "results" && !bound.contains(&"results"));
        match &expression.expr {
            Expr::Ident(name) => {
                if !bound.contains(&name.as_str()) {
                    self.variables.insert(name.clone());
                }
            }
            Expr::Call(call) => {
                if let ([of, key], true) = (call.args.as_slice(), call.func_name == INDEX)
                    && is_results(of, bound)
                    && let Expr::Literal(LiteralValue::String(name)) = &key.expr
                {
                    self.results.insert(name.inner().to_owned());
                }
                for part in call.target.as_deref().into_iter().chain(&call.args) {
                    self.collect(part, bound, depth)?;
                }
            }
            Expr::Select(select) => {
                if is_results(&select.operand, bound) {
                    self.results.insert(select.field.clone());
                }
                self.collect(&select.operand, bound, depth)?;
            }
            Expr::Comprehension(loop_) => {
                self.collect(&loop_.iter_range, bound, depth)?;
                self.collect(&loop_.accu_init, bound, depth)?;
                let outside = bound.len();
                bound.extend([loop_.iter_var.as_str(), loop_.accu_var.as_str()]);
                bound.extend(loop_.iter_var2.as_deref());
                for part in [&loop_.loop_cond, &loop_.loop_step, &loop_.result] {
                    self.collect(part, bound, depth)?;
                }
                bound.truncate(outside);
            }
            Expr::List(list) => {
                for element in &list.elements {
                    self.collect(element, bound, depth)?;
                }
            }
            Expr::Map(map) => {
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(entry) = &entry.expr {
                        self.collect(&entry.key, bound, depth)?;
                        self.collect(&entry.value, bound, depth)?;
                    }
                }
            }
            Expr::Struct(fields) => {
                for entry in &fields.entries {
                    if let EntryExpr::StructField(field) = &entry.expr {
                        self.collect(&field.value, bound, depth)?;
                    }
                }
            }
            Expr::Unspecified | Expr::Literal(_) => {}
        }
        Ok(())
    }
}

/// A condition nested deeper than [`MAX_DEPTH`].
struct TooDeep;

/// How deep the brackets of `text` nest (those in its string literals too: a
/// condition has no need of so many there).
fn bracket_depth(text: &str) -> usize {
    let mut depth = 0_usize;
    let mut deepest = 0;
    for c in text.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
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
            ("['AUD', 'NZD'].exists(c, c == input.currency)", true),
        ] {
            assert_eq!(holds(text, &input, &account), Ok(expected), "{text}");
        }
    }

    #[test]
    fn a_condition_tells_the_results_it_names() {
        let condition = Condition::parse(
            "results['check-account'].tier == 'gold' && size(results.quote.prices.filter(p, p > results['floor'].min)) > 0 && input.x",
        )
        .expect("CEL");
        assert_eq!(
            condition.results_named(),
            &["check-account", "floor", "quote"].map(String::from).into()
        );
        let none = Condition::parse("input.amount >= 100").expect("CEL");
        assert!(none.results_named().is_empty());
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

    #[test]
    fn a_condition_nested_deeper_than_a_stack_holds_is_refused_at_load() {
        let brackets = |depth: usize| format!("{}1{} == 1", "(".repeat(depth), ")".repeat(depth));
        let additions = |terms: usize| format!("1{} > 0", " + 1".repeat(terms));
        for deep in [brackets(9), brackets(400), additions(30), additions(30_000)] {
            let refused = Condition::parse(&deep).expect_err("too deep");
            assert!(
                refused.contains("deep") || refused.contains("bytes"),
                "{refused}"
            );
        }
        // The deepest allowed load and hold on a thread of 2 MiB, a worker's.
        let loaded = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                [brackets(MAX_BRACKETS), additions(MAX_DEPTH - 3)]
                    .iter()
                    .map(|text| Condition::parse(text)?.holds(&json!({}), &Results::new()))
                    .collect::<Result<Vec<bool>, String>>()
            })
            .expect("a thread")
            .join()
            .expect("no overflow");
        assert_eq!(loaded, Ok(vec![true, true]));
    }
}
