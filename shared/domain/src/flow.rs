//! Flow control: how many calls a remote service takes at once and a second, across
//! all tasks, per key of the input if need be, and which waiting call goes first.
//!
//! A limit is written in a service's settings, or in a step's `limit` where the step
//! should be narrower than its service:
//!
//! ```json
//! {"max_concurrency": 50, "rate": {"per_second": 20, "burst": 40}, "key": "input.customer_id"}
//! ```
//!
//! Each limit is a gate: a call passes its step's gate (if any), then its service's,
//! and holds a slot of each until its step's answer is recorded or its complete-by
//! passes. A call that finds a gate full waits in the gate's line, in the order of
//! [`line_position`], and its step's complete-by starts when it passes.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::ids::TaskId;
use crate::messages::Operation;
use crate::time::Timestamp;
use crate::trace::TraceContext;

/// The priorities a submission may carry: 1 goes first, 5 last.
pub const PRIORITIES: std::ops::RangeInclusive<u8> = 1..=5;
/// A submission's priority when it gives none.
pub const DEFAULT_PRIORITY: u8 = 3;
/// [`DEFAULT_PRIORITY`], for serde.
#[must_use]
pub const fn default_priority() -> u8 {
    DEFAULT_PRIORITY
}

/// Whether `priority` is the default, which records leave out.
#[must_use]
pub const fn is_default_priority(priority: &u8) -> bool {
    *priority == DEFAULT_PRIORITY
}

/// How much later than it came a call waits in a line for each step of priority
/// below 1: a priority-3 call is placed as though it came a minute later.
pub const PRIORITY_STEP: Duration = Duration::from_secs(30);

/// The most calls a limit may let in flight at once. A gate keeps the calls holding
/// its slots in one item of the state table, under DynamoDB's 400 KB: this many of
/// the longest a call's name can be (a child's child's task id, 511 bytes) take about
/// 300 KB, which leaves room for the rest of the item.
pub const MAX_CONCURRENCY: u32 = 500;

/// A limit on the calls through one gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// Calls in flight at once, at most [`MAX_CONCURRENCY`]; `None` for no bound.
    pub max_concurrency: Option<u32>,
    /// Calls started a second; `None` for no bound.
    pub rate: Option<Rate>,
    /// The input's field whose value keys the limit: each value has a gate of its own
    /// (`input.customer_id`: so many calls per customer). `None`: one gate for all.
    pub key: Option<String>,
}

/// Calls a second, and how many may start at once after a quiet while.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Calls a second, on average: a finite number above zero, never NaN.
    pub per_second: f64,
    /// The most that may start at once (the bucket's size); at least one.
    pub burst: u32,
}

// A rate is read only finite and above zero ([`LimitFile::check`]): equal to itself.
impl Eq for Rate {}

/// A limit as written: its fields, any of them.
#[derive(Deserialize, Serialize, Clone)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_concurrency: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rate: Option<RateFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) key: Option<String>,
}

/// A rate as written: calls a second alone, or with a burst.
#[derive(Deserialize, Serialize, Clone)]
#[serde(untagged)]
pub(crate) enum RateFile {
    PerSecond(f64),
    Full { per_second: f64, burst: Option<u32> },
}

impl LimitFile {
    /// The limit, checked; the error names the field.
    pub(crate) fn check(self) -> Result<Limit, (String, String)> {
        let refused = |field: &str, message: String| (field.to_owned(), message);
        match self.max_concurrency {
            Some(0) => return Err(refused("max_concurrency", "must be at least 1".into())),
            Some(max) if max > MAX_CONCURRENCY => {
                return Err(refused(
                    "max_concurrency",
                    format!(
                        "{max}: at most {MAX_CONCURRENCY}, what one gate's record holds \
                         (a rate alone bounds calls started a second, with no such bound)"
                    ),
                ));
            }
            _ => {}
        }
        let rate = match self.rate {
            None => None,
            Some(RateFile::PerSecond(per_second)) => Some((per_second, None)),
            Some(RateFile::Full { per_second, burst }) => Some((per_second, burst)),
        };
        let rate = match rate {
            None => None,
            Some((per_second, _)) if !(per_second > 0.0 && per_second.is_finite()) => {
                return Err(refused(
                    "rate.per_second",
                    format!("{per_second}: must be a number of calls a second above 0"),
                ));
            }
            Some((_, Some(0))) => return Err(refused("rate.burst", "must be at least 1".into())),
            Some((per_second, burst)) => Some(Rate {
                per_second,
                // A second's calls at once, unless given.
                burst: burst.unwrap_or_else(|| whole(per_second.ceil()).max(1)),
            }),
        };
        let key = match self.key {
            None => None,
            Some(text) => match text.strip_prefix("input.") {
                Some(field) if !field.is_empty() && !field.contains('.') => Some(field.to_owned()),
                _ => return Err(refused("key", format!("'{text}': must be input.<field>"))),
            },
        };
        if self.max_concurrency.is_none() && rate.is_none() {
            return Err(refused(
                "max_concurrency",
                "a limit needs max_concurrency, rate or both".into(),
            ));
        }
        Ok(Limit {
            max_concurrency: self.max_concurrency,
            rate,
            key,
        })
    }
}

