//! A function that cannot start says why, to Lambda: its real binary, run as Lambda
//! runs it, against a stand-in for the Runtime API.

use std::process::Command;

use sas_tests::function_binary;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Runs `function` without `TABLE_NAME`; returns the request it made of the Runtime
/// API, its exit status and what it wrote.
async fn start_without_its_table(function: &str) -> (String, std::process::Output) {
    let binary = function_binary(function);
    let runtime_api = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let address = runtime_api.local_addr().expect("address");
    let server = tokio::spawn(async move {
        let (mut socket, _) = runtime_api.accept().await.expect("a request");
        let mut request = Vec::new();
        let mut buffer = [0; 4096];
        // Headers, then the body of the length they give.
        loop {
            let n = socket.read(&mut buffer).await.expect("read");
            request.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&request).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if body.len() >= length || n == 0 {
                    break;
                }
            }
        }
        socket
            .write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
            .await
            .expect("answered");
        String::from_utf8_lossy(&request).to_string()
    });
    let output = tokio::task::spawn_blocking(move || {
        Command::new(binary)
            .env_clear()
            .env("AWS_LAMBDA_RUNTIME_API", address.to_string())
            .env("AWS_REGION", "eu-west-1")
            .env(
                "SCHEDULER_QUEUE_URL",
                "https://sqs.eu-west-1.amazonaws.com/1/s",
            )
            .output()
            .expect("ran")
    })
    .await
    .expect("joined");
    let request = tokio::time::timeout(std::time::Duration::from_secs(10), server)
        .await
        .expect("the function reported within 10 s")
        .expect("the stand-in ran");
    (request, output)
}

#[tokio::test]
async fn a_function_missing_a_variable_reports_it_to_lambda_as_its_init_error() {
    for function in ["sas-scheduler", "sas-agent"] {
        let (request, output) = start_without_its_table(function).await;
        assert!(
            request.starts_with("POST /2018-06-01/runtime/init/error "),
            "{function}: {request}"
        );
        assert!(
            request
                .to_ascii_lowercase()
                .contains("lambda-runtime-function-error-type: runtime.configerror"),
            "{request}"
        );
        let body = request.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
        let body: serde_json::Value = serde_json::from_str(body).expect("a JSON body");
        assert_eq!(
            body,
            serde_json::json!({
                "errorType": "Runtime.ConfigError",
                "errorMessage": "environment variable TABLE_NAME is not set"
            })
        );
        assert!(!output.status.success(), "{function} ended in failure");
        let written = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            written.contains("environment variable TABLE_NAME is not set"),
            "the log says it: {written}"
        );
        assert!(!written.contains("Missing("), "no debug string: {written}");
    }
}
