//! Who calls the local API. Open by default, as on 127.0.0.1 only one person
//! does. With `SAS_AUTH_JWKS` (a file of an identity provider's public keys) or
//! `SAS_AUTH_DEV_KEY` (a shared HS256 secret, for development), every request needs a
//! bearer token, checked as API Gateway's JWT authorizer checks it: signature,
//! expiry, and the issuer and audience when `SAS_AUTH_ISSUER` and
//! `SAS_AUTH_AUDIENCE` are set. The owner is the token's `sub`; an operator has the
//! scope `SAS_AUTH_OPERATOR_SCOPE` (default `sas/operator`).

use anyhow::Context as _;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use sas_core::api::Caller;
use sas_core::domain::ids::Owner;
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
    /// The keys, by `kid` (`None` for a key without one), each with what a token
    /// signed with it must satisfy.
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
    /// A key file that cannot be read or is not a JWKS, a development key too short,
    /// or both kinds of key at once.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let keys = match (var("SAS_AUTH_JWKS"), var("SAS_AUTH_DEV_KEY")) {
            (None, None) => return Ok(Self::Open),
            (Some(_), Some(_)) => {
                anyhow::bail!("set SAS_AUTH_JWKS or SAS_AUTH_DEV_KEY, not both")
            }
            (Some(path), None) => {
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
        let (_, key, validation) = self
            .keys
            .iter()
            .find(|(kid, _, _)| kid.is_none() || *kid == header.kid)
            .ok_or(jsonwebtoken::errors::ErrorKind::InvalidKeyFormat)?;
        Ok(jsonwebtoken::decode::<Claims>(token, key, validation)?.claims)
    }
}

impl std::fmt::Debug for Authentication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}
