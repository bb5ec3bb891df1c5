//! The dead-letter queues ([`DeadLetters`]): counted, peeked at, and redriven to
//! their source queues.

use std::collections::HashSet;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::{ChangeMessageVisibilityBatchRequestEntry, QueueAttributeName};

use sas_core::ports::{DeadLetter, DeadLetters, OutgoingMessage, QueueError, Queues};
use sas_domain::ids::QueueName;

use super::{Sqs, failed};

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
                    self.send(
                        source,
                        &[OutgoingMessage {
                            body,
                            delay,
                            trace: None,
                        }],
                    )
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
    use std::time::Duration;

    use aws_sdk_sqs::Client;
    use sas_core::ports::{Consumer, DeadLetters};

    use crate::sqs::{Sqs, queue_name};

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
}
