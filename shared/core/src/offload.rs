//! The tasks' records with their large values stored apart ([`sas_domain::payload`]):
//! [`Offloading`] stands before a state store, storing a record's large values in
//! [`Payloads`] before the record is written and putting them back when it is read,
//! so that the store keeps references and every decision sees values.
//!
//! [`OffloadingQueues`] does the same for messages: a body over what SQS takes is
//! stored apart and the message carries its reference, which the receivers read
//! back ([`message_body`]).
//!
//! A record's values are in its task's scope, deleted with the task; a message's in
//! the messages' ([`ValueScope`]).
//!
//! A value is stored before the record or message that names it is written: none
//! names a value that is not there. Values are immutable, so those read or written
//! are kept in memory (up to [`KEPT_BYTES`]): a step's write does not store or read
//! again the input and outputs it did not change.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde_json::Value;

use sas_domain::ids::{QueueName, TaskId};
use sas_domain::limits::MAX_MESSAGE_BODY;
use sas_domain::payload::{self, PayloadRef, Slot, ValueScope};
use sas_domain::task::{Order, Task};

use crate::ports::{
    Outgoing, OutgoingMessage, PayloadError, Payloads, QueueError, Queues, StateStore, StoreError,
    TaskStore,
};

/// The most bytes of values kept in memory.
const KEPT_BYTES: u64 = 256 * 1024 * 1024;

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
/// each sent as its reference.
pub struct OffloadingQueues {
    inner: Arc<dyn Queues>,
    payloads: Arc<dyn Payloads>,
}

impl OffloadingQueues {
    /// `inner`, with large bodies stored in `payloads`.
    pub fn new(inner: Arc<dyn Queues>, payloads: Arc<dyn Payloads>) -> Self {
        Self { inner, payloads }
    }
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
            let body = message.body.clone().into_bytes();
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
    kept: Mutex<Kept>,
}

/// Values read or stored lately, by hash, and which values (by address) they are, in
/// which scope.
#[derive(Default)]
struct Kept {
    values: HashMap<String, (Arc<Value>, u64)>,
    by_address: HashMap<usize, (PayloadRef, ValueScope)>,
    order: VecDeque<String>,
    bytes: u64,
}

impl Kept {
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
            kept: Mutex::new(Kept::default()),
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
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
                    let reference = store_apart(&*self.payloads, scope, slot.json().into_bytes())
                        .await
                        .map_err(unavailable)?;
                    if let Some(value) = slot.shared() {
                        self.kept().keep(scope, &reference, value.clone());
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
        task: &Task,
        outbox: Vec<Outgoing>,
    ) -> Result<Vec<Outgoing>, StoreError> {
        let task = self.stored_task(task).await?;
        self.inner.update_and_send(&task, outbox).await
    }
}
