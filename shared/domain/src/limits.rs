//! How large what is stored and sent may be. A value (an input, a step's output, a
//! state's data) may have up to [`MAX_VALUE`]: what a
//! record or a message cannot hold is stored apart ([`crate::payload`]), so a
//! record stays within a DynamoDB item and a message within SQS's 256 KiB. What
//! is over these limits is refused where it arrives: a step whose answer is too
//! large is [`Unusable`] and compensated, never retried against a limit it cannot
//! pass.
//!
//! [`Unusable`]: crate::task::StepState::Unusable

/// The most one value may have, as JSON: a task's input, a step's output, a
/// callback's body.
pub const MAX_VALUE: usize = 128 * 1024 * 1024;

/// The most one step's output may have, as JSON.
pub const MAX_STEP_OUTPUT: usize = MAX_VALUE;

/// The most a task's input and its steps' outputs may have together, as JSON: what
/// an agent request carries (stored apart when over a message's size).
pub const MAX_TASK_DATA: usize = 2 * MAX_VALUE;

/// The most a task's order data may have, as JSON: its input and the inputs edited
/// resubmissions replaced.
pub const MAX_ORDER: usize = 2 * MAX_VALUE;

/// The largest message SQS takes, body and attributes.
pub const MAX_MESSAGE: usize = 256 * 1024;

/// The largest body the SQS adapter sends: SQS's limit, less room for the
/// attributes it adds (a trace header).
pub const MAX_MESSAGE_BODY: usize = MAX_MESSAGE - 1024;

/// The longest SQS delays a message.
pub const MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// The largest item DynamoDB takes, names and values.
pub const MAX_ITEM: usize = 400 * 1024;

/// The longest path a step's operation may have once its values are filled in: far
/// under what HTTP servers take, and within what an agent request leaves room for.
pub const MAX_PATH: usize = 2 * 1024;

/// The most of an agent's error text a task keeps: it is stored in the step, in the
/// task's error and in its alert, and published to operators.
pub const MAX_ERROR_TEXT: usize = 1024;

/// The longest error a state machine's execution, state or event keeps, as Step
/// Functions bounds it.
pub const MAX_MACHINE_ERROR: usize = 256;

/// The longest cause a state machine's execution, state or event keeps, as Step
/// Functions bounds it.
pub const MAX_MACHINE_CAUSE: usize = 32_768;

/// `text`, cut to [`MAX_ERROR_TEXT`] bytes (at a character's boundary) with a mark
/// saying so.
#[must_use]
pub fn bounded_error(text: String) -> String {
    bounded(text, MAX_ERROR_TEXT)
}

/// A state machine's failure, its error and cause cut to Step Functions' lengths
/// ([`MAX_MACHINE_ERROR`], [`MAX_MACHINE_CAUSE`]), each marked where it was.
#[must_use]
pub fn bounded_failure(failure: sas_asl::Failure) -> sas_asl::Failure {
    sas_asl::Failure::new(
        bounded(failure.error, MAX_MACHINE_ERROR),
        bounded(failure.cause, MAX_MACHINE_CAUSE),
    )
}

/// `text`, cut to at most `most` bytes (at a character's boundary), ending with a
/// mark saying so where it was cut.
fn bounded(mut text: String, most: usize) -> String {
    const CUT: &str = " [cut]";
    if text.len() > most {
        let mut end = most - CUT.len();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(CUT);
    }
    text
}

/// Why a request cannot be sent as its workflow builds it, if it cannot: a path
/// over [`MAX_PATH`], or a payload of mapped fields over [`MAX_TASK_DATA`] (a field
/// mapping may name one value more than once; the payload of a step without one
/// is within it by construction).
#[must_use]
pub fn request_refusal(path: &str, mapped_payload: Option<&str>) -> Option<String> {
    if path.len() > MAX_PATH {
        return Some(format!(
            "path: {} bytes, over the {MAX_PATH} a path may have",
            path.len()
        ));
    }
    let bytes = mapped_payload.map_or(0, str::len);
    (bytes > MAX_TASK_DATA)
        .then(|| format!("fields: {bytes} bytes, over the {MAX_TASK_DATA} a request may carry"))
}

/// The bytes of a value as JSON, counted as they are written (none kept).
#[must_use]
pub fn json_size(value: &serde_json::Value) -> usize {
    let mut counted = Counted(0);
    serde_json::to_writer(&mut counted, value).map_or(usize::MAX, |()| counted.0)
}