/// `value` (whole, at least zero) as a `u32`, saturating.
fn whole(value: f64) -> u32 {
    if value >= f64::from(u32::MAX) {
        u32::MAX
    } else if value > 0.0 {
        // In range, and whole: nothing is cut.
        #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let whole = value as u32;
        whole
    } else {
        0
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        LimitFile::deserialize(deserializer)?
            .check()
            .map_err(|(field, message)| serde::de::Error::custom(format!("{field}: {message}")))
    }
}

impl Serialize for Limit {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        LimitFile {
            max_concurrency: self.max_concurrency,
            rate: self.rate.map(|rate| RateFile::Full {
                per_second: rate.per_second,
                burst: Some(rate.burst),
            }),
            key: self.key.as_ref().map(|field| format!("input.{field}")),
        }
        .serialize(serializer)
    }
}

/// The longest value of a key a gate's name holds as it is; a longer one is named by
/// its hash ([`Limit::gate`]).
pub const MAX_READABLE_KEY: usize = 128;

/// What a gate's name holds in place of a key's value it names by its hash.
const HASHED_KEY: &str = "sha256:";

impl Limit {
    /// The gate of a call under this limit named `name` (a service's, or a step's),
    /// for a task with `input`: one for all, or one per value of the key.
    #[must_use]
    pub fn gate(&self, name: &str, input: &Value) -> String {
        match &self.key {
            None => name.to_owned(),
            Some(field) => {
                let value = match input.get(field) {
                    Some(Value::String(text)) => key_in_gate(text),
                    Some(other) => key_in_gate(&other.to_string()),
                    None => String::new(),
                };
                format!("{name}/{value}")
            }
        }
    }
}

/// A key's value as its gate's name holds it: as it is, up to [`MAX_READABLE_KEY`]
/// bytes; past that, `sha256:` and its hash, so that the name fits a DynamoDB key
/// (2,048 bytes) whatever the input holds. A short value that begins `sha256:` is
/// hashed too: no value can name another's gate.
fn key_in_gate(value: &str) -> String {
    if value.len() <= MAX_READABLE_KEY && !value.starts_with(HASHED_KEY) {
        value.to_owned()
    } else {
        format!("{HASHED_KEY}{}", crate::sha256_hex(value))
    }
}

/// Where a call waiting since `since` with `priority` stands in a gate's line, the
/// lowest first: as though it came [`PRIORITY_STEP`] later for each step below
/// priority 1. So a priority-1 call goes before the priority-3 calls that came less
/// than a minute before it, and after those that came earlier: no call waits behind
/// an endless stream of more urgent ones.
#[must_use]
pub fn line_position(since: Timestamp, priority: u8) -> Timestamp {
    let steps = u32::from(priority.clamp(*PRIORITIES.start(), *PRIORITIES.end()) - 1);
    since.plus(PRIORITY_STEP * steps)
}

/// One call of a step (an attempt of its call or of its compensation): what holds a
/// gate's slot, and waits in its line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CallRef {
    /// The task.
    pub task_id: TaskId,
    /// Its run.
    pub run: u32,
    /// The step, by index.
    pub step: usize,
    /// The step's attempt.
    pub attempt: u32,
    /// Its call, or its compensation.
    pub operation: Operation,
}

impl CallRef {
    /// Its name among a gate's holders and in its line.
    #[must_use]
    pub fn id(&self) -> String {
        let operation = match self.operation {
            Operation::Call => "call",
            Operation::Compensate => "compensate",
        };
        format!(
            "{}/{}/{}/{}/{operation}",
            self.task_id, self.run, self.step, self.attempt
        )
    }
}

