//! Who calls the local API. Open by default, as on 127.0.0.1 only one person
//! does. With `SAS_AUTH_JWKS` (a file of an identity provider's public keys) or
//! `SAS_AUTH_DEV_KEY` (a shared HS256 secret, for development), every request needs a
//! bearer token, checked as API Gateway's JWT authorizer checks it: signature (by
//! the key its `kid` names), expiry, not-before, issuer and audience
//! (`SAS_AUTH_ISSUER` and `SAS_AUTH_AUDIENCE`, required with a JWKS, checked when
//! set with a development key). The owner is the token's `sub`; an operator has the
//! scope `SAS_AUTH_OPERATOR_SCOPE` (default `sas/operator`).

use anyhow::Context as _;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use sas_api::Caller;
use sas_domain::ids::Owner;
use serde::Deserialize;
use tracing::info;

/// The shortest development key taken: HS256 with less is guessable.
const MIN_DEV_KEY_BYTES: usize = 32;

/// How the local API knows its callers.
pub enum Authentication {
    /// Everyone may do everything.
    Open,
    /// A bearer token is required.
    Tokens(Verifier),
}

/// Checks bearer tokens.
pub struct Verifier {
    /// The keys, by `kid` (`None` for a key without one, used only alone), each
    /// with what a token signed with it must satisfy.
    keys: Vec<(Option<String>, DecodingKey, Validation)>,
    operator_scope: String,
}

/// The claims read from a token; the rest are ignored.
#[derive(Deserialize)]
struct Claims {
    sub: String,
    /// Scopes as OAuth writes them: one string, space-separated.
    #[serde(default)]
    scope: Option<String>,
    /// Scopes as some providers write them: a list.
    #[serde(default)]
    scp: Option<Vec<String>>,
}

impl Authentication {
    /// Reads the `SAS_AUTH_*` variables through `var`.
    ///
    /// # Errors
    /// A key file that cannot be read or is not a JWKS, or without the issuer and
    /// audience of its tokens; a development key too short; both kinds of key at once.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let keys = match (var("SAS_AUTH_JWKS"), var("SAS_AUTH_DEV_KEY")) {
            (None, None) => return Ok(Self::Open),
            (Some(_), Some(_)) => {
                anyhow::bail!("set SAS_AUTH_JWKS or SAS_AUTH_DEV_KEY, not both")
            }
            (Some(path), None) => {
                for name in ["SAS_AUTH_ISSUER", "SAS_AUTH_AUDIENCE"] {
                    anyhow::ensure!(
                        var(name).is_some(),
                        "SAS_AUTH_JWKS needs {name}: without it, a token these keys \
                         signed for another tenant or application would be taken"
                    );
                }
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("SAS_AUTH_JWKS={path}: cannot read it"))?;
                let set: JwkSet = serde_json::from_str(&text)
                    .with_context(|| format!("SAS_AUTH_JWKS={path}: not a JWKS"))?;
                set.keys
                    .iter()
                    .map(|jwk| {
                        let algorithm = jwk
                            .common
                            .key_algorithm
                            .and_then(|a| a.to_string().parse().ok())
                            .unwrap_or(Algorithm::RS256);
                        let key = DecodingKey::from_jwk(jwk)
                            .with_context(|| format!("SAS_AUTH_JWKS={path}: a key is unusable"))?;
                        Ok((jwk.common.key_id.clone(), key, algorithm))
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?
            }
            (None, Some(secret)) => {
                anyhow::ensure!(
                    secret.len() >= MIN_DEV_KEY_BYTES,
                    "SAS_AUTH_DEV_KEY: must be at least {MIN_DEV_KEY_BYTES} bytes"
                );
                vec![(
                    None,
                    DecodingKey::from_secret(secret.as_bytes()),
                    Algorithm::HS256,
                )]
            }
        };
        anyhow::ensure!(!keys.is_empty(), "SAS_AUTH_JWKS: the set has no keys");
        let (issuer, audience) = (var("SAS_AUTH_ISSUER"), var("SAS_AUTH_AUDIENCE"));
        let validation = |algorithm| {
            let mut validation = Validation::new(algorithm);
            validation.leeway = 0;
            validation.validate_nbf = true;
            validation.set_required_spec_claims(&["exp", "sub"]);
            if let Some(issuer) = &issuer {
                validation.set_issuer(&[issuer]);
            }
            match &audience {
                Some(audience) => validation.set_audience(&[audience]),
                None => validation.validate_aud = false,
            }
            validation
        };
        Ok(Self::Tokens(Verifier {
            keys: keys
                .into_iter()
                .map(|(kid, key, algorithm)| (kid, key, validation(algorithm)))
                .collect(),
            operator_scope: var("SAS_AUTH_OPERATOR_SCOPE").unwrap_or_else(|| "sas/operator".into()),
        }))
    }

    /// How the API is open, for the line printed at start.
    #[must_use]
    pub fn describe(&self) -> &'static str {
        match self {
            Self::Open => {
                "open to anyone who can reach it (set SAS_AUTH_JWKS or SAS_AUTH_DEV_KEY to require tokens)"
            }
            Self::Tokens(_) => "bearer tokens required",
        }
    }

    /// The caller of a request with this `Authorization` header.
    #[must_use]
    pub fn caller(&self, authorization: Option<&str>) -> Caller {
        match self {
            Self::Open => Caller::Anyone,
            Self::Tokens(verifier) => verifier.caller(authorization),
        }
    }
}

