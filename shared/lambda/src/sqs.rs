//! The queues on SQS: batch sends (with the X-Ray trace header of the invocation,
//! when there is one; concurrent sends to a queue share requests), and receiving for
//! the tests and any non-Lambda consumer.
//! Queues are named; a name not configured with its URL is looked up once.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, MessageSystemAttributeName,
    MessageSystemAttributeNameForSends, MessageSystemAttributeValue, QueueAttributeName,
    SendMessageBatchRequestEntry,
};
use aws_types::SdkConfig;
use tokio::sync::{Notify, oneshot};

use crate::sdk::{SdkClient, sdk_client};
use sas_core::ports::{
    Cause, Consumer, DeadLetter, DeadLetters, Delivery, OutgoingMessage, QueueError, Queues,
};
use sas_domain::ids::QueueName;
use sas_domain::limits::{MAX_DELAY, MAX_MESSAGE, MAX_MESSAGE_BODY};

tokio::task_local! {
    /// The SQS batch whose record is being handled, when there is one.
    static GATE: Arc<SendGate>;
}

/// The records of one SQS batch, handled at once: a record's send waits until every
/// record still at work is sending too, and then they all go together. Without it,
/// the first record to send would go alone and the rest in the next request: about
/// twice the SendMessageBatch calls. A record's send waits, at most, for the slowest
/// record of its batch to reach its own send or its end.
pub struct SendGate {
    records: usize,
    state: Mutex<GateState>,
    open: Notify,
}

#[derive(Default)]
struct GateState {
    /// Records waiting at the gate.
    sending: usize,
    /// Records handled.
    finished: usize,
    /// How often the gate has opened.
    openings: u64,
}

impl SendGate {
    /// A gate for a batch of `records`.
    #[must_use]
    pub fn new(records: usize) -> Arc<Self> {
        Arc::new(Self {
            records,
            state: Mutex::default(),
            open: Notify::new(),
        })
    }

    /// Handles one record of the batch, its sends through the gate.
    pub async fn handle<F: Future>(self: &Arc<Self>, handling: F) -> F::Output {
        let _finished = Finished(Arc::clone(self));
        GATE.scope(Arc::clone(self), handling).await
    }

    fn state(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens the gate when every record not yet handled is waiting at it.
    fn open_if_all_wait(&self, state: &mut GateState) {
        if state.sending > 0 && state.sending + state.finished >= self.records {
            state.sending = 0;
            state.openings += 1;
            self.open.notify_waiters();
        }
    }

    /// Waits until every record not yet handled is sending too.
    async fn pass(&self) {
        let opened = self.open.notified();
        tokio::pin!(opened);
        opened.as_mut().enable();
        {
            let mut state = self.state();
            let openings = state.openings;
            state.sending += 1;
            self.open_if_all_wait(&mut state);
            if state.openings != openings {
                return;
            }
        }
        opened.await;
    }
}

/// Counts a record handled, however its handling ends.
struct Finished(Arc<SendGate>);

impl Drop for Finished {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.finished += 1;
        self.0.open_if_all_wait(&mut state);
    }
}

/// Messages per SQS batch call.
const BATCH: usize = 10;
/// Bytes of message bodies per SQS batch call (SQS takes 256 KiB, attributes included).
const BATCH_BYTES: usize = 200 * 1024;
/// Tries of the entries of a batch that SQS did not take.
const SEND_TRIES: usize = 3;

/// Queue URLs looked up (callers' notification queues) kept at most; past it the
/// lookups start afresh, so that callers naming ever new queues do not grow the
/// function's memory.
const LEARNED_URLS: usize = 1024;

/// Queue URLs by name: the pattern's own, given at start, and those looked up.
struct Urls {
    known: HashMap<String, String>,
    learned: RwLock<HashMap<String, String>>,
}

impl Urls {
    fn get(&self, queue: &str) -> Option<String> {
        self.known.get(queue).cloned().or_else(|| {
            self.learned
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .get(queue)
                .cloned()
        })
    }

