//! Values stored apart from the record that holds them: what lets a task's input, a
//! step's output or a state's data be of any size (up to [`MAX_VALUE`](crate::limits::MAX_VALUE)) while its
//! record stays within a DynamoDB item and its messages within SQS's.
//!
//! A record's large values are its *slots* ([`task_slots`], [`order_slots`]): each
//! value the task keeps whole (an input, an output, a variable, a child's input).
//! Before a record is written, a slot over [`OFFLOAD_ABOVE`] bytes of JSON, and then
//! the largest others until the rest is within [`INLINE_BUDGET`], is replaced by a
//! reference ([`PayloadRef`]): `{"$payload": {"sha256": "...", "bytes": N}}`, its
//! JSON's SHA-256 naming the stored text. When the record is read, each reference is
//! replaced by its value again, so no decision ever sees one. A value that itself
//! looks like a reference is always stored apart, so that a reference read back is
//! never a value given.
//!
//! This module is the choice and the marks; storing and reading the text is the
//! core's (`sas_core::ports::Payloads`).

use std::collections::HashMap;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::ids::TaskId;
use crate::machine::{BranchScope, Branches, MachineRun, VisitWork};
use crate::task::{Order, Task};
use crate::time::Timestamp;

/// A slot whose JSON is larger than this is stored apart.
pub const OFFLOAD_ABOVE: usize = 32 * 1024;

/// The most a record's slots kept inline may have together: beyond it the largest
/// are stored apart too, so that a record stays far within a DynamoDB item.
pub const INLINE_BUDGET: usize = 160 * 1024;

/// The key that marks a reference.
const MARK: &str = "$payload";

/// What a value stored apart belongs to, and is deleted with. The same value in two
/// scopes is stored twice.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ValueScope {
    /// A task's record (and its order data): deleted with the task. Its creation tells
    /// it from a task created under the same id after it was deleted.
    Task {
        /// The task's id.
        id: TaskId,
        /// When it was created.
        created: Timestamp,
    },
    /// A message's body: kept as long as a queue may keep a message.
    Message,
    /// A value uploaded for a task to name, which the task then keeps in its own.
    Upload,
}

impl ValueScope {
    /// The scope of `task`'s values.
    #[must_use]
    pub fn of(task: &Task) -> Self {
        Self::Task {
            id: task.id.clone(),
            created: task.created_at,
        }
    }

    /// Where its values are kept, under the store's root: `tasks/<id>/<created, in
    /// ms>/`, `messages/` or `uploads/`.
    #[must_use]
    pub fn prefix(&self) -> String {
        match self {
            Self::Task { id, created } => format!("tasks/{id}/{}/", created.0),
            Self::Message => "messages/".to_owned(),
            Self::Upload => "uploads/".to_owned(),
        }
    }
}

/// A value stored apart: its JSON's SHA-256 (hex), which names it, and its size.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct PayloadRef {
    /// The SHA-256 of the value's JSON, in hex.
    pub sha256: String,
    /// The bytes of the value's JSON.
    pub bytes: u64,
}

impl PayloadRef {
    /// The reference to the JSON `text`.
    #[must_use]
    pub fn of(text: &[u8]) -> Self {
        Self {
            sha256: crate::sha256_hex(text),
            bytes: u64::try_from(text.len()).unwrap_or(u64::MAX),
        }
    }

    /// The reference as it stands in a record.
    #[must_use]
    pub fn mark(&self) -> Value {
        json!({ MARK: self })
    }

    /// The reference `value` is, if it is one.
    #[must_use]
    pub fn in_value(value: &Value) -> Option<Self> {
        let object = value.as_object().filter(|object| object.len() == 1)?;
        let reference: Self = serde_json::from_value(object.get(MARK)?.clone()).ok()?;
        is_sha256(&reference.sha256).then_some(reference)
    }

    /// The reference the JSON `text` is, if it is one.
    #[must_use]
    pub fn in_text(text: &str) -> Option<Self> {
        if text.len() > 256 || !text.trim_start().starts_with('{') || !text.contains(MARK) {
            return None;
        }
        Self::in_value(&serde_json::from_str(text).ok()?)
    }
}

/// Whether `text` is a SHA-256 as a reference names it: 64 lowercase hex digits.
#[must_use]
pub fn is_sha256(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
}

/// Whether `value` could be taken for a reference: an object whose one key is the
/// mark. Such a value is stored apart whatever its size.
fn looks_like_a_reference(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|object| object.len() == 1 && object.contains_key(MARK))
}

