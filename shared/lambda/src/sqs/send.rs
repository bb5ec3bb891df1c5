//! The sends ([`Queues`]): a call's messages checked, then sent with the calls made
//! meanwhile, up to ten a SendMessageBatch request, each with its trace: W3C's
//! `traceparent` and `tracestate` as message attributes, and X-Ray's trace header
//! (that trace's, or the invocation's when the message has none).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    MessageAttributeValue, MessageSystemAttributeNameForSends, MessageSystemAttributeValue,
    SendMessageBatchRequestEntry,
};
use tokio::sync::oneshot;

use sas_core::ports::{Cause, OutgoingMessage, QueueError, Queues};
use sas_domain::ids::QueueName;
use sas_domain::limits::{MAX_DELAY, MAX_MESSAGE, MAX_MESSAGE_BODY};
use sas_domain::trace::TraceContext;

use super::send_gate::GATE;
use super::{Sqs, failed};

/// Messages per SQS batch call.
const BATCH: usize = 10;

/// Bytes of message bodies per SQS batch call (SQS takes 256 KiB, attributes included).
const BATCH_BYTES: usize = 200 * 1024;

/// Tries of the entries of a batch that SQS did not take.
const SEND_TRIES: usize = 3;

/// Why a send failed, shared by the calls whose messages went in one request.
type SharedCause = Arc<dyn std::error::Error + Send + Sync>;

/// A shared cause that is only a message.
fn message(text: impl Into<String>) -> SharedCause {
    Arc::from(Cause::from(text.into()))
}

/// The X-Ray trace of the current invocation, which Lambda puts in the environment.
fn invocation_trace() -> Option<String> {
    std::env::var("_X_AMZN_TRACE_ID")
        .ok()
        .filter(|t| !t.is_empty())
}

/// A message's attributes of its trace: `traceparent`, and `tracestate` if any.
fn trace_attributes(trace: &TraceContext) -> HashMap<String, MessageAttributeValue> {
    let attribute = |value: String| {
        MessageAttributeValue::builder()
            .data_type("String")
            .string_value(value)
            .build()
            .ok()
    };
    trace
        .headers()
        .filter_map(|(name, value)| Some((name.to_owned(), attribute(value)?)))
        .collect()
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
        let invocation = invocation_trace();
        let entries = messages
            .iter()
            .map(|message| Entry {
                body: message.body.clone(),
                delay: i32::try_from(message.delay.min(MAX_DELAY).as_secs()).unwrap_or(0),
                trace: (message.trace.as_ref().map(TraceContext::xray_header))
                    .or_else(|| invocation.clone())
                    .and_then(|header| {
                        MessageSystemAttributeValue::builder()
                            .data_type("String")
                            .string_value(header)
                            .build()
                            .ok()
                    }),
                attributes: message.trace.as_ref().map(trace_attributes),
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
    /// X-Ray's trace header.
    trace: Option<MessageSystemAttributeValue>,
    /// W3C's `traceparent` and `tracestate`.
    attributes: Option<HashMap<String, MessageAttributeValue>>,
}

/// The messages of one call of [`Queues::send`], and where its outcome goes.
struct Call {
    entries: Vec<Entry>,
    done: oneshot::Sender<Result<(), SharedCause>>,
}

/// The calls waiting for a queue's next SendMessageBatch, and whether a sender is at
/// work on the queue.
#[derive(Default)]
pub(super) struct Waiting {
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
                    .set_message_attributes(entry.attributes.clone())
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

#[cfg(test)]
mod tests {
    use aws_sdk_sqs::types::SendMessageBatchRequestEntry;

    use super::{batches, call_of};

    fn entry(id: usize, bytes: usize) -> SendMessageBatchRequestEntry {
        SendMessageBatchRequestEntry::builder()
            .id(format!("{id}-0"))
            .message_body("x".repeat(bytes))
            .build()
            .expect("entry")
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

    #[test]
    fn an_entry_names_its_call() {
        assert_eq!(call_of("12-3"), Some(12));
        assert_eq!(call_of("0-0"), Some(0));
        assert_eq!(call_of("x"), None);
    }
}
