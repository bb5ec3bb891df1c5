//! The tasks' records with their large values stored apart ([`sas_domain::payload`]):
//! [`Offloading`] stands before a state store, storing a record's large values in
//! [`Payloads`] before the record is written and putting them back when it is read,
//! so that the store keeps references and every decision sees values.
//!
//! [`OffloadingQueues`] does the same for messages: a body over what SQS takes is
//! stored apart and the message carries its reference, which the receivers read
//! back ([`message_body`]). An agent's request carries its payload's large parts as
//! references to values of its task's scope instead ([`sas_domain::payload::by_reference`]):
//! the task's input and its steps' outputs, which its record names already, are not
//! stored again for each request that carries them; the agent reads them back
//! ([`put_parts_back`]).
//!
//! A record's values are in its task's scope, deleted with the task; a message's in
//! the messages' ([`ValueScope`]).
//!
//! A value is stored before the record or message that names it is written: none
//! names a value that is not there. Values are immutable, so those read or written
//! are kept in memory (up to [`KEPT_BYTES`]): a step's write does not store or read
//! again the input and outputs it did not change.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde_json::Value;

use sas_domain::ids::{QueueName, TaskId};
use sas_domain::limits::MAX_MESSAGE_BODY;
use sas_domain::messages::{AgentRequest, AgentResponse, Outcome, Payload};
use sas_domain::payload::{self, PayloadRef, Slot, ValueScope};
use sas_domain::task::{Order, Task};

use crate::ports::{
    Outgoing, OutgoingMessage, PayloadError, Payloads, QueueError, Queues, StateStore, StoreError,
    TaskStore,
};

/// The most bytes of values kept in memory.
const KEPT_BYTES: u64 = 256 * 1024 * 1024;

/// The most values remembered as stored in their scope.
const KNOWN_STORED: usize = 100_000;

/// The most rounds of parts put back into a request's payload: a part taken whole
/// names the parts taken before it, a level of the payload a round.
const PART_ROUNDS: usize = 64;

/// Stores `text` apart, and gives its reference.
///
/// # Errors
/// [`PayloadError`] when the value store fails.
pub async fn store_apart(
    payloads: &dyn Payloads,
    scope: &ValueScope,
    text: Vec<u8>,
) -> Result<PayloadRef, PayloadError> {
    let reference = PayloadRef::of(&text);
    payloads.put(scope, &reference.sha256, text).await?;
    Ok(reference)
}

/// The text `reference` names, if the store holds it: checked against its hash.
///
/// # Errors
/// [`PayloadError`] when the value store fails.
pub async fn stored(
    payloads: &dyn Payloads,
    scope: &ValueScope,
    reference: &PayloadRef,
) -> Result<Option<Vec<u8>>, PayloadError> {
    let text = payloads.get(scope, &reference.sha256).await?;
    Ok(text.filter(|text| PayloadRef::of(text) == *reference))
}

/// The text `reference` names, checked against its hash.
///
/// # Errors
/// [`PayloadError`] when the value store fails, or does not hold the value named.
pub async fn fetch(
    payloads: &dyn Payloads,
    scope: &ValueScope,
    reference: &PayloadRef,
) -> Result<Vec<u8>, PayloadError> {
    stored(payloads, scope, reference).await?.ok_or_else(|| {
        let missing = format!("the value {} is not stored as named", reference.sha256);
        PayloadError(missing.into())
    })
}

/// The value `reference` names, checked against its hash and parsed.
///
/// # Errors
/// [`PayloadError`] when the value store fails, does not hold the value named, or
/// holds text that is not JSON.
async fn fetch_value(
    payloads: &dyn Payloads,
    scope: &ValueScope,
    reference: &PayloadRef,
) -> Result<Value, PayloadError> {
    let text = fetch(payloads, scope, reference).await?;
    serde_json::from_slice(&text).map_err(|error| PayloadError(error.into()))
}

/// `body`, or the body stored apart that it names.
///
/// # Errors
/// [`PayloadError`] when it names a body that cannot be read.
pub async fn message_body<'a>(
    payloads: Option<&dyn Payloads>,
    body: &'a str,
) -> Result<Cow<'a, str>, PayloadError> {
    let (Some(payloads), Some(reference)) = (payloads, PayloadRef::in_text(body)) else {
        return Ok(Cow::Borrowed(body));
    };
    let text = fetch(payloads, &ValueScope::Message, &reference).await?;
    String::from_utf8(text)
        .map(Cow::Owned)
        .map_err(|error| PayloadError(error.into()))
}

