//! DynamoDB, on moto, passes the ports' conformance suite for the state store.

use std::time::Duration;

use sas_lambda::config::TableSettings;
use sas_lambda::emulator;
use sas_testkit::conformance;
use sas_testkit::moto::Moto;

use crate::store::DynamoStore;
use crate::table::create_table;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_on_moto_conforms() {
    let moto = Moto::start();
    let sdk = emulator::sdk(&moto.endpoint);
    create_table(&aws_sdk_dynamodb::Client::new(&sdk), "conformance").await;
    let settings = TableSettings {
        table: "conformance".into(),
        lease_shards: 4,
        lease_bucket: Duration::ZERO,
        retention: Duration::from_secs(86_400),
    };
    conformance::state_store(&DynamoStore::new(&sdk, settings)).await;
}