impl Verifier {
    fn caller(&self, authorization: Option<&str>) -> Caller {
        let Some(token) = authorization.and_then(|h| h.strip_prefix("Bearer ")) else {
            return Caller::Unauthenticated;
        };
        match self.verify(token.trim()) {
            Ok(claims) => {
                let operator = claims
                    .scope
                    .iter()
                    .flat_map(|s| s.split(' '))
                    .chain(claims.scp.iter().flatten().map(String::as_str))
                    .any(|scope| scope == self.operator_scope);
                Owner::new(claims.sub).map_or(Caller::Unauthenticated, |owner| Caller::Known {
                    owner,
                    operator,
                })
            }
            Err(e) => {
                info!(reason = %e, "a request's token was refused");
                Caller::Unauthenticated
            }
        }
    }

    fn verify(&self, token: &str) -> Result<Claims, jsonwebtoken::errors::Error> {
        let header = jsonwebtoken::decode_header(token)?;
        let (_, key, validation) = match self.keys.as_slice() {
            // The development key, or a JWKS of one key without a `kid`: no other.
            [only @ (None, _, _)] => Some(only),
            keys => header
                .kid
                .and_then(|kid| keys.iter().find(|(id, _, _)| id.as_ref() == Some(&kid))),
        }
        .ok_or(jsonwebtoken::errors::ErrorKind::InvalidKeyFormat)?;
        Ok(jsonwebtoken::decode::<Claims>(token, key, validation)?.claims)
    }
}

impl std::fmt::Debug for Authentication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::{Value, json};

    use super::*;

    const ISSUER: &str = "https://issuer.example";
    const AUDIENCE: &str = "sas-local";
    const DEV_KEY: &str = "a-development-key-of-forty-bytes-or-so!!";

    /// The HS256 secret `name` stands for, as a JWKS writes it: alphanumeric, 44
    /// characters, it reads the same in both base64 alphabets.
    fn secret(name: char) -> String {
        name.to_string().repeat(44)
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
    }

    fn claims() -> Value {
        json!({ "sub": "alice", "iss": ISSUER, "aud": AUDIENCE, "exp": now() + 600 })
    }

    fn token(key: &EncodingKey, kid: Option<&str>, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, key).expect("signed")
    }

    /// A token of `claims` signed with the JWKS key `name`, under `kid`.
    fn signed_by(name: char, kid: Option<&str>) -> String {
        let key = EncodingKey::from_base64_secret(&secret(name)).expect("base64");
        token(&key, kid, &claims())
    }

    fn vars<'a>(pairs: &'a [(&'a str, String)]) -> impl Fn(&str) -> Option<String> + 'a {
        |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, v)| v.clone())
        }
    }

    /// The authentication by a JWKS of `keys` (a `kid` and a secret's name each),
    /// with `more` variables.
    fn with_jwks(
        keys: &[(Option<&str>, char)],
        more: &[(&str, &str)],
    ) -> anyhow::Result<Authentication> {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("jwks.json");
        let keys: Vec<Value> = keys
            .iter()
            .map(|(kid, name)| json!({ "kty": "oct", "alg": "HS256", "kid": kid, "k": secret(*name) }))
            .collect();
        std::fs::write(&path, json!({ "keys": keys }).to_string()).expect("written");
        let mut pairs = vec![("SAS_AUTH_JWKS", path.display().to_string())];
        pairs.extend(more.iter().map(|(k, v)| (*k, (*v).to_owned())));
        Authentication::from_vars(vars(&pairs))
    }

    fn taken(authentication: &Authentication, token: &str) -> bool {
        matches!(
            authentication.caller(Some(&format!("Bearer {token}"))),
            Caller::Known { .. }
        )
    }

    const ISSUED: [(&str, &str); 2] =
        [("SAS_AUTH_ISSUER", ISSUER), ("SAS_AUTH_AUDIENCE", AUDIENCE)];

    #[test]
    fn a_token_not_yet_valid_is_refused() {
        let pairs = [("SAS_AUTH_DEV_KEY", DEV_KEY.to_owned())];
        let authentication = Authentication::from_vars(vars(&pairs)).expect("a valid key");
        let key = EncodingKey::from_secret(DEV_KEY.as_bytes());
        let from = |nbf: u64| {
            let mut claims = claims();
            claims["nbf"] = json!(nbf);
            token(&key, None, &claims)
        };
        assert!(
            !taken(&authentication, &from(now() + 60)),
            "valid in a minute"
        );
        assert!(
            taken(&authentication, &from(now() - 1)),
            "valid since a second"
        );
    }

    #[test]
    fn with_several_keys_a_token_is_checked_only_by_the_key_its_kid_names() {
        let authentication = with_jwks(&[(None, 'n'), (Some("a"), 'a')], &ISSUED).expect("valid");
        for (what, token) in [
            ("no kid", signed_by('n', None)),
            ("a kid naming no key", signed_by('n', Some("x"))),
            ("no kid, signed by a named key", signed_by('a', None)),
            ("another key's kid", signed_by('n', Some("a"))),
        ] {
            assert!(!taken(&authentication, &token), "{what}");
        }
        assert!(taken(&authentication, &signed_by('a', Some("a"))));

        let one = with_jwks(&[(None, 'n')], &ISSUED).expect("valid");
        assert!(taken(&one, &signed_by('n', None)), "one key without kid");
        let named = with_jwks(&[(Some("a"), 'a')], &ISSUED).expect("valid");
        assert!(!taken(&named, &signed_by('a', None)), "the key has a kid");
    }

    #[test]
    fn a_jwks_without_the_issuer_or_the_audience_stops_the_start_naming_it() {
        for (missing, given) in [
            ("SAS_AUTH_ISSUER", ISSUED[1]),
            ("SAS_AUTH_AUDIENCE", ISSUED[0]),
        ] {
            let error = with_jwks(&[(Some("a"), 'a')], &[given]).expect_err("refused");
            assert!(error.to_string().contains(missing), "{error}");
        }
    }
}
