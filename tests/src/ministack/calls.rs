//! What a test asks of the deployed stack: requests to its API (unsigned, signed, or
//! with a bearer token), IAM users, invocations, the functions' logs, and waits.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use super::FUNCTIONS;
use super::client::{AccessKey, Answer};
use super::deploy::Deployment;

impl Deployment {
    /// A request to the API; signed as the root when `signed`.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        signed: bool,
    ) -> Answer {
        self.send(method, path, body, signed.then(AccessKey::root), None, &[])
            .await
    }

    /// An unsigned request to the API with more `headers`.
    pub async fn call_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Answer {
        self.send(method, path, body, None, None, headers).await
    }

    /// A request to the API signed with `key`.
    pub async fn call_signed_as(
        &self,
        key: &AccessKey,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Answer {
        self.send(method, path, body, Some(key.clone()), None, &[])
            .await
    }

    /// An IAM user of the emulator's account named `name`, with `policy` and an access
    /// key: the key.
    ///
    /// # Panics
    /// When IAM refuses.
    pub async fn iam_user(&self, name: &str, policy: &Value) -> AccessKey {
        let iam = |body: String| {
            let client = &self.client;
            async move {
                let answer = client
                    .send(
                        "POST",
                        &format!("{}/", self.ministack.endpoint),
                        Some("iam"),
                        &[("content-type", "application/x-www-form-urlencoded")],
                        body.as_bytes(),
                    )
                    .await;
                assert_eq!(answer.status, 200, "{body}: {}", answer.body);
                answer.body
            }
        };
        iam(format!(
            "Action=CreateUser&UserName={name}&Version=2010-05-08"
        ))
        .await;
        let document = percent_encoding::utf8_percent_encode(
            &policy.to_string(),
            percent_encoding::NON_ALPHANUMERIC,
        )
        .to_string();
        iam(format!(
            "Action=PutUserPolicy&UserName={name}&PolicyName=api&PolicyDocument={document}&Version=2010-05-08"
        ))
        .await;
        let created = iam(format!(
            "Action=CreateAccessKey&UserName={name}&Version=2010-05-08"
        ))
        .await;
        let element = |tag: &str| {
            let start = created.find(&format!("<{tag}>")).expect(tag) + tag.len() + 2;
            let end = created[start..].find('<').expect("its end") + start;
            created[start..end].to_owned()
        };
        AccessKey {
            id: element("AccessKeyId"),
            secret: element("SecretAccessKey"),
        }
    }

    /// Puts `body` in the emulator's S3 as `bucket`'s object `key`, the bucket made if
    /// it is not there, as the account's root.
    ///
    /// # Panics
    /// When S3 refuses.
    pub async fn put_object(&self, bucket: &str, key: &str, body: &[u8]) {
        let endpoint = &self.ministack.endpoint;
        for (url, body) in [
            (format!("{endpoint}/{bucket}"), &[][..]),
            (format!("{endpoint}/{bucket}/{key}"), body),
        ] {
            let answer = (self.client)
                .send(
                    "PUT",
                    &url,
                    Some("s3"),
                    &[("x-amz-content-sha256", "UNSIGNED-PAYLOAD")],
                    body,
                )
                .await;
            assert!(
                answer.status == 200 || answer.body.contains("BucketAlreadyOwnedByYou"),
                "PUT {url}: {} {}",
                answer.status,
                answer.body
            );
        }
    }

    /// Reads `path` (`/BUCKET/KEY`, `/BUCKET?list-type=2`) of the emulator's S3 as the
    /// account's root: the answer's text.
    ///
    /// # Panics
    /// When S3 answers other than 200.
    pub async fn s3_get(&self, path: &str) -> String {
        let url = format!("{}{path}", self.ministack.endpoint);
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let headers = [("x-amz-content-sha256", empty)];
        let answer = (self.client)
            .send("GET", &url, Some("s3"), &headers, &[])
            .await;
        assert_eq!(answer.status, 200, "GET {url}: {}", answer.body);
        answer.body
    }

    /// A request to the API with `token` as its bearer token.
    pub async fn call_as(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Answer {
        self.send(method, path, body, None, token, &[]).await
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        signer: Option<AccessKey>,
        token: Option<&str>,
        more: &[(&str, &str)],
    ) -> Answer {
        let body = body.map(Value::to_string).unwrap_or_default();
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut headers = more.to_vec();
        if !body.is_empty() {
            headers.push(("content-type", "application/json"));
        }
        if let Some(bearer) = &bearer {
            headers.push(("authorization", bearer.as_str()));
        }
        self.client
            .send_as(
                method,
                &format!("{}{path}", self.api),
                signer.map(|key| ("execute-api", key)),
                &headers,
                body.as_bytes(),
            )
            .await
    }

    /// Invokes a function (by logical id) with `payload`, as the root; returns its answer.
    pub async fn invoke(&self, function: &str, payload: &Value) -> Value {
        self.client
            .rest(
                "POST",
                "lambda",
                &format!(
                    "/2015-03-31/functions/{}/invocations",
                    self.functions[function]
                ),
                payload,
            )
            .await
    }

    /// The lines a function (by logical id) has logged so far.
    pub async fn logs(&self, function: &str) -> Vec<String> {
        let group = &self.log_groups[function];
        let mut lines = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut request = json!({"logGroupName": group});
            if let Some(token) = &token {
                request["nextToken"] = json!(token);
            }
            let page = self
                .client
                .rpc("logs", "1.1", "Logs_20140328.FilterLogEvents", &request)
                .await;
            for event in page["events"].as_array().into_iter().flatten() {
                lines.push(event["message"].as_str().unwrap_or_default().to_owned());
            }
            match page["nextToken"].as_str() {
                Some(next) if token.as_deref() != Some(next) => token = Some(next.to_owned()),
                _ => return lines,
            }
        }
    }

    /// Waits until `check` gives a value, polling every `every`; panics after `patience`,
    /// saying what was awaited and showing the last thing seen.
    pub async fn wait<T, F, Fut>(
        &self,
        what: &str,
        patience: Duration,
        every: Duration,
        check: F,
    ) -> T
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            match check().await {
                Ok(value) => return value,
                Err(last) => {
                    if tokio::time::Instant::now() >= deadline {
                        panic!(
                            "{what}: not within {patience:?}; last seen: {last}\n{}\nMiniStack's log:\n{}",
                            self.all_logs().await,
                            self.ministack.log_tail()
                        );
                    }
                }
            }
            tokio::time::sleep(every).await;
        }
    }

    /// What the functions logged, for failure messages.
    pub async fn all_logs(&self) -> String {
        let mut text = String::new();
        for (function, _) in FUNCTIONS {
            let _ = writeln!(text, "--- {function}");
            for line in self.logs(function).await {
                let _ = writeln!(text, "{line}");
            }
        }
        text
    }
}
