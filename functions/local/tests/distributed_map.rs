//! A distributed Map whose items are read from an object in S3 (moto's), given to its
//! children in batches, and a reader that finds no object caught by its error; and
//! one whose results are written back to S3 (`ResultWriter`); and one whose items are
//! a bucket's listing.

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

/// Each item's id told back, the results exported to S3 as Step Functions does.
const WRITTEN: &str = r#"{
  "StartAt": "Each",
  "States": {
    "Each": {"Type": "Map",
             "ItemReader": {"Resource": "arn:aws:states:::s3:getObject",
                            "Parameters": {"Bucket": "orders", "Key": "in/today.json"}},
             "ResultWriter": {"Resource": "arn:aws:states:::s3:putObject",
                              "Parameters": {"Bucket": "results", "Prefix.$": "$.prefix"}},
             "MaxConcurrency": 5,
             "ItemProcessor": {
               "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
               "StartAt": "Tell",
               "States": {"Tell": {"Type": "Pass", "End": true,
                                   "Parameters": {"told.$": "$.id"}}}},
             "End": true}
  }
}"#;

/// Each object under a prefix, its key and size told back.
const LISTED: &str = r#"{
  "StartAt": "Each",
  "States": {
    "Each": {"Type": "Map",
             "ItemReader": {"Resource": "arn:aws:states:::s3:listObjectsV2",
                            "Parameters": {"Bucket": "orders", "Prefix": "photos/"}},
             "ItemProcessor": {
               "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
               "StartAt": "Tell",
               "States": {"Tell": {"Type": "Pass", "End": true,
                                   "Parameters": {"key.$": "$.Key", "size.$": "$.Size",
                                                  "dated.$": "States.MathAdd($.LastModified, 0)"}}}},
             "End": true}
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
    std::fs::write(workflows.path().join("written.asl.json"), WRITTEN).expect("written");
    std::fs::write(workflows.path().join("listed.asl.json"), LISTED).expect("written");
    for (key, body) in [
        ("photos/a.jpg", "1"),
        ("photos/b&c.jpg", "22"),
        ("other/d.jpg", "333"),
    ] {
        let put = http.put(format!("{bucket}/{key}")).body(body).send().await;
        assert!(put.is_ok_and(|put| put.status().is_success()), "{key}");
    }
    let made = http.put(format!("{}/results", moto.endpoint)).send().await;
    assert!(
        made.is_ok_and(|made| made.status().is_success()),
        "a bucket"
    );
    let data = tempfile::tempdir().expect("a data directory");
    let workflows_dir = workflows.path().to_str().expect("a path");
    let environment = [
        ("AWS_ENDPOINT_URL", moto.endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
    ];
    let mut settings = vec![("SAS_WORKFLOWS_DIR", workflows_dir)];
    settings.extend(environment);
    let (mut server, api, _) = common::spawn_with(data.path(), &settings);
    for (id, workflow, input) in [
        (
            "today",
            "each",
            json!({"key": "in/today.json", "day": "mon"}),
        ),
        (
            "missing",
            "each",
            json!({"key": "in/none.json", "day": "mon"}),
        ),
        ("written", "written", json!({"prefix": "runs"})),
        ("listed", "listed", json!({})),
    ] {
        let created = http
            .put(format!("{api}/tasks/{id}"))
            .json(&json!({"workflow": workflow, "input": input}))
            .send()
            .await
            .expect("submitted");
        assert!(created.status().is_success(), "{id}: {}", created.status());
    }
    let today = ended(&http, &api, "today").await;
    let missing = ended(&http, &api, "missing").await;
    let written = ended(&http, &api, "written").await;
    let listed = ended(&http, &api, "listed").await;
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

    // The Map's output names the manifest, which names the file of its 25 results.
    assert_eq!(written["status"], "SUCCEEDED", "{written:#}");
    let details = &written["output"]["ResultWriterDetails"];
    assert_eq!(details["Bucket"], "results", "{written:#}");
    let manifest_key = details["Key"].as_str().expect("the manifest's key");
    assert!(
        manifest_key.starts_with("runs/") && manifest_key.ends_with("/manifest.json"),
        "{manifest_key}"
    );
    // moto keeps an object put signed from unsigned readers: read as the agent wrote.
    let sdk = sas_aws_tasks::local_sdk(|name| {
        (environment.iter())
            .find(|(key, _)| *key == name)
            .map(|(_, value)| (*value).to_owned())
    });
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk)
            .endpoint_url(&moto.endpoint)
            .force_path_style(true)
            .build(),
    );
    let read = |key: String| {
        let s3 = s3.clone();
        async move {
            let object = s3.get_object().bucket("results").key(key).send().await;
            let bytes = object
                .expect("the object")
                .body
                .collect()
                .await
                .expect("read");
            serde_json::from_slice::<Value>(&bytes.into_bytes()).expect("JSON")
        }
    };
    let manifest = read(manifest_key.to_owned()).await;
    assert_eq!(manifest["MapRunArn"], written["output"]["MapRunArn"]);
    assert_eq!(manifest["ResultFiles"]["FAILED"], json!([]));
    let file = &manifest["ResultFiles"]["SUCCEEDED"][0];
    let results = read(file["Key"].as_str().expect("a key").to_owned()).await;
    let results = results.as_array().expect("the results");
    assert_eq!(results.len(), 25);
    assert_eq!(results[7]["Status"], "SUCCEEDED");
    assert_eq!(results[7]["Input"], "{\"id\":\"o-7\"}");
    assert_eq!(results[7]["Output"], "{\"told\":\"o-7\"}");

    // The objects under the prefix, in the listing's order, each an item.
    assert_eq!(listed["status"], "SUCCEEDED", "{listed:#}");
    let told = listed["output"].as_array().expect("the items' outputs");
    let keys: Vec<(&str, u64)> = told
        .iter()
        .map(|item| {
            (
                item["key"].as_str().unwrap_or_default(),
                item["size"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(keys, [("photos/a.jpg", 1), ("photos/b&c.jpg", 2)]);
    assert!(
        told[0]["dated"]
            .as_u64()
            .is_some_and(|at| at > 1_700_000_000),
        "{listed:#}"
    );
}