    fn learn(&self, queue: &str, url: String) {
        let mut learned = self.learned.write().unwrap_or_else(PoisonError::into_inner);
        if learned.len() >= LEARNED_URLS {
            learned.clear();
        }
        learned.insert(queue.to_owned(), url);
    }
}

/// SQS queues by name.
pub struct Sqs {
    client: SdkClient<Client>,
    urls: Urls,
    /// Messages waiting to be sent, by queue URL.
    waiting: Arc<Mutex<HashMap<String, Waiting>>>,
}

/// The queue's name, the last segment of its URL.
///
/// # Errors
/// [`QueueError`] when the URL's last segment is not a queue name.
pub fn queue_name(url: &str) -> Result<QueueName, QueueError> {
    let name = url.rsplit('/').next().unwrap_or_default();
    QueueName::parse(name).map_err(|e| QueueError::new(url, format!("not a queue URL: {e}")))
}

impl Sqs {
    /// SQS, with the URLs of the queues known in advance.
    #[must_use]
    pub fn new(sdk: &SdkConfig, known: impl IntoIterator<Item = (QueueName, String)>) -> Self {
        let known = known
            .into_iter()
            .map(|(name, url)| (name.to_string(), url))
            .collect();
        Self {
            client: sdk_client(sdk, Client::new),
            urls: Urls {
                known,
                learned: RwLock::default(),
            },
            waiting: Arc::default(),
        }
    }

    async fn url(&self, queue: &QueueName) -> Result<String, QueueError> {
        if let Some(url) = self.urls.get(queue.as_str()) {
            return Ok(url);
        }
        let output = self
            .client
            .get_queue_url()
            .queue_name(queue.as_str())
            .send()
            .await
            .map_err(|e| failed(queue, e))?;
        let url = output
            .queue_url()
            .ok_or_else(|| failed(queue, "no URL returned"))?
            .to_owned();
        self.urls.learn(queue.as_str(), url.clone());
        Ok(url)
    }

    /// Deletes a received message from the queue at `url` (`queue`, or its
    /// dead-letter queue), naming `queue` in the error.
    async fn delete_at(
        &self,
        url: &str,
        receipt: &str,
        queue: &QueueName,
    ) -> Result<(), QueueError> {
        self.client
            .delete_message()
            .queue_url(url)
            .receipt_handle(receipt)
            .send()
            .await
            .map_err(|e| failed(queue, e))?;
        Ok(())
    }
}

fn failed(queue: &QueueName, cause: impl Into<Cause>) -> QueueError {
    QueueError::new(queue, cause)
}

/// Why a send failed, shared by the calls whose messages went in one request.
type SharedCause = Arc<dyn std::error::Error + Send + Sync>;

/// A shared cause that is only a message.
fn message(text: impl Into<String>) -> SharedCause {
    Arc::from(Cause::from(text.into()))
}

/// The X-Ray trace of the current invocation, which Lambda puts in the environment.
fn trace_header() -> Option<MessageSystemAttributeValue> {
    let trace = std::env::var("_X_AMZN_TRACE_ID")
        .ok()
        .filter(|t| !t.is_empty())?;
    MessageSystemAttributeValue::builder()
        .data_type("String")
        .string_value(trace)
        .build()
        .ok()
}

