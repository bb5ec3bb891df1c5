//! A task read until it has ended, for the tests that start tasks over HTTP (included
//! by those alone, by its path).

use serde_json::Value;

/// The task `id` once it is Processed or in Error, read with the API's long poll
/// (`?wait=5s`), for ten minutes at the most.
pub async fn ended(http: &reqwest::Client, api: &str, id: &str) -> Value {
    for _ in 0..120 {
        let task: Value = http
            .get(format!("{api}/tasks/{id}?wait=5s"))
            .send()
            .await
            .expect("read")
            .json()
            .await
            .expect("json");
        if matches!(task["state"].as_str(), Some("Processed" | "Error")) {
            return task;
        }
    }
    panic!("task {id} did not end");
}
