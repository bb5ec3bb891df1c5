//! Values of any size, end to end on the local system as a caller gives them: an
//! input uploaded once and named by reference (20 MB through a workflow, 100 MB put
//! by the upload request through a state machine), and a service answering 5 MB. The
//! records keep references; the values are in the data directory's `payloads`, each
//! once; every call carries the whole input, and every step sees the whole answer.

use sas_tests::{Harness, delivery_input, step};
use serde_json::{Value, json};

const MB: usize = 1024 * 1024;

/// Uploads `value`; its reference.
async fn upload(harness: &Harness, value: &Value) -> Value {
    let text = serde_json::to_vec(value).expect("json");
    let (status, _, reference) = harness.call("POST", "/payloads", Some(&text)).await;
    assert_eq!(status, 201, "{reference}");
    assert_eq!(
        reference["$payload"]["bytes"],
        json!(text.len()),
        "{reference}"
    );
    reference
}

/// Puts `value` by the request `POST /payloads/uploads` answers (locally, a path on
/// the API: `PUT /payloads/{sha256}`); its reference.
async fn put_by_request(harness: &Harness, value: &Value) -> Value {
    let text = serde_json::to_vec(value).expect("json");
    let named =
        json!({"sha256": sas_domain::payload::PayloadRef::of(&text).sha256, "bytes": text.len()});
    let asked = serde_json::to_vec(&named).expect("json");
    let (status, _, request) = harness
        .call("POST", "/payloads/uploads", Some(&asked))
        .await;
    assert_eq!(status, 201, "{request}");
    assert_eq!(request["$payload"], named, "{request}");
    let path = format!("/payloads/{}", named["sha256"].as_str().expect("a hash"));
    assert_eq!(request["url"], json!(path), "a path on the API: {request}");
    assert_eq!(request["method"], "PUT", "{request}");
    let (status, _, put) = harness.call("PUT", &path, Some(&text)).await;
    assert_eq!(status, 201, "{put}");
    assert_eq!(put["$payload"], named, "{put}");
    json!({"$payload": request["$payload"]})
}

/// `shown` read whole: where a view too large to send whole names it by its
/// reference, the value `GET /tasks/{id}/payloads/{sha256}` reads.
async fn whole(harness: &Harness, task: &str, shown: &Value) -> Value {
    let Some(reference) = sas_domain::payload::PayloadRef::in_value(shown) else {
        return shown.clone();
    };
    let path = format!("/tasks/{task}/payloads/{}", reference.sha256);
    let (status, _, value) = harness.call("GET", &path, None).await;
    assert_eq!(status, 200, "{path}");
    value
}

