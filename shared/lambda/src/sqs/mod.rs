//! The queues on SQS: batch sends (with the X-Ray trace header of the invocation,
//! when there is one; concurrent sends to a queue share requests), and receiving for
//! the tests and any non-Lambda consumer.
//! Queues are named; a name not configured with its URL is looked up once.
//!
//! Here: [`Sqs`] and its queues' URLs; `send` (the sends, grouped into batch
//! requests), `send_gate` (the records of an SQS batch, whose sends go together),
//! `receive` (receiving and deleting) and `dead_letters` (counting, peeking and
//! redriving them).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use aws_sdk_sqs::Client;
use aws_types::SdkConfig;

use crate::sdk::{SdkClient, sdk_client};
use sas_core::ports::{Cause, QueueError};
use sas_domain::ids::QueueName;

mod dead_letters;
mod receive;
mod send;
mod send_gate;

use send::Waiting;

pub use send_gate::SendGate;

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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::RwLock;

    use super::{LEARNED_URLS, Urls};

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
}
