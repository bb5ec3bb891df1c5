//! The queues on SQS: batch sends (with the X-Ray trace header of the invocation,
//! when there is one), and receiving for the tests and any non-Lambda consumer.
//! Queues are named; a name not configured with its URL is looked up once.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{
    MessageSystemAttributeName, MessageSystemAttributeNameForSends, MessageSystemAttributeValue,
    SendMessageBatchRequestEntry,
};

use crate::domain::ids::QueueName;
use crate::ports::{Consumer, Delivery, OutgoingMessage, QueueError, Queues};

/// Messages per SQS batch call.
const BATCH: usize = 10;
/// Tries of the entries of a batch that SQS did not take.
const SEND_TRIES: usize = 3;

/// SQS queues by name.
pub struct Sqs {
    client: Client,
    urls: RwLock<HashMap<String, String>>,
}

/// The queue's name, the last segment of its URL.
///
/// # Errors
/// [`QueueError`] when the URL's last segment is not a queue name.
pub fn queue_name(url: &str) -> Result<QueueName, QueueError> {
    let name = url.rsplit('/').next().unwrap_or_default();
    QueueName::parse(name).map_err(|e| QueueError {
        queue: url.to_owned(),
        reason: format!("not a queue URL: {e}"),
    })
}

impl Sqs {
    /// SQS, with the URLs of the queues known in advance.
    #[must_use]
    pub fn new(client: Client, known: impl IntoIterator<Item = (QueueName, String)>) -> Self {
        let urls = known
            .into_iter()
            .map(|(name, url)| (name.to_string(), url))
            .collect();
        Self {
            client,
            urls: RwLock::new(urls),
        }
    }

    async fn url(&self, queue: &QueueName) -> Result<String, QueueError> {
        if let Some(url) = self
            .urls
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(queue.as_str())
        {
            return Ok(url.clone());
        }
        let output = self
            .client
            .get_queue_url()
            .queue_name(queue.as_str())
            .send()
            .await
            .map_err(|e| failed(queue, DisplayErrorContext(e)))?;
        let url = output
            .queue_url()
            .ok_or_else(|| failed(queue, "no URL returned"))?
            .to_owned();
        self.urls
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(queue.to_string(), url.clone());
        Ok(url)
    }
}

fn failed(queue: &QueueName, reason: impl std::fmt::Display) -> QueueError {
    QueueError {
        queue: queue.to_string(),
        reason: reason.to_string(),
    }
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
        let url = self.url(queue).await?;
        let trace = trace_header();
        for chunk in messages.chunks(BATCH) {
            let mut entries = chunk
                .iter()
                .enumerate()
                .map(|(i, message)| {
                    let delay = i32::try_from(message.delay.as_secs().min(900)).unwrap_or(900);
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(&message.body)
                        .delay_seconds(delay)
                        .set_message_system_attributes(trace.clone().map(|t| {
                            HashMap::from([(MessageSystemAttributeNameForSends::AwsTraceHeader, t)])
                        }))
                        .build()
                        .map_err(|e| failed(queue, e))
                })
                .collect::<Result<Vec<_>, _>>()?;
            for _ in 0..SEND_TRIES {
                let output = self
                    .client
                    .send_message_batch()
                    .queue_url(&url)
                    .set_entries(Some(entries.clone()))
                    .send()
                    .await
                    .map_err(|e| failed(queue, DisplayErrorContext(e)))?;
                let refused: Vec<&str> = output.failed().iter().map(|f| f.id()).collect();
                entries.retain(|e| refused.contains(&e.id()));
                if entries.is_empty() {
                    break;
                }
            }
            if !entries.is_empty() {
                return Err(failed(
                    queue,
                    format!(
                        "{} messages refused after {SEND_TRIES} tries",
                        entries.len()
                    ),
                ));
            }
        }
        Ok(())
    }
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
            .map_err(|e| failed(queue, DisplayErrorContext(e)))?;
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
        self.client
            .delete_message()
            .queue_url(&url)
            .receipt_handle(receipt)
            .send()
            .await
            .map_err(|e| failed(queue, DisplayErrorContext(e)))?;
        Ok(())
    }
}
