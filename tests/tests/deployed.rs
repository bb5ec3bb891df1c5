//! The real stack, `infra/template.yaml`, deployed with `sam deploy` on MiniStack with
//! IAM enforced, and driven from outside as its users drive it: through the deployed
//! HTTP API, the deployed queues and the alert topic. The functions run as Lambda
//! functions through their real triggers, each under the policy the template gives it,
//! so a permission missing from the template fails a test here. Each test deploys the
//! stack on a MiniStack of its own (`sas_tests::ministack`, which lists the emulator's
//! gaps and how the harness works around them). Two tests deploy it otherwise, as its
//! users do: with `infra/localstack/deploy.sh`, and the CDK app with `cdk deploy`.

use std::time::Duration;

use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use sas_domain::ids::{Owner, TaskId};
use sas_tests::aws::{Remote, api_event, fixture, free_port, queue_arn, repository};
use sas_tests::ministack::{
    AccessKey, Answer, Client, Deployment, MiniStack, REGION, emulator_template,
    lay_out_as_cargo_lambda, sam_cli,
};
use sas_tests::tokens::{AUDIENCE, Issuer};
use sas_tests::{
    UNDONE_AFTER_THE_DELIVERY_FAILED, UNDONE_BEFORE_THE_DELIVERY, accepted_submission,
    all_children, notified_states, parcel_order, step_states,
};
use serde_json::{Value, json};

/// The README's drone delivery.
fn readme_delivery() -> Value {
    json!({"workflow":"drone-delivery","input":{"customer_id":"c-1","pickup":"Sydney","dropoff":"Bondi","weight_kg":1.2}})
}

/// The stack with the remote services at `remote` ([`Deployment::with_services`]).
async fn deploy(remote: &Remote) -> Deployment {
    Deployment::with_services(remote).await
}

/// Waits until the task satisfies `done`; panics after `patience` with the task and
/// the functions' logs.
async fn wait_for_task(
    stack: &Deployment,
    id: &str,
    what: &str,
    patience: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    wait_for_task_as(stack, None, id, what, patience, done).await
}

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

