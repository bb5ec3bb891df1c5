//! Queues created as the template creates them, and an SDK configuration for an
//! emulator: for emulators and tests, never in a function.

use aws_sdk_sqs::types::QueueAttributeName;
use aws_types::SdkConfig;

/// An SDK configuration pointed at an emulator's `endpoint`, built as the functions
/// build theirs.
///
/// # Panics
/// Never: the configuration is complete.
#[must_use]
pub fn sdk(endpoint: &str) -> SdkConfig {
    crate::sdk::sdk_config(|name| match name {
        "AWS_REGION" => Some("eu-west-1".into()),
        "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY" => Some("test".into()),
        "AWS_ENDPOINT_URL" => Some(endpoint.to_owned()),
        _ => None,
    })
    .expect("a complete SDK configuration")
}

/// How the stack's queues treat messages.
#[derive(Debug, Clone, Copy)]
pub struct QueuePolicy {
    /// The visibility timeout, in whole seconds as SQS has it.
    pub visibility_seconds: u32,
    /// Receives before the dead-letter queue.
    pub max_receive_count: u32,
}

/// Creates a queue with a dead-letter queue; returns both URLs.
///
/// # Panics
/// When the emulator refuses.
pub async fn create_queue(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    policy: QueuePolicy,
) -> (String, String) {
    let dead_letter = sqs
        .create_queue()
        .queue_name(format!("{name}-dlq"))
        .send()
        .await
        .expect("dlq");
    let dead_letter_url = dead_letter.queue_url().expect("url").to_owned();
    let arn = queue_arn(sqs, &dead_letter_url).await;
    let redrive = serde_json::json!({ "deadLetterTargetArn": arn, "maxReceiveCount": policy.max_receive_count.to_string() });
    let queue = sqs
        .create_queue()
        .queue_name(name)
        .attributes(
            QueueAttributeName::VisibilityTimeout,
            policy.visibility_seconds.to_string(),
        )
        .attributes(QueueAttributeName::RedrivePolicy, redrive.to_string())
        .send()
        .await
        .expect("queue");
    (queue.queue_url().expect("url").to_owned(), dead_letter_url)
}

/// A queue's ARN.
///
/// # Panics
/// When the emulator refuses.
pub async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> String {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("queue attributes");
    attributes
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn))
        .expect("arn")
        .clone()
}
