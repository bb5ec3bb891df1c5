//! Callers of the local system with tokens required: who may call, whose tasks
//! each sees, and where each is notified.

use std::collections::BTreeSet;

use sas_local::auth::Authentication;
use sas_tests::Harness;
use sas_tests::tokens::{self, AUDIENCE, Issuer};
use serde_json::{Value, json};

fn delivery(notify: Option<&str>) -> Vec<u8> {
    json!({ "workflow": "drone-delivery-quick", "input": sas_tests::delivery_input(), "notify": notify })
        .to_string()
        .into_bytes()
}

/// The local system checking tokens of `issuer`, with its JWKS in a file.
async fn harness(issuer: &Issuer) -> (Harness, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a directory");
    let jwks = dir.path().join("jwks.json");
    issuer.write_jwks(&jwks);
    let vars = [
        ("SAS_AUTH_JWKS", jwks.display().to_string()),
        ("SAS_AUTH_ISSUER", issuer.url.clone()),
        ("SAS_AUTH_AUDIENCE", AUDIENCE.to_owned()),
    ];
    let authentication = Authentication::from_vars(|name| {
        vars.iter()
            .find(|(key, _)| *key == name)
            .map(|(_, v)| v.clone())
    })
    .expect("the configuration is valid");
    (Harness::start_with(5, authentication).await, dir)
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

/// Reads a task until it is final.
async fn settled(harness: &Harness, token: &str, id: &str) -> Value {
    let path = format!("/tasks/{id}?wait=20s");
    let (status, _, task) = harness.call_as(Some(token), "GET", &path, None).await;
    assert_eq!(status, 200, "{task}");
    task
}

#[tokio::test]
async fn without_a_valid_token_nothing_is_served() {
    let issuer = Issuer::start().await;
    let (harness, _dir) = harness(&issuer).await;
    let refused = [
        ("no token", None),
        ("a forged token", Some(issuer.forged("alice", &[]))),
        ("an expired token", Some(issuer.token("alice", &[], -60))),
        ("not a token", Some("not-a-jwt".to_owned())),
    ];
    for (what, token) in &refused {
        for (method, path) in [
            ("GET", "/tasks/order-1"),
            ("PUT", "/tasks/order-1"),
            ("GET", "/workflows"),
            ("GET", "/operator/tasks?state=Error"),
            ("GET", "/local/alerts"),
        ] {
            let (status, _, body) = harness
                .call_as(token.as_deref(), method, path, Some(&delivery(None)))
                .await;
            assert_eq!(
                (status, code(&body)),
                (401, "unauthenticated"),
                "{what} on {method} {path}: {body}"
            );
        }
    }
    let (status, _, _) = harness
        .call_as(Some(&issuer.client("alice")), "GET", "/workflows", None)
        .await;
    assert_eq!(status, 200, "a valid token is served");
}

#[tokio::test]
async fn each_caller_sees_only_its_own_tasks_by_its_own_ids_and_the_operator_sees_all() {
    let issuer = Issuer::start().await;
    let (harness, _dir) = harness(&issuer).await;
    let (alice, bob, operator) = (
        issuer.client("alice"),
        issuer.client("bob"),
        issuer.operator("ops"),
    );
    let me = |token: String| {
        let harness = &harness;
        async move { harness.call_as(Some(&token), "GET", "/me", None).await.2 }
    };
    let alice_me = me(alice.clone()).await;
    let bob_me = me(bob.clone()).await;
    assert_eq!(alice_me["owner"], "alice");
    assert_eq!(alice_me["operator"], false);
    let alice_queue = format!(
        "sas-notify{}",
        alice_me["notify_queue_suffix"].as_str().expect("suffix")
    );
    let bob_queue = format!(
        "sas-notify{}",
        bob_me["notify_queue_suffix"].as_str().expect("suffix")
    );

    // Both use the id order-1; each is its own task.
    for (token, queue) in [(&alice, &alice_queue), (&bob, &bob_queue)] {
        let (status, location, task) = harness
            .call_as(
                Some(token),
                "PUT",
                "/tasks/order-1",
                Some(&delivery(Some(queue))),
            )
            .await;
        assert_eq!(
            (status, location.as_deref()),
            (202, Some("/tasks/order-1")),
            "{task}"
        );
        assert_eq!(task["id"], "order-1");
        assert!(
            task.get("owner").is_none(),
            "a caller is not shown an owner: {task}"
        );
    }
    for token in [&alice, &bob] {
        let task = settled(&harness, token, "order-1").await;
        assert_eq!(
            (task["id"].as_str(), task["state"].as_str()),
            (Some("order-1"), Some("Processed"))
        );
    }

    // A task only bob has is not found for alice, whatever she does with it.
    harness
        .faults("delivery", json!({ "permanent_error_rate": 1.0 }))
        .await;
    let (status, _, _) = harness
        .call_as(Some(&bob), "PUT", "/tasks/bobs-only", Some(&delivery(None)))
        .await;
    assert_eq!(status, 202);
    assert_eq!(settled(&harness, &bob, "bobs-only").await["state"], "Error");
    let (status, _, _) = harness
        .call_as(
            Some(&alice),
            "PUT",
            "/tasks/alices-failed",
            Some(&delivery(None)),
        )
        .await;
    assert_eq!(status, 202);
    assert_eq!(
        settled(&harness, &alice, "alices-failed").await["state"],
        "Error"
    );
    for (method, path) in [
        ("GET", "/tasks/bobs-only"),
        ("POST", "/tasks/bobs-only/resubmit"),
    ] {
        let (status, _, body) = harness.call_as(Some(&alice), method, path, None).await;
        assert_eq!(
            (status, code(&body)),
            (404, "not_found"),
            "{method} {path}: {body}"
        );
    }
    let ids = |body: &Value| -> BTreeSet<String> {
        body["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .map(|t| t["id"].as_str().expect("id").to_owned())
            .collect()
    };
    let (_, _, listed) = harness
        .call_as(Some(&alice), "GET", "/tasks?state=Error", None)
        .await;
    assert_eq!(
        ids(&listed),
        BTreeSet::from(["alices-failed".to_owned()]),
        "alice lists hers, none of bob's: {listed}"
    );
    let (_, _, listed) = harness
        .call_as(Some(&bob), "GET", "/tasks?state=Error", None)
        .await;
    assert_eq!(ids(&listed), BTreeSet::from(["bobs-only".to_owned()]));

    // Notifications go to the caller's own queues only, by its own ids.
    let (status, _, body) = harness
        .call_as(
            Some(&alice),
            "PUT",
            "/tasks/order-2",
            Some(&delivery(Some(&bob_queue))),
        )
        .await;
    assert_eq!(
        (status, code(&body), body["error"]["field"].as_str()),
        (400, "invalid_field", Some("notify")),
        "{body}"
    );
    let (status, _, body) = harness
        .call_as(
            Some(&alice),
            "GET",
            &format!("/local/queues/{bob_queue}"),
            None,
        )
        .await;
    assert_eq!((status, code(&body)), (404, "not_found"), "{body}");
    let (status, _, body) = harness
        .call_as(Some(&alice), "GET", "/local/queues/not%20a%20queue", None)
        .await;
    assert_eq!(
        (status, code(&body), body["error"]["field"].as_str()),
        (400, "invalid_field", Some("name")),
        "{body}"
    );
    let (_, _, mine) = harness
        .call_as(
            Some(&alice),
            "GET",
            &format!("/local/queues/{alice_queue}"),
            None,
        )
        .await;
    let updates = mine["messages"].as_array().expect("messages");
    assert!(!updates.is_empty());
    assert!(
        updates.iter().all(|u| u["task_id"] == "order-1"),
        "alice's queue has her task only, by her id: {updates:?}"
    );

    // The operator routes: not for clients; the operator sees everyone's, with owners.
    for token in [&alice, &bob] {
        let (status, _, body) = harness
            .call_as(Some(token), "GET", "/operator/tasks?state=Error", None)
            .await;
        assert_eq!((status, code(&body)), (403, "forbidden"), "{body}");
    }
    let (status, _, body) = harness
        .call_as(Some(&alice), "GET", "/local/alerts", None)
        .await;
    assert_eq!((status, code(&body)), (404, "not_found"), "{body}");
    let (status, _, all) = harness
        .call_as(Some(&operator), "GET", "/operator/tasks?state=Error", None)
        .await;
    assert_eq!(status, 200, "{all}");
    let listed = all["tasks"].as_array().expect("tasks");
    let owned: BTreeSet<(String, String)> = listed
        .iter()
        .map(|t| {
            let id = t["id"].as_str().expect("id");
            let local = id.split_once('.').map_or(id, |(_, local)| local);
            (
                t["owner"].as_str().expect("an owner").to_owned(),
                local.to_owned(),
            )
        })
        .collect();
    assert_eq!(
        owned,
        BTreeSet::from([
            ("alice".to_owned(), "alices-failed".to_owned()),
            ("bob".to_owned(), "bobs-only".to_owned()),
        ]),
        "the operator lists both callers' tasks, with their owners: {all}"
    );
    let full_id = listed
        .iter()
        .find(|t| t["owner"] == "bob")
        .and_then(|t| t["id"].as_str())
        .expect("bob's task");
    assert!(full_id.ends_with(".bobs-only"), "{full_id}");

    // The operator resubmits bob's task by its full id; bob sees it run again.
    harness.clear_faults("delivery").await;
    let (status, location, body) = harness
        .call_as(
            Some(&operator),
            "POST",
            &format!("/operator/tasks/{full_id}/resubmit"),
            None,
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(location, Some(format!("/operator/tasks/{full_id}")));
    assert_eq!(
        settled(&harness, &bob, "bobs-only").await["state"],
        "Processed"
    );
    let (status, _, task) = harness
        .call_as(
            Some(&operator),
            "GET",
            &format!("/operator/tasks/{full_id}"),
            None,
        )
        .await;
    assert_eq!((status, task["run"].as_u64()), (200, Some(2)), "{task}");

    // A client cannot name a full id on its own routes.
    let (status, _, body) = harness
        .call_as(Some(&alice), "GET", &format!("/tasks/{full_id}"), None)
        .await;
    assert_eq!((status, code(&body)), (400, "invalid_id"), "{body}");

    // An operator's bulk action is named for operators: its owner sees the request,
    // not the name.
    let bulk = json!({ "batch": "incident-7", "state": "Error" }).to_string();
    let (status, _, report) = harness
        .call_as(
            Some(&operator),
            "POST",
            "/operator/bulk/resubmit",
            Some(bulk.as_bytes()),
        )
        .await;
    assert_eq!((status, &report["taken"]), (200, &json!(1)), "{report}");
    let alices = listed
        .iter()
        .find(|t| t["owner"] == "alice")
        .and_then(|t| t["id"].as_str())
        .expect("alice's task");
    let (_, _, seen) = harness
        .call_as(
            Some(&operator),
            "GET",
            &format!("/operator/tasks/{alices}"),
            None,
        )
        .await;
    assert_eq!(seen["resubmissions"][0]["batch"], "incident-7", "{seen}");
    let (_, _, hers) = harness
        .call_as(Some(&alice), "GET", "/tasks/alices-failed", None)
        .await;
    assert_eq!(hers["resubmissions"][0]["by"], "operator", "{hers}");
    assert!(hers["resubmissions"][0].get("batch").is_none(), "{hers}");
}

/// A submission that waits for its end is answered with its caller's own task: two
/// callers' waits on the same id each end with their own input, and neither is shown
/// an owner.
#[tokio::test]
async fn a_submission_that_waits_shows_its_caller_its_own_task_only() {
    let issuer = Issuer::start().await;
    let (harness, _dir) = harness(&issuer).await;
    for caller in ["alice", "bob"] {
        let mut input = sas_tests::delivery_input();
        input["customer_id"] = json!(caller);
        let body = json!({ "workflow": "drone-delivery-quick", "input": input }).to_string();
        let (status, _, task) = harness
            .call_as(
                Some(&issuer.client(caller)),
                "PUT",
                "/tasks/waited?wait=10s",
                Some(body.as_bytes()),
            )
            .await;
        assert_eq!(
            (status, task["id"].as_str(), task["state"].as_str()),
            (200, Some("waited"), Some("Processed")),
            "{task}"
        );
        assert_eq!(task["input"]["customer_id"], caller, "{task}");
        assert!(task.get("owner").is_none(), "{task}");
    }
}

#[tokio::test]
async fn a_development_key_signs_local_tokens_and_is_refused_when_short() {
    let key = "a-development-key-of-forty-bytes-or-so!!";
    let authentication =
        Authentication::from_vars(|name| (name == "SAS_AUTH_DEV_KEY").then(|| key.to_owned()))
            .expect("a long enough key");
    let harness = Harness::start_with(5, authentication).await;
    let (status, _, me) = harness
        .call_as(Some(&tokens::dev_token(key, "dev")), "GET", "/me", None)
        .await;
    assert_eq!((status, me["owner"].as_str()), (200, Some("dev")), "{me}");
    let other = "another-development-key-of-forty-bytes!!";
    let (status, _, body) = harness
        .call_as(Some(&tokens::dev_token(other, "dev")), "GET", "/me", None)
        .await;
    assert_eq!((status, code(&body)), (401, "unauthenticated"));

    let short = Authentication::from_vars(|name| {
        (name == "SAS_AUTH_DEV_KEY").then(|| "too-short".to_owned())
    });
    assert!(
        short
            .expect_err("a short key is refused")
            .to_string()
            .contains("at least 32 bytes")
    );
    let both = Authentication::from_vars(|name| {
        matches!(name, "SAS_AUTH_DEV_KEY" | "SAS_AUTH_JWKS").then(|| "x".repeat(40))
    });
    assert!(both.expect_err("refused").to_string().contains("not both"));
    let open = Authentication::from_vars(|_| None).expect("open");
    assert!(open.describe().contains("open to anyone"));
}