#[async_trait]
impl Queues for Sqs {
    async fn send(
        &self,
        queue: &QueueName,
        messages: &[OutgoingMessage],
    ) -> Result<(), QueueError> {
        if let Some(large) = messages.iter().find(|m| m.body.len() > MAX_MESSAGE_BODY) {
            // SQS would refuse it at every try: refused here, with its size.
            return Err(failed(
                queue,
                format!(
                    "a message of {} bytes is over the {MAX_MESSAGE_BODY} a body may have \
                     (SQS takes {MAX_MESSAGE} with its attributes)",
                    large.body.len()
                ),
            ));
        }
        let url = self.url(queue).await?;
        if let Ok(gate) = GATE.try_with(Arc::clone) {
            gate.pass().await;
        }
        let trace = trace_header();
        let entries = messages
            .iter()
            .map(|message| Entry {
                body: message.body.clone(),
                delay: i32::try_from(message.delay.min(MAX_DELAY).as_secs()).unwrap_or(0),
                trace: trace.clone(),
            })
            .collect();
        let (done, sent) = oneshot::channel();
        let start_sender = {
            let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            let queue_waiting = waiting.entry(url.clone()).or_default();
            queue_waiting.calls.push(Call { entries, done });
            !std::mem::replace(&mut queue_waiting.sending, true)
        };
        if start_sender {
            tokio::spawn(send_waiting(
                (*self.client).clone(),
                Arc::clone(&self.waiting),
                url,
            ));
        }
        sent.await
            .unwrap_or_else(|_| Err(message("the sender stopped")))
            .map_err(|cause| failed(queue, Box::new(cause)))
    }
}

/// One message to send.
struct Entry {
    body: String,
    delay: i32,
    trace: Option<MessageSystemAttributeValue>,
}

/// The messages of one call of [`Queues::send`], and where its outcome goes.
struct Call {
    entries: Vec<Entry>,
    done: oneshot::Sender<Result<(), SharedCause>>,
}

/// The calls waiting for a queue's next SendMessageBatch, and whether a sender is at
/// work on the queue.
#[derive(Default)]
struct Waiting {
    calls: Vec<Call>,
    sending: bool,
}

/// Sends the calls waiting for the queue at `url`, ten messages per request, round
/// after round, until none is left: the calls made while a request is in flight go
/// together in the next one (a group commit: no wait is added, and concurrent sends,
/// such as those of the records of one batch, share requests).
async fn send_waiting(client: Client, waiting: Arc<Mutex<HashMap<String, Waiting>>>, url: String) {
    let mut release = ReleaseIfStopped {
        waiting: Arc::clone(&waiting),
        url: url.clone(),
        finished: false,
    };
    loop {
        let calls = {
            let mut all = waiting.lock().unwrap_or_else(PoisonError::into_inner);
            let queue_waiting = all.entry(url.clone()).or_default();
            if queue_waiting.calls.is_empty() {
                // Nothing kept for a queue with nothing to send: callers' queues
                // come and go.
                all.remove(&url);
                release.finished = true;
                return;
            }
            std::mem::take(&mut queue_waiting.calls)
        };
        let mut outcome: Vec<Result<(), SharedCause>> = vec![Ok(()); calls.len()];
        // Each entry's id names its call and its place in it: a refusal names its call.
        let mut entries: Vec<SendMessageBatchRequestEntry> = Vec::new();
        for (call, c) in calls.iter().enumerate() {
            for (i, entry) in c.entries.iter().enumerate() {
                let built = SendMessageBatchRequestEntry::builder()
                    .id(format!("{call}-{i}"))
                    .message_body(&entry.body)
                    .delay_seconds(entry.delay)
                    .set_message_system_attributes(entry.trace.clone().map(|t| {
                        HashMap::from([(MessageSystemAttributeNameForSends::AwsTraceHeader, t)])
                    }))
                    .build();
                match built {
                    Ok(built) => entries.push(built),
                    Err(e) => outcome[call] = Err(Arc::new(e)),
                }
            }
        }
        let requests = batches(entries)
            .into_iter()
            .map(|batch| send_batch(&client, &url, batch));
        for (id, cause) in futures_util::future::join_all(requests)
            .await
            .into_iter()
            .flatten()
        {
            if let Some(call) = call_of(&id).and_then(|call| outcome.get_mut(call)) {
                *call = Err(cause);
            }
        }
        for (call, result) in calls.into_iter().zip(outcome) {
            let _ = call.done.send(result);
        }
    }
}

/// The call an entry of a round belongs to, by the entry's id (`<call>-<place>`).
fn call_of(entry_id: &str) -> Option<usize> {
    entry_id.split_once('-')?.0.parse().ok()
}

