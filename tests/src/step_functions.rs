//! Step Functions' protocol, as the AWS SDKs speak it to the harness's API.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Harness;

impl Harness {
    /// A Step Functions operation, as the AWS SDKs send it: its answer.
    ///
    /// # Panics
    /// When it does not succeed, or its answer is not JSON.
    pub async fn step_functions(&self, operation: &str, body: &Value) -> Value {
        let (status, answer) = self.step_functions_answer(operation, body).await;
        assert!(
            (200..300).contains(&status),
            "{operation}: {status} {answer}"
        );
        answer
    }

    /// A Step Functions operation, as the AWS SDKs send it: its status and its answer.
    ///
    /// # Panics
    /// When the API does not answer with JSON.
    pub async fn step_functions_answer(&self, operation: &str, body: &Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}/", self.api))
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", format!("AWSStepFunctions.{operation}"))
            .body(body.to_string())
            .send()
            .await
            .expect("the API answers");
        let status = response.status().as_u16();
        (status, response.json().await.expect("JSON"))
    }

    /// The execution `arn` described once it is no longer running.
    ///
    /// # Panics
    /// When it still runs after three minutes (a debug build moving 100 MB values
    /// under the whole suite's load takes more than one).
    pub async fn execution_ended(&self, arn: &Value) -> Value {
        let execution = json!({"executionArn": arn});
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let described = self.step_functions("DescribeExecution", &execution).await;
            if described["status"] != "RUNNING" {
                return described;
            }
            assert!(Instant::now() < deadline, "still running: {described}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
