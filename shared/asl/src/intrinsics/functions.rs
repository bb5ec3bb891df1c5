//! Each intrinsic function on its evaluated arguments.

use std::collections::HashSet;

use base64::Engine as _;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use serde_json::Value;
use sha2::Digest as _;

use super::Function;
use crate::Failure;

/// The longest string (in UTF-16 units, as Step Functions counts) that
/// `States.Base64Encode`, `States.Base64Decode` and `States.Hash` take.
const MAX_TEXT: usize = 10_000;

/// The most items `States.ArrayRange` makes.
const MAX_RANGE: i128 = 1_000;

/// Decodes what Step Functions' decoder accepts: symbols up to the first `=`, the
/// URL-safe `-` and `_` as `+` and `/`, anything else skipped.
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// Runs `function`; `literal_template` is the first argument's text as written when it
/// is a string literal (`States.Format` reads `\{` in it as a brace, not a placeholder).
pub(super) fn run(
    function: Function,
    args: &[Value],
    literal_template: Option<&str>,
) -> Result<Value, Failure> {
    dispatch(function, args, literal_template)
        .ok_or_else(|| Failure::runtime(format!("Invalid arguments in {}", function.name())))
}

/// The function's value, `None` where it refuses its arguments (their count included).
fn dispatch(function: Function, args: &[Value], literal_template: Option<&str>) -> Option<Value> {
    use Function as F;
    match (function, args) {
        (F::Format, [template, values @ ..]) => format(template, values, literal_template),
        (F::StringToJson, [Value::String(text)]) => string_to_json(text),
        (F::JsonToString, [value]) => Some(Value::String(crate::json_text(value))),
        (F::Array, items) => Some(Value::Array(items.to_vec())),
        (F::ArrayPartition, [Value::Array(items), size]) => {
            let size = usize::try_from(truncated(size)?)
                .ok()
                .filter(|&size| size > 0)?;
            Some(
                items
                    .chunks(size)
                    .map(|chunk| Value::Array(chunk.to_vec()))
                    .collect(),
            )
        }
        (F::ArrayContains, [Value::Array(items), wanted]) => Some(items.contains(wanted).into()),
        (F::ArrayRange, [start, end, step]) => {
            range(truncated(start)?, truncated(end)?, truncated(step)?)
        }
        (F::ArrayGetItem, [Value::Array(items), index]) => {
            let index = usize::try_from(truncated(index)?).ok()?;
            // Step Functions answers null for any index into an empty array.
            if items.is_empty() {
                return Some(Value::Null);
            }
            items.get(index).cloned()
        }
        (F::ArrayLength, [Value::Array(items)]) => Some(items.len().into()),
        (F::ArrayUnique, [Value::Array(items)]) => {
            let mut seen = HashSet::new();
            Some(
                items
                    .iter()
                    .filter(|item| seen.insert(canonical(item)))
                    .cloned()
                    .collect(),
            )
        }
        (F::Base64Encode, [Value::String(text)]) if fits(text) => {
            Some(STANDARD.encode(text).into())
        }
        (F::Base64Decode, [Value::String(text)]) if fits(text) => base64_decode(text),
        (F::Hash, [data, Value::String(algorithm)]) => hash(&display(data), algorithm),
        // Only the shallow merge exists: a deep flag of `true` is refused, any other
        // value taken as `false`.
        (F::JsonMerge, [Value::Object(left), Value::Object(right), deep])
            if *deep != Value::Bool(true) =>
        {
            let mut merged = left.clone();
            merged.extend(
                right
                    .iter()
                    .map(|(key, value)| (key.clone(), value.clone())),
            );
            Some(Value::Object(merged))
        }
        (F::MathRandom, [start, end, seed @ ..]) if seed.len() <= 1 => {
            let (start, end) = (truncated(start)?, truncated(end)?);
            if start >= end {
                return None;
            }
            Some(
                match seed {
                    [seed] => {
                        fastrand::Rng::with_seed(truncated(seed)?.cast_unsigned()).i64(start..end)
                    }
                    _ => fastrand::i64(start..end),
                }
                .into(),
            )
        }
        (F::MathAdd, [left, right]) => {
            let sum = i32::try_from(rounded(left)? + rounded(right)?).ok()?;
            Some(sum.into())
        }
        (F::StringSplit, [Value::String(text), Value::String(delimiters)]) => Some(
            text.split(|c| delimiters.contains(c))
                .filter(|token| !token.is_empty())
                .map(|token| Value::String(token.to_owned()))
                .collect(),
        ),
        (F::Uuid, []) => Some(uuid::Uuid::new_v4().to_string().into()),
        _ => None,
    }
}