/// Entries in SendMessageBatch requests: at most ten, and at most `BATCH_BYTES` of
/// bodies, per request.
fn batches(entries: Vec<SendMessageBatchRequestEntry>) -> Vec<Vec<SendMessageBatchRequestEntry>> {
    let mut batches: Vec<Vec<SendMessageBatchRequestEntry>> = Vec::new();
    let mut bytes = 0;
    for entry in entries {
        let size = entry.message_body().len();
        match batches.last_mut() {
            Some(batch) if batch.len() < BATCH && bytes + size <= BATCH_BYTES => {
                bytes += size;
                batch.push(entry);
            }
            _ => {
                bytes = size;
                batches.push(vec![entry]);
            }
        }
    }
    batches
}

/// Should a sender stop before its work is done (a panic, or its runtime going
/// away), fails the calls waiting for it and lets the next call start another, rather
/// than leave every later send to the queue waiting.
struct ReleaseIfStopped {
    waiting: Arc<Mutex<HashMap<String, Waiting>>>,
    url: String,
    finished: bool,
}

impl Drop for ReleaseIfStopped {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut all = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(queue_waiting) = all.get_mut(&self.url) {
            queue_waiting.sending = false;
            for call in queue_waiting.calls.drain(..) {
                let _ = call.done.send(Err(message("the sender stopped")));
            }
        }
    }
}

/// One SendMessageBatch, with the entries SQS refused tried again (but for faults
/// of the sender's, bad content, which another try does not mend); the ids of the
/// entries not sent in the end, each with why.
async fn send_batch(
    client: &Client,
    url: &str,
    mut entries: Vec<SendMessageBatchRequestEntry>,
) -> Vec<(String, SharedCause)> {
    let mut failed: Vec<(String, SharedCause)> = Vec::new();
    let mut retrying: Vec<(String, SharedCause)> = Vec::new();
    for _ in 0..SEND_TRIES {
        let output = match client
            .send_message_batch()
            .queue_url(url)
            .set_entries(Some(entries.clone()))
            .send()
            .await
        {
            Ok(output) => output,
            Err(e) => {
                let cause: SharedCause = Arc::new(e);
                failed.extend(
                    entries
                        .iter()
                        .map(|e| (e.id().to_owned(), Arc::clone(&cause))),
                );
                return failed;
            }
        };
        retrying.clear();
        for refusal in output.failed() {
            let cause = message(format!(
                "{}: {}",
                refusal.code(),
                refusal.message().unwrap_or_default()
            ));
            let refused = (refusal.id().to_owned(), cause);
            if refusal.sender_fault() {
                failed.push(refused);
            } else {
                retrying.push(refused);
            }
        }
        entries.retain(|e| retrying.iter().any(|(id, _)| id == e.id()));
        if entries.is_empty() {
            break;
        }
    }
    failed.extend(retrying);
    failed
}

#[async_trait]
impl Consumer for Sqs {
    async fn receive(
        &self,
        queue: &QueueName,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        let url = self.url(queue).await?;
        let output = self
            .client
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(i32::try_from(max.clamp(1, 10)).unwrap_or(10))
            .wait_time_seconds(i32::try_from(wait.as_secs().min(20)).unwrap_or(20))
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|e| failed(queue, e))?;
        Ok(output
            .messages()
            .iter()
            .map(|m| Delivery {
                id: m.message_id().unwrap_or_default().to_owned(),
                body: m.body().unwrap_or_default().to_owned(),
                receive_count: m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(1),
                receipt: m.receipt_handle().unwrap_or_default().to_owned(),
            })
            .collect())
    }

    async fn delete(&self, queue: &QueueName, receipt: &str) -> Result<(), QueueError> {
        let url = self.url(queue).await?;
        self.delete_at(&url, receipt, queue).await
    }
}

/// Receives of a dead-letter queue one peek makes at most.
const PEEK_RECEIVES: usize = 10;

