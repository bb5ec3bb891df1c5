//! A submission that waits is answered with its end (or as without the wait), and a
//! parameter on a route that takes none is refused, naming it.

use sas_tests::{Harness, delivery_input, step_states};
use serde_json::json;

use super::quick;

/// A submission with `?wait=` is answered with its task once it has ended, as
/// `GET /tasks/{id}?wait=` shows it, in both ingestions; so is the same request again.
/// A task that has not ended within the wait is answered as without it, and so is a
/// different request under an ended task's id (a conflict, direct; buffered, queued to
/// be refused), never with that task. A wait the API cannot take, or another
/// parameter, is refused before anything is submitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_that_waits_is_answered_with_its_end() {
    for (harness, conflicting) in [
        (Harness::start(5).await, 409),
        (Harness::start_buffered(5).await, 202),
    ] {
        let body = quick(None).to_string();
        for _ in 0..2 {
            let (status, _, task) = harness
                .call("PUT", "/tasks/waited?wait=10s", Some(body.as_bytes()))
                .await;
            assert_eq!(
                (status, task["id"].as_str(), task["state"].as_str()),
                (200, Some("waited"), Some("Processed")),
                "{task:#}"
            );
            assert_eq!(step_states(&task), ["Processed"; 5]);
            assert!(task["history"].is_array(), "{task:#}");
        }
        let (status, _, task) = harness
            .call("POST", "/tasks?wait=10s", Some(body.as_bytes()))
            .await;
        assert_eq!((status, task["state"].as_str()), (200, Some("Processed")));

        let mut other = quick(None);
        other["input"]["customer_id"] = json!("someone-else");
        let (status, _, answer) = harness
            .call(
                "PUT",
                "/tasks/waited?wait=1s",
                Some(other.to_string().as_bytes()),
            )
            .await;
        assert_eq!(status, conflicting, "not the ended task: {answer:#}");

        // The harness's clock stands in January 2027.
        let starts_later = json!({ "workflow": "drone-delivery-quick",
                                   "input": delivery_input(), "start_at": "2030-01-01T00:00:00Z" });
        let (status, location, answer) = harness
            .call(
                "PUT",
                "/tasks/later?wait=1s",
                Some(starts_later.to_string().as_bytes()),
            )
            .await;
        assert_eq!(
            (status, location.as_deref()),
            (202, Some("/tasks/later")),
            "{answer:#}"
        );
        assert_ne!(answer["state"], "Processed", "{answer:#}");

        for (query, field) in [
            ("wait=21s", "wait"),
            ("wait=soon", "wait"),
            ("and=1", "and"),
        ] {
            let path = format!("/tasks/refused?{query}");
            let (status, _, refused) = harness.call("PUT", &path, Some(body.as_bytes())).await;
            assert_eq!(
                (status, refused["error"]["field"].as_str()),
                (400, Some(field)),
                "{query}: {refused:#}"
            );
        }
        // Taken after the refusals: once it has ended, a refused one queued (buffered)
        // would have been created.
        let (status, _, _) = harness
            .call(
                "PUT",
                "/tasks/after-refusals?wait=10s",
                Some(body.as_bytes()),
            )
            .await;
        assert_eq!(status, 200);
        let (status, _, _) = harness.call("GET", "/tasks/refused", None).await;
        assert_eq!(status, 404, "a refused submission submits nothing");
    }
}

/// A query parameter on a route that takes none is refused, naming it, and nothing is
/// done: a batch asked to wait is not submitted without waiting, a cancel with a
/// parameter it does not know cancels nothing. A wait's value is percent-decoded, as
/// the other parameters' are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parameter_on_a_route_that_takes_none_is_refused_naming_it() {
    let harness = Harness::start(5).await;
    let mut named = quick(None);
    named["id"] = json!("batched-waiting");
    let batch = json!({ "tasks": [named] }).to_string();
    let (status, _, refused) = harness
        .call("POST", "/tasks/batch?wait=10s", Some(batch.as_bytes()))
        .await;
    assert_eq!(
        (status, refused["error"]["field"].as_str()),
        (400, Some("wait")),
        "{refused:#}"
    );
    let (status, _, _) = harness.call("GET", "/tasks/batched-waiting", None).await;
    assert_eq!(status, 404, "the refused batch submitted nothing");

    // The harness's clock stands in January 2027: this task waits Pending.
    let later = json!({ "workflow": "drone-delivery-quick",
                        "input": delivery_input(), "start_at": "2030-01-01T00:00:00Z" });
    let (status, _, _) = harness
        .call("PUT", "/tasks/kept", Some(later.to_string().as_bytes()))
        .await;
    assert_eq!(status, 202);
    let (status, _, refused) = harness
        .call("POST", "/tasks/kept/cancel?now=1", Some(b"{}"))
        .await;
    assert_eq!(
        (status, refused["error"]["field"].as_str()),
        (400, Some("now")),
        "{refused:#}"
    );
    let (_, _, kept) = harness.call("GET", "/tasks/kept", None).await;
    assert_eq!(
        (kept["state"].as_str(), kept.get("cancelled")),
        (Some("Pending"), None),
        "nothing cancelled: {kept:#}"
    );

    let (status, _, task) = harness
        .call(
            "PUT",
            "/tasks/spaced?wait=9s%20500ms",
            Some(quick(None).to_string().as_bytes()),
        )
        .await;
    assert_eq!(
        (status, task["state"].as_str()),
        (200, Some("Processed")),
        "{task:#}"
    );
}
