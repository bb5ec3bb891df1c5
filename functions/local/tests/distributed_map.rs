//! A distributed Map whose items are read from an object in S3 (moto's), given to its
//! children in batches, and a reader that finds no object caught by its error.

mod common;
#[path = "common/ended.rs"]
mod ended;

use ended::ended;

use serde_json::{Value, json};

const EACH: &str = r#"{
  "StartAt": "Each",
  "States": {
    "Each": {"Type": "Map",
             "ItemReader": {"Resource": "arn:aws:states:::s3:getObject",
                            "ReaderConfig": {"InputType": "JSON"},
                            "Parameters": {"Bucket": "orders", "Key.$": "$.key"}},
             "ItemBatcher": {"MaxItemsPerBatch": 10, "BatchInput": {"day.$": "$.day"}},
             "ItemProcessor": {
               "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
               "StartAt": "Count",
               "States": {"Count": {"Type": "Pass", "End": true,
                                    "Parameters": {"n.$": "States.ArrayLength($.Items)",
                                                   "day.$": "$.BatchInput.day"}}}},
             "Catch": [{"ErrorEquals": ["States.ItemReaderFailed"], "Next": "Unread"}],
             "End": true},
    "Unread": {"Type": "Pass", "End": true}
  }
}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_distributed_map_reads_its_items_from_s3_and_gives_them_in_batches() {
    let moto = sas_testkit::moto::Moto::start();
    let http = reqwest::Client::new();
    // moto takes S3's REST calls unsigned.
    let bucket = format!("{}/orders", moto.endpoint);
    let made = http.put(&bucket).send().await.expect("a bucket");
    assert!(made.status().is_success(), "{}", made.status());
    let orders: Vec<Value> = (0..25).map(|at| json!({"id": format!("o-{at}")})).collect();
    let put = http
        .put(format!("{bucket}/in/today.json"))
        .body(Value::from(orders).to_string())
        .send()
        .await
        .expect("an object");
    assert!(put.status().is_success(), "{}", put.status());

    let workflows = tempfile::tempdir().expect("a workflows directory");
    std::fs::write(workflows.path().join("each.asl.json"), EACH).expect("written");
    let data = tempfile::tempdir().expect("a data directory");
    let workflows_dir = workflows.path().to_str().expect("a path");
    let (mut server, api, _) = common::spawn_with(
        data.path(),
        &[
            ("SAS_WORKFLOWS_DIR", workflows_dir),
            ("AWS_ENDPOINT_URL", moto.endpoint.as_str()),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
        ],
    );
    for (id, key) in [("today", "in/today.json"), ("missing", "in/none.json")] {
        let created = http
            .put(format!("{api}/tasks/{id}"))
            .json(&json!({"workflow": "each", "input": {"key": key, "day": "mon"}}))
            .send()
            .await
            .expect("submitted");
        assert!(created.status().is_success());
    }
    let today = ended(&http, &api, "today").await;
    let missing = ended(&http, &api, "missing").await;
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(today["status"], "SUCCEEDED", "{today:#}");
    assert_eq!(
        today["output"],
        json!([{"n": 10, "day": "mon"}, {"n": 10, "day": "mon"}, {"n": 5, "day": "mon"}])
    );
    assert_eq!(missing["status"], "SUCCEEDED", "{missing:#}");
    assert_eq!(missing["output"]["Error"], "States.ItemReaderFailed");
    let cause = missing["output"]["Cause"].as_str().unwrap_or_default();
    assert!(cause.contains("S3.NoSuchKey"), "{cause}");
}
