//! The SAM template and the CDK construct compared: the same security, alarms and
//! triggers, with the defaults, with buffered ingestion and with a key for the services'
//! secrets; and switching ingestion keeps the ingest queue and its consumer.

use std::collections::BTreeSet;

use sas_tests::ministack::FUNCTIONS;
use serde_json::{Value, json};

use super::Deployed;

/// Both build the same security, alarms and triggers, thirteen alarms, each notifying
/// the alert topic, and every queue a function reads watched for the age of its oldest
/// message (a consumer behind, throttled or failing).
fn assert_the_same_security_alarms_and_triggers(sam: &Deployed, cdk: &Deployed) {
    let encryption = sam.topic_encryption();
    assert_eq!(
        encryption["rotates"], true,
        "the alert key rotates: {encryption:#}"
    );
    let principals: BTreeSet<&str> = encryption["policy"]
        .as_array()
        .expect("statements")
        .iter()
        .flat_map(|s| s["principals"].as_array().expect("principals"))
        .map(|p| p.as_str().expect("a principal"))
        .collect();
    assert!(
        principals.contains("Service:cloudwatch.amazonaws.com"),
        "CloudWatch may use the alert key: {encryption:#}"
    );
    assert_eq!(encryption, cdk.topic_encryption(), "the alert topic's key");
    assert_eq!(
        sam.resource_policies(),
        cdk.resource_policies(),
        "the topic's and the queues' policies"
    );
    let (sam_functions, cdk_functions) = (sam.function_permissions(), cdk.function_permissions());
    assert_eq!(
        sam_functions.keys().collect::<Vec<_>>(),
        [
            "AgentFunction",
            "ReadFunction",
            "SchedulerFunction",
            "SubmissionFunction",
            "SupervisorFunction"
        ]
    );
    for (function, permissions) in &sam_functions {
        assert_eq!(
            Some(permissions),
            cdk_functions.get(function),
            "{function}'s permissions, SAM then CDK"
        );
    }
    assert_eq!(sam.triggers(), cdk.triggers(), "the functions' triggers");
    let sam_alarms = sam.alarms();
    assert_eq!(sam_alarms.len(), 14, "{sam_alarms:#?}");
    assert!(
        sam_alarms
            .iter()
            .all(|a| a["actions"] == json!(["${AlertTopic}"])),
        "every alarm notifies the alert topic: {sam_alarms:#?}"
    );
    // What the functions count for a person: tasks in Error, task records the
    // supervisor could not read and took off the leases, and calls still waiting for
    // a limit's slots.
    for counted in [
        "SchedulerAgentSupervisor/TasksInError {Function=scheduler}",
        "SchedulerAgentSupervisor/QuarantinedTasks {Function=supervisor}",
        "SchedulerAgentSupervisor/SlotWait {Function=supervisor}",
    ] {
        assert!(
            sam_alarms.iter().any(|a| a["watches"]
                .as_str()
                .is_some_and(|w| w.starts_with(counted))),
            "no alarm on {counted}: {sam_alarms:#?}"
        );
    }
    // Deleted tasks' values left in the bucket: the batch the stream gave up on.
    let failures = "{QueueName=${ValueDeletionFailureQueue.QueueName}}";
    assert!(
        (sam_alarms.iter()).any(|a| a["watches"].as_str().is_some_and(|w| w.contains(failures))),
        "no alarm on {failures}: {sam_alarms:#?}"
    );
    // A panic caught, in any function that handles outside input.
    for function in ["submission", "scheduler", "agent"] {
        let panics = format!("SchedulerAgentSupervisor/Panics {{Function={function}}}");
        assert!(
            sam_alarms
                .iter()
                .any(|a| a["watches"].as_str().is_some_and(|w| w.contains(&panics))),
            "no alarm on {panics}: {sam_alarms:#?}"
        );
    }
    for deployed in [sam, cdk] {
        let unwatched = deployed.queues_without_an_age_alarm();
        assert!(
            unwatched.is_empty(),
            "{}: no alarm on the age of the oldest message of {unwatched:?}",
            deployed.name
        );
    }
    assert_eq!(sam_alarms, cdk.alarms(), "the alarms");
}

#[test]
fn the_sam_template_and_the_cdk_construct_build_the_same_security_alarms_and_triggers() {
    assert_the_same_security_alarms_and_triggers(&Deployed::sam(), &Deployed::cdk("cdk.out"));
}

