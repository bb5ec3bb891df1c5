//! The AWS API actions a Task may name (`arn:aws:states:::sqs:sendMessage`, ...), as
//! Step Functions' optimized integrations: each action's service, operation and fields.

/// An API action a Task may name.
#[derive(Debug, PartialEq, Eq)]
pub struct Action {
    /// As the resource names it: `sqs:sendMessage`.
    pub resource: &'static str,
    /// The service: the agent that calls it, whose flow control its calls share.
    pub service: &'static str,
    /// The API's operation: `SendMessage`.
    pub operation: &'static str,
    /// The fields its request may have.
    pub fields: &'static [&'static str],
    /// Where a field given as JSON is sent as its text (`*`: each element of an array).
    pub as_text: &'static [&'static str],
    /// Whether `.waitForTaskToken` may follow it: the token is sent with the request.
    pub waits_for_token: bool,
}

const CONDITIONS: [&str; 5] = [
    "ConditionExpression",
    "ConditionalOperator",
    "Expected",
    "ExpressionAttributeNames",
    "ExpressionAttributeValues",
];

/// What a write to DynamoDB may ask back.
const WRITE_RETURNS: [&str; 4] = [
    "ReturnConsumedCapacity",
    "ReturnItemCollectionMetrics",
    "ReturnValues",
    "ReturnValuesOnConditionCheckFailure",
];

/// The API actions this engine calls, as Step Functions' optimized integrations.
pub const ACTIONS: &[Action] = &[
    Action {
        resource: "sqs:sendMessage",
        service: "sqs",
        operation: "SendMessage",
        fields: &[
            "QueueUrl",
            "MessageBody",
            "DelaySeconds",
            "MessageAttributes",
            "MessageSystemAttributes",
            "MessageDeduplicationId",
            "MessageGroupId",
        ],
        as_text: &["MessageBody"],
        waits_for_token: true,
    },
    Action {
        resource: "sns:publish",
        service: "sns",
        operation: "Publish",
        fields: &[
            "TopicArn",
            "TargetArn",
            "PhoneNumber",
            "Message",
            "Subject",
            "MessageStructure",
            "MessageAttributes",
            "MessageDeduplicationId",
            "MessageGroupId",
        ],
        as_text: &["Message"],
        waits_for_token: true,
    },
    Action {
        resource: "dynamodb:getItem",
        service: "dynamodb",
        operation: "GetItem",
        fields: &[
            "TableName",
            "Key",
            "AttributesToGet",
            "ConsistentRead",
            "ExpressionAttributeNames",
            "ProjectionExpression",
            "ReturnConsumedCapacity",
        ],
        as_text: &[],
        waits_for_token: false,
    },
    Action {
        resource: "dynamodb:putItem",
        service: "dynamodb",
        operation: "PutItem",
        fields: &concat::<11>([&["TableName", "Item"], &CONDITIONS, &WRITE_RETURNS]),
        as_text: &[],
        waits_for_token: false,
    },
    Action {
        resource: "dynamodb:updateItem",
        service: "dynamodb",
        operation: "UpdateItem",
        fields: &concat::<13>([
            &["TableName", "Key", "UpdateExpression", "AttributeUpdates"],
            &CONDITIONS,
            &WRITE_RETURNS,
        ]),
        as_text: &[],
        waits_for_token: false,
    },
    Action {
        resource: "dynamodb:deleteItem",
        service: "dynamodb",
        operation: "DeleteItem",
        fields: &concat::<11>([&["TableName", "Key"], &CONDITIONS, &WRITE_RETURNS]),
        as_text: &[],
        waits_for_token: false,
    },
    Action {
        resource: "events:putEvents",
        service: "events",
        operation: "PutEvents",
        fields: &["Entries", "EndpointId"],
        as_text: &["Entries/*/Detail"],
        waits_for_token: true,
    },
];

/// Three lists of fields, one after the other, `N` in all (checked as it is built).
const fn concat<const N: usize>(lists: [&[&'static str]; 3]) -> [&'static str; N] {
    let mut all = [""; N];
    let mut at = 0;
    let mut list = 0;
    while list < lists.len() {
        let mut i = 0;
        while i < lists[list].len() {
            all[at] = lists[list][i];
            at += 1;
            i += 1;
        }
        list += 1;
    }
    assert!(at == N, "the lists' lengths add up to N");
    all
}

/// The action a resource names after `arn:aws:states:::`, if this engine calls it.
pub fn action(resource: &str) -> Option<&'static Action> {
    ACTIONS.iter().find(|action| action.resource == resource)
}
