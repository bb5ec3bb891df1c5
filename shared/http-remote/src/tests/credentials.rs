//! A service's credentials: a secret read once and again after a 401, within the
//! call's timeout, and SigV4 signatures.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use sas_core::ports::{
    CredentialError, Credentials, RemoteCall, RemoteError, RemoteRequest, Unsigned,
};
use sas_domain::messages::Method;
use sas_domain::services::{SecretRef, SigV4};

use crate::{HttpRemote, LocalCredentials};

use super::{answer, request};

/// A secret store holding one value, which a test may change, counting its reads.
#[derive(Default)]
struct Vault {
    value: Mutex<String>,
    reads: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl Credentials for Vault {
    async fn secret(&self, _: &SecretRef) -> Result<String, CredentialError> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(self.value.lock().expect("lock").clone())
    }

    /// "Signs" with the secret as the key, and says what it was given to sign.
    async fn sign(
        &self,
        signing: &SigV4,
        request: Unsigned<'_>,
    ) -> Result<Vec<(String, String)>, CredentialError> {
        let signed = format!(
            "{} {} {} {}",
            signing.service,
            signing.region,
            request.method,
            String::from_utf8_lossy(request.body)
        );
        let key = self.value.lock().expect("lock").clone();
        Ok(vec![
            ("x-api-key".into(), key),
            ("x-tenant".into(), "acme".into()),
            ("x-signed".into(), signed),
        ])
    }
}

/// A server that answers 200 `{}` to a request carrying `X-Api-Key: <key>` and
/// `X-Tenant: acme`, and 401 to others; the key it takes may change. It keeps the
/// requests' heads.
async fn guarded(key: &str) -> (String, Arc<Mutex<String>>, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let key = Arc::new(Mutex::new(key.to_owned()));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let (taken, seen) = (Arc::clone(&key), Arc::clone(&heads));
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut request = vec![0; 65_536];
            let n = socket.read(&mut request).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&request[..n]).to_lowercase();
            let wanted = format!("x-api-key: {}\r\n", taken.lock().expect("lock"));
            let ok = head.contains(&wanted) && head.contains("x-tenant: acme\r\n");
            seen.lock().expect("lock").push(head);
            let reply = if ok {
                answer("200 OK", "content-type: application/json\r\n", b"{}")
            } else {
                answer("401 Unauthorized", "", b"")
            };
            let _ = socket.write_all(&reply).await;
            let _ = socket.shutdown().await;
        }
    });
    (url, key, heads)
}

#[tokio::test]
async fn a_credential_is_read_once_sent_in_its_header_and_read_again_after_a_401() {
    let (url, key, heads) = guarded("key-1").await;
    let vault = Arc::new(Vault::default());
    *vault.value.lock().expect("lock") = "key-1".into();
    let services = sas_domain::services::parse(&format!(
        r#"{{"svc": {{"url": "{url}", "headers": {{"X-Tenant": "acme"}},
            "credential": {{"secret": "secretsmanager:svc-key", "header": "X-Api-Key"}}}}}}"#
    ))
    .expect("services");
    let remote = HttpRemote::new(services, None, Arc::clone(&vault) as Arc<dyn Credentials>);
    let request = request(Method::Post, &serde_json::json!({}));
    let reads = || vault.reads.load(std::sync::atomic::Ordering::SeqCst);
    for _ in 0..2 {
        assert_eq!(
            remote.call(&request).await.expect("taken"),
            serde_json::json!({})
        );
    }
    assert_eq!(reads(), 1, "read once, then kept");

    // Rotated: the service takes only the new key, the store has it.
    *key.lock().expect("lock") = "key-2".into();
    *vault.value.lock().expect("lock") = "key-2".into();
    assert_eq!(
        remote.call(&request).await.expect("taken"),
        serde_json::json!({})
    );
    assert_eq!(reads(), 2, "read again after the 401");
    let sent = heads.lock().expect("lock").clone();
    assert_eq!(sent.len(), 4, "the refused call and its repeat: {sent:?}");
    assert!(sent[3].contains("x-api-key: key-2") && sent[3].contains("idempotency-key: t/1/step"));

    // Refused with the store's current value: a 401, for good, and nothing more sent.
    *key.lock().expect("lock") = "key-3".into();
    let refused = remote.call(&request).await.expect_err("refused");
    assert!(
        matches!(&refused, RemoteError::Permanent(reason) if reason.contains("401") && !reason.contains("key-2")),
        "{refused:?}"
    );
    assert_eq!(heads.lock().expect("lock").len(), 5);
}