/// An update from buffered to direct ingestion keeps the ingest queue, its dead
/// letters, their alarms and the scheduler's consumer: the submissions a buffered stack
/// accepted are created after it, not deleted with their queue. Only the functions'
/// `INGESTION` changes.
#[test]
fn switching_ingestion_keeps_the_ingest_queue_and_its_consumer() {
    let modes = [
        (
            Deployed::sam(),
            Deployed::sam().with(&[("IngestionMode", "BUFFERED")]),
        ),
        (Deployed::cdk("cdk.out"), Deployed::cdk("cdk.out.buffered")),
    ];
    for (direct, buffered) in modes {
        let name = direct.name;
        let resources = direct.deployed();
        for queue in ["IngestQueue", "IngestDeadLetterQueue"] {
            assert!(
                resources.contains(&format!("AWS::SQS::Queue {queue}")),
                "{name}: no {queue} in direct ingestion: {resources:#?}"
            );
        }
        assert_eq!(resources, buffered.deployed(), "{name}: the resources");
        assert!(
            direct.event_source_queues()["SchedulerFunction"].contains("${IngestQueue.Arn}"),
            "{name}: the scheduler drains the ingest queue in direct ingestion"
        );
        assert_eq!(
            direct.triggers(),
            buffered.triggers(),
            "{name}: the triggers"
        );
        assert_eq!(direct.alarms(), buffered.alarms(), "{name}: the alarms");
        assert_eq!(
            direct.function_permissions(),
            buffered.function_permissions(),
            "{name}: the functions' permissions"
        );
        let (mut direct, mut buffered) = (direct.environments(), buffered.environments());
        assert_eq!(direct.len(), FUNCTIONS.len(), "{name}: {direct:#?}");
        for (function, environment) in &mut direct {
            let other = buffered.get_mut(function).expect("the same functions");
            assert_eq!(
                (environment.remove("INGESTION"), other.remove("INGESTION")),
                (Some("DIRECT".into()), Some("BUFFERED".into())),
                "{name}: {function}'s INGESTION"
            );
        }
        assert_eq!(direct, buffered, "{name}: the rest of the environments");
    }
}

#[test]
fn the_sam_template_and_the_cdk_construct_build_the_same_with_buffered_ingestion() {
    let sam = Deployed::sam().with(&[("IngestionMode", "BUFFERED")]);
    let cdk = Deployed::cdk("cdk.out.buffered");
    assert_the_same_security_alarms_and_triggers(&sam, &cdk);
}

/// The key of the services' secrets `infra/check` synthesizes the CDK app with
/// (`cdk.out.secrets-key`).
const SECRETS_KEY: &str =
    "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab";

#[test]
fn the_agent_may_decrypt_the_services_secrets_with_their_key_through_secrets_manager_and_ssm_only()
{
    let decrypts = |deployed: &Deployed| -> Vec<Value> {
        let agent = &deployed.function_permissions()["AgentFunction"];
        let grants = agent["grants"].as_array().expect("grants");
        grants
            .iter()
            .filter(|g| g.as_str().is_some_and(|g| g.starts_with("kms:")))
            .cloned()
            .collect()
    };
    assert_eq!(
        decrypts(&Deployed::sam()),
        [] as [Value; 0],
        "no key, no KMS"
    );
    let sam = Deployed::sam().with(&[("SecretsKmsKeyArn", SECRETS_KEY)]);
    let through = json!({"StringEquals": {"kms:ViaService": [
        "secretsmanager.${AWS::Region}.amazonaws.com",
        "ssm.${AWS::Region}.amazonaws.com",
    ]}});
    assert_eq!(
        decrypts(&sam),
        [json!(format!("kms:Decrypt {SECRETS_KEY} if {through}"))]
    );
    let cdk = Deployed::cdk("cdk.out.secrets-key");
    assert_the_same_security_alarms_and_triggers(&sam, &cdk);
}

