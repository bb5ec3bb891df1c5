//! The deployments set exactly the environment the functions read, and build the same
//! security, alarms and triggers: the SAM template (after its transform, as
//! `infra/check` writes it), and the CDK construct as `infra/check` synthesizes it.
//!
//! This file holds a template as deployed ([`Deployed`]) and what Lambda itself needs;
//! beside it, each a module of `infrastructure/`: [`template`], a template read and its
//! values rendered; [`permissions`], its IAM; [`alarms`], its triggers and alarms;
//! [`variables`], [`compared`] and [`api`], the tests.

#[path = "infrastructure/alarms.rs"]
mod alarms;
#[path = "infrastructure/api.rs"]
mod api;
#[path = "infrastructure/compared.rs"]
mod compared;
#[path = "infrastructure/permissions.rs"]
mod permissions;
#[path = "infrastructure/template.rs"]
mod template;
#[path = "infrastructure/variables.rs"]
mod variables;

use std::collections::BTreeSet;
use std::path::PathBuf;

use sas_lambda::config::VARIABLES;
use serde_json::Value;

fn infra(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../infra")
        .join(path)
}

fn declared() -> BTreeSet<String> {
    VARIABLES.iter().map(|v| (*v).to_owned()).collect()
}

/// A CloudFormation template as deployed, read so that two templates of the same stack
/// written differently compare: the SAM template after its transform (`infra/check`
/// writes it with aws-sam-translator) and the CDK app's synthesized one. Every reference
/// is rendered as text with the resources named as in the SAM template (CDK's logical
/// ids less their `Sas` prefix and hash suffix) and each parameter at its default.
struct Deployed {
    resources: serde_json::Map<String, Value>,
    parameters: serde_json::Map<String, Value>,
    conditions: serde_json::Map<String, Value>,
    name: &'static str,
}

/// The AWS-managed policies the templates attach, by what they are for.
const MANAGED_POLICIES: [(&str, Platform); 4] = [
    ("AWSLambdaBasicExecutionRole", Platform::Logs),
    ("AWSXrayWriteOnlyAccess", Platform::Tracing),
    ("AWSLambdaSQSQueueExecutionRole", Platform::QueuePolling),
    ("AWSLambdaDynamoDBExecutionRole", Platform::StreamReading),
];

/// What Lambda itself needs of a function's role, granted by SAM with managed policies
/// and by CDK with statements of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Platform {
    Logs,
    Tracing,
    QueuePolling,
    /// A DynamoDB stream's mapping reading it (SAM's policy: any stream; CDK's: its own).
    StreamReading,
}

/// What a DynamoDB stream's mapping does with a role's permissions on its stream.
const STREAM_READING: [&str; 4] = [
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
];

/// What the event-source mappings do with a role's permissions on their queues.
const POLLING: [&str; 5] = [
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueAttributes",
    "sqs:GetQueueUrl",
];