/// A secret store that answers its first read and never another.
struct StallingAfterFirst(std::sync::atomic::AtomicBool);

#[async_trait]
impl Credentials for StallingAfterFirst {
    async fn secret(&self, _: &SecretRef) -> Result<String, CredentialError> {
        if self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        Ok("key-1".into())
    }

    async fn sign(
        &self,
        _: &SigV4,
        _: Unsigned<'_>,
    ) -> Result<Vec<(String, String)>, CredentialError> {
        unreachable!("no service here is signed")
    }
}

/// Refused with a 401, the call reads its credential again, and that read hangs:
/// the call still ends within its timeout, the time the agent had left before
/// the step's complete-by, and sends nothing after it.
#[tokio::test]
async fn a_call_ends_within_its_timeout_whatever_it_waits_for_after_a_401() {
    let (url, _, heads) = guarded("another-key").await;
    let services = sas_domain::services::parse(&format!(
        r#"{{"svc": {{"url": "{url}", "headers": {{"X-Tenant": "acme"}},
            "credential": {{"secret": "secretsmanager:svc-key", "header": "X-Api-Key"}}}}}}"#
    ))
    .expect("services");
    let credentials = Arc::new(StallingAfterFirst(std::sync::atomic::AtomicBool::new(
        false,
    )));
    let remote = HttpRemote::new(services, None, credentials);
    let request = RemoteRequest {
        timeout: Duration::from_millis(300),
        ..request(Method::Post, &serde_json::json!({}))
    };
    // Far longer than the call's timeout: reached only if the call outlives it.
    let ended = tokio::time::timeout(Duration::from_secs(10), remote.call(&request))
        .await
        .expect("the call ended within its timeout");
    assert!(
        matches!(&ended, Err(RemoteError::Transient(reason)) if reason.contains("did not answer in time")),
        "{ended:?}"
    );
    assert_eq!(
        heads.lock().expect("lock").len(),
        1,
        "only the refused call was sent"
    );
}

#[tokio::test]
async fn a_credential_that_cannot_be_read_is_transient_and_names_no_value() {
    let services = sas_domain::services::parse(
        r#"{"svc": {"url": "http://127.0.0.1:9", "credential": {"secret": "env:SAS_TEST_UNSET_SECRET"}}}"#,
    )
    .expect("services");
    let remote = HttpRemote::new(services, None, Arc::new(LocalCredentials));
    let error = remote
        .call(&request(Method::Post, &serde_json::json!({})))
        .await
        .expect_err("no secret");
    assert!(
        matches!(&error, RemoteError::Transient(reason) if reason.contains("credential")),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_sigv4_service_is_called_with_the_headers_its_signature_gives_over_the_body_sent() {
    let (url, _, heads) = guarded("key-1").await;
    let vault = Arc::new(Vault::default());
    *vault.value.lock().expect("lock") = "key-1".into();
    let services = sas_domain::services::parse(&format!(
        r#"{{"svc": {{"url": "{url}", "sigv4": {{"service": "execute-api", "region": "eu-west-1"}}}}}}"#
    ))
    .expect("services");
    let remote = HttpRemote::new(services, None, Arc::clone(&vault) as Arc<dyn Credentials>);
    let answer = remote
        .call(&request(Method::Put, &serde_json::json!({"a": 1})))
        .await;
    assert_eq!(answer.expect("taken"), serde_json::json!({}));
    let sent = heads.lock().expect("lock").clone();
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0].contains(r#"x-signed: execute-api eu-west-1 put {"a":1}"#)
            && sent[0].ends_with(r#"{"a":1}"#),
        "the body signed is the body sent: {}",
        sent[0]
    );

    let local = HttpRemote::new(
        sas_domain::services::parse(&format!(
            r#"{{"svc": {{"url": "{url}", "sigv4": {{"service": "execute-api", "region": "r"}}}}}}"#
        ))
        .expect("services"),
        None,
        Arc::new(LocalCredentials),
    );
    let refused = local
        .call(&request(Method::Post, &serde_json::json!({})))
        .await
        .expect_err("no identity to sign with");
    assert!(
        matches!(&refused, RemoteError::Transient(reason) if reason.contains("could not be signed")),
        "{refused:?}"
    );
    assert_eq!(
        heads.lock().expect("lock").len(),
        1,
        "nothing sent unsigned"
    );
}