/// Receives of a dead-letter queue one redrive makes at most, looking for the messages
/// it names: a thousand messages looked at, within API Gateway's 30 s.
const REDRIVE_RECEIVES: usize = 100;

/// How long a redrive keeps hidden the messages it looked at and passed over, so that
/// its next receives find others; it makes them visible again when it ends.
const REDRIVE_HOLD: Duration = Duration::from_secs(30);

impl Sqs {
    /// The URL of the dead-letter queue of `source`, from its redrive policy.
    async fn dead_letter_url(&self, source: &QueueName) -> Result<String, QueueError> {
        let url = self.url(source).await?;
        let policy = self
            .attribute(source, &url, QueueAttributeName::RedrivePolicy)
            .await?;
        let target = policy
            .and_then(|policy| serde_json::from_str::<serde_json::Value>(&policy).ok())
            .and_then(|policy| Some(policy["deadLetterTargetArn"].as_str()?.to_owned()))
            .ok_or_else(|| failed(source, "the queue has no dead-letter queue"))?;
        let name = target.rsplit(':').next().unwrap_or_default();
        let name = QueueName::parse(name).map_err(|e| failed(source, e))?;
        self.url(&name).await
    }

    /// One attribute of the queue at `url` (of `source`'s, for errors), if it has it.
    async fn attribute(
        &self,
        source: &QueueName,
        url: &str,
        name: QueueAttributeName,
    ) -> Result<Option<String>, QueueError> {
        let output = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(name.clone())
            .send()
            .await
            .map_err(|e| failed(source, e))?;
        Ok(output.attributes().and_then(|a| a.get(&name)).cloned())
    }

    /// Receives up to ten messages of a dead-letter queue, hidden for `hidden`,
    /// waiting up to `wait` for one (a wait asks every SQS server: none received is
    /// then none visible).
    async fn receive_dead_letters(
        &self,
        source: &QueueName,
        url: &str,
        hidden: Duration,
        wait: Duration,
    ) -> Result<Vec<aws_sdk_sqs::types::Message>, QueueError> {
        let seconds = |d: Duration| i32::try_from(d.as_secs()).unwrap_or(20);
        let output = self
            .client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(seconds(hidden))
            .wait_time_seconds(seconds(wait))
            .send()
            .await
            .map_err(|e| failed(source, e))?;
        Ok(output.messages().to_vec())
    }

    /// Sends back to `source` the messages of its dead-letter queue at `url` named by
    /// `ids` (any when `None`), at most `max`; those looked at and passed over are
    /// added to `passed_over` (their receipts), hidden until released.
    async fn move_dead_letters(
        &self,
        source: &QueueName,
        url: &str,
        ids: Option<&[String]>,
        max: usize,
        passed_over: &mut Vec<String>,
    ) -> Result<usize, QueueError> {
        let mut wanted: Option<HashSet<&str>> =
            ids.map(|ids| ids.iter().map(String::as_str).collect());
        let mut moved = 0;
        for _ in 0..REDRIVE_RECEIVES {
            if moved == max || wanted.as_ref().is_some_and(HashSet::is_empty) {
                break;
            }
            let received = self
                .receive_dead_letters(source, url, REDRIVE_HOLD, Duration::from_secs(1))
                .await?;
            if received.is_empty() {
                break;
            }
            for message in received {
                let id = message.message_id().unwrap_or_default();
                let receipt = message.receipt_handle().unwrap_or_default().to_owned();
                if moved < max && wanted.as_mut().is_none_or(|wanted| wanted.remove(id)) {
                    let body = message.body().unwrap_or_default().to_owned();
                    let delay = Duration::ZERO;
                    self.send(source, &[OutgoingMessage { body, delay }])
                        .await?;
                    self.delete_at(url, &receipt, source).await?;
                    moved += 1;
                } else {
                    passed_over.push(receipt);
                }
            }
        }
        Ok(moved)
    }