/// `States.Format`: each `{}` of the template replaced by the next value.
fn format(template: &Value, values: &[Value], literal: Option<&str>) -> Option<Value> {
    let pieces = match (literal, template) {
        (Some(raw), _) => pieces(raw, true)?,
        (None, Value::String(text)) => pieces(text, false)?,
        _ => return None,
    };
    if pieces.len() != values.len() + 1 {
        return None;
    }
    let mut out = String::new();
    for (piece, value) in pieces.iter().zip(values) {
        out.push_str(piece);
        out.push_str(&display(value));
    }
    out.push_str(pieces.last()?);
    Some(Value::String(out))
}

/// A template's text between its `{}` placeholders; `None` where a brace stands alone.
/// With `escapes`, `\x` stands for the character `x`.
fn pieces(template: &str, escapes: bool) -> Option<Vec<String>> {
    let mut pieces = Vec::new();
    let mut piece = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if escapes => piece.extend(chars.next()),
            '{' if chars.next_if_eq(&'}').is_some() => pieces.push(std::mem::take(&mut piece)),
            '{' | '}' => return None,
            other => piece.push(other),
        }
    }
    pieces.push(piece);
    Some(pieces)
}

/// A value as `States.Format` writes it: strings bare, objects and arrays the way Java
/// prints maps and lists (`{a=1, b=[x, y]}`), other values as JSON.
fn display(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(display).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(key, value)| format!("{key}={}", display(value)))
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
        other => crate::json_text(other),
    }
}

/// A value's JSON with every object's keys in order: equal values, equal texts.
fn canonical(value: &Value) -> String {
    match value {
        Value::Object(fields) => {
            let mut fields: Vec<String> = fields
                .iter()
                .map(|(key, value)| format!("{}:{}", Value::from(key.as_str()), canonical(value)))
                .collect();
            fields.sort_unstable();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", items.join(","))
        }
        other => crate::json_text(other),
    }
}

/// `States.StringToJson`: blank text is null.
fn string_to_json(text: &str) -> Option<Value> {
    if text.trim().is_empty() {
        return Some(Value::Null);
    }
    let value: Value = serde_json::from_str(text).ok()?;
    Some(match value.as_f64() {
        // `-0` parses as the float -0.0; Step Functions answers 0.
        Some(number) if number == 0.0 && !value.is_i64() && !value.is_u64() => 0.into(),
        _ => value,
    })
}

/// A number's integer part, as Step Functions reads integer arguments (`2.6` is 2).
fn truncated(value: &Value) -> Option<i64> {
    match value.as_i64() {
        Some(integer) => Some(integer),
        // Saturates beyond i64's range; callers bound their integers further.
        None => value
            .as_f64()
            .filter(|number| number.is_finite())
            .map(|number| number.trunc() as i64),
    }
}

/// A number rounded half up (Java's `Math.round`), within a 32-bit integer, as
/// `States.MathAdd` takes its operands.
fn rounded(value: &Value) -> Option<i64> {
    let integer = match value.as_i64() {
        Some(integer) => integer,
        None => (value.as_f64()? + 0.5).floor() as i64,
    };
    i32::try_from(integer).ok().map(i64::from)
}

/// `States.ArrayRange`: from `start` to `end` inclusive by `step`, at most 1000 items.
fn range(start: i64, end: i64, step: i64) -> Option<Value> {
    if step == 0 {
        return None;
    }
    let steps = (i128::from(end) - i128::from(start)) / i128::from(step);
    let count = if steps < 0 { 0 } else { steps + 1 };
    if count > MAX_RANGE {
        return None;
    }
    let items = (0..count).map(|at| {
        let item = i128::from(start) + at * i128::from(step);
        i64::try_from(item).ok().map(Value::from)
    });
    items.collect::<Option<Vec<_>>>().map(Value::Array)
}

fn fits(text: &str) -> bool {
    text.encode_utf16().count() <= MAX_TEXT
}

fn base64_decode(text: &str) -> Option<Value> {
    let mut symbols: String = text
        .chars()
        .take_while(|&c| c != '=')
        .filter_map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '+' | '/' => Some(c),
            '-' => Some('+'),
            '_' => Some('/'),
            _ => None,
        })
        .collect();
    // A last lone symbol carries no whole byte.
    if symbols.len() % 4 == 1 {
        symbols.pop();
    }
    let bytes = LENIENT.decode(symbols).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned().into())
}

/// `States.Hash`: the data's digest in lowercase hex. Data that is not a string is
/// hashed as `States.Format` would write it.
fn hash(data: &str, algorithm: &str) -> Option<Value> {
    if !fits(data) {
        return None;
    }
    let digest = match algorithm {
        "MD5" => md5::Md5::digest(data).to_vec(),
        "SHA-1" => sha1::Sha1::digest(data).to_vec(),
        "SHA-256" => sha2::Sha256::digest(data).to_vec(),
        "SHA-384" => sha2::Sha384::digest(data).to_vec(),
        "SHA-512" => sha2::Sha512::digest(data).to_vec(),
        _ => return None,
    };
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    Some(hex.into())
}