/// What state machines' Task states call, as `infra/check` names them to the CDK app
/// (`cdk.out.task-calls`): the template's parameter, the grant each gives the agents.
const TASK_CALLS: [(&str, &str, &[&str]); 8] = [
    (
        "LambdaFunctionArns",
        "arn:aws:lambda:us-east-1:111122223333:function:quote",
        &["lambda:InvokeFunction"],
    ),
    (
        "StateMachineQueueArns",
        "arn:aws:sqs:us-east-1:111122223333:asks",
        &["sqs:SendMessage"],
    ),
    (
        "StateMachineTopicArns",
        "arn:aws:sns:us-east-1:111122223333:approvals",
        &["sns:Publish"],
    ),
    (
        "StateMachineTableArns",
        "arn:aws:dynamodb:us-east-1:111122223333:table/orders",
        &[
            "dynamodb:DeleteItem",
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
        ],
    ),
    (
        "StateMachineEventBusArns",
        "arn:aws:events:us-east-1:111122223333:event-bus/default",
        &["events:PutEvents"],
    ),
    (
        "StateMachineObjectArns",
        "arn:aws:s3:::orders/in/*",
        &["s3:GetObject"],
    ),
    (
        "StateMachineResultArns",
        "arn:aws:s3:::orders/out/*",
        &["s3:PutObject"],
    ),
    (
        "StateMachineBucketArns",
        "arn:aws:s3:::photos",
        &["s3:ListBucket"],
    ),
];

#[test]
fn the_agent_may_call_exactly_what_the_state_machines_task_states_name() {
    let task_grants = |deployed: &Deployed| -> BTreeSet<String> {
        let agent = &deployed.function_permissions()["AgentFunction"];
        let resources: Vec<&str> = TASK_CALLS.iter().map(|(_, arn, _)| *arn).collect();
        agent["grants"]
            .as_array()
            .expect("grants")
            .iter()
            .filter_map(Value::as_str)
            .filter(|grant| resources.iter().any(|arn| grant.ends_with(arn)))
            .map(str::to_owned)
            .collect()
    };
    let expected: BTreeSet<String> = TASK_CALLS
        .iter()
        .flat_map(|(_, arn, actions)| actions.iter().map(move |action| format!("{action} {arn}")))
        .collect();
    let parameters: Vec<(&str, &str)> = TASK_CALLS
        .iter()
        .map(|(name, arn, _)| (*name, *arn))
        .collect();
    let sam = Deployed::sam().with(&parameters);
    assert_eq!(task_grants(&sam), expected, "SAM");
    assert!(
        task_grants(&Deployed::sam()).is_empty(),
        "nothing named, nothing granted"
    );
    let cdk = Deployed::cdk("cdk.out.task-calls");
    assert_eq!(task_grants(&cdk), expected, "CDK");
    assert_the_same_security_alarms_and_triggers(&sam, &cdk);
}

#[test]
fn the_values_bucket_is_private_encrypted_tls_only_and_deletes_its_values_in_both() {
    for deployed in [Deployed::sam(), Deployed::cdk("cdk.out")] {
        let name = deployed.name;
        let buckets: Vec<_> = deployed.of_type("AWS::S3::Bucket").collect();
        assert_eq!(buckets.len(), 1, "{name}: one bucket, the values'");
        let properties = &buckets[0].1["Properties"];
        let rules: Vec<(String, String, String)> = (properties["LifecycleConfiguration"]["Rules"])
            .as_array()
            .into_iter()
            .flatten()
            .map(|rule| {
                let field = |name: &str| deployed.render(&rule[name]);
                (field("Prefix"), field("ExpirationInDays"), field("Status"))
            })
            .collect();
        let rule = |prefix: &str, days: &str| (prefix.into(), days.into(), "Enabled".into());
        assert_eq!(
            rules,
            [
                rule("payloads/", "400"),
                rule("payloads/messages/", "15"),
                rule("payloads/uploads/", "7"),
            ],
            "{name}: every value expires after PayloadRetentionDays (a task's if not \
             deleted with it); the messages' after SQS's longest; the uploads' after a week"
        );
        let encryption = &properties["BucketEncryption"]["ServerSideEncryptionConfiguration"][0];
        assert_eq!(
            encryption["ServerSideEncryptionByDefault"]["SSEAlgorithm"], "AES256",
            "{name}"
        );
        assert_eq!(
            properties["PublicAccessBlockConfiguration"],
            json!({"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true}),
            "{name}"
        );
        let policies: Vec<_> = deployed.of_type("AWS::S3::BucketPolicy").collect();
        let statements = policies[0].1["Properties"]["PolicyDocument"]["Statement"].to_string();
        assert!(
            statements.contains("\"Deny\"") && statements.contains("aws:SecureTransport"),
            "{name}: only over TLS: {statements}"
        );
    }
}