    /// Makes the messages of `receipts` in the queue at `url` (of `source`'s) visible
    /// again. One that fails is visible when its hold ends.
    async fn release(
        &self,
        source: &QueueName,
        url: &str,
        receipts: &[String],
    ) -> Result<(), QueueError> {
        for chunk in receipts.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(n, receipt)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(n.to_string())
                        .receipt_handle(receipt)
                        .visibility_timeout(0)
                        .build()
                        .map_err(|e| failed(source, e))
                })
                .collect::<Result<Vec<_>, _>>()?;
            self.client
                .change_message_visibility_batch()
                .queue_url(url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| failed(source, e))?;
        }
        Ok(())
    }
}

#[async_trait]
impl DeadLetters for Sqs {
    async fn count(&self, source: &QueueName) -> Result<u64, QueueError> {
        let url = self.dead_letter_url(source).await?;
        let count = self
            .attribute(
                source,
                &url,
                QueueAttributeName::ApproximateNumberOfMessages,
            )
            .await?;
        Ok(count.and_then(|count| count.parse().ok()).unwrap_or(0))
    }

    /// SQS has no peek: messages are received visible again at once, a few times,
    /// and those seen are shown (a sample, on a queue of more than a few tens).
    async fn peek(&self, source: &QueueName, max: usize) -> Result<Vec<DeadLetter>, QueueError> {
        let url = self.dead_letter_url(source).await?;
        let mut seen: Vec<DeadLetter> = Vec::new();
        for _ in 0..PEEK_RECEIVES {
            let received = self
                .receive_dead_letters(source, &url, Duration::ZERO, Duration::ZERO)
                .await?;
            let before = seen.len();
            for message in received {
                let id = message.message_id().unwrap_or_default();
                if !seen.iter().any(|s| s.id == id) {
                    seen.push(DeadLetter {
                        id: id.to_owned(),
                        body: message.body().unwrap_or_default().to_owned(),
                    });
                }
            }
            if seen.len() >= max || seen.len() == before {
                break;
            }
        }
        seen.truncate(max);
        Ok(seen)
    }

    /// Receives the dead-letter queue page after page, those looked at and not asked
    /// for kept hidden meanwhile, until every message named is sent back, `max` are, or
    /// the queue has no more (within `REDRIVE_RECEIVES`); then makes the others
    /// visible again.
    async fn redrive(
        &self,
        source: &QueueName,
        ids: Option<&[String]>,
        max: usize,
    ) -> Result<usize, QueueError> {
        let url = self.dead_letter_url(source).await?;
        let mut passed_over = Vec::new();
        let moved = self
            .move_dead_letters(source, &url, ids, max, &mut passed_over)
            .await;
        self.release(source, &url, &passed_over).await?;
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: usize, bytes: usize) -> SendMessageBatchRequestEntry {
        SendMessageBatchRequestEntry::builder()
            .id(format!("{id}-0"))
            .message_body("x".repeat(bytes))
            .build()
            .expect("entry")
    }

    #[test]
    fn looked_up_urls_are_kept_up_to_a_bound_and_the_patterns_own_always() {
        let urls = Urls {
            known: HashMap::from([("scheduler".to_owned(), "https://q/scheduler".to_owned())]),
            learned: RwLock::default(),
        };
        for n in 0..LEARNED_URLS * 3 {
            urls.learn(&format!("notify-{n}"), format!("https://q/notify-{n}"));
            assert!(urls.learned.read().expect("lock").len() <= LEARNED_URLS);
        }
        let last = LEARNED_URLS * 3 - 1;
        assert_eq!(
            urls.get(&format!("notify-{last}")).as_deref(),
            Some(format!("https://q/notify-{last}").as_str())
        );
        assert_eq!(
            urls.get("scheduler").as_deref(),
            Some("https://q/scheduler")
        );
    }

