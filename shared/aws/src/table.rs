//! The table created as the template creates it: for emulators and tests, never in
//! a function.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, TimeToLiveSpecification,
};

use crate::store::{EXPIRY_INDEX, LISTING_INDEX};

/// Creates the state table with its indexes and TTL.
///
/// # Panics
/// When the emulator refuses.
pub async fn create_table(dynamodb: &aws_sdk_dynamodb::Client, name: &str) {
    let attribute = |name: &str, kind| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(kind)
            .build()
            .expect("attribute")
    };
    let key = |name: &str, kind| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .expect("key")
    };
    let index = |name: &str, partition: &str, sort: &str| {
        GlobalSecondaryIndex::builder()
            .index_name(name)
            .key_schema(key(partition, KeyType::Hash))
            .key_schema(key(sort, KeyType::Range))
            .projection(
                Projection::builder()
                    .projection_type(ProjectionType::KeysOnly)
                    .build(),
            )
            .build()
            .expect("index")
    };
    dynamodb
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attribute("pk", ScalarAttributeType::S))
        .attribute_definitions(attribute("sk", ScalarAttributeType::S))
        .attribute_definitions(attribute("lease_shard", ScalarAttributeType::S))
        .attribute_definitions(attribute("lease_expires", ScalarAttributeType::N))
        .attribute_definitions(attribute("listed_state", ScalarAttributeType::S))
        .attribute_definitions(attribute("listed_key", ScalarAttributeType::S))
        .key_schema(key("pk", KeyType::Hash))
        .key_schema(key("sk", KeyType::Range))
        .global_secondary_indexes(index(EXPIRY_INDEX, "lease_shard", "lease_expires"))
        .global_secondary_indexes(index(LISTING_INDEX, "listed_state", "listed_key"))
        .send()
        .await
        .expect("table");
    dynamodb
        .update_time_to_live()
        .table_name(name)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .attribute_name("expires_at")
                .enabled(true)
                .build()
                .expect("ttl"),
        )
        .send()
        .await
        .expect("ttl");
}
