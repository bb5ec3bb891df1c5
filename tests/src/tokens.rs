//! An identity provider for the tests: an RSA key made at start, its JWKS and
//! OpenID discovery document served on 127.0.0.1 (where API Gateway's JWT
//! authorizer, on the emulator, fetches them), and RS256 tokens signed with it,
//! valid, expired or forged.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::hmac;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::{KeyPair, KeySize};
use aws_lc_rs::signature::{KeyPair as _, RSA_PKCS1_SHA256};
use axum::Json;
use axum::routing::get;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

/// The audience the tests' tokens are for.
pub const AUDIENCE: &str = "sas-tests";

/// The scope that makes a caller an operator (the default of the functions and
/// of `sas-local`).
pub const OPERATOR_SCOPE: &str = "sas/operator";

/// The identity provider.
pub struct Issuer {
    key: KeyPair,
    /// The `iss` of its tokens, and where its documents are served.
    pub url: String,
    server: tokio::task::JoinHandle<()>,
}

const KEY_ID: &str = "sas-tests-1";

fn new_key() -> KeyPair {
    KeyPair::generate(KeySize::Rsa2048).expect("an RSA key")
}

fn jwks(key: &KeyPair) -> Value {
    let public = key.public_key();
    json!({ "keys": [{
        "kty": "RSA",
        "alg": "RS256",
        "use": "sig",
        "kid": KEY_ID,
        "n": URL_SAFE_NO_PAD.encode(public.modulus().big_endian_without_leading_zero()),
        "e": URL_SAFE_NO_PAD.encode(public.exponent().big_endian_without_leading_zero()),
    }]})
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

impl Issuer {
    /// Makes a key and serves its documents.
    ///
    /// # Panics
    /// When it cannot listen on 127.0.0.1.
    pub async fn start() -> Self {
        let key = new_key();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port for the identity provider");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let keys = jwks(&key);
        let discovery =
            json!({ "issuer": url, "jwks_uri": format!("{url}/.well-known/jwks.json") });
        let router = axum::Router::new()
            .route(
                "/.well-known/jwks.json",
                get(move || std::future::ready(Json(keys.clone()))),
            )
            .route(
                "/.well-known/openid-configuration",
                get(move || std::future::ready(Json(discovery.clone()))),
            );
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router.into_make_service()).await;
        });
        Self { key, url, server }
    }

    /// Writes the JWKS to `path`, for `sas-local`'s `SAS_AUTH_JWKS`.
    ///
    /// # Panics
    /// When it cannot be written.
    pub fn write_jwks(&self, path: &Path) {
        std::fs::write(path, jwks(&self.key).to_string()).expect("the JWKS written");
    }

    /// A token for `sub` with `scopes`, valid for `valid_for` (in the past when
    /// negative: an expired token).
    #[must_use]
    pub fn token(&self, sub: &str, scopes: &[&str], valid_for: i64) -> String {
        sign(&self.key, &self.claims(sub, scopes, valid_for))
    }

    /// A token like [`Issuer::token`]'s, signed by another key under the same key id.
    #[must_use]
    pub fn forged(&self, sub: &str, scopes: &[&str]) -> String {
        sign(&new_key(), &self.claims(sub, scopes, 600))
    }

    /// A valid client token for `sub`.
    #[must_use]
    pub fn client(&self, sub: &str) -> String {
        self.token(sub, &[], 600)
    }

    /// A valid operator token for `sub`.
    #[must_use]
    pub fn operator(&self, sub: &str) -> String {
        self.token(sub, &[OPERATOR_SCOPE], 600)
    }

    fn claims(&self, sub: &str, scopes: &[&str], valid_for: i64) -> Value {
        let now = now();
        let expires = now
            .checked_add_signed(valid_for)
            .expect("a time after 1970");
        json!({
            "iss": self.url,
            "aud": AUDIENCE,
            "sub": sub,
            "scope": scopes.join(" "),
            "iat": now.min(expires),
            "exp": expires,
        })
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A compact JWS of `claims`, RS256 with `key`.
fn sign(key: &KeyPair, claims: &Value) -> String {
    compact("RS256", claims, |signed| {
        let mut signature = vec![0; key.public_modulus_len()];
        key.sign(
            &RSA_PKCS1_SHA256,
            &SystemRandom::new(),
            signed,
            &mut signature,
        )
        .expect("signed");
        signature
    })
}

/// A token for `sub` signed with `sas-local`'s development key (`SAS_AUTH_DEV_KEY`).
#[must_use]
pub fn dev_token(key: &str, sub: &str) -> String {
    let claims = json!({ "sub": sub, "exp": now() + 600 });
    compact("HS256", &claims, |signed| {
        let key = hmac::Key::new(hmac::HMAC_SHA256, key.as_bytes());
        hmac::sign(&key, signed).as_ref().to_vec()
    })
}

fn compact(algorithm: &str, claims: &Value, signer: impl FnOnce(&[u8]) -> Vec<u8>) -> String {
    let header = json!({ "alg": algorithm, "typ": "JWT", "kid": KEY_ID });
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = signer(signed.as_bytes());
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
}