/// A call given a slot of each of its gates, which it holds until `until` at the
/// earliest: its agent must be done by then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Grant {
    /// The call.
    pub call: CallRef,
    /// When its first slot to lapse does, a lost release made good.
    pub until: Timestamp,
}

/// A gate a call passes: its name (with its key's value) and its limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateRef {
    /// `service:<name>` or `step:<workflow>/<step>`, then `/<key's value>` if keyed
    /// (`/sha256:<its hash>` past [`MAX_READABLE_KEY`] bytes).
    pub name: String,
    /// Its limit.
    pub limit: Limit,
}

/// A call asking for a slot of each of its gates, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admission {
    /// The call.
    pub call: CallRef,
    /// Its gates, its step's before its service's.
    pub gates: Vec<GateRef>,
    /// The service it calls.
    pub service: String,
    /// When it began to wait.
    pub since: Timestamp,
    /// Where it stands in each line ([`line_position`]).
    pub position: Timestamp,
    /// How long it may hold its slots once given them: its step's complete-by, and a
    /// margin; a release lost is made up for then.
    pub hold: Duration,
    /// The trace of its step's operation, which its grant continues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
}

/// A gate's state: the calls holding its slots, and its rate's bucket.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Gate {
    /// The calls holding a slot, by call, with when each slot is given back at the
    /// latest: its call's complete-by (a release lost is made up for then).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub holders: BTreeMap<String, Timestamp>,
    /// Calls that may start now under the rate, as of `refilled_at`.
    #[serde(default)]
    pub tokens: f64,
    /// When the bucket was last filled.
    #[serde(default)]
    pub refilled_at: Timestamp,
    /// The version written last: each write is conditional on it.
    #[serde(default)]
    pub version: u64,
}

/// A call in a gate's line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiter {
    /// The call asking, with its gates.
    pub admission: Admission,
    /// The gate whose line it is in, by index among its gates.
    pub at: usize,
    /// When the first of the slots it holds already (of the gates before) lapses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_until: Option<Timestamp>,
}

impl Waiter {
    /// The gate whose line it is in.
    #[must_use]
    pub fn gate(&self) -> Option<&GateRef> {
        self.admission.gates.get(self.at)
    }
}

impl Gate {
    /// How many calls may pass now under `limit`, at most `wanted`: the slots free
    /// and the rate's tokens. Forgets the holders whose time has passed and fills the
    /// bucket up to now.
    pub fn open(&mut self, limit: &Limit, now: Timestamp, wanted: usize) -> usize {
        self.holders.retain(|_, until| *until > now);
        let slots = limit.max_concurrency.map_or(usize::MAX, |max| {
            (max as usize).saturating_sub(self.holders.len())
        });
        let tokens = limit.rate.map_or(usize::MAX, |rate| {
            let elapsed = self.refilled_at.until(now).as_secs_f64();
            let fresh = self.version == 0 && self.holders.is_empty();
            let full = f64::from(rate.burst);
            self.tokens = if fresh {
                full
            } else {
                (self.tokens + elapsed * rate.per_second).min(full)
            };
            self.refilled_at = now;
            whole(self.tokens.floor()) as usize
        });
        slots.min(tokens).min(wanted)
    }

    /// Gives `call` a slot until `until`, spending a token of the rate's. Only a limit
    /// on calls at once keeps the call among its holders, which it counts: a rate
    /// counts starts, and its holders would grow with it (a call a second held a
    /// minute, 60) past what the gate's record holds.
    pub fn take(&mut self, limit: &Limit, call: String, until: Timestamp) {
        if limit.rate.is_some() {
            self.tokens -= 1.0;
        }
        if limit.max_concurrency.is_some() {
            self.holders.insert(call, until);
        }
    }

