//! A Choice state's rules: read and checked once, then tried in order against the input.

use chrono::{DateTime, FixedOffset};
use serde_json::{Map, Value};

use crate::{Refusal, path};

/// A top-level rule with where it leads, or a rule nested in `And`, `Or`, `Not`.
#[derive(Clone, Debug, PartialEq)]
pub struct ChoiceRule {
    pub test: Test,
    /// `Next` (top-level rules only).
    pub next: Option<String>,
    pub assign: Option<Value>,
    /// JSONata's `Output` on a rule.
    pub output: Option<Value>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Test {
    And(Vec<ChoiceRule>),
    Or(Vec<ChoiceRule>),
    Not(Box<ChoiceRule>),
    /// JSONata's `Condition`: an expression, or a literal boolean.
    Condition(Value),
    Compare {
        variable: String,
        operator: Operator,
        /// The literal to compare with, or the path to it (the `...Path` forms).
        against: Against,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Against {
    Literal(Value),
    Path(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    String(Order),
    StringMatches,
    Numeric(Order),
    Timestamp(Order),
    BooleanEquals,
    IsNull,
    IsPresent,
    IsNumeric,
    IsString,
    IsBoolean,
    IsTimestamp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    Equals,
    LessThan,
    GreaterThan,
    LessThanEquals,
    GreaterThanEquals,
}

impl Order {
    fn holds(self, ordering: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::{Equal, Greater, Less};
        match self {
            Order::Equals => ordering == Equal,
            Order::LessThan => ordering == Less,
            Order::GreaterThan => ordering == Greater,
            Order::LessThanEquals => ordering != Greater,
            Order::GreaterThanEquals => ordering != Less,
        }
    }
}

const ORDERS: [(&str, Order); 5] = [
    ("Equals", Order::Equals),
    ("LessThan", Order::LessThan),
    ("GreaterThan", Order::GreaterThan),
    ("LessThanEquals", Order::LessThanEquals),
    ("GreaterThanEquals", Order::GreaterThanEquals),
];

/// The comparison an operator's name (without `Path`) stands for.
fn operator(name: &str) -> Option<Operator> {
    let ordered = |prefix: &str, make: fn(Order) -> Operator| {
        let rest = name.strip_prefix(prefix)?;
        ORDERS
            .iter()
            .find(|(suffix, _)| *suffix == rest)
            .map(|(_, order)| make(*order))
    };
    ordered("String", Operator::String)
        .or_else(|| ordered("Numeric", Operator::Numeric))
        .or_else(|| ordered("Timestamp", Operator::Timestamp))
        .or(match name {
            "StringMatches" => Some(Operator::StringMatches),
            "BooleanEquals" => Some(Operator::BooleanEquals),
            "IsNull" => Some(Operator::IsNull),
            "IsPresent" => Some(Operator::IsPresent),
            "IsNumeric" => Some(Operator::IsNumeric),
            "IsString" => Some(Operator::IsString),
            "IsBoolean" => Some(Operator::IsBoolean),
            "IsTimestamp" => Some(Operator::IsTimestamp),
            _ => None,
        })
}

/// Reads a rule; `top` says whether it is one of `Choices` (which must lead somewhere).
pub(crate) fn parse(value: &Value, at: &str, top: bool) -> Result<ChoiceRule, Refusal> {
    let Some(fields) = value.as_object() else {
        return Err(Refusal::new(at, "a choice rule must be an object"));
    };
    let next = match (top, fields.get("Next")) {
        (true, Some(Value::String(next))) => Some(next.clone()),
        (true, _) => return Err(Refusal::new(at, "a choice rule must have Next")),
        (false, Some(_)) => {
            return Err(Refusal::new(at, "a nested choice rule may not have Next"));
        }
        (false, None) => None,
    };
    let test = test(fields, at)?;
    Ok(ChoiceRule {
        test,
        next,
        assign: fields.get("Assign").cloned(),
        output: fields.get("Output").cloned(),
    })
}

fn test(fields: &Map<String, Value>, at: &str) -> Result<Test, Refusal> {
    let nested = |value: &Value| -> Result<Vec<ChoiceRule>, Refusal> {
        match value {
            Value::Array(rules) if !rules.is_empty() => {
                rules.iter().map(|rule| parse(rule, at, false)).collect()
            }
            _ => Err(Refusal::new(
                at,
                "And and Or take a non-empty list of rules",
            )),
        }
    };
    if let Some(rules) = fields.get("And") {
        return Ok(Test::And(nested(rules)?));
    }
    if let Some(rules) = fields.get("Or") {
        return Ok(Test::Or(nested(rules)?));
    }
    if let Some(rule) = fields.get("Not") {
        return Ok(Test::Not(Box::new(parse(rule, at, false)?)));
    }
    if let Some(condition) = fields.get("Condition") {
        return Ok(Test::Condition(condition.clone()));
    }
    let variable = match fields.get("Variable") {
        Some(Value::String(variable)) if path::is_valid(variable) => variable.clone(),
        Some(_) => return Err(Refusal::new(at, "Variable must be a valid JSONPath")),
        None => return Err(Refusal::new(at, "a choice rule must have a comparison")),
    };
    let mut comparisons = fields
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "Variable" | "Next" | "Assign" | "Comment"));
    let (Some((name, value)), None) = (comparisons.next(), comparisons.next()) else {
        return Err(Refusal::new(
            at,
            "a choice rule must have exactly one comparison",
        ));
    };
    let (base, by_path) = match name.strip_suffix("Path") {
        Some(base) if operator(base).is_some() => (base, true),
        _ => (name.as_str(), false),
    };
    let Some(operator) = operator(base) else {
        return Err(Refusal::new(
            at,
            format!("unknown comparison operator {name}"),
        ));
    };
    let against = if by_path {
        match value.as_str() {
            Some(path) if path::is_valid(path) => Against::Path(path.to_owned()),
            _ => return Err(Refusal::new(at, format!("{name} must be a valid JSONPath"))),
        }
    } else {
        check_literal(operator, value, name, at)?;
        Against::Literal(value.clone())
    };
    Ok(Test::Compare {
        variable,
        operator,
        against,
    })
}

fn check_literal(operator: Operator, value: &Value, name: &str, at: &str) -> Result<(), Refusal> {
    let fits = match operator {
        Operator::String(_) | Operator::StringMatches => value.is_string(),
        Operator::Numeric(_) => value.is_number(),
        Operator::Timestamp(_) => value.as_str().and_then(timestamp).is_some(),
        _ => value.is_boolean(),
    };
    if fits {
        Ok(())
    } else {
        Err(Refusal::new(
            at,
            format!("{name} has a value of the wrong type"),
        ))
    }
}

/// An RFC 3339 timestamp, as ASL reads one (with its `T`: RFC 3339 allows a space,
/// Step Functions does not).
pub(crate) fn timestamp(text: &str) -> Option<DateTime<FixedOffset>> {
    if text.get(10..11) != Some("T") {
        return None;
    }
    DateTime::parse_from_rfc3339(text).ok()
}

/// Whether `value` compares with `against` as `operator` says (`false` where their
/// types do not fit it).
pub(crate) fn compare(operator: Operator, value: &Value, against: &Value) -> bool {
    let is = |test: bool| test == (against == &Value::Bool(true));
    match operator {
        Operator::String(order) => match (value.as_str(), against.as_str()) {
            (Some(value), Some(against)) => order.holds(value.cmp(against)),
            _ => false,
        },
        Operator::StringMatches => match (value.as_str(), against.as_str()) {
            (Some(value), Some(pattern)) => string_matches(value, pattern),
            _ => false,
        },
        Operator::Numeric(order) => match (value.as_f64(), against.as_f64()) {
            (Some(value), Some(against)) => value
                .partial_cmp(&against)
                .is_some_and(|ordering| order.holds(ordering)),
            _ => false,
        },
        Operator::Timestamp(order) => {
            match (
                value.as_str().and_then(timestamp),
                against.as_str().and_then(timestamp),
            ) {
                (Some(value), Some(against)) => order.holds(value.cmp(&against)),
                _ => false,
            }
        }
        Operator::BooleanEquals => match (value.as_bool(), against.as_bool()) {
            (Some(value), Some(against)) => value == against,
            _ => false,
        },
        Operator::IsNull => is(value.is_null()),
        Operator::IsPresent => is(true),
        Operator::IsNumeric => is(value.is_number()),
        Operator::IsString => is(value.is_string()),
        Operator::IsBoolean => is(value.is_boolean()),
        Operator::IsTimestamp => is(value.as_str().and_then(timestamp).is_some()),
    }
}

/// `StringMatches`: `*` matches any run of characters; `\*` and `\\` are literal.
fn string_matches(value: &str, pattern: &str) -> bool {
    #[derive(PartialEq)]
    enum Piece {
        Char(char),
        Any,
    }
    let mut pieces = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => pieces.push(Piece::Char(chars.next().unwrap_or('\\'))),
            '*' => pieces.push(Piece::Any),
            c => pieces.push(Piece::Char(c)),
        }
    }
    let text: Vec<char> = value.chars().collect();
    // Greedy matching with one backtrack point: the last `*` seen.
    let (mut t, mut p, mut star, mut mark) = (0, 0, None, 0);
    while t < text.len() {
        if p < pieces.len() && pieces[p] == Piece::Char(text[t]) {
            t += 1;
            p += 1;
        } else if p < pieces.len() && pieces[p] == Piece::Any {
            star = Some(p);
            mark = t;
            p += 1;
        } else if let Some(s) = star {
            p = s + 1;
            mark += 1;
            t = mark;
        } else {
            return false;
        }
    }
    pieces[p..].iter().all(|piece| *piece == Piece::Any)
}

#[cfg(test)]
mod tests {
    use super::string_matches;

    #[test]
    fn string_matches_reads_stars_and_escapes() {
        assert!(string_matches("log-2024.txt", "log-*.txt"));
        assert!(string_matches("anything", "*"));
        assert!(!string_matches("log.csv", "log-*.txt"));
        assert!(string_matches("a*b", "a\\*b"));
        assert!(!string_matches("axb", "a\\*b"));
        assert!(string_matches("abcbc", "a*bc"));
    }
}
