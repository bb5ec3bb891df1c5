//! The stack deployed runs tasks through its API: the README's delivery, one trace
//! across the functions, the operator's routes guarded, poison dead-lettered; and with
//! buffered ingestion, each task created once by the scheduler.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use sas_tests::aws::{Remote, api_event};
use sas_tests::ministack::Deployment;
use sas_tests::otlp::Receiver;
use sas_tests::{accepted_submission, notified_states, step_states};
use serde_json::{Value, json};

use super::traces::one_trace_across_the_functions;
use super::{
    create_queue, deploy, drain, listed, operator, put_task, readme_delivery, status_and_code,
    wait_for_task,
};

/// The URL of the deployed queue whose name holds `name`.
async fn queue_url(sqs: &aws_sdk_sqs::Client, name: &str) -> String {
    let queues = sqs.list_queues().send().await.expect("the queues");
    queues
        .queue_urls()
        .iter()
        .find(|url| url.contains(name))
        .unwrap_or_else(|| panic!("no {name} in {:?}", queues.queue_urls()))
        .clone()
}

/// [`accepted_submission`] as an entry of a batch, by `id`.
fn accepted(id: &str, like: &Value) -> SendMessageBatchRequestEntry {
    SendMessageBatchRequestEntry::builder()
        .id(id)
        .message_body(accepted_submission(id, like))
        .build()
        .expect("an entry")
}

