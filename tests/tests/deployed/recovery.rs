//! The deployed stack recovers and alerts: a hung agent recovered by its deadline
//! message or the scheduled supervisor; a task past its threshold compensated, its alert
//! raised again when lost, and the alarm reaching the topic.

use std::time::Duration;

use sas_tests::aws::{Remote, fixture};
use sas_tests::{UNDONE_AFTER_THE_DELIVERY_FAILED, UNDONE_BEFORE_THE_DELIVERY, step_states};
use serde_json::{Value, json};

use super::{
    deploy, drain, listed, operators_inbox, put_task, readme_delivery, sns_message, verdicts,
    wait_for_task,
};

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