    /// When the next token comes, if the rate is what holds calls back.
    #[must_use]
    pub fn next_token(&self, limit: &Limit) -> Option<Timestamp> {
        let rate = limit.rate?;
        let missing = (1.0 - self.tokens).max(0.0);
        let millis = (missing / rate.per_second * 1000.0).ceil();
        Some(
            self.refilled_at
                .plus(Duration::from_millis(u64::from(whole(millis)))),
        )
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(max) = self.max_concurrency {
            parts.push(format!("{max} at once"));
        }
        if let Some(rate) = self.rate {
            parts.push(format!("{}/s (burst {})", rate.per_second, rate.burst));
        }
        if let Some(key) = &self.key {
            parts.push(format!("per input.{key}"));
        }
        f.write_str(&parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn limit(json: Value) -> Result<Limit, String> {
        serde_json::from_value(json).map_err(|e| e.to_string())
    }

    #[test]
    fn a_limit_is_read_with_its_defaults_and_errors_name_the_field() {
        let both = limit(json!({"max_concurrency": 3, "rate": 20, "key": "input.customer_id"}))
            .expect("valid");
        assert_eq!(both.max_concurrency, Some(3));
        assert_eq!(
            both.rate,
            Some(Rate {
                per_second: 20.0,
                burst: 20
            })
        );
        assert_eq!(both.key.as_deref(), Some("customer_id"));
        assert_eq!(
            both.to_string(),
            "3 at once, 20/s (burst 20), per input.customer_id"
        );
        let slow = limit(json!({"rate": {"per_second": 0.5, "burst": 2}})).expect("valid");
        assert_eq!(slow.rate.map(|r| r.burst), Some(2));
        assert_eq!(
            limit(json!({"rate": 0.5}))
                .expect("valid")
                .rate
                .map(|r| r.burst),
            Some(1)
        );
        for (written, expected) in [
            (
                json!({"max_concurrency": 0}),
                "max_concurrency: must be at least 1",
            ),
            (json!({"rate": -1}), "rate.per_second: -1: must be"),
            (
                json!({"rate": {"per_second": 5, "burst": 0}}),
                "rate.burst: must be at least 1",
            ),
            (
                json!({"max_concurrency": 1, "key": "customer_id"}),
                "key: 'customer_id': must be input.<field>",
            ),
            (
                json!({"key": "input.customer_id"}),
                "a limit needs max_concurrency, rate or both",
            ),
            (
                json!({"max_concurrency": 1, "burst": 2}),
                "unknown field `burst`",
            ),
        ] {
            let error = limit(written.clone()).expect_err("refused");
            assert!(error.contains(expected), "{written}: {error}");
        }
    }

    #[test]
    fn a_keyed_limit_has_a_gate_per_value_of_its_key() {
        let per_customer =
            limit(json!({"max_concurrency": 1, "key": "input.customer_id"})).expect("valid");
        let input = json!({"customer_id": "c-1", "n": 7});
        assert_eq!(
            per_customer.gate("service:drone", &input),
            "service:drone/c-1"
        );
        let by_number = limit(json!({"max_concurrency": 1, "key": "input.n"})).expect("valid");
        assert_eq!(by_number.gate("service:drone", &input), "service:drone/7");
        let all = limit(json!({"max_concurrency": 1})).expect("valid");
        assert_eq!(all.gate("service:drone", &input), "service:drone");
    }

    #[test]
    fn a_keyed_gates_name_stays_short_whatever_the_value_of_its_key() {
        let per_customer =
            limit(json!({"max_concurrency": 1, "key": "input.customer_id"})).expect("valid");
        let gate =
            |customer: &str| per_customer.gate("service:drone", &json!({"customer_id": customer}));
        let long = "c".repeat(3_000);
        let named = gate(&long);
        assert!(
            named.starts_with("service:drone/sha256:") && named.len() == 14 + 7 + 64,
            "named by its hash: {} bytes",
            named.len()
        );
        assert_eq!(gate(&long), named, "the same value, the same gate");
        assert_ne!(
            gate(&format!("{long}d")),
            named,
            "another value, another gate"
        );
        let readable = "c".repeat(MAX_READABLE_KEY);
        assert_eq!(gate(&readable), format!("service:drone/{readable}"));
        let posing = named.trim_start_matches("service:drone/");
        assert_ne!(
            gate(posing),
            named,
            "a value written as a hash is hashed too"
        );
        let number = json!({"customer_id": [long]});
        assert!(per_customer.gate("service:drone", &number).len() < 100);
    }

    #[test]
    fn a_gate_opens_to_its_free_slots_and_its_tokens() {
        let limit = Limit {
            max_concurrency: Some(3),
            rate: Some(Rate {
                per_second: 2.0,
                burst: 2,
            }),
            key: None,
        };
        let now = Timestamp(10_000);
        let mut gate = Gate::default();
        assert_eq!(gate.open(&limit, now, 10), 2, "a full bucket: its burst");
        gate.take(&limit, "a".into(), now.plus(Duration::from_secs(5)));
        gate.take(&limit, "b".into(), now.plus(Duration::from_secs(5)));
        gate.version = 1;
        assert_eq!(gate.open(&limit, now, 10), 0, "no token left");
        assert_eq!(
            gate.next_token(&limit),
            Some(now.plus(Duration::from_millis(500)))
        );
        let later = now.plus(Duration::from_secs(1));
        assert_eq!(gate.open(&limit, later, 10), 1, "3 at once: one slot free");
        gate.take(&limit, "c".into(), later.plus(Duration::from_secs(5)));
        assert_eq!(
            gate.open(&limit, later.plus(Duration::from_secs(2)), 10),
            0,
            "full"
        );
        // The holders' time passes: their slots are free again (their releases lost).
        let gone = now.plus(Duration::from_millis(5500));
        assert_eq!(
            gate.open(&limit, gone, 10),
            2,
            "the bucket holds two at most"
        );
        assert_eq!(gate.holders.len(), 1);
    }

    #[test]
    fn a_limit_on_more_calls_at_once_than_a_gate_holds_is_refused_naming_the_field() {
        let most = json!({"max_concurrency": MAX_CONCURRENCY});
        assert_eq!(
            limit(most).expect("valid").max_concurrency,
            Some(MAX_CONCURRENCY)
        );
        let error = limit(json!({"max_concurrency": 10_000})).expect_err("refused");
        assert!(
            error.starts_with("max_concurrency: 10000: at most 500"),
            "{error}"
        );
    }

    #[test]
    fn a_gate_full_of_the_longest_calls_fits_one_item() {
        // The longest task id: an owner's tag, and a client's id with generations of
        // children after it, 480 bytes.
        let generation = format!("~{}~{}", "g".repeat(64), u32::MAX);
        let local = format!("{}{}", "c".repeat(24), generation.repeat(6));
        let task_id = TaskId::parse(format!("{}.{local}", "f".repeat(30))).expect("an id");
        assert_eq!(task_id.as_str().len(), 511);
        let limit = Limit {
            max_concurrency: Some(MAX_CONCURRENCY),
            rate: None,
            key: None,
        };
        let mut gate = Gate::default();
        for holder in 0..MAX_CONCURRENCY {
            let call = CallRef {
                task_id: task_id.clone(),
                run: u32::MAX,
                step: usize::MAX,
                attempt: u32::MAX - holder,
                operation: Operation::Compensate,
            };
            gate.take(&limit, call.id(), Timestamp(i64::MAX));
        }
        assert_eq!(gate.holders.len(), MAX_CONCURRENCY as usize);
        // What else the item holds: its keys (a gate's name, bounded whatever the key's
        // value), its version and its bucket.
        let room = 8 * 1024;
        let state = crate::to_json(&gate).len();
        assert!(
            state + room <= crate::limits::MAX_ITEM,
            "{state} bytes of state"
        );
    }

    #[test]
    fn a_rate_alone_keeps_no_holders_and_lets_its_tokens_start() {
        let limit = Limit {
            max_concurrency: None,
            rate: Some(Rate {
                per_second: 1000.0,
                burst: 1000,
            }),
            key: None,
        };
        let now = Timestamp(10_000);
        let mut gate = Gate::default();
        assert_eq!(gate.open(&limit, now, 5_000), 1000);
        for call in 0..1000 {
            gate.take(
                &limit,
                format!("call-{call}"),
                now.plus(Duration::from_secs(60)),
            );
        }
        assert!(gate.holders.is_empty(), "{} holders", gate.holders.len());
        gate.version = 1;
        assert_eq!(
            gate.open(&limit, now, 5_000),
            0,
            "its tokens spent, once written"
        );
    }

    #[test]
    fn a_more_urgent_call_goes_first_unless_the_other_came_long_before() {
        let now = Timestamp(1_000_000);
        let urgent = line_position(now, 1);
        assert!(urgent < line_position(now.minus(Duration::from_secs(59)), 3));
        assert!(urgent > line_position(now.minus(Duration::from_secs(61)), 3));
        assert_eq!(line_position(now, 9), line_position(now, 5), "clamped");
    }
}