/// Queues whose messages over what SQS takes ([`MAX_MESSAGE_BODY`]) are stored apart,
/// each sent as its reference; an agent's request, as its payload's large parts'
/// references where that makes it fit, when the queues know what the tasks' scopes
/// hold ([`Offloading::queues`]).
pub struct OffloadingQueues {
    inner: Arc<dyn Queues>,
    payloads: Arc<dyn Payloads>,
    kept: Option<Arc<Mutex<Kept>>>,
}

impl OffloadingQueues {
    /// `inner`, with large bodies stored whole in `payloads`.
    pub fn new(inner: Arc<dyn Queues>, payloads: Arc<dyn Payloads>) -> Self {
        Self {
            inner,
            payloads,
            kept: None,
        }
    }

    /// `body`, an agent's request, with its payload's large parts carried as
    /// references to values of its task's scope, those not stored yet stored there;
    /// `None` where it is no request (or these queues know no scope), or one carried
    /// whole: its task's creation
    /// unknown, its payload holding what could be taken for a reference, or none of
    /// its parts a value its task keeps already (a state machine's request body, the
    /// JSON text of its values).
    async fn request_by_reference(&self, body: &str) -> Option<Result<String, PayloadError>> {
        let kept = self.kept.as_deref()?;
        let mut request: AgentRequest = serde_json::from_str(body).ok()?;
        let scope = task_scope(&request.task_id, request.task_created_at)?;
        let mut value: Value = serde_json::from_str(request.payload.as_str()).ok()?;
        if payload::holds_a_lookalike(&value) {
            return None;
        }
        let to_store = {
            let kept = lock(kept);
            let sizes = kept.sizes_in(&scope);
            let values = payload::KeptValues {
                sizes: &sizes,
                holds: &|reference| kept.is_stored(&scope, reference),
            };
            payload::by_reference(&mut value, &values)?
        };
        for (reference, json) in to_store {
            let stored = store_apart(&*self.payloads, &scope, json.into_bytes()).await;
            if let Err(error) = stored {
                return Some(Err(error));
            }
            lock(kept).stored(&scope, &reference);
        }
        request.payload = match Payload::of(&value) {
            Ok(payload) => payload,
            Err(error) => return Some(Err(PayloadError(error.into()))),
        };
        request.parts_apart = true;
        Some(Ok(sas_domain::to_json(&request)))
    }
}

/// `request`'s payload with the parts it carries by reference read back from its
/// task's scope ([`OffloadingQueues`]), each checked against its hash.
///
/// # Errors
/// [`PayloadError`] when a part cannot be read, or the request names parts without
/// its task's creation.
pub async fn put_parts_back(
    payloads: &dyn Payloads,
    request: &mut AgentRequest,
) -> Result<(), PayloadError> {
    if !request.parts_apart {
        return Ok(());
    }
    let scope = task_scope(&request.task_id, request.task_created_at).ok_or_else(|| {
        PayloadError("a request carrying parts apart without its task's creation".into())
    })?;
    let mut value: Value = serde_json::from_str(request.payload.as_str())
        .map_err(|error| PayloadError(error.into()))?;
    for _ in 0..PART_ROUNDS {
        let references = payload::references_in(&value);
        if references.is_empty() {
            request.payload = Payload::of(&value).map_err(|error| PayloadError(error.into()))?;
            request.parts_apart = false;
            return Ok(());
        }
        let mut parts = HashMap::with_capacity(references.len());
        for reference in references {
            let part = fetch_value(payloads, &scope, &reference).await?;
            parts.insert(reference.sha256, part);
        }
        payload::put_parts_back(&mut value, &parts);
    }
    Err(PayloadError(
        "a request's parts nested deeper than any written".into(),
    ))
}

/// The scope of the values of the task a message names, where it names its creation.
fn task_scope(
    task_id: &TaskId,
    created: Option<sas_domain::time::Timestamp>,
) -> Option<ValueScope> {
    Some(ValueScope::Task {
        id: task_id.clone(),
        created: created?,
    })
}

