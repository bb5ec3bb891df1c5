//! Who may call the deployed API: callers authenticated by the gateway with JWTs, and
//! IAM signers, each seeing only its own tasks while the operator reads them by owner.

use std::time::Duration;

use sas_domain::ids::{Owner, TaskId};
use sas_tests::aws::{Remote, repository};
use sas_tests::ministack::{AccessKey, Deployment, REGION};
use sas_tests::tokens::{AUDIENCE, Issuer};
use serde_json::{Value, json};

use super::{readme_delivery, status_and_code, wait_for_task_as};

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
            "arn:aws:execute-api:*:*:*/*/POST/",
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

    // Step Functions' own API, through boto3 signing for API Gateway: alice on the
    // root, the root on the operator's route.
    let key = |key: &AccessKey| format!("{}:{}", key.id, key.secret);
    let client = std::process::Command::new(repository().join(".venv/bin/python"))
        .arg(repository().join("tests/clients/stepfunctions_deployed.py"))
        .args(["--api", &stack.api, "--region", REGION])
        .args(["--caller-key", &key(&alice)])
        .args(["--operator-key", &key(&AccessKey::root())])
        .output()
        .expect("the boto3 client runs");
    let said = String::from_utf8_lossy(&client.stdout);
    assert!(
        client.status.success(),
        "the boto3 client failed:\n{said}\n{}",
        String::from_utf8_lossy(&client.stderr)
    );
    assert_eq!(said.lines().count(), 12, "{said}");
}