/// [`wait_for_task`], reading the task with `token` as its bearer token.
async fn wait_for_task_as(
    stack: &Deployment,
    token: Option<&str>,
    id: &str,
    what: &str,
    patience: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let answer = stack
            .call_as(token, "GET", &format!("/tasks/{id}"), None)
            .await;
        let task = answer.json();
        if answer.status == 200 && done(&task) {
            return task;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "task {id} never became {what} within {patience:?}: {} {}\n{}",
                answer.status,
                answer.body,
                stack.all_logs().await
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Submits a task through the deployed API (unsigned, as a client); its answer, a 202.
async fn put_task(stack: &Deployment, id: &str, body: &Value) -> Answer {
    let put = stack
        .call("PUT", &format!("/tasks/{id}"), Some(body), false)
        .await;
    assert_eq!(put.status, 202, "{}", put.body);
    put
}

/// Creates a queue; returns its URL.
async fn create_queue(sqs: &aws_sdk_sqs::Client, name: &str) -> String {
    sqs.create_queue()
        .queue_name(name)
        .send()
        .await
        .expect("a queue")
        .queue_url()
        .expect("its URL")
        .to_owned()
}

/// Receives what a queue holds, deleting it; the bodies.
async fn drain(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    let received = sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .expect("a receive");
    let mut bodies = Vec::new();
    for message in received.messages() {
        bodies.push(message.body().unwrap_or_default().to_owned());
        sqs.delete_message()
            .queue_url(url)
            .receipt_handle(message.receipt_handle().unwrap_or_default())
            .send()
            .await
            .expect("a delete");
    }
    bodies
}

/// The operators' view of a state, signed: status and task ids.
async fn listed(stack: &Deployment, state: &str) -> (u16, Vec<String>) {
    let answer = stack
        .call("GET", &format!("/operator/tasks?state={state}"), None, true)
        .await;
    let ids = answer.json()["tasks"]
        .as_array()
        .map(|tasks| {
            tasks
                .iter()
                .map(|t| t["id"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default();
    (answer.status, ids)
}

fn status_and_code(answer: &Answer) -> (u16, Option<String>) {
    (
        answer.status,
        answer.json()["error"]["code"].as_str().map(str::to_owned),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployed_stack_runs_the_readme_delivery_guards_the_operator_routes_and_dead_letters_poison()
 {
    let remote = Remote::start(true).await;
    let stack = deploy(&remote).await;
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);

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
/// Waits on the deployed stack: a refund's approval used through the deployed API by
/// its token (once), another refused on the owner's route, and a task paused while its
/// timer runs: the timer ends on its deadline message (the supervisor's sweep is a day
/// off), and the task goes on only once resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_is_approved_by_its_token_through_the_deployed_api_and_a_task_paused_over_its_timer_goes_on_when_resumed()
 {
    let remote = Remote::start(true).await;
    // No sweep in the test's time: a timer is ended by its deadline message alone.
    let stack = Deployment::with_services_and(
        &remote,
        &[("AuthMode", "NONE"), ("SupervisorRate", "rate(1 day)")],
    )
    .await;
    let refund = |amount: u32| json!({"workflow": "refund", "input": {"order_id": "o-1", "customer_id": "c-1", "amount": amount}});
    let approve = |t: &Value| t["steps"][1].clone();
    let post = |path: String, body: Value| {
        let stack = &stack;
        async move { stack.call("POST", &path, Some(&body), false).await }
    };

    put_task(&stack, "refund-1", &refund(250)).await;
    put_task(&stack, "refund-2", &refund(400)).await;
    let waiting = |t: &Value| approve(t)["waiting"]["for"] == "callback";
    let task = wait_for_task(
        &stack,
        "refund-1",
        "waiting for its approval",
        Duration::from_secs(60),
        waiting,
    )
    .await;
    let token = approve(&task)["waiting"]["token"]
        .as_str()
        .expect("the approval's token in the task's view")
        .to_owned();
    let approval = json!({"output": {"approved_by": "ana"}});
    let used = post(format!("/callbacks/{token}"), approval.clone()).await;
    assert_eq!(
        (used.status, used.json()),
        (200, json!({"step": "approve", "state": "Processed"})),
        "{}",
        used.body
    );
    let again = post(format!("/callbacks/{token}"), approval).await;
    assert_eq!(
        status_and_code(&again),
        (409, Some("not_waiting".to_owned())),
        "a token is used once: {}",
        again.body
    );
    let task = wait_for_task(
        &stack,
        "refund-1",
        "Processed",
        Duration::from_secs(60),
        |t| t["state"] == "Processed",
    )
    .await;
    assert_eq!(approve(&task)["output"], json!({"approved_by": "ana"}));

    wait_for_task(
        &stack,
        "refund-2",
        "waiting for its approval",
        Duration::from_secs(60),
        waiting,
    )
    .await;
    let refused = post(
        "/tasks/refund-2/steps/approve/complete".to_owned(),
        json!({"error": "not this one"}),
    )
    .await;
    assert_eq!(refused.status, 202, "{}", refused.body);
    let task = wait_for_task(&stack, "refund-2", "Error", Duration::from_secs(60), |t| {
        t["state"] == "Error"
    })
    .await;
    assert_eq!(
        step_states(&task),
        ["Processed", "Error", "Pending", "Pending"],
        "refused: nothing paid"
    );

    // A nap of 5 s (tests/workflows/nap.json), the task paused as it starts.
    let nap = json!({"workflow": "nap", "input": {"customer_id": "c-1"}});
    put_task(&stack, "napping", &nap).await;
    wait_for_task(&stack, "napping", "napping", Duration::from_secs(60), |t| {
        t["steps"][1]["waiting"]["for"] == "timer"
    })
    .await;
    let paused = post("/tasks/napping/pause".to_owned(), json!({})).await;
    assert_eq!(paused.status, 202, "{}", paused.body);
    wait_for_task(
        &stack,
        "napping",
        "past its timer",
        Duration::from_secs(60),
        |t| t["steps"][1]["state"] == "Processed",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let task = wait_for_task(&stack, "napping", "still paused", Duration::ZERO, |t| {
        t["paused"].is_object()
    })
    .await;
    assert_eq!(
        step_states(&task),
        ["Processed", "Processed", "Pending"],
        "paused: the step after the timer waits: {task}"
    );
    assert_eq!(
        remote.effects("napping").len(),
        1,
        "only the package created"
    );
    assert_eq!(
        verdicts(&stack, "SchedulerFunction", "woke").await,
        1,
        "the timer ended on its deadline message"
    );
    let resumed = post("/tasks/napping/resume".to_owned(), json!({})).await;
    assert_eq!(resumed.status, 202, "{}", resumed.body);
    wait_for_task(
        &stack,
        "napping",
        "Processed",
        Duration::from_secs(60),
        |t| t["state"] == "Processed",
    )
    .await;
    assert_eq!(
        remote.effects("napping").len(),
        2,
        "the delivery created once"
    );
}

/// Flow control on the deployed stack: the drone service limited to 2 calls at once
/// (in `ServiceUrls`) sees no 3rd from 8 tasks submitted at once, across the
/// scheduler's concurrent invocations, under IAM (a call taken off its gate's line is
/// the only delete the functions may make).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_limited_to_2_calls_at_once_sees_no_3rd_across_the_deployed_functions() {
    let remote = Remote::start(true).await;
    let mut services = json!(sas_tests::aws::service_urls(&remote.url));
    services["drone"] = json!({ "url": format!("{}/drone", remote.url), "max_concurrency": 2 });
    let services = services.to_string();
    let stack =
        Deployment::with_services_and(&remote, &[("AuthMode", "NONE"), ("ServiceUrls", &services)])
            .await;
    remote.mocks.set_faults(
        "drone",
        serde_json::from_value(json!({ "latency_ms": 300 })).expect("faults"),
    );
    let ids: Vec<String> = (0..8).map(|i| format!("limited-{i}")).collect();
    for id in &ids {
        put_task(&stack, id, &readme_delivery()).await;
    }
    for id in &ids {
        let task = wait_for_task(&stack, id, "Processed", Duration::from_secs(120), |t| {
            t["state"] == "Processed"
        })
        .await;
        assert_eq!(task["steps"][3]["failure_count"], 0, "{task}");
    }
    let peak = remote.mocks.concurrency()["drone"].peak;
    assert!(peak <= 2, "the drone service saw {peak} calls at once");
    assert_eq!(remote.mocks.calls()["drone"], 8);

    // The operator sees the limit, its slots all given back, through the deployed API
    // (the submission function reads the gates under its own role).
    let (status, view) = operator(&stack, "GET", "/operator/services", None).await;
    assert_eq!(status, 200, "{view}");
    let limit = &sas_tests::service(&view, "drone")["limits"][0];
    assert_eq!(
        (
            &limit["max_concurrency"],
            &limit["gate"]["in_flight"],
            &limit["gate"]["waiting"]
        ),
        (&json!(2), &json!(0), &json!(0)),
        "{view}"
    );
    // Each call's wait is a SlotWait metric of its service, in milliseconds.
    let waits: Vec<Value> = stack
        .logs("SchedulerFunction")
        .await
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line.get("SlotWait").is_some() && line["Service"] == "drone")
        .collect();
    assert!(waits.len() >= 8, "a wait per call: {waits:#?}");
    assert_eq!(
        waits[0]["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"],
        "Milliseconds"
    );
    assert!(
        waits.iter().any(|w| w["SlotWait"].as_u64() > Some(0)),
        "with 8 calls at a service taking 2 at once, some waited: {waits:#?}"
    );
}

async fn cut_scheduler_visibility(stack: &Deployment, seconds: u32) {
    aws_sdk_sqs::Client::new(&stack.sdk)
        .set_queue_attributes()
        .queue_url(&stack.outputs["SchedulerQueueUrl"])
        .attributes(QueueAttributeName::VisibilityTimeout, seconds.to_string())
        .send()
        .await
        .expect("the visibility timeout");
}

/// An operator's signed call: its status and body.
async fn operator(
    stack: &Deployment,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let answer = stack.call(method, path, body, true).await;
    (answer.status, answer.json())
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
async fn a_hung_agent_is_recovered_by_its_deadline_message_or_when_that_is_lost_by_the_scheduled_supervisor()
 {
    let remote = Remote::start(true).await;
    let stack = deploy(&remote).await;

    // The drone service applies the effect and answers 20 s later, past the step's
    // complete-by (10 s), once: the agent stays silent, the lease expires, and the
    // scheduler, on the deadline message it sent itself when it took the lease, retries
    // the step.
    let hang = || {
        remote.mocks.set_faults(
            "drone",
            serde_json::from_value(json!({"hang_ms": 20000, "times": 1})).expect("faults"),
        );
    };
    hang();
    put_task(&stack, "hung", &readme_delivery()).await;
    let task = wait_for_task(&stack, "hung", "Processed", Duration::from_secs(60), |t| {
        t["state"] == "Processed"
    })
    .await;
    assert_recovered(&remote, &task, "hung");
    assert_eq!(
        verdicts(&stack, "SchedulerFunction", "retry").await,
        1,
        "the scheduler retried the step, on the lease's deadline message"
    );

    // Again, with the deadline message lost: the supervisor's sweep, on its one-minute
    // schedule (nothing else invokes it here), is the backstop.
    hang();
    put_task(&stack, "backstop", &readme_delivery()).await;
    stack
        .wait(
            "the hung call",
            Duration::from_secs(60),
            Duration::from_millis(100),
            || async {
                let calls = remote.mocks.calls().get("drone").copied().unwrap_or(0);
                if calls >= 3 {
                    Ok(())
                } else {
                    Err(format!("{calls} calls to the drone service"))
                }
            },
        )
        .await;
    let (status, processing) = listed(&stack, "Processing").await;
    assert_eq!(
        (status, processing),
        (200, vec!["backstop".to_owned()]),
        "the operator lists the tasks in flight from the expiry index, with IAM enforced"
    );
    // The scheduler sends the step's deadline message right after the agent's request,
    // which the drone service has received: a second later, it waits in the queue, delayed
    // until the lease's end. Purging the queue loses it (and the earlier leases' ones).
    tokio::time::sleep(Duration::from_secs(1)).await;
    aws_sdk_sqs::Client::new(&stack.sdk)
        .purge_queue()
        .queue_url(&stack.outputs["SchedulerQueueUrl"])
        .send()
        .await
        .expect("the scheduler's queue purged");
    let task = wait_for_task(
        &stack,
        "backstop",
        "Processed",
        Duration::from_secs(150),
        |t| t["state"] == "Processed",
    )
    .await;
    assert_recovered(&remote, &task, "backstop");
    assert_eq!(
        verdicts(&stack, "SupervisorFunction", "retry").await,
        1,
        "the scheduled supervisor retried the step"
    );
    assert_eq!(
        verdicts(&stack, "SchedulerFunction", "retry").await,
        1,
        "no deadline message for the second hang"
    );

    // Once more, cancelled by its owner during the hung call: the call is not tried
    // again when its lease ends, and the done steps are undone, the drone's included.
    hang();
    put_task(&stack, "cancelled", &readme_delivery()).await;
    wait_for_task(
        &stack,
        "cancelled",
        "calling the drone",
        Duration::from_secs(60),
        |t| t["steps"][3]["state"] == "Processing",
    )
    .await;
    let cancel = stack
        .call("POST", "/tasks/cancelled/cancel", None, false)
        .await;
    assert_eq!(
        (cancel.status, cancel.json()["state"].as_str()),
        (202, Some("Compensating")),
        "{}",
        cancel.body
    );
    let task = wait_for_task(&stack, "cancelled", "Error", Duration::from_secs(60), |t| {
        t["state"] == "Error"
    })
    .await;
    assert_eq!(step_states(&task), UNDONE_BEFORE_THE_DELIVERY, "{task:#}");
    assert_eq!(task["error"], "cancelled by its owner");
    let mut undone: Vec<_> = remote
        .effects("cancelled")
        .into_iter()
        .filter(|(_, operation, _)| operation.ends_with("/cancel"))
        .collect();
    undone.sort();
    assert_eq!(
        undone,
        [
            ("drone".to_owned(), "/drones/cancel".to_owned(), 1),
            ("package".to_owned(), "/packages/cancel".to_owned(), 1)
        ]
    );
}

/// A task recovered from one hang of the drone service: Processed, the drone step
/// retried once after one expired budget, scheduled once and called twice.
fn assert_recovered(remote: &Remote, task: &Value, id: &str) {
    assert_eq!(step_states(task), ["Processed"; 5], "{task:#}");
    assert_eq!(
        (
            task["steps"][3]["attempt"].as_u64(),
            task["steps"][3]["failure_count"].as_u64()
        ),
        (Some(2), Some(1)),
        "the drone step retried once, after one expired budget: {task:#}"
    );
    let drone: Vec<_> = remote
        .effects(id)
        .into_iter()
        .filter(|e| e.0 == "drone")
        .collect();
    assert_eq!(
        drone,
        [("drone".to_owned(), "/drones/schedule".to_owned(), 2)],
        "called twice, applied once"
    );
}

/// How many decisions of `verdict` a function has made, from its metric lines.
async fn verdicts(stack: &Deployment, function: &str, verdict: &str) -> usize {
    stack
        .logs(function)
        .await
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line.get("Decisions").is_some() && line["Verdict"] == verdict)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_past_its_threshold_is_compensated_and_alerted_a_lost_alert_is_raised_again_and_the_alarm_reaches_the_topic()
 {
    let remote = Remote::start(true).await;
    let stack = deploy(&remote).await;
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let sns = aws_sdk_sns::Client::new(&stack.sdk);

    let topic = &stack.outputs["AlertTopicArn"];
    let inbox = operators_inbox(&stack, &sqs, &sns).await;

    // A lost alert. The scheduler may not publish for now (a statement of the topic's
    // policy denies its role), and the delivery service refuses for good: the task is
    // compensated at once and ends in Error, its alert not published.
    let original = sns
        .get_topic_attributes()
        .topic_arn(topic)
        .send()
        .await
        .expect("the topic's attributes")
        .attributes()
        .and_then(|a| a.get("Policy"))
        .cloned()
        .unwrap_or_default();
    let mut refusing: Value = serde_json::from_str(&original).expect("the topic's policy");
    refusing["Statement"]
        .as_array_mut()
        .expect("statements")
        .push(json!({
            "Sid": "NotTheScheduler", "Effect": "Deny", "Principal": "*",
            "Action": "sns:Publish", "Resource": topic,
            "Condition": {"StringLike": {"aws:PrincipalArn": "*SchedulerFunctionRole*"}}}));
    let set_policy = |policy: String| {
        sns.set_topic_attributes()
            .topic_arn(topic)
            .attribute_name("Policy")
            .attribute_value(policy)
            .send()
    };
    set_policy(refusing.to_string())
        .await
        .expect("the scheduler refused");
    let faults = |service: &str, faults: Value| {
        remote
            .mocks
            .set_faults(service, serde_json::from_value(faults).expect("faults"));
    };
    faults("delivery", json!({"permanent_error_rate": 1.0}));
    put_task(&stack, "refused", &readme_delivery()).await;
    let task = wait_for_task(
        &stack,
        "refused",
        "in Error",
        Duration::from_secs(60),
        |t| t["state"] == "Error",
    )
    .await;
    // The alert's lease ends a minute after the Error (ALERT_REDELIVERY).
    let alert_lease_end = tokio::time::Instant::now() + Duration::from_secs(60);
    assert_eq!(
        step_states(&task),
        UNDONE_AFTER_THE_DELIVERY_FAILED,
        "{task:#}"
    );
    let refused = stack
        .wait(
            "the scheduler's publication refused",
            Duration::from_secs(10),
            Duration::from_millis(500),
            || async {
                let logs = stack.logs("SchedulerFunction").await;
                logs.iter()
                    .find(|line| line.contains("alert not raised"))
                    .cloned()
                    .ok_or_else(|| "not yet".to_owned())
            },
        )
        .await;
    assert!(refused.contains("refused"), "{refused}");
    // The alert's lease has its deadline message, which would have the scheduler raise it
    // again: lost here (the queue purged), the supervisor must.
    sqs.purge_queue()
        .queue_url(&stack.outputs["SchedulerQueueUrl"])
        .send()
        .await
        .expect("the scheduler's queue purged");
    set_policy(original).await.expect("the scheduler allowed");
    faults("delivery", json!({}));

    // Meanwhile, a task past its threshold: the drone service applies the effect and
    // answers too late, four times running. The agent is silent each time; on the lease's
    // deadline message the scheduler retries the step after each expired budget, the last
    // time after the extended wait, and past the threshold (3) gives up: the drone (whose
    // effect is in place) and the package are undone.
    faults("drone", json!({"hang_ms": 15000, "times": 4}));
    put_task(&stack, "doomed", &readme_delivery()).await;

    // Until the second task is in Error and both alerts are in the operators' inbox:
    // the first raised again by the supervisor once its lease has ended, the second
    // published by the scheduler, both through the encrypted topic. The supervisor's
    // schedule could come a minute after the lease's end: past it, the test invokes the
    // deployed function itself, with the scheduled event, every two seconds.
    let scheduled = fixture("eventbridge-scheduled.json");
    let received = std::sync::Mutex::new(Vec::<Value>::new());
    let alerted = |received: &[Value], id: &str| {
        received
            .iter()
            .filter(|m| m["task_id"] == id)
            .cloned()
            .collect::<Vec<_>>()
    };
    let task = stack
        .wait(
            "the second task in Error and both alerts in the operators' inbox",
            Duration::from_secs(180),
            Duration::from_secs(2),
            || async {
                if tokio::time::Instant::now() >= alert_lease_end {
                    stack.invoke("SupervisorFunction", &scheduled).await;
                }
                let new = drain(&sqs, &inbox).await;
                let task = stack.call("GET", "/tasks/doomed", None, false).await.json();
                let mut received = received.lock().expect("received");
                received.extend(new.iter().map(|m| sns_message(m)));
                let done = task["state"] == "Error"
                    && !alerted(&received, "refused").is_empty()
                    && !alerted(&received, "doomed").is_empty();
                if done {
                    Ok(task)
                } else {
                    Err(format!("{task}\n{received:?}"))
                }
            },
        )
        .await;
    assert_eq!(
        step_states(&task),
        UNDONE_BEFORE_THE_DELIVERY,
        "the drone and the package undone: {task:#}"
    );
    assert_eq!(
        task["steps"][3]["failure_count"], 4,
        "retried after each of three expired budgets, given up after the fourth: {task:#}"
    );
    for id in ["refused", "doomed"] {
        let mut undone: Vec<_> = remote
            .effects(id)
            .into_iter()
            .filter(|e| e.1.ends_with("/cancel"))
            .map(|e| e.1)
            .collect();
        undone.sort();
        assert_eq!(undone, ["/drones/cancel", "/packages/cancel"], "{id}");
    }
    let (status, in_error) = listed(&stack, "Error").await;
    assert_eq!(
        (status, in_error),
        (200, vec!["refused".to_owned(), "doomed".to_owned()])
    );
    let received = received.into_inner().expect("received");
    for id in ["refused", "doomed"] {
        assert_eq!(
            alerted(&received, id).len(),
            1,
            "{id}'s alert once: {received:?}"
        );
    }
    assert_eq!(
        verdicts(&stack, "SupervisorFunction", "alerted again").await,
        1,
        "the supervisor raised the lost alert again"
    );

    // The alarm: MiniStack turns no EMF line into a metric, so the harness does what
    // CloudWatch does with the scheduler's TasksInError line: puts it as metric data.
    // MiniStack then evaluates the alarm, which notifies the topic.
    let logs = stack.logs("SchedulerFunction").await;
    let emf: Value = logs
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line.get("TasksInError").is_some())
        .unwrap_or_else(|| panic!("no TasksInError metric in the scheduler's logs: {logs:#?}"));
    let namespace = &emf["_aws"]["CloudWatchMetrics"][0]["Namespace"];
    stack
        .client
        .rpc(
            "monitoring",
            "1.0",
            "GraniteServiceVersion20100801.PutMetricData",
            &json!({"Namespace": namespace, "MetricData": [{
                "MetricName": "TasksInError",
                "Dimensions": [{"Name": "Function", "Value": emf["Function"]}],
                "Value": emf["TasksInError"], "Unit": "Count"}]}),
        )
        .await;
    let alarm = stack
        .wait(
            "the TasksInError alarm's notification in the operators' inbox",
            Duration::from_secs(30),
            Duration::from_millis(200),
            || async {
                let messages: Vec<Value> = drain(&sqs, &inbox)
                    .await
                    .iter()
                    .map(|m| sns_message(m))
                    .collect();
                messages
                    .iter()
                    .find(|m| m["NewStateValue"] == "ALARM")
                    .cloned()
                    .ok_or_else(|| format!("{messages:?}"))
            },
        )
        .await;
    assert!(
        alarm["AlarmName"]
            .as_str()
            .is_some_and(|name| name.contains("TasksInErrorAlarm")),
        "{alarm:#}"
    );

    // The operator resubmits, signed: the task completes.
    let resubmit = stack
        .call("POST", "/operator/tasks/doomed/resubmit", None, true)
        .await;
    assert_eq!(resubmit.status, 202, "{}", resubmit.body);
    let task = wait_for_task(
        &stack,
        "doomed",
        "Processed after the resubmission",
        Duration::from_secs(60),
        |t| t["state"] == "Processed",
    )
    .await;
    assert_eq!(step_states(&task), ["Processed"; 5]);
}

/// The operators' inbox: a queue subscribed to the stack's alert topic, which SNS may
/// send to; its URL.
async fn operators_inbox(
    stack: &Deployment,
    sqs: &aws_sdk_sqs::Client,
    sns: &aws_sdk_sns::Client,
) -> String {
    let topic = &stack.outputs["AlertTopicArn"];
    let inbox = create_queue(sqs, "operators-inbox").await;
    let inbox_arn = queue_arn(sqs, &inbox).await;
    let policy = json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": "sns.amazonaws.com"},
        "Action": "sqs:SendMessage", "Resource": inbox_arn,
        "Condition": {"ArnEquals": {"aws:SourceArn": topic}}}]});
    sqs.set_queue_attributes()
        .queue_url(&inbox)
        .attributes(QueueAttributeName::Policy, policy.to_string())
        .send()
        .await
        .expect("the inbox's policy");
    sns.subscribe()
        .topic_arn(topic)
        .protocol("sqs")
        .endpoint(&inbox_arn)
        .send()
        .await
        .expect("the inbox subscribed");
    inbox
}

/// The message of an SNS envelope delivered to SQS, as JSON.
fn sns_message(body: &str) -> Value {
    let envelope: Value = serde_json::from_str(body).expect("an SNS envelope");
    let message = envelope["Message"].as_str().unwrap_or(body);
    serde_json::from_str(message).unwrap_or_else(|_| json!(message))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_jwt_callers_are_authenticated_by_the_gateway_and_see_only_their_own_tasks() {
    let issuer = Issuer::start().await;
    let remote = Remote::start(true).await;
    let stack = Deployment::with_services_and(
        &remote,
        &[
            ("AuthMode", "JWT"),
            ("JwtIssuer", &issuer.url),
            ("JwtAudience", AUDIENCE),
        ],
    )
    .await;
    let (alice, bob, operator) = (
        issuer.client("alice"),
        issuer.client("bob"),
        issuer.operator("ops"),
    );
    let delivery = readme_delivery();

    // The gateway's authorizer refuses what has no valid token, before any function.
    for (what, token) in [
        ("no token", None),
        ("a forged token", Some(issuer.forged("alice", &[]))),
        ("an expired token", Some(issuer.token("alice", &[], -60))),
    ] {
        for (method, path) in [
            ("PUT", "/tasks/order-1"),
            ("GET", "/tasks/order-1"),
            ("GET", "/operator/tasks?state=Error"),
        ] {
            let answer = stack
                .call_as(token.as_deref(), method, path, Some(&delivery))
                .await;
            assert_eq!(
                answer.status, 401,
                "{what} on {method} {path}: {}",
                answer.body
            );
        }
    }

    // Both callers use order-1; bob's second task fails.
    for token in [&alice, &bob] {
        let answer = stack
            .call_as(Some(token), "PUT", "/tasks/order-1", Some(&delivery))
            .await;
        assert_eq!(answer.status, 202, "{}", answer.body);
        assert_eq!(answer.json()["id"], "order-1");
    }
    let in_state = |state: &'static str| move |t: &Value| t["state"] == state;
    let minute = Duration::from_secs(60);
    for token in [&alice, &bob] {
        wait_for_task_as(
            &stack,
            Some(token),
            "order-1",
            "Processed",
            minute,
            in_state("Processed"),
        )
        .await;
    }
    remote.mocks.set_faults(
        "delivery",
        serde_json::from_value(json!({"permanent_error_rate": 1.0})).expect("faults"),
    );
    for (token, id) in [(&bob, "bobs-only"), (&alice, "alices-failed")] {
        let answer = stack
            .call_as(Some(token), "PUT", &format!("/tasks/{id}"), Some(&delivery))
            .await;
        assert_eq!(answer.status, 202, "{}", answer.body);
        wait_for_task_as(&stack, Some(token), id, "Error", minute, in_state("Error")).await;
    }

    // Alice cannot see, list or resubmit bob's task, nor be notified on his queue.
    for (method, path) in [
        ("GET", "/tasks/bobs-only"),
        ("POST", "/tasks/bobs-only/resubmit"),
    ] {
        let answer = stack.call_as(Some(&alice), method, path, None).await;
        assert_eq!(
            status_and_code(&answer),
            (404, Some("not_found".into())),
            "{method} {path}: {}",
            answer.body
        );
    }
    let listed_by = |token: &str| {
        let token = token.to_owned();
        let stack = &stack;
        async move {
            let answer = stack
                .call_as(Some(&token), "GET", "/tasks?state=Error", None)
                .await;
            assert_eq!(answer.status, 200, "{}", answer.body);
            answer.json()["tasks"]
                .as_array()
                .expect("tasks")
                .iter()
                .map(|t| t["id"].as_str().expect("id").to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(listed_by(&alice).await, ["alices-failed"]);
    assert_eq!(listed_by(&bob).await, ["bobs-only"]);
    let bob_me = stack.call_as(Some(&bob), "GET", "/me", None).await.json();
    let bob_queue = format!(
        "sas-notify-orders{}",
        bob_me["notify_queue_suffix"].as_str().expect("a suffix")
    );
    let mut notified = delivery.clone();
    notified["notify"] = json!(bob_queue);
    let answer = stack
        .call_as(Some(&alice), "PUT", "/tasks/order-2", Some(&notified))
        .await;
    assert_eq!(
        status_and_code(&answer),
        (400, Some("invalid_field".into())),
        "{}",
        answer.body
    );

    // The operator's routes need the operator's scope, checked by the gateway; the
    // operator sees every caller's tasks, with their owners.
    let answer = stack
        .call_as(Some(&alice), "GET", "/operator/tasks?state=Error", None)
        .await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    let answer = stack
        .call_as(Some(&operator), "GET", "/operator/tasks?state=Error", None)
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let mut owners: Vec<String> = answer.json()["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["owner"].as_str().expect("an owner").to_owned())
        .collect();
    owners.sort();
    assert_eq!(
        owners,
        ["alice", "bob"],
        "the operator lists both callers' tasks: {}",
        answer.body
    );
    for owner in ["alice", "bob"] {
        let id = TaskId::scoped(
            &Owner::new(owner).expect("an owner"),
            &TaskId::parse("order-1").expect("an id"),
        );
        let answer = stack
            .call_as(
                Some(&operator),
                "GET",
                &format!("/operator/tasks/{id}"),
                None,
            )
            .await;
        assert_eq!(
            (answer.status, answer.json()["owner"].as_str()),
            (200, Some(owner)),
            "{}",
            answer.body
        );
    }
}

/// Parcels in the deployed order that ships: three pages of children, fifteen turns of
/// the map's twenty at a time.
const PARCELS: usize = 300;
/// Parcels in the deployed order that is refused, each undone: five turns.
const REFUSED_PARCELS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parcel_order_ships_each_parcel_as_a_child_task_a_child_workflow_ships_one_and_a_refused_order_has_every_parcel_undone()
 {
    let remote = Remote::start(true).await;
    let stack = deploy(&remote).await;
    // The children's ends, told to their order at once, race for its record; one that
    // loses every try is sent again a second later, not left to the queue's visibility
    // timeout (three minutes as deployed).
    let children = async |id: &str| {
        all_children(id, "deliver-each", 100, async |path| {
            let answer = stack.call("GET", &path, None, false).await;
            (answer.status, answer.json())
        })
        .await
    };
    let ids = |listed: &[Value]| -> Vec<String> {
        listed
            .iter()
            .map(|c| c["id"].as_str().expect("an id").to_owned())
            .collect()
    };
    let expected = |order: &str, parcels: usize| -> Vec<String> {
        (0..parcels)
            .map(|n| format!("{order}~deliver-each~{n}"))
            .collect()
    };

    // Each parcel shipped by a child task of its own, created by the scheduler, which
    // tells the order of each end on its own queue; the order joins them.
    put_task(&stack, "order-1", &parcel_order("order-1", PARCELS)).await;
    let task = wait_for_task(
        &stack,
        "order-1",
        "Processed",
        Duration::from_secs(120),
        |t| t["state"] == "Processed",
    )
    .await;
    assert_eq!(step_states(&task), ["Processed"; 3], "{task:#}");
    assert_eq!(task["steps"][1]["output"]["succeeded"], PARCELS, "{task:#}");
    let listed = children("order-1").await;
    assert_eq!(ids(&listed), expected("order-1", PARCELS));
    for child in &listed {
        assert_eq!(step_states(child), ["Processed"; 2], "{child:#}");
        let id = child["id"].as_str().expect("an id");
        assert_eq!(remote.effects(id).len(), 2, "{id} run once");
    }

    // A child workflow step (tests/workflows/ship-one.json, packaged with the
    // deployment): one child, named in its step's result.
    let one = json!({
        "workflow": "ship-one",
        "input": {"order_id": "o-1", "parcel_id": "p-1", "dropoff": "Bondi", "weight_kg": 1.0},
    });
    put_task(&stack, "one-1", &one).await;
    let task = wait_for_task(&stack, "one-1", "Processed", Duration::from_secs(60), |t| {
        t["state"] == "Processed"
    })
    .await;
    assert_eq!(
        task["steps"][0]["output"]["task_id"], "one-1~ship~0",
        "{task:#}"
    );
    let child = stack
        .call("GET", "/tasks/one-1~ship~0", None, false)
        .await
        .json();
    assert_eq!(step_states(&child), ["Processed"; 2], "{child:#}");
    assert_eq!(child["parent"]["task_id"], "one-1", "{child:#}");

    // The confirmation refused for good: every parcel's child undone by its own
    // compensations, each effect applied once and undone once.
    remote.mocks.set_faults(
        "delivery",
        serde_json::from_value(json!({"permanent_error_rate": 1.0})).expect("faults"),
    );
    put_task(&stack, "order-2", &parcel_order("order-2", REFUSED_PARCELS)).await;
    let task = wait_for_task(
        &stack,
        "order-2",
        "in Error",
        Duration::from_secs(120),
        |t| t["state"] == "Error",
    )
    .await;
    assert_eq!(
        step_states(&task),
        ["Processed", "Compensated", "Error"],
        "{task:#}"
    );
    let listed = children("order-2").await;
    assert_eq!(ids(&listed), expected("order-2", REFUSED_PARCELS));
    for child in &listed {
        assert_eq!(step_states(child), ["Compensated"; 2], "{child:#}");
        assert_eq!(child["cancelled"]["by"], "parent", "{child:#}");
        let id = child["id"].as_str().expect("an id");
        assert_eq!(
            remote.effects(id),
            [
                ("drone".into(), "/drones/cancel".into(), 1),
                ("drone".into(), "/drones/schedule".into(), 1),
                ("package".into(), "/packages".into(), 1),
                ("package".into(), "/packages/cancel".into(), 1),
            ],
            "{id}"
        );
    }
}

/// The drone operations a task's keys were applied with, sorted.
fn drone_operations(remote: &Remote, id: &str) -> Vec<String> {
    remote
        .effects(id)
        .into_iter()
        .filter(|(service, _, _)| service == "drone")
        .map(|(_, operation, _)| operation)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_of_the_deployment_calls_paths_from_results_with_a_key_from_secrets_manager_rotated()
 {
    let remote = Remote::start(true).await;
    let mut services = json!(sas_tests::aws::service_urls(&remote.url));
    services["drone"] = json!({
        "url": format!("{}/drone", remote.url),
        "credential": { "secret": "secretsmanager:sas-drone-key", "header": "X-Api-Key" },
    });
    let services = services.to_string();
    let stack = Deployment::with_services_and(
        &remote,
        &[
            ("AuthMode", "NONE"),
            ("ServiceUrls", &services),
            // The agent may read this secret, and no other.
            (
                "ServiceSecretArns",
                "arn:aws:secretsmanager:us-east-1:*:secret:sas-drone-key-??????",
            ),
        ],
    )
    .await;
    let secrets = aws_sdk_secretsmanager::Client::new(&stack.sdk);
    secrets
        .create_secret()
        .name("sas-drone-key")
        .secret_string("drone-key-1")
        .send()
        .await
        .expect("the secret created");
    let faults = |service: &str, faults: Value| {
        remote
            .mocks
            .set_faults(service, serde_json::from_value(faults).expect("faults"));
    };
    faults("drone", json!({ "api_key": "drone-key-1" }));
    // A workflow packaged with the deployment (tests/workflows/drone-delivery-paths.json):
    // the drone scheduled with a PUT at a path of the package's id.
    let paths = json!({ "workflow": "drone-delivery-paths", "input": readme_delivery()["input"] });
    put_task(&stack, "keyed-1", &paths).await;
    let task = wait_for_task(
        &stack,
        "keyed-1",
        "Processed",
        Duration::from_secs(60),
        |t| t["state"] == "Processed",
    )
    .await;
    let package = task["steps"][1]["output"]["id"]
        .as_str()
        .expect("a package id");
    assert_eq!(
        drone_operations(&remote, "keyed-1"),
        [format!("PUT /drones/for/{package}")]
    );

    // Rotated: the service takes only the new key; an agent holding the old one is
    // refused, reads the secret again, and calls again with the new one. The delivery
    // then fails for good: the drone is cancelled at the path of its own id.
    secrets
        .put_secret_value()
        .secret_id("sas-drone-key")
        .secret_string("drone-key-2")
        .send()
        .await
        .expect("the secret rotated");
    faults("drone", json!({ "api_key": "drone-key-2" }));
    faults("delivery", json!({ "permanent_error_rate": 1.0 }));
    put_task(&stack, "keyed-2", &paths).await;
    let task = wait_for_task(
        &stack,
        "keyed-2",
        "in Error",
        Duration::from_secs(60),
        |t| t["state"] == "Error",
    )
    .await;
    assert_eq!(
        step_states(&task),
        UNDONE_AFTER_THE_DELIVERY_FAILED,
        "{task:#}"
    );
    let package = task["steps"][1]["output"]["id"]
        .as_str()
        .expect("a package id");
    let drone = task["steps"][3]["output"]["id"]
        .as_str()
        .expect("a drone id");
    let mut expected = [
        format!("PUT /drones/for/{package}"),
        format!("DELETE /drones/{drone}"),
    ];
    expected.sort();
    assert_eq!(drone_operations(&remote, "keyed-2"), expected);
    // What the drone service saw, whichever execution environment served each call (a
    // warm one holds the old key until it is refused; a fresh one reads the new key
    // first): the first task's calls all with the first key; the second's each with the
    // new key, or with the old one refused as stale and then made again with the new.
    let seen: Value = reqwest::get(format!("{}/credentials", remote.url))
        .await
        .expect("the mock services' credentials")
        .json()
        .await
        .expect("their JSON");
    let drone = &seen["credentials"]["drone"];
    assert_eq!(drone["refused_unknown"], 0, "{drone:#}");
    let checks = |task: &str| -> Vec<(String, u64, String)> {
        drone["checks"]
            .as_array()
            .expect("the drone's checks")
            .iter()
            .filter(|c| {
                c["idempotency_key"]
                    .as_str()
                    .is_some_and(|k| k.starts_with(&format!("{task}/")))
            })
            .map(|c| {
                (
                    c["idempotency_key"].as_str().unwrap_or_default().to_owned(),
                    c["presented"].as_u64().unwrap_or(0),
                    c["verdict"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let before = checks("keyed-1");
    assert!(
        !before.is_empty()
            && before
                .iter()
                .all(|(_, key, v)| *key == 1 && v == "accepted"),
        "before the rotation, the first key taken: {drone:#}"
    );
    let after = checks("keyed-2");
    assert!(
        after.iter().any(|(_, key, v)| *key == 2 && v == "accepted"),
        "the rotated key used: {drone:#}"
    );
    for (i, (call, key, verdict)) in after.iter().enumerate() {
        match (key, verdict.as_str()) {
            (2, "accepted") => {}
            (1, "refused_stale") => assert!(
                after[i + 1..]
                    .iter()
                    .any(|(again, key, v)| again == call && *key == 2 && v == "accepted"),
                "{call}, refused with the old key, made again with the new: {drone:#}"
            ),
            _ => panic!("{call}: the key of {key} {verdict} after the rotation: {drone:#}"),
        }
    }
    let logs = stack.logs("AgentFunction").await;
    assert!(
        logs.iter().all(|line| !line.contains("drone-key-")),
        "no log line holds a key:\n{}",
        logs.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_iam_each_signer_owns_its_tasks_and_the_operator_reads_them_by_owner() {
    let remote = Remote::start(true).await;
    // The template's default AuthMode: IAM.
    let stack = Deployment::with_services_and(&remote, &[("AuthMode", "IAM")]).await;
    // The callers' policy as the README gives it: their routes, not the operator's (an
    // IAM wildcard spans '/': "*/tasks*" would match /operator/tasks too).
    let client = json!({ "Version": "2012-10-17", "Statement": [{
        "Effect": "Allow",
        "Action": "execute-api:Invoke",
        "Resource": [
            "arn:aws:execute-api:*:*:*/*/POST/tasks",
            "arn:aws:execute-api:*:*:*/*/POST/tasks/*",
            "arn:aws:execute-api:*:*:*/*/PUT/tasks/*",
            "arn:aws:execute-api:*:*:*/*/GET/tasks*",
            "arn:aws:execute-api:*:*:*/*/GET/me",
            "arn:aws:execute-api:*:*:*/*/GET/workflows",
        ],
    }]});
    let alice = stack.iam_user("alice", &client).await;
    let bob = stack.iam_user("bob", &client).await;
    let delivery = readme_delivery();

    let unsigned = stack
        .call("PUT", "/tasks/order-1", Some(&delivery), false)
        .await;
    assert_eq!(unsigned.status, 403, "unsigned: {}", unsigned.body);
    for key in [&alice, &bob] {
        let answer = stack
            .call_signed_as(key, "PUT", "/tasks/order-1", Some(&delivery))
            .await;
        assert_eq!(answer.status, 202, "{}", answer.body);
    }
    let me = stack
        .call_signed_as(&alice, "GET", "/me", None)
        .await
        .json();
    let alice_arn = me["owner"].as_str().expect("an owner").to_owned();
    assert!(alice_arn.ends_with(":user/alice"), "{me}");
    let answer = stack
        .call_signed_as(&bob, "PUT", "/tasks/bobs-only", Some(&delivery))
        .await;
    assert_eq!(answer.status, 202, "{}", answer.body);
    let answer = stack
        .call_signed_as(&alice, "GET", "/tasks/bobs-only", None)
        .await;
    assert_eq!(
        status_and_code(&answer),
        (404, Some("not_found".into())),
        "{}",
        answer.body
    );

    let answer = stack
        .call_signed_as(&alice, "GET", "/operator/tasks?state=Error", None)
        .await;
    assert_eq!(
        answer.status, 403,
        "a client on the operator routes: {}",
        answer.body
    );

    // The root, whom IAM lets call the operator routes, reads both order-1 tasks by
    // their owners' full ids.
    for (key, user) in [(&alice, "alice"), (&bob, "bob")] {
        let owner = stack.call_signed_as(key, "GET", "/me", None).await.json()["owner"]
            .as_str()
            .expect("an owner")
            .to_owned();
        let id = TaskId::scoped(
            &Owner::new(owner.clone()).expect("an owner"),
            &TaskId::parse("order-1").expect("an id"),
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let task = loop {
            let answer = stack
                .call("GET", &format!("/operator/tasks/{id}"), None, true)
                .await;
            assert_eq!(answer.status, 200, "{user}: {}", answer.body);
            let task = answer.json();
            if task["state"] == "Processed" || tokio::time::Instant::now() >= deadline {
                break task;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        assert_eq!(
            (task["owner"].as_str(), task["state"].as_str()),
            (Some(owner.as_str()), Some("Processed")),
            "{task}"
        );
    }

    // The command line signs as its user: alice reads her own task, and is refused
    // the operator's routes; the root lists the dead letters.
    let sas = |key: &AccessKey, arguments: &[&str]| {
        let output = std::process::Command::new(sas_tests::function_binary("sas"))
            .args(["--sigv4", REGION])
            .args(arguments)
            .env("SAS_API", &stack.api)
            .env("AWS_ACCESS_KEY_ID", &key.id)
            .env("AWS_SECRET_ACCESS_KEY", &key.secret)
            .env_remove("AWS_SESSION_TOKEN")
            .output()
            .expect("sas runs");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (success, shown, err) = sas(&alice, &["--mine", "tasks", "show", "order-1"]);
    assert!(success, "{err}");
    assert!(
        shown.starts_with("order-1  Processed  drone-delivery v2"),
        "{shown}"
    );
    let (success, _, err) = sas(&alice, &["tasks", "list", "--state", "Error"]);
    assert!(!success && err.contains("403"), "{err}");
    let (success, queues, err) = sas(&AccessKey::root(), &["dlq", "list"]);
    assert!(
        success && queues.contains("agent-requests"),
        "{err}{queues}"
    );
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

/// `infra/localstack/deploy.sh`, the script a LocalStack user runs, run as it is against
/// MiniStack with IAM enforced: it deploys the stack with the template's default
/// AuthMode, IAM, its mock services being those of the `sas-local` it starts, and ends
/// with `infra/localstack/smoke.sh`, whose requests it signs as the deployer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_localstack_script_deploys_the_stack_with_iam_and_its_signed_smoke_test_passes() {
    let ministack = MiniStack::start();
    let build = tempfile::tempdir().expect("a directory");
    let lambda = build.path().join("lambda");
    lay_out_as_cargo_lambda(&lambda);
    // The template less what MiniStack cannot deploy (LocalStack takes it as it is).
    let source = std::fs::read_to_string(repository().join("infra/template.yaml"))
        .expect("infra/template.yaml");
    let template = build.path().join("template.yaml");
    std::fs::write(&template, emulator_template(&source, &[])).expect("the template");
    let started = std::time::Instant::now();
    let script = tokio::task::block_in_place(|| {
        std::process::Command::new(repository().join("infra/localstack/deploy.sh"))
            .env("AWS_ENDPOINT_URL", &ministack.endpoint)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            .env_remove("TOKEN")
            .env("SAM", sam_cli())
            .env("LAMBDA_DIR", &lambda)
            .env("SAS_LOCAL", sas_tests::function_binary("sas-local"))
            .env("MOCK_HOST", "127.0.0.1")
            .env("MOCK_PORT", free_port().to_string())
            .env(
                "API_URL",
                format!("{}/_aws/execute-api/%s", ministack.endpoint),
            )
            .env("TEMPLATE", &template)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("deploy.sh runs")
    });
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&script.stdout),
        String::from_utf8_lossy(&script.stderr)
    );
    assert!(
        script.status.success(),
        "deploy.sh exited with {} after {:?}:\n{output}\nMiniStack's log:\n{}",
        script.status,
        started.elapsed(),
        ministack.log_tail()
    );
    assert!(
        output.contains("Processed"),
        "the smoke test's delivery Processed:\n{output}"
    );

    // What made it pass is its signature: the same request unsigned is refused.
    let client = Client::new(&ministack.endpoint);
    let apis = client
        .rest("GET", "apigateway", "/v2/apis", &Value::Null)
        .await;
    let api = apis["items"][0]["apiId"].as_str().expect("the API's id");
    let unsigned = client
        .send(
            "PUT",
            &format!(
                "{}/_aws/execute-api/{api}/tasks/unsigned",
                ministack.endpoint
            ),
            None,
            &[("content-type", "application/json")],
            readme_delivery().to_string().as_bytes(),
        )
        .await;
    assert_eq!(unsigned.status, 403, "{}", unsigned.body);
}

/// The CDK app (`infra/cdk`) deployed as its users deploy it, `cdk bootstrap` and `cdk
/// deploy` (its assets, the functions' zipped code and the template, uploaded to the
/// bootstrap's bucket), with the app's defaults but for the services' URLs: the
/// construct's stack runs the README's delivery to Processed, and a delivery refused for
/// good is compensated and its alert reaches the operators through the encrypted topic.
/// IAM is the construct's default: an unsigned request is refused, the root's signed
/// ones taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cdk_app_deployed_runs_the_readme_delivery_and_compensates_a_refused_one_with_an_alert()
{
    let remote = Remote::start(true).await;
    let services = json!(sas_tests::aws::service_urls(&remote.url)).to_string();
    let stack = Deployment::deploy_cdk(&[("serviceUrls", &services)]).await;
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let sns = aws_sdk_sns::Client::new(&stack.sdk);
    let inbox = operators_inbox(&stack, &sqs, &sns).await;
    let signed_task = |id: &'static str, state: &'static str| {
        let stack = &stack;
        async move {
            stack
                .wait(
                    &format!("task {id} {state}"),
                    Duration::from_secs(90),
                    Duration::from_millis(250),
                    || async {
                        let answer = stack.call("GET", &format!("/tasks/{id}"), None, true).await;
                        let task = answer.json();
                        if answer.status == 200 && task["state"] == state {
                            Ok(task)
                        } else {
                            Err(format!("{} {}", answer.status, answer.body))
                        }
                    },
                )
                .await
        }
    };

    let unsigned = stack
        .call("PUT", "/tasks/delivery-1", Some(&readme_delivery()), false)
        .await;
    assert_eq!(unsigned.status, 403, "{}", unsigned.body);
    let put = stack
        .call("PUT", "/tasks/delivery-1", Some(&readme_delivery()), true)
        .await;
    assert_eq!(put.status, 202, "{}", put.body);
    let task = signed_task("delivery-1", "Processed").await;
    assert_eq!(step_states(&task), ["Processed"; 5], "{task:#}");
    // The services see a task by its full id, its owner's (the root's ARN) and its own.
    let me = stack.call("GET", "/me", None, true).await.json();
    let owner = Owner::new(me["owner"].as_str().expect("an owner").to_owned()).expect("an owner");
    let full = |id: &str| TaskId::scoped(&owner, &TaskId::parse(id).expect("an id")).to_string();
    assert_eq!(
        remote.effects(&full("delivery-1")).len(),
        5,
        "one effect per step"
    );

    remote.mocks.set_faults(
        "delivery",
        serde_json::from_value(json!({"permanent_error_rate": 1.0})).expect("faults"),
    );
    let put = stack
        .call("PUT", "/tasks/refused", Some(&readme_delivery()), true)
        .await;
    assert_eq!(put.status, 202, "{}", put.body);
    let task = signed_task("refused", "Error").await;
    assert_eq!(
        step_states(&task),
        UNDONE_AFTER_THE_DELIVERY_FAILED,
        "{task:#}"
    );
    let alert = stack
        .wait(
            "the alert in the operators' inbox",
            Duration::from_secs(60),
            Duration::from_millis(500),
            || async {
                let received: Vec<Value> = drain(&sqs, &inbox)
                    .await
                    .iter()
                    .map(|m| sns_message(m))
                    .collect();
                received
                    .into_iter()
                    .find(|m| m["task_id"] == full("refused"))
                    .ok_or_else(|| "not yet".to_owned())
            },
        )
        .await;
    assert_eq!(alert["task_id"], full("refused"), "{alert:#}");
    // Each function logs to the group the construct gives it, which the harness reads.
    let logs = stack.logs("SchedulerFunction").await;
    assert!(
        logs.iter().any(|line| line.contains(&full("refused"))),
        "the scheduler's log group: {logs:?}"
    );
}