/// `response`, whose message would be over what SQS takes, with its succeeded output
/// stored among its task's values and named by reference (`output_apart`), where the
/// step's write will find it stored; unchanged where its task's creation is unknown
/// (the whole message is then stored apart).
///
/// # Errors
/// [`PayloadError`] when the value store fails.
pub async fn answer_by_reference(
    payloads: &dyn Payloads,
    response: &mut AgentResponse,
) -> Result<(), PayloadError> {
    let scope = task_scope(&response.task_id, response.task_created_at);
    let (Some(scope), Outcome::Succeeded { output }) = (scope, &mut response.outcome) else {
        return Ok(());
    };
    let reference = store_apart(payloads, &scope, sas_domain::to_json(output).into_bytes()).await?;
    *output = reference.mark();
    response.output_apart = true;
    Ok(())
}

fn lock(kept: &Mutex<Kept>) -> std::sync::MutexGuard<'_, Kept> {
    kept.lock().unwrap_or_else(PoisonError::into_inner)
}

#[async_trait]
impl Queues for OffloadingQueues {
    async fn send(
        &self,
        queue: &QueueName,
        messages: &[OutgoingMessage],
    ) -> Result<(), QueueError> {
        if messages.iter().all(|m| m.body.len() <= MAX_MESSAGE_BODY) {
            return self.inner.send(queue, messages).await;
        }
        let mut sent = Vec::with_capacity(messages.len());
        for message in messages {
            if message.body.len() <= MAX_MESSAGE_BODY {
                sent.push(message.clone());
                continue;
            }
            let body = match self.request_by_reference(&message.body).await {
                Some(Ok(body)) if body.len() <= MAX_MESSAGE_BODY => {
                    sent.push(OutgoingMessage {
                        body,
                        ..message.clone()
                    });
                    continue;
                }
                Some(Ok(body)) => body.into_bytes(),
                Some(Err(error)) => return Err(QueueError::new(queue, error)),
                None => message.body.clone().into_bytes(),
            };
            let reference = store_apart(&*self.payloads, &ValueScope::Message, body)
                .await
                .map_err(|error| QueueError::new(queue, error))?;
            sent.push(OutgoingMessage {
                body: sas_domain::to_json(&reference.mark()),
                delay: message.delay,
                trace: message.trace.clone(),
            });
        }
        self.inner.send(queue, &sent).await
    }
}

/// A state store whose records' large values are stored apart.
pub struct Offloading {
    inner: Arc<dyn StateStore>,
    payloads: Arc<dyn Payloads>,
    kept: Arc<Mutex<Kept>>,
}

/// Values read or stored lately, by hash, and which values (by address) they are, in
/// which scope; and which values (by hash) are known stored in which scope.
#[derive(Default)]
struct Kept {
    values: HashMap<String, (Arc<Value>, u64)>,
    by_address: HashMap<usize, (PayloadRef, ValueScope)>,
    order: VecDeque<String>,
    bytes: u64,
    known: HashMap<(ValueScope, String), u64>,
    known_order: VecDeque<(ValueScope, String)>,
}

impl Kept {
    /// Remembers that `scope` holds the value `reference` names.
    fn stored(&mut self, scope: &ValueScope, reference: &PayloadRef) {
        let entry = (scope.clone(), reference.sha256.clone());
        if self.known.insert(entry.clone(), reference.bytes).is_none() {
            self.known_order.push_back(entry);
        }
        while self.known_order.len() > KNOWN_STORED {
            if let Some(oldest) = self.known_order.pop_front() {
                self.known.remove(&oldest);
            }
        }
    }

    /// Whether `scope` is known to hold the value `reference` names.
    fn is_stored(&self, scope: &ValueScope, reference: &PayloadRef) -> bool {
        self.known
            .contains_key(&(scope.clone(), reference.sha256.clone()))
    }

    /// The sizes of the values known stored in `scope`.
    fn sizes_in(&self, scope: &ValueScope) -> HashSet<u64> {
        (self.known.iter())
            .filter(|((kept_in, _), _)| kept_in == scope)
            .map(|(_, bytes)| *bytes)
            .collect()
    }