/// The bytes of the files under `dir`, and how many there are.
fn files_in(dir: &std::path::Path) -> (u64, usize) {
    let mut total = (0, 0);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let (bytes, count) = if path.is_dir() {
            files_in(&path)
        } else {
            (entry.metadata().map_or(0, |m| m.len()), 1)
        };
        total = (total.0 + bytes, total.1 + count);
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20_mb_input_and_a_5_mb_answer_run_through_a_workflow_kept_apart() {
    let harness = Harness::start(5).await;
    let mut input = delivery_input();
    input["manifest"] = json!("m".repeat(20 * MB));
    let reference = upload(&harness, &input).await;
    harness
        .faults("drone", json!({"answer_bytes": 5 * MB}))
        .await;
    let (status, body) = harness
        .put_task(
            "large",
            &json!({"workflow": "drone-delivery", "input": reference}),
        )
        .await;
    assert!(matches!(status, 201 | 202), "{body}");
    let task = harness.settle_in("large", "Processed").await;

    // Too large to send whole (over 4 MiB), the view names the large values by their
    // references; each is read whole by its own route.
    let shown = &step(&task, "schedule-drone")["output"];
    assert!(
        shown.to_string().len() < 200,
        "a reference: {:.200}",
        shown.to_string()
    );
    assert_eq!(task["input"], reference, "the input as it was named");
    let answer = whole(&harness, "large", shown).await;
    assert_eq!(answer.to_string().len(), 5 * MB, "the answer kept whole");
    let given = whole(&harness, "large", &task["input"]).await;
    assert_eq!(given, input, "the input kept whole");
    let sha256 = task["input"]["$payload"]["sha256"]
        .as_str()
        .expect("a hash");
    let printed = harness.sas_ok(&["tasks", "value", "large", sha256]).await;
    let read: Value = serde_json::from_str(&printed).expect("sas prints the JSON");
    assert_eq!(read, input, "sas reads it whole");
    let last = &step(&task, "create-delivery")["output"];
    let carried = last["received_bytes"].as_u64().expect("bytes received");
    assert!(
        carried > (25 * MB) as u64,
        "the last call carried the input and the drone's answer: {carried} bytes"
    );

    let data = harness.data.path();
    let (kept, values) = files_in(&data.join("payloads"));
    assert!(
        kept > (25 * MB) as u64,
        "the values are kept apart: {kept} bytes"
    );
    assert!(
        values <= 8,
        "each value kept once, not at every step: {values} files"
    );
    let (database, _) = files_in(data);
    assert!(
        database - kept < (4 * MB) as u64,
        "the database keeps references, not values: {} bytes",
        database - kept
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_naming_nothing_uploaded_is_refused_and_an_upload_must_be_the_json_named() {
    let harness = Harness::start(5).await;
    let nothing = json!({"$payload": {"sha256": "0".repeat(64), "bytes": 2}});
    let (status, body) = harness
        .put_task(
            "nothing",
            &json!({"workflow": "drone-delivery", "input": nothing}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "input", "{body}");
    let (status, _, body) = harness.call("POST", "/payloads", Some(b"{not json")).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_json", "{body}");

    // Put by its hash: the body must have it, and be JSON.
    let text = b"{\"a\": 1}";
    let sha256 = sas_domain::payload::PayloadRef::of(text).sha256;
    let (status, _, body) = harness
        .call("PUT", &format!("/payloads/{}", "0".repeat(64)), Some(text))
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_body")),
        "{body}"
    );
    let (status, _, body) = harness.call("PUT", "/payloads/uploads", Some(text)).await;
    assert_eq!(
        (status, &body["error"]["field"]),
        (400, &json!("sha256")),
        "{body}"
    );
    let not_json = b"{not json";
    let named = sas_domain::payload::PayloadRef::of(not_json).sha256;
    let (status, _, body) = harness
        .call("PUT", &format!("/payloads/{named}"), Some(not_json))
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_json")),
        "{body}"
    );
    let (status, _, body) = harness
        .call("PUT", &format!("/payloads/{sha256}"), Some(text))
        .await;
    assert_eq!(status, 201, "{body}");

    // A request for a value with no hash, or too large for one.
    for (asked, field) in [
        (json!({"sha256": "abc", "bytes": 2}), "sha256"),
        (json!({"sha256": sha256, "bytes": 200 * MB}), "bytes"),
    ] {
        let asked = serde_json::to_vec(&asked).expect("json");
        let (status, _, body) = harness
            .call("POST", "/payloads/uploads", Some(&asked))
            .await;
        assert_eq!(
            (status, &body["error"]["field"]),
            (400, &json!(field)),
            "{body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_mb_input_and_a_5_mb_answer_run_through_a_state_machine() {
    let harness = Harness::start_with_services(r#"{"drone": {}, "delivery": {}}"#).await;
    let mock = harness.mock.clone();
    let input = json!({
        "drone_at": format!("{mock}/drone/schedule"),
        "delivery_at": format!("{mock}/delivery/create"),
        "manifest": "m".repeat(100 * MB),
    });
    let reference = put_by_request(&harness, &input).await;
    harness
        .faults("drone", json!({"answer_bytes": 5 * MB}))
        .await;
    let machine = "arn:aws:states:us-east-1:000000000000:stateMachine:large-values";
    let started = harness
        .step_functions(
            "StartExecution",
            &json!({"stateMachineArn": machine, "name": "large", "input": reference.to_string()}),
        )
        .await;
    let ended = harness.execution_ended(&started["executionArn"]).await;
    assert_eq!(ended["status"], "SUCCEEDED", "{}", ended["error"]);
    // Over what an answer carries, the execution's input and output are left out, as
    // Step Functions' details say; the task's view names them, read by reference.
    for (field, details) in [("input", "inputDetails"), ("output", "outputDetails")] {
        assert!(ended.get(field).is_none(), "{field} left out");
        assert_eq!(ended[details], json!({"included": false}));
    }
    let task = harness.task("large").await;
    let output = whole(&harness, "large", &task["output"]).await;
    assert_eq!(output["manifest"].as_str().map(str::len), Some(100 * MB));
    let answer = &output["drone"]["answer"];
    assert_eq!(
        answer.to_string().len(),
        5 * MB,
        "the drone's answer kept whole"
    );
    let carried = output["recorded"]["received_bytes"]
        .as_u64()
        .expect("bytes");
    assert!(
        carried > (25 * MB) as u64,
        "the last call carried both: {carried}"
    );
    let (kept, _) = files_in(&harness.data.path().join("payloads"));
    assert!(
        kept > (25 * MB) as u64,
        "the values are kept apart: {kept} bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_that_looks_like_a_reference_is_kept_as_it_was_given() {
    let harness = Harness::start(5).await;
    let input = json!({"order_id": "o-1", "customer_id": "c-1", "amount": 10});
    let (status, body) = harness
        .put_task(
            "lookalike",
            &json!({"workflow": "approved-refund", "input": input}),
        )
        .await;
    assert!(matches!(status, 201 | 202), "{body}");
    harness
        .wait_for("lookalike", "waiting for its approval", |t| {
            t["steps"][1]["state"] == "Processing"
        })
        .await;
    let lookalike = json!({"$payload": {"sha256": "0".repeat(64), "bytes": 2}});
    let completion = json!({"output": lookalike}).to_string();
    let path = "/tasks/lookalike/steps/approve/complete";
    let (status, _, answer) = harness
        .call("POST", path, Some(completion.as_bytes()))
        .await;
    assert_eq!(status, 202, "{answer}");
    let task = harness.settle_in("lookalike", "Processed").await;
    assert_eq!(step(&task, "approve")["output"], lookalike, "{task:#}");
}

/// An execution whose history holds more than an answer carries (ten Pass states, each
/// entered and left with 300 KB, cut to 256 KiB an event as Step Functions cuts it)
/// comes in pages of at most 4 MiB, each naming the next, the events in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_too_large_for_one_answer_comes_in_pages() {
    let harness = Harness::start(5).await;
    let states: serde_json::Map<String, Value> = (0..10)
        .map(|at| {
            let next = if at == 9 {
                json!({"Type": "Pass", "End": true})
            } else {
                json!({"Type": "Pass", "Next": format!("P{}", at + 1)})
            };
            (format!("P{at}"), next)
        })
        .collect();
    let definition = json!({"StartAt": "P0", "States": states}).to_string();
    let create = json!({"name": "passes", "definition": definition, "roleArn": "r"});
    let created = harness.step_functions("CreateStateMachine", &create).await;
    let input = put_by_request(&harness, &json!({"manifest": "m".repeat(300 * 1024)})).await;
    let start = json!({"stateMachineArn": created["stateMachineArn"], "name": "paged",
        "input": input.to_string()});
    let started = harness.step_functions("StartExecution", &start).await;
    let ended = harness.execution_ended(&started["executionArn"]).await;
    // Its input and output, each kept apart, are read for the answer, which carries them.
    for field in ["input", "output"] {
        let text = ended[field].as_str().expect("carried");
        let value: Value = serde_json::from_str(text).expect("JSON text");
        assert_eq!(
            value["manifest"].as_str().map(str::len),
            Some(300 * 1024),
            "{field}"
        );
    }

    let (mut ids, mut pages, mut token) = (Vec::new(), 0, None::<Value>);
    loop {
        let mut asked = json!({"executionArn": started["executionArn"], "maxResults": 1000});
        if let Some(token) = &token {
            asked["nextToken"] = token.clone();
        }
        let page = harness.step_functions("GetExecutionHistory", &asked).await;
        assert!(
            page.to_string().len() <= sas_api::MAX_ANSWER_BYTES,
            "page {pages}"
        );
        let events = page["events"].as_array().expect("events");
        ids.extend(events.iter().filter_map(|event| event["id"].as_u64()));
        pages += 1;
        match page.get("nextToken") {
            Some(next) => token = Some(next.clone()),
            None => break,
        }
    }
    assert!(pages >= 2, "{pages} page(s) of {} events", ids.len());
    let expected: Vec<u64> = (1..=ids.len() as u64).collect();
    assert_eq!(ids, expected, "every event once, in order");
}