/// Waits for task `id` to be Processed, run once: an effect for each of its five steps.
async fn processed_once(stack: &Deployment, remote: &Remote, id: &str) {
    wait_for_task(stack, id, "Processed", Duration::from_secs(90), |t| {
        t["state"] == "Processed"
    })
    .await;
    assert_eq!(remote.effects(id).len(), 5, "{id} run once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployed_stack_runs_the_readme_delivery_guards_the_operator_routes_and_dead_letters_poison()
 {
    let remote = Remote::start(true).await;
    let receiver = Receiver::start().await;
    let stack = Deployment::with_services_and(
        &remote,
        &[
            ("AuthMode", "NONE"),
            ("TraceExportEndpoint", &receiver.url),
            ("TraceExportProtocol", "http/json"),
        ],
    )
    .await;
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    one_trace_across_the_functions(&stack, &receiver).await;

    // The README's curl lines, through the deployed API.
    let put = put_task(&stack, "delivery-1", &readme_delivery()).await;
    assert_eq!(put.json()["id"], "delivery-1");
    let task = wait_for_task(
        &stack,
        "delivery-1",
        "Processed",
        Duration::from_secs(60),
        |t| t["state"] == "Processed",
    )
    .await;
    assert_eq!(step_states(&task), ["Processed"; 5], "{task:#}");
    let effects = remote.effects("delivery-1");
    assert_eq!(effects.len(), 5, "one effect per step: {effects:?}");
    let again = stack
        .call("PUT", "/tasks/delivery-1", Some(&readme_delivery()), false)
        .await;
    assert_eq!(again.status, 202, "the same PUT again is the same task");
    let mut other = readme_delivery();
    other["input"]["weight_kg"] = json!(7);
    let conflict = stack
        .call("PUT", "/tasks/delivery-1", Some(&other), false)
        .await;
    assert_eq!(
        status_and_code(&conflict),
        (409, Some("conflict".into())),
        "{}",
        conflict.body
    );

    // The reads are a function's of their own (under a role that only reads: the
    // buffered test sends it a submission): the task was read through it.
    let read_function = stack.logs("ReadFunction").await;
    assert!(
        read_function.iter().any(|line| line.starts_with("START")),
        "the reads invoke the read function: {read_function:?}"
    );

    // A submission accepted while the stack ingested buffered, left in the ingest queue
    // by the update to direct ingestion: the scheduler still creates its task, once.
    sqs.send_message_batch()
        .queue_url(queue_url(&sqs, "IngestQueue").await)
        .entries(accepted("accepted-before", &task))
        .send()
        .await
        .expect("queued");
    processed_once(&stack, &remote, "accepted-before").await;

    // The delivery with its checks in parallel: both sent, joined, every effect once.
    let mut parallel = readme_delivery();
    parallel["workflow"] = json!("drone-delivery-parallel");
    put_task(&stack, "parallel-1", &parallel).await;
    let task = wait_for_task(
        &stack,
        "parallel-1",
        "Processed",
        Duration::from_secs(60),
        |t| t["state"] == "Processed",
    )
    .await;
    assert_eq!(step_states(&task), ["Processed"; 5], "{task:#}");
    assert_eq!(
        task["steps"][1]["within"],
        json!([{ "parallel": "checks", "branch": 1 }]),
        "{task:#}"
    );
    assert_eq!(remote.effects("parallel-1").len(), 5);

    // The smoke test that ends infra/localstack/deploy.sh, through the same API URL.
    let smoke = tokio::task::block_in_place(|| {
        std::process::Command::new(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/localstack/smoke.sh"),
        )
        .args([stack.api.as_str(), "60"])
        .output()
        .expect("smoke.sh runs")
    });
    assert!(
        smoke.status.success(),
        "smoke.sh: {}{}",
        String::from_utf8_lossy(&smoke.stdout),
        String::from_utf8_lossy(&smoke.stderr)
    );

    // The caller's notification queue, named with the prefix the functions may post to.
    let updates_queue = create_queue(&sqs, "sas-notify-caller").await;
    let mut notified = readme_delivery();
    notified["notify"] = json!("sas-notify-caller");
    put_task(&stack, "notified", &notified).await;
    wait_for_task(
        &stack,
        "notified",
        "Processed",
        Duration::from_secs(60),
        |t| t["state"] == "Processed",
    )
    .await;
    let mut updates: Vec<Value> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while notified_states("notified", &updates).len() < 3 && tokio::time::Instant::now() < deadline
    {
        for body in drain(&sqs, &updates_queue).await {
            updates.push(serde_json::from_str(&body).expect("a notification"));
        }
    }
    assert_eq!(
        notified_states("notified", &updates),
        ["Pending", "Processing", "Processed"]
    );

    // The operator's routes: refused unsigned by the authorizer, taken signed.
    for (method, path) in [
        ("GET", "/operator/tasks?state=Processing"),
        ("GET", "/operator/tasks?state=Error"),
        ("POST", "/operator/tasks/delivery-1/resubmit"),
    ] {
        let answer = stack.call(method, path, None, false).await;
        assert_eq!(
            answer.status, 403,
            "{method} {path} unsigned: {}",
            answer.body
        );
    }
    for state in ["Pending", "Processing", "Compensating", "Error"] {
        let (status, _) = listed(&stack, state).await;
        assert_eq!(
            status, 200,
            "GET /operator/tasks?state={state} signed: the submission function may read the index it lists from"
        );
    }
    let resubmit = stack
        .call("POST", "/operator/tasks/delivery-1/resubmit", None, true)
        .await;
    assert_eq!(
        status_and_code(&resubmit),
        (409, Some("not_in_error".into())),
        "signed, the resubmission reaches the function: {}",
        resubmit.body
    );
    let workflows = stack.call("GET", "/workflows", None, false).await;
    assert_eq!(workflows.status, 200, "{}", workflows.body);

    // A poison message beside a good one in the scheduler's queue: the good one goes
    // through, the poison ends in the dead-letter queue after maxReceiveCount (5)
    // receives. The queue's visibility timeout (180 s, six times the scheduler's
    // timeout) is cut to 1 s for the test, or the five receives would take 15 minutes.
    let scheduler = &stack.outputs["SchedulerQueueUrl"];
    cut_scheduler_visibility(&stack, 1).await;
    put_task(&stack, "beside-poison", &readme_delivery()).await;
    let batch = sqs
        .send_message_batch()
        .queue_url(scheduler)
        .entries(
            aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                .id("poison")
                .message_body("not json")
                .build()
                .expect("an entry"),
        )
        .entries(
            aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                .id("good")
                .message_body(json!({"type": "run", "task_id": "beside-poison"}).to_string())
                .build()
                .expect("an entry"),
        )
        .send()
        .await
        .expect("a batch sent");
    assert!(batch.failed().is_empty(), "{batch:?}");
    let task = wait_for_task(
        &stack,
        "beside-poison",
        "Processed",
        Duration::from_secs(60),
        |t| t["state"] == "Processed",
    )
    .await;
    assert_eq!(step_states(&task), ["Processed"; 5]);
    // The operator sees it through the API (signed), and sends it back to its queue,
    // where it fails again and returns.
    let dead = poison_dead_lettered(&stack).await;
    assert_eq!(dead.len(), 1, "only the poison is dead-lettered: {dead:?}");
    assert_eq!(dead[0]["body"], "not json");
    let (_, listed) = operator(&stack, "GET", "/operator/dead-letters", None).await;
    assert_eq!(listed["queues"][0]["queue"], "scheduler", "{listed:#}");
    let (status, redriven) = operator(
        &stack,
        "POST",
        "/operator/dead-letters/scheduler/redrive",
        Some(&json!({ "ids": [dead[0]["id"]] })),
    )
    .await;
    assert_eq!(
        (status, redriven["redriven"].as_u64()),
        (200, Some(1)),
        "{redriven:#}"
    );
    assert_eq!(
        poison_dead_lettered(&stack).await.len(),
        1,
        "redriven, failed again, dead-lettered again"
    );
    let unsigned = stack
        .call("GET", "/operator/dead-letters", None, false)
        .await;
    assert_eq!(unsigned.status, 403);
    let openapi = stack.call("GET", "/openapi.json", None, false).await;
    assert_eq!(
        (openapi.status, openapi.json()["openapi"].as_str()),
        (200, Some("3.1.0")),
        "the API's description needs no signature"
    );
    let console = stack.call("GET", "/", None, false).await;
    assert!(
        console.status == 200 && console.body.contains("operator console"),
        "the console's page, through the gateway and the function: {} {}",
        console.status,
        &console.body[..console.body.len().min(200)]
    );
}

/// Cuts the scheduler queue's visibility timeout (180 s, six times the scheduler's
/// timeout) to `seconds`: a message that failed is delivered again that much later.
async fn cut_scheduler_visibility(stack: &Deployment, seconds: u32) {
    aws_sdk_sqs::Client::new(&stack.sdk)
        .set_queue_attributes()
        .queue_url(&stack.outputs["SchedulerQueueUrl"])
        .attributes(QueueAttributeName::VisibilityTimeout, seconds.to_string())
        .send()
        .await
        .expect("the visibility timeout");
}

/// The messages of the scheduler's dead-letter queue, as the operator's API shows
/// them, once there are some.
async fn poison_dead_lettered(stack: &Deployment) -> Vec<Value> {
    stack
        .wait(
            "a message in the scheduler's dead-letter queue",
            Duration::from_secs(90),
            Duration::from_millis(500),
            || async {
                let (status, shown) =
                    operator(stack, "GET", "/operator/dead-letters/scheduler", None).await;
                match shown["messages"].as_array() {
                    Some(messages) if status == 200 && !messages.is_empty() => Ok(messages.clone()),
                    _ => Err(format!("{status}: {shown}")),
                }
            },
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_buffered_ingestion_the_api_queues_and_the_scheduler_creates_each_task_once() {
    let remote = Remote::start(true).await;
    let stack = Deployment::with_services_and(
        &remote,
        &[("AuthMode", "NONE"), ("IngestionMode", "BUFFERED")],
    )
    .await;
    let put = stack
        .call("PUT", "/tasks/buffered-1", Some(&readme_delivery()), false)
        .await;
    assert_eq!(
        (put.status, put.json()["status"].as_str()),
        (202, Some("accepted")),
        "{}\n{}",
        put.body,
        stack.all_logs().await
    );
    // The same request again, and a different one for the same id: both accepted.
    put_task(&stack, "buffered-1", &readme_delivery()).await;
    let mut other = readme_delivery();
    other["input"]["weight_kg"] = json!(7);
    put_task(&stack, "buffered-1", &other).await;
    let task = wait_for_task(
        &stack,
        "buffered-1",
        "Processed, the different request refused on it",
        Duration::from_secs(90),
        |t| {
            t["state"] == "Processed"
                && t["refused_submissions"]
                    .as_array()
                    .is_some_and(|r| r.len() == 1)
        },
    )
    .await;
    assert_eq!(step_states(&task), ["Processed"; 5], "{task:#}");
    // SQS keeps no order: the request whose message was handled first runs.
    let ran = task["input"]["weight_kg"].as_f64();
    assert!(
        ran == Some(1.2) || ran == Some(7.0),
        "one of the two requests runs: {task:#}"
    );
    assert_eq!(
        remote.effects("buffered-1").len(),
        5,
        "created once: one effect per step"
    );

    // The read function's role only reads: a submission sent to it straight is
    // refused (on AWS its first write; here its queueing, as MiniStack does not
    // evaluate the role's condition on the keys it may write), without a word of why.
    let refused = stack
        .invoke(
            "ReadFunction",
            &api_event("PUT", "/tasks/through-reads", Some(&readme_delivery())),
        )
        .await;
    assert_eq!(refused["statusCode"], 503, "{refused}");
    let body = refused["body"].as_str().unwrap_or_default();
    assert!(
        !body.contains("arn:") && !body.contains("AccessDenied"),
        "{body}"
    );

    // A batch through the gateway: accepted together, each task created and run once,
    // the bad submission refused on its own.
    let named =
        |id: &str, input: Value| json!({"id": id, "workflow": "drone-delivery", "input": input});
    let input = readme_delivery()["input"].clone();
    let batch = json!({"tasks": [
        named("batched-1", input.clone()),
        named("batched-bad", json!({})),
        named("batched-2", input),
    ]});
    let answer = stack
        .call("POST", "/tasks/batch", Some(&batch), false)
        .await;
    let statuses: Vec<_> = answer.json()["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["status"].as_u64())
        .collect();
    assert_eq!(
        (answer.status, statuses),
        (200, vec![Some(202), Some(400), Some(202)]),
        "{}",
        answer.body
    );
    for id in ["batched-1", "batched-2"] {
        processed_once(&stack, &remote, id).await;
    }
    let absent = stack.call("GET", "/tasks/through-reads", None, false).await;
    assert_eq!(absent.status, 404, "never queued: {}", absent.body);

    // A scheduler that crashed mid-batch (after creating a task, before the batch's
    // delete) has its messages delivered again: the first request's message once
    // more, in one batch with a new submission's.
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let ingest = &queue_url(&sqs, "IngestQueue").await;
    let submitted = |id: &str| accepted(id, &task);
    sqs.send_message_batch()
        .queue_url(ingest)
        .entries(submitted("buffered-1"))
        .entries(submitted("buffered-2"))
        .send()
        .await
        .expect("sent again");
    processed_once(&stack, &remote, "buffered-2").await;
    stack
        .wait(
            "the ingest queue handled and emptied",
            Duration::from_secs(60),
            Duration::from_millis(500),
            || async {
                let attributes = sqs
                    .get_queue_attributes()
                    .queue_url(ingest)
                    .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
                    .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                let left = attributes.attributes().map_or(0, |a| {
                    a.values().filter_map(|n| n.parse::<u64>().ok()).sum()
                });
                if left == 0 {
                    Ok(())
                } else {
                    Err(format!("{left} left"))
                }
            },
        )
        .await;
    let again = stack.call("GET", "/tasks/buffered-1", None, false).await;
    assert_eq!(
        again.json()["version"],
        task["version"],
        "the task created before is not touched by its message again"
    );
    assert_eq!(remote.effects("buffered-1").len(), 5, "nor run again");

    // An accepted submission whose message could not be handled through all its
    // receives (an outage) waits in the ingest dead-letter queue: the operator, with
    // IAM enforced, sees it and sends it back, and its task is created and run.
    let dead_letters = queue_url(&sqs, "IngestDeadLetterQueue").await;
    sqs.send_message_batch()
        .queue_url(dead_letters)
        .entries(submitted("buffered-3"))
        .send()
        .await
        .expect("dead-lettered");
    let missing = stack.call("GET", "/tasks/buffered-3", None, false).await;
    assert_eq!(missing.status, 404, "its task was not created");
    let (status, listed) = operator(&stack, "GET", "/operator/dead-letters", None).await;
    assert_eq!(
        (status, &listed["queues"][3]["queue"]),
        (200, &json!("ingest")),
        "{listed:#}"
    );
    let (status, shown) = operator(&stack, "GET", "/operator/dead-letters/ingest", None).await;
    assert_eq!(
        (status, &shown["messages"][0]["task_id"]),
        (200, &json!("buffered-3")),
        "{shown:#}"
    );
    let (status, redriven) = operator(
        &stack,
        "POST",
        "/operator/dead-letters/ingest/redrive",
        Some(&json!({ "ids": [shown["messages"][0]["id"]] })),
    )
    .await;
    assert_eq!(
        (status, redriven["redriven"].as_u64()),
        (200, Some(1)),
        "{redriven:#}"
    );
    processed_once(&stack, &remote, "buffered-3").await;
}

/// Waits for task `id` to be Processed, showing on failure its steps' states and the
/// agent's logs, not the task (its values are megabytes).
async fn processed_quietly(stack: &Deployment, id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        let task = stack
            .call("GET", &format!("/tasks/{id}"), None, false)
            .await
            .json();
        if task["state"] == "Processed" {
            return task;
        }
        if tokio::time::Instant::now() > deadline {
            let mut logs = stack.logs("AgentFunction").await;
            logs.extend(stack.logs("SchedulerFunction").await);
            let failed: Vec<&String> = logs
                .iter()
                .filter(|line| line.contains("ERROR") || line.contains("WARN"))
                .collect();
            let tail = format!("{failed:#?}");
            panic!(
                "{id} never became Processed: {}, steps {:?}\n{tail}",
                task["state"],
                step_states(&task)
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Puts `value` into the stack's bucket by the presigned request `POST
/// /payloads/uploads` answers, as a caller must past a function's 6 MB; its reference.
/// A body other than the one named is refused first, by S3, for its checksum.
async fn put_by_request(stack: &Deployment, value: &Value) -> Value {
    let text = serde_json::to_vec(value).expect("json");
    let reference = sas_domain::payload::PayloadRef::of(&text);
    let asked = stack
        .call("POST", "/payloads/uploads", Some(&json!(reference)), false)
        .await;
    assert_eq!(asked.status, 201, "{}", asked.body);
    let request = asked.json();
    let put = |body: Vec<u8>| {
        let url = request["url"].as_str().expect("a URL");
        let mut put = reqwest::Client::new().put(url).body(body);
        for (name, value) in request["headers"].as_object().expect("headers") {
            put = put.header(name, value.as_str().expect("a header's value"));
        }
        put.send()
    };
    let mut forged = text.clone();
    let last = forged.len() - 3;
    forged[last] = b'n';
    let refused = put(forged).await.expect("S3 answers");
    let status = refused.status();
    let answer = refused.text().await.unwrap_or_default();
    assert!(status.is_client_error(), "{status} {answer}");
    let stored = put(text).await.expect("S3 answers");
    assert!(stored.status().is_success(), "{}", stored.status());
    json!({"$payload": request["$payload"]})
}

/// `shown` read whole: where a task's view, too large to send (over 4 MiB), names it
/// by its reference, the value `GET /tasks/{id}/payloads/{sha256}` redirects to, in S3.
async fn whole(stack: &Deployment, task: &str, shown: &Value) -> Value {
    let Some(reference) = sas_domain::payload::PayloadRef::in_value(shown) else {
        return shown.clone();
    };
    let path = format!("/tasks/{task}/payloads/{}", reference.sha256);
    let read = stack.call("GET", &path, None, false).await;
    assert_eq!(read.status, 200, "{path}: {:.300}", read.body);
    assert_eq!(read.body.len() as u64, reference.bytes, "{path}");
    read.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20_mb_input_and_a_5_mb_answer_run_through_a_workflow_and_a_state_machine_deployed() {
    const MB: usize = 1024 * 1024;
    let remote = Remote::start(true).await;
    let stack = deploy(&remote).await;
    let mut input = readme_delivery()["input"].clone();
    input["manifest"] = json!("m".repeat(20 * MB));
    let uploaded = put_by_request(&stack, &input).await;
    let answer = json!({"answer_bytes": 5 * MB});
    remote
        .mocks
        .set_faults("drone", serde_json::from_value(answer).expect("faults"));
    let submission = json!({"workflow": "drone-delivery", "input": uploaded});
    put_task(&stack, "large", &submission).await;
    let task = processed_quietly(&stack, "large").await;
    let answer = whole(&stack, "large", &task["steps"][3]["output"]).await;
    assert_eq!(answer.to_string().len(), 5 * MB, "kept whole");
    let carried = task["steps"][4]["output"]["received_bytes"].as_u64();
    assert!(
        carried.is_some_and(|bytes| bytes > (25 * MB) as u64),
        "the last call carried the input and the drone's answer: {carried:?}"
    );

    // A state machine (tests/workflows/large-values.asl.json) with its own 20 MB input,
    // uploaded through the API (MiniStack's functions take it; AWS's would not), its
    // http:invoke Tasks at the deployment's services, the drone answering 5 MB still.
    let mut machine_input = json!({
        "drone_at": format!("{}/drone/schedule", remote.url),
        "delivery_at": format!("{}/delivery/create", remote.url),
    });
    machine_input["manifest"] = input["manifest"].clone();
    let uploaded = stack
        .call("POST", "/payloads", Some(&machine_input), false)
        .await;
    assert_eq!(uploaded.status, 201, "{}", uploaded.body);
    let execution = json!({"workflow": "large-values", "input": uploaded.json()});
    put_task(&stack, "large-machine", &execution).await;
    let task = processed_quietly(&stack, "large-machine").await;
    let output = &whole(&stack, "large-machine", &task["output"]).await;
    assert_eq!(output["manifest"].as_str().map(str::len), Some(20 * MB));
    assert_eq!(output["drone"]["answer"].to_string().len(), 5 * MB);
    let carried = output["recorded"]["received_bytes"].as_u64();
    assert!(
        carried.is_some_and(|bytes| bytes > (25 * MB) as u64),
        "{carried:?}"
    );

    // In the stack's bucket, under payloads/: a task's values in its own scope, and
    // nothing in the messages': the requests name the task's values, and the agents
    // store their answers among them. (MiniStack's CloudFormation leaves out the
    // bucket's lifecycle, which tests/tests/infrastructure checks in the templates.)
    let buckets = stack.s3_get("/").await;
    let bucket = buckets
        .split("<Name>")
        .filter_map(|part| part.split("</Name>").next())
        .find(|name| name.to_lowercase().contains("payloadbucket"))
        .unwrap_or_else(|| panic!("no payload bucket in {buckets}"))
        .to_owned();
    let count = async |prefix: &str| {
        let listed = stack
            .s3_get(&format!("/{bucket}?list-type=2&prefix={prefix}"))
            .await;
        listed.matches("<Key>").count()
    };
    let tasks = count("payloads/tasks/large/").await;
    assert!(tasks >= 2, "the input and the answer, in the task's own");
    assert_eq!(
        count("payloads/messages/").await,
        0,
        "no message stored apart"
    );

    // Deleted as DynamoDB's TTL deletes a task a retention after it finished, its values
    // are deleted with it, by the supervisor on the table's stream; another's stay.
    let dynamodb = aws_sdk_dynamodb::Client::new(&stack.sdk);
    dynamodb
        .delete_item()
        .table_name(&stack.outputs["StateTableName"])
        .key("pk", AttributeValue::S("TASK#large".into()))
        .key("sk", AttributeValue::S("TASK".into()))
        .send()
        .await
        .expect("the task's item deleted");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while count("payloads/tasks/large/").await > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the deleted task's values are still there: {:#?}",
            stack.logs("SupervisorFunction").await
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert!(
        count("payloads/tasks/large-machine/").await >= 2,
        "another task's stay"
    );
}