    fn keep(&mut self, scope: &ValueScope, reference: &PayloadRef, value: Arc<Value>) {
        if self.values.contains_key(&reference.sha256) {
            return;
        }
        let address = Arc::as_ptr(&value) as usize;
        (self.by_address).insert(address, (reference.clone(), scope.clone()));
        self.values
            .insert(reference.sha256.clone(), (value, reference.bytes));
        self.order.push_back(reference.sha256.clone());
        self.bytes += reference.bytes;
        while self.bytes > KEPT_BYTES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some((value, bytes)) = self.values.remove(&oldest) {
                self.by_address.remove(&(Arc::as_ptr(&value) as usize));
                self.bytes -= bytes;
            }
        }
    }

    /// The reference of a value kept in `scope`, if `value` is one (the very one).
    fn reference_of(&self, scope: &ValueScope, value: &Arc<Value>) -> Option<PayloadRef> {
        let (reference, kept_in) = self.by_address.get(&(Arc::as_ptr(value) as usize))?;
        (kept_in == scope).then(|| reference.clone())
    }
}

fn unavailable(error: PayloadError) -> StoreError {
    StoreError::Unavailable(error.into())
}

impl Offloading {
    /// `inner`, with large values stored in `payloads`.
    pub fn new(inner: Arc<dyn StateStore>, payloads: Arc<dyn Payloads>) -> Self {
        Self {
            inner,
            payloads,
            kept: Arc::default(),
        }
    }