/// At least the bytes of a value as JSON ([`json_size`]), found without writing it:
/// each string as if every byte of it were escaped, each number at its longest. A
/// walk of the value's nodes, not of its bytes: it tells, at a fraction of the cost,
/// that a value is well within a limit, as most are.
#[must_use]
pub fn json_size_at_most(value: &serde_json::Value) -> usize {
    use serde_json::Value;

    /// `\u00XX` a byte, and the quotes.
    fn text(text: &str) -> usize {
        2 + 6 * text.len()
    }
    match value {
        Value::Null | Value::Bool(_) => 5,
        // A float at its longest, as ryu writes it: -2.2250738585072014e-308.
        Value::Number(_) => 24,
        Value::String(string) => text(string),
        // Brackets, and a comma after each item (one too many).
        Value::Array(items) => {
            2 + items
                .iter()
                .map(|item| json_size_at_most(item) + 1)
                .sum::<usize>()
        }
        Value::Object(fields) => {
            let field =
                |(name, value): (&String, &Value)| text(name) + 1 + json_size_at_most(value) + 1;
            2 + fields.iter().map(field).sum::<usize>()
        }
    }
}

/// Why `output` cannot be kept beside `kept` (the task's input and earlier
/// outputs), if it cannot ([`output_refusal`]): their bytes counted only where their
/// bounds ([`json_size_at_most`]) leave it open.
#[must_use]
pub fn refusal_of<'a>(
    output: &serde_json::Value,
    kept: impl Iterator<Item = &'a serde_json::Value> + Clone,
) -> Option<String> {
    let output_bound = json_size_at_most(output);
    let kept_bound: usize = kept.clone().map(json_size_at_most).sum();
    if output_bound <= MAX_STEP_OUTPUT && output_bound + kept_bound <= MAX_TASK_DATA {
        return None;
    }
    output_refusal(json_size(output), kept.map(json_size).sum())
}

/// A writer that counts the bytes written to it.
struct Counted(usize);

impl std::io::Write for Counted {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Why a step's output cannot be kept, if it cannot: over [`MAX_STEP_OUTPUT`], or
/// taking the task's data (`kept`: the input's and earlier outputs' bytes) over
/// [`MAX_TASK_DATA`].
#[must_use]
pub fn output_refusal(output_bytes: usize, kept: usize) -> Option<String> {
    if output_bytes > MAX_STEP_OUTPUT {
        return Some(format!(
            "the answer has {output_bytes} bytes, over the {MAX_STEP_OUTPUT} a step's output may have"
        ));
    }
    let total = kept + output_bytes;
    (total > MAX_TASK_DATA).then(|| {
        format!(
            "the answer takes the task's input and outputs to {total} bytes, over the {MAX_TASK_DATA} a task may carry"
        )
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;

    /// Any JSON value, with strings that need escaping and numbers at their longest.
    fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "(.|[\u{0}-\u{1f}\"\\\\]){0,24}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::from),
                prop::collection::vec(("[\u{0}-\u{1f}\"a-z]{0,8}", inner), 0..8)
                    .prop_map(|fields| Value::Object(fields.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn a_value_has_at_most_its_bound_of_bytes(value in any_value()) {
            prop_assert!(json_size_at_most(&value) >= json_size(&value));
        }

        #[test]
        fn a_refusal_is_told_as_from_the_exact_sizes(output in any_value(), kept in any_value()) {
            let exact = output_refusal(json_size(&output), json_size(&kept));
            prop_assert_eq!(refusal_of(&output, std::iter::once(&kept)), exact);
        }
    }

    /// A value whose bound is over the limit, not itself: counted exactly, and kept.
    #[test]
    fn a_value_over_the_limit_only_by_its_bound_is_kept() {
        let output = json!("a".repeat(MAX_STEP_OUTPUT / 6 + 1));
        assert!(json_size_at_most(&output) > MAX_STEP_OUTPUT);
        assert_eq!(refusal_of(&output, std::iter::empty()), None);
        let over = json!("a".repeat(MAX_STEP_OUTPUT - 1));
        assert!(
            refusal_of(&over, std::iter::empty()).is_some(),
            "quotes included"
        );
    }
}