    #[test]
    fn batches_hold_ten_entries_and_a_bounded_size() {
        let sizes = |batches: Vec<Vec<SendMessageBatchRequestEntry>>| -> Vec<usize> {
            batches.iter().map(Vec::len).collect()
        };
        let small = (0..25).map(|i| entry(i, 100)).collect();
        assert_eq!(sizes(batches(small)), [10, 10, 5]);
        let large = (0..3).map(|i| entry(i, 150 * 1024)).collect();
        assert_eq!(
            sizes(batches(large)),
            [1, 1, 1],
            "two would pass the size limit"
        );
        assert!(batches(Vec::new()).is_empty());
    }

    #[tokio::test]
    async fn the_sends_of_a_batch_wait_for_every_record_still_at_work() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let gate = SendGate::new(4);
        let arrived = AtomicUsize::new(0);
        let arrived = &arrived;
        // Three records send after work of different lengths, one ends without a send.
        let record = |work: u64, sends: bool| {
            let gate = Arc::clone(&gate);
            async move {
                gate.handle(async move {
                    tokio::time::sleep(Duration::from_millis(work)).await;
                    if !sends {
                        return None;
                    }
                    arrived.fetch_add(1, Ordering::SeqCst);
                    GATE.with(Arc::clone).pass().await;
                    Some(arrived.load(Ordering::SeqCst))
                })
                .await
            }
        };
        let passed = futures_util::future::join_all([
            record(1, true),
            record(30, true),
            record(5, false),
            record(15, true),
        ])
        .await;
        assert_eq!(
            passed,
            [Some(3), Some(3), None, Some(3)],
            "none passed before the last sender arrived"
        );
        assert_eq!(gate.state().openings, 1);

        // Outside a batch, a send does not wait.
        assert!(GATE.try_with(|_| ()).is_err());
    }

    /// A redrive by ids moves every message named, however deep in the dead-letter
    /// queue (moto, as SQS, answers a receive with the oldest visible messages), and
    /// at most `max` of them; the others stay, visible.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_redrive_moves_every_named_dead_letter_however_deep() {
        use crate::emulator::{self, QueuePolicy, create_queue};
        let moto = sas_testkit::moto::Moto::start();
        let sdk = emulator::sdk(&moto.endpoint);
        let client = Client::new(&sdk);
        let policy = QueuePolicy {
            visibility_seconds: 1,
            max_receive_count: 2,
        };
        let (work_url, dead_letter_url) = create_queue(&client, "work", policy).await;
        let mut ids = Vec::new();
        for n in 0..25 {
            let sent = client
                .send_message()
                .queue_url(&dead_letter_url)
                .message_body(format!("m{n:02}"))
                .send()
                .await
                .expect("dead-lettered");
            ids.push(sent.message_id().expect("an id").to_owned());
        }
        let work = queue_name(&work_url).expect("name");
        let dead_letters = queue_name(&dead_letter_url).expect("name");
        let sqs = Sqs::new(
            &sdk,
            [(work.clone(), work_url), (dead_letters, dead_letter_url)],
        );

        // The last 15, behind more than a receive's worth of others.
        let named = &ids[10..];
        assert_eq!(
            sqs.redrive(&work, Some(named), named.len())
                .await
                .expect("redriven"),
            15
        );
        let mut moved = Vec::new();
        while moved.len() < 15 {
            let received = sqs
                .receive(&work, 10, Duration::from_secs(1))
                .await
                .expect("received");
            assert!(!received.is_empty(), "only {moved:?} came back");
            moved.extend(received.into_iter().map(|m| m.body));
        }
        moved.sort();
        assert_eq!(
            moved,
            (10..25).map(|n| format!("m{n:02}")).collect::<Vec<_>>()
        );

        assert_eq!(
            sqs.redrive(&work, Some(&ids[..3]), 2)
                .await
                .expect("redriven"),
            2,
            "at most max"
        );
        assert_eq!(
            sqs.count(&work).await.expect("counted"),
            8,
            "the others stay, visible again"
        );
    }

    #[test]
    fn an_entry_names_its_call() {
        assert_eq!(call_of("12-3"), Some(12));
        assert_eq!(call_of("0-0"), Some(0));
        assert_eq!(call_of("x"), None);
    }
}