/// A place in a record that holds a value kept whole.
pub enum Slot<'a> {
    /// A value.
    Plain(&'a mut Value),
    /// A value shared with the decisions that read it.
    Shared(&'a mut Arc<Value>),
    /// A value kept as its JSON text (a Lambda function's payload).
    Text(&'a mut String),
}

/// What a slot holds, to be read: a value (plain or shared alike), or JSON text.
enum Held<'s> {
    Value(&'s Value),
    Text(&'s str),
}

impl Slot<'_> {
    fn held(&self) -> Held<'_> {
        match self {
            Self::Plain(value) => Held::Value(value),
            Self::Shared(value) => Held::Value(value),
            Self::Text(text) => Held::Text(text),
        }
    }

    /// The reference the slot holds, if it holds one.
    #[must_use]
    pub fn reference(&self) -> Option<PayloadRef> {
        match self.held() {
            Held::Value(value) => PayloadRef::in_value(value),
            Held::Text(text) => PayloadRef::in_text(text),
        }
    }

    /// The slot's JSON text.
    #[must_use]
    pub fn json(&self) -> String {
        match self.held() {
            Held::Value(value) => crate::to_json(value),
            Held::Text(text) => text.to_owned(),
        }
    }

    /// Whether it must be stored apart whatever its size: its value could be taken
    /// for a reference.
    #[must_use]
    pub fn looks_like_a_reference(&self) -> bool {
        match self.held() {
            Held::Value(value) => looks_like_a_reference(value),
            Held::Text(text) => PayloadRef::in_text(text).is_some(),
        }
    }

    /// The bytes of the slot's JSON, counted without writing it.
    #[must_use]
    pub fn size(&self) -> usize {
        match self.held() {
            Held::Value(value) => crate::limits::json_size(value),
            Held::Text(text) => text.len(),
        }
    }

    /// At least the bytes of the slot's JSON ([`crate::limits::json_size_at_most`]).
    #[must_use]
    pub fn size_at_most(&self) -> usize {
        match self.held() {
            Held::Value(value) => crate::limits::json_size_at_most(value),
            Held::Text(text) => text.len(),
        }
    }

    /// The value a reference stands for, or the reference for a value.
    pub fn set(&mut self, value: Arc<Value>) {
        match self {
            Self::Plain(slot) => **slot = Arc::unwrap_or_clone(value),
            Self::Shared(slot) => **slot = value,
            Self::Text(slot) => **slot = crate::to_json(&value),
        }
    }

    /// The value it shares, if it shares one.
    #[must_use]
    pub fn shared(&self) -> Option<&Arc<Value>> {
        match self {
            Self::Shared(value) => Some(value),
            Self::Plain(_) | Self::Text(_) => None,
        }
    }
}

/// The bytes of the values `slots` name by reference: what reading them would add.
#[must_use]
pub fn bytes_apart(slots: Vec<Slot<'_>>) -> u64 {
    slots
        .iter()
        .filter_map(Slot::reference)
        .map(|r| r.bytes)
        .sum()
}

/// Whether none of `slots` is to be stored apart, told from their sizes' bounds
/// alone: none could be taken for a reference, and at their largest each is within
/// [`OFFLOAD_ABOVE`] and all within [`INLINE_BUDGET`] ([`to_store_apart`]).
#[must_use]
pub fn none_apart(slots: &[Slot<'_>]) -> bool {
    let mut total = 0;
    slots.iter().all(|slot| {
        let size = slot.size_at_most();
        total += size;
        size <= OFFLOAD_ABOVE && total <= INLINE_BUDGET && !slot.looks_like_a_reference()
    })
}

/// Which of slots of these sizes to store apart: those that must be, those over
/// [`OFFLOAD_ABOVE`], then the largest others until the rest fit [`INLINE_BUDGET`].
#[must_use]
pub fn to_store_apart(sizes: &[(usize, bool)]) -> Vec<bool> {
    let mut apart: Vec<bool> = sizes
        .iter()
        .map(|&(size, must)| must || size > OFFLOAD_ABOVE)
        .collect();
    let mut inline: Vec<usize> = (0..sizes.len()).filter(|&i| !apart[i]).collect();
    inline.sort_by_key(|&i| std::cmp::Reverse(sizes[i].0));
    let mut total: usize = inline.iter().map(|&i| sizes[i].0).sum();
    for i in inline {
        if total <= INLINE_BUDGET {
            break;
        }
        apart[i] = true;
        total -= sizes[i].0;
    }
    apart
}

/// Whether any part of `value` could be taken for a reference: a message whose
/// payload holds one is not carried by reference ([`by_reference`]), so that no
/// value given is ever read back as a reference.
#[must_use]
pub fn holds_a_lookalike(value: &Value) -> bool {
    match value {
        Value::Object(fields) => {
            looks_like_a_reference(value) || fields.values().any(holds_a_lookalike)
        }
        Value::Array(items) => items.iter().any(holds_a_lookalike),
        _ => false,
    }
}

/// What a message's value may name of the values kept already: their sizes (a part
/// of another size is not hashed to look it up), and whether one is kept.
pub struct KeptValues<'a> {
    /// The sizes of the values kept.
    pub sizes: &'a std::collections::HashSet<u64>,
    /// Whether the value a reference names is kept.
    pub holds: &'a dyn Fn(&PayloadRef) -> bool,
}

/// `value`, for a message that carries it, with its parts over [`OFFLOAD_ABOVE`]
/// replaced by their references: from the whole down, a part `kept` holds already (a
/// task's input or a step's output, which its record names) is taken whole; another
/// is looked into first, and taken whole if still too large. Gives the parts taken
/// that are not kept yet, each with its JSON, to store before the message is sent;
/// `None` where no part is kept already, and the message is better stored whole.
pub fn by_reference(value: &mut Value, kept: &KeptValues<'_>) -> Option<Vec<(PayloadRef, String)>> {
    if crate::limits::json_size_at_most(value) <= OFFLOAD_ABOVE {
        return None;
    }
    let mut to_store = Vec::new();
    let size = crate::limits::json_size(value);
    (take_parts(value, size, kept, &mut to_store) > 0).then_some(to_store)
}

/// Takes the parts of `value` (of `size` bytes of JSON); gives how many were kept
/// already.
fn take_parts(
    value: &mut Value,
    size: usize,
    kept: &KeptValues<'_>,
    to_store: &mut Vec<(PayloadRef, String)>,
) -> usize {
    if size <= OFFLOAD_ABOVE {
        return 0;
    }
    if kept.sizes.contains(&(size as u64)) {
        let reference = PayloadRef::of(crate::to_json(value).as_bytes());
        if (kept.holds)(&reference) {
            *value = reference.mark();
            return 1;
        }
    }
    let (mut reused, before) = (0, to_store.len());
    let mut take = |part: &mut Value| {
        let size = crate::limits::json_size(part);
        reused += take_parts(part, size, kept, to_store);
    };
    match value {
        Value::Object(fields) => fields.values_mut().for_each(&mut take),
        Value::Array(items) => items.iter_mut().for_each(&mut take),
        _ => {}
    }
    let size = if reused > 0 || to_store.len() > before {
        crate::limits::json_size(value)
    } else {
        size
    };
    if size > OFFLOAD_ABOVE {
        let json = crate::to_json(value);
        let reference = PayloadRef::of(json.as_bytes());
        *value = reference.mark();
        to_store.push((reference, json));
    }
    reused
}

/// The references [`by_reference`] left in `value`.
#[must_use]
pub fn references_in(value: &Value) -> Vec<PayloadRef> {
    let mut found = Vec::new();
    let mut parts = vec![value];
    while let Some(part) = parts.pop() {
        if let Some(reference) = PayloadRef::in_value(part) {
            found.push(reference);
            continue;
        }
        match part {
            Value::Object(fields) => parts.extend(fields.values()),
            Value::Array(items) => parts.extend(items),
            _ => {}
        }
    }
    found
}

/// `value` with each reference [`references_in`] finds replaced by the part `parts`
/// holds under its SHA-256. A part taken whole may itself hold references (to the
/// parts taken before it): the reader puts parts back until none is left.
pub fn put_parts_back(value: &mut Value, parts: &HashMap<String, Value>) {
    if let Some(reference) = PayloadRef::in_value(value) {
        if let Some(part) = parts.get(&reference.sha256) {
            *value = part.clone();
        }
        return;
    }
    match value {
        Value::Object(fields) => {
            for part in fields.values_mut() {
                put_parts_back(part, parts);
            }
        }
        Value::Array(items) => {
            for part in items {
                put_parts_back(part, parts);
            }
        }
        _ => {}
    }
}

/// The slots of a task's record.
pub fn task_slots(task: &mut Task) -> Vec<Slot<'_>> {
    let mut slots = Vec::new();
    for step in &mut task.steps {
        if let Some(output) = &mut step.output {
            slots.push(Slot::Shared(output));
        }
    }
    if let Some(machine) = task.machine.as_deref_mut() {
        machine_slots(machine, &mut slots);
    }
    if let Some(scope) = task
        .parent
        .as_mut()
        .and_then(|parent| parent.scope.as_deref_mut())
    {
        scope_slots(scope, &mut slots);
    }
    slots
}