    /// `inner` as [`OffloadingQueues`] that know the values this store keeps, so that
    /// a request carries those by reference without storing them again.
    pub fn queues(&self, inner: Arc<dyn Queues>) -> OffloadingQueues {
        OffloadingQueues {
            inner,
            payloads: Arc::clone(&self.payloads),
            kept: Some(Arc::clone(&self.kept)),
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        lock(&self.kept)
    }

    /// `response`'s output read back from its task's values where its agent stored it
    /// ([`answer_by_reference`]), checked against its hash; known stored there, so
    /// that the step's write does not store it again.
    ///
    /// # Errors
    /// [`PayloadError`] when the value cannot be read, or the response names it
    /// without its task's creation.
    pub async fn read_answer(&self, response: &mut AgentResponse) -> Result<(), PayloadError> {
        if !response.output_apart {
            return Ok(());
        }
        let scope = task_scope(&response.task_id, response.task_created_at).ok_or_else(|| {
            PayloadError("an answer stored apart without its task's creation".into())
        })?;
        let Outcome::Succeeded { output } = &mut response.outcome else {
            return Err(PayloadError(
                "an answer stored apart that did not succeed".into(),
            ));
        };
        let reference = PayloadRef::in_value(output)
            .ok_or_else(|| PayloadError("an answer stored apart that names no value".into()))?;
        *output = fetch_value(&*self.payloads, &scope, &reference).await?;
        response.output_apart = false;
        self.kept().stored(&scope, &reference);
        Ok(())
    }

    /// `slots` with the values to store apart stored in `scope`, and replaced by
    /// references.
    async fn store_apart(
        &self,
        scope: &ValueScope,
        mut slots: Vec<Slot<'_>>,
    ) -> Result<(), StoreError> {
        let known: Vec<Option<PayloadRef>> = {
            let kept = self.kept();
            (slots.iter())
                .map(|slot| (slot.shared()).and_then(|value| kept.reference_of(scope, value)))
                .collect()
        };
        if known.iter().all(Option::is_none) && payload::none_apart(&slots) {
            return Ok(());
        }
        let sizes: Vec<(usize, bool)> = slots
            .iter()
            .zip(&known)
            .map(|(slot, known)| match known {
                Some(reference) => (usize::try_from(reference.bytes).unwrap_or(usize::MAX), true),
                None => (slot.size(), slot.looks_like_a_reference()),
            })
            .collect();
        let apart = payload::to_store_apart(&sizes);
        for ((slot, known), apart) in slots.iter_mut().zip(known).zip(apart) {
            let reference = match (known, apart) {
                (Some(reference), _) => reference,
                (None, false) => continue,
                (None, true) => {
                    let json = slot.json().into_bytes();
                    let reference = PayloadRef::of(&json);
                    // An agent's answer stored apart is in its task's scope already.
                    if !self.kept().is_stored(scope, &reference) {
                        (self.payloads.put(scope, &reference.sha256, json).await)
                            .map_err(unavailable)?;
                    }
                    let mut kept = self.kept();
                    kept.stored(scope, &reference);
                    if let Some(value) = slot.shared() {
                        kept.keep(scope, &reference, value.clone());
                    }
                    reference
                }
            };
            slot.set(Arc::new(reference.mark()));
        }
        Ok(())
    }

    /// `slots` with each reference replaced by the value it names in `scope`.
    async fn put_back(&self, scope: &ValueScope, slots: Vec<Slot<'_>>) -> Result<(), StoreError> {
        for mut slot in slots {
            let Some(reference) = slot.reference() else {
                continue;
            };
            // A record names only what its scope holds.
            self.kept().stored(scope, &reference);
            let kept = self
                .kept()
                .values
                .get(&reference.sha256)
                .map(|(value, _)| value.clone());
            let value = match kept {
                Some(value) => value,
                None => {
                    let text = fetch(&*self.payloads, scope, &reference)
                        .await
                        .map_err(unavailable)?;
                    let value: Value = serde_json::from_slice(&text)
                        .map_err(|error| StoreError::Corrupt(error.into()))?;
                    let value = Arc::new(value);
                    self.kept().keep(scope, &reference, value.clone());
                    value
                }
            };
            slot.set(value);
        }
        Ok(())
    }

    async fn stored_task(&self, task: &Task) -> Result<Task, StoreError> {
        let mut stored = task.clone();
        let scope = ValueScope::of(task);
        self.store_apart(&scope, payload::task_slots(&mut stored))
            .await?;
        Ok(stored)
    }

    /// `order`, of `task`, with its large values stored apart in the task's scope.
    async fn stored_order(&self, task: &Task, order: &Order) -> Result<Order, StoreError> {
        let mut stored = order.clone();
        let scope = ValueScope::of(task);
        self.store_apart(&scope, payload::order_slots(&mut stored))
            .await?;
        Ok(stored)
    }

    async fn read_task(&self, task: Option<Task>) -> Result<Option<Task>, StoreError> {
        let Some(mut task) = task else {
            return Ok(None);
        };
        let scope = ValueScope::of(&task);
        self.put_back(&scope, payload::task_slots(&mut task))
            .await?;
        Ok(Some(task))
    }

    async fn read_both(
        &self,
        both: Option<(Task, Order)>,
    ) -> Result<Option<(Task, Order)>, StoreError> {
        let Some((mut task, mut order)) = both else {
            return Ok(None);
        };
        let scope = ValueScope::of(&task);
        self.put_back(&scope, payload::task_slots(&mut task))
            .await?;
        self.put_back(&scope, payload::order_slots(&mut order))
            .await?;
        Ok(Some((task, order)))
    }
}

#[async_trait]
impl TaskStore for Offloading {
    async fn create(&self, task: &Task, order: &Order) -> Result<(), StoreError> {
        let (task, order) = (
            self.stored_task(task).await?,
            self.stored_order(task, order).await?,
        );
        self.inner.create(&task, &order).await
    }

    async fn task(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        self.read_task(self.inner.task(id).await?).await
    }

    async fn task_with_order(&self, id: &TaskId) -> Result<Option<(Task, Order)>, StoreError> {
        self.read_both(self.inner.task_with_order(id).await?).await
    }

    async fn task_with_order_eventually_consistent(
        &self,
        id: &TaskId,
    ) -> Result<Option<(Task, Order)>, StoreError> {
        let read = self.inner.task_with_order_eventually_consistent(id).await?;
        self.read_both(read).await
    }

    async fn update(&self, task: &Task) -> Result<(), StoreError> {
        self.inner.update(&self.stored_task(task).await?).await
    }

    async fn update_with_order(&self, task: &Task, order: &Order) -> Result<(), StoreError> {
        let (task, order) = (
            self.stored_task(task).await?,
            self.stored_order(task, order).await?,
        );
        self.inner.update_with_order(&task, &order).await
    }

    async fn update_and_send(
        &self,
        task: Cow<'_, Task>,
        outbox: Vec<Outgoing>,
    ) -> Result<Vec<Outgoing>, StoreError> {
        // Its copy with its large values stored apart is the store's to keep.
        let task = self.stored_task(&task).await?;
        self.inner.update_and_send(Cow::Owned(task), outbox).await
    }
}