/// The slots of a task's order data.
pub fn order_slots(order: &mut Order) -> Vec<Slot<'_>> {
    let mut slots = vec![Slot::Shared(&mut order.input)];
    slots.extend(
        order
            .earlier
            .iter_mut()
            .map(|earlier| Slot::Plain(&mut earlier.input)),
    );
    slots
}

fn machine_slots<'a>(machine: &'a mut MachineRun, slots: &mut Vec<Slot<'a>>) {
    slots.push(Slot::Shared(&mut machine.input));
    if let Some(output) = &mut machine.output {
        slots.push(Slot::Shared(output));
    }
    variable_slots(&mut machine.variables, slots);
    match &mut machine.work {
        Some(VisitWork::Invoke { payload, .. }) => slots.push(Slot::Text(payload)),
        Some(VisitWork::Service { request, .. }) => slots.push(Slot::Shared(request)),
        Some(VisitWork::Timer { result, .. }) => slots.push(Slot::Plain(result)),
        Some(VisitWork::Activity { input, .. }) => slots.push(Slot::Plain(input)),
        Some(VisitWork::Branches(branches)) => branch_slots(branches, slots),
        None => {}
    }
}

fn branch_slots<'a>(branches: &'a mut Branches, slots: &mut Vec<Slot<'a>>) {
    slots.extend(branches.inputs.iter_mut().map(Slot::Plain));
    slots.extend(branches.outputs.iter_mut().map(Slot::Plain));
    if let Some(input) = &mut branches.execution_input {
        slots.push(Slot::Plain(input));
    }
    if let Some(output) = branches
        .execution
        .as_deref_mut()
        .and_then(|execution| execution.told.as_mut())
        .and_then(|told| told.output.as_mut())
    {
        slots.push(Slot::Plain(output));
    }
}

fn scope_slots<'a>(scope: &'a mut BranchScope, slots: &mut Vec<Slot<'a>>) {
    variable_slots(&mut scope.variables, slots);
    if let Some(input) = &mut scope.execution_input {
        slots.push(Slot::Plain(input));
    }
}

fn variable_slots<'a>(variables: &'a mut Map<String, Value>, slots: &mut Vec<Slot<'a>>) {
    slots.extend(variables.values_mut().map(Slot::Plain));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_large_are_stored_apart_then_the_largest_until_the_rest_fit() {
        let big = OFFLOAD_ABOVE + 1;
        assert_eq!(
            to_store_apart(&[(10, false), (big, false), (5, true)]),
            [false, true, true]
        );
        let near = OFFLOAD_ABOVE - 1;
        let many = vec![(near, false); 8];
        let apart = to_store_apart(&many);
        let kept: usize = apart.iter().filter(|a| !**a).count() * near;
        assert!(
            kept <= INLINE_BUDGET && kept + near > INLINE_BUDGET,
            "{apart:?}"
        );
    }

    #[test]
    fn the_bytes_apart_are_those_the_references_name() {
        let reference = PayloadRef::of(&vec![b'1'; 40_000]);
        let (mut apart, mut inline) = (reference.mark(), json!({"a": 1}));
        let slots = vec![Slot::Plain(&mut apart), Slot::Plain(&mut inline)];
        assert_eq!(bytes_apart(slots), 40_000);
        assert_eq!(bytes_apart(vec![Slot::Plain(&mut inline)]), 0);
    }

    #[test]
    fn a_reference_is_told_from_a_value_and_a_lookalike_is_always_stored_apart() {
        let reference = PayloadRef::of(b"\"text\"");
        assert_eq!(
            PayloadRef::in_value(&reference.mark()),
            Some(reference.clone())
        );
        let text = crate::to_json(&reference.mark());
        assert_eq!(PayloadRef::in_text(&text), Some(reference));
        let lookalike = json!({"$payload": {"sha256": "not hex", "bytes": 1}});
        assert_eq!(PayloadRef::in_value(&lookalike), None);
        let mut value = lookalike;
        let slot = Slot::Plain(&mut value);
        assert!(
            slot.looks_like_a_reference(),
            "stored apart, so never read back as itself"
        );
        assert_eq!(PayloadRef::in_value(&json!({"a": 1})), None);
    }

    #[test]
    fn a_message_carries_its_stored_parts_by_reference_and_reads_back_whole() {
        let big = |c: &str| json!({"blob": c.repeat(OFFLOAD_ABOVE)});
        let (input, answer) = (big("i"), big("a"));
        let other = json!("o".repeat(OFFLOAD_ABOVE));
        let payload =
            json!({"order": input, "results": {"drone": answer, "more": [other, 1]}, "n": 2});
        let stored_refs = [&input, &answer].map(|v| PayloadRef::of(crate::to_json(v).as_bytes()));
        let sizes = stored_refs.iter().map(|r| r.bytes).collect();
        let kept = KeptValues {
            sizes: &sizes,
            holds: &|r| stored_refs.contains(r),
        };
        let mut carried = payload.clone();
        let to_store = by_reference(&mut carried, &kept).expect("parts kept already");

        assert_eq!(
            carried["order"],
            stored_refs[0].mark(),
            "the input, stored already"
        );
        assert_eq!(carried["results"]["drone"], stored_refs[1].mark());
        let stored_now: Vec<Value> = to_store
            .iter()
            .map(|(r, json)| {
                assert_eq!(*r, PayloadRef::of(json.as_bytes()), "named by its hash");
                serde_json::from_str(json).expect("json")
            })
            .collect();
        assert!(
            stored_now == [other.clone()],
            "only the part not kept yet is stored"
        );
        assert!(crate::to_json(&carried).len() < 1_000, "{carried}");

        let mut parts: HashMap<String, Value> = HashMap::new();
        for (reference, value) in stored_refs.iter().zip([&input, &answer]) {
            parts.insert(reference.sha256.clone(), value.clone());
        }
        for (reference, json) in &to_store {
            parts.insert(
                reference.sha256.clone(),
                serde_json::from_str(json).expect("json"),
            );
        }
        assert_eq!(references_in(&carried).len(), 3);
        put_parts_back(&mut carried, &parts);
        assert!(references_in(&carried).is_empty());
        assert!(carried == payload, "read back whole");
    }

    #[test]
    fn a_part_too_large_whole_is_taken_with_its_parts_taken_first() {
        let medium = |n: u32| json!(n.to_string().repeat(OFFLOAD_ABOVE / 3));
        let outer = json!({"large": "x".repeat(OFFLOAD_ABOVE + 1), "a": medium(1), "b": medium(2),
            "c": medium(3), "d": medium(4)});
        let kept_value = json!("k".repeat(OFFLOAD_ABOVE));
        let kept_ref = PayloadRef::of(crate::to_json(&kept_value).as_bytes());
        let payload = json!({"outer": outer, "kept": kept_value, "n": 1});
        let none = std::collections::HashSet::new();
        let nothing_kept = KeptValues {
            sizes: &none,
            holds: &|_| false,
        };
        assert!(
            by_reference(&mut payload.clone(), &nothing_kept).is_none(),
            "no part kept already: the message is better stored whole"
        );
        let sizes = [kept_ref.bytes, 7].into();
        let kept = KeptValues {
            sizes: &sizes,
            holds: &|r| *r == kept_ref,
        };
        let mut carried = payload.clone();
        let mut to_store = by_reference(&mut carried, &kept).expect("a part kept already");
        assert_eq!(
            to_store.len(),
            2,
            "the large string, then the object holding it"
        );
        assert!(
            to_store[1].1.contains("$payload"),
            "the object names the string"
        );
        to_store.push((kept_ref.clone(), crate::to_json(&kept_value)));
        let mut parts = HashMap::new();
        for (reference, json) in &to_store {
            parts.insert(
                reference.sha256.clone(),
                serde_json::from_str(json).expect("json"),
            );
        }
        let mut rounds = 0;
        while !references_in(&carried).is_empty() {
            put_parts_back(&mut carried, &parts);
            rounds += 1;
        }
        assert_eq!(rounds, 2);
        assert!(carried == payload, "read back whole");
    }

    #[test]
    fn a_lookalike_anywhere_in_a_value_is_found() {
        let lookalike = json!({"$payload": {"sha256": "0", "bytes": 1}});
        assert!(holds_a_lookalike(&json!({"a": [1, {"b": lookalike}]})));
        assert!(!holds_a_lookalike(
            &json!({"a": [1, {"b": {"$payload": 1, "c": 2}}]})
        ));
    }
}
