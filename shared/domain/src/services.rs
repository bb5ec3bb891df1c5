//! How the agents reach the remote services: by service name, a base URL, headers
//! sent with every call, a timeout, a credential read from a secret store, and
//! SigV4 signing for an AWS-hosted API (with the agent's own identity).
//!
//! Written as JSON (`SERVICE_URLS` on Lambda, `SAS_SERVICES` locally); a service may
//! be its URL alone:
//!
//! ```json
//! {"drone": "https://drones.example.com",
//!  "package": {"url": "https://packages.example.com/v2",
//!              "headers": {"X-Tenant": "acme"},
//!              "timeout": "5s",
//!              "credential": {"secret": "secretsmanager:prod/packages-key",
//!                             "header": "X-Api-Key"},
//!              "max_concurrency": 50, "rate": {"per_second": 20, "burst": 40}}}
//! ```
//!
//! A service's `max_concurrency`, `rate` and `key` limit its calls across all tasks
//! ([`crate::flow`]).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::flow::{Limit, LimitFile, RateFile};

/// One remote service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// The base URL; a step's path is appended to it.
    pub url: String,
    /// Headers sent with every call, beside the credential's.
    pub headers: BTreeMap<String, String>,
    /// The longest one call may take, below the step's own budget; `None` for the budget.
    pub timeout: Option<Duration>,
    /// A secret sent with every call.
    pub credential: Option<Credential>,
    /// Every call signed with SigV4, for an AWS-hosted API.
    pub sigv4: Option<SigV4>,
    /// How many calls it takes at once and a second, across all tasks
    /// ([`crate::flow`]); `None` for no limit.
    pub limit: Option<Limit>,
}

/// Signing for an AWS-hosted API: its service's signing name and its region.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SigV4 {
    /// The signing name: `execute-api` for API Gateway, `lambda` for a function URL.
    pub service: String,
    /// The API's region.
    pub region: String,
}

impl Service {
    /// The service at `url`, with no headers, timeout or credential of its own.
    #[must_use]
    pub fn at(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            headers: BTreeMap::new(),
            timeout: None,
            credential: None,
            sigv4: None,
            limit: None,
        }
    }

    /// Where the calls of this service, named `name`, go: its URL, or
    /// `<fallback>/<name>` when it is set without one and there is a fallback.
    #[must_use]
    pub fn base_url(&self, name: &str, fallback: Option<&str>) -> Option<String> {
        if !self.url.is_empty() {
            return Some(self.url.clone());
        }
        fallback.map(|fallback| format!("{}/{name}", fallback.trim_end_matches('/')))
    }
}

/// The deployment's services, by name, and where a service set without a URL is
/// (`<fallback>/<name>`), if anywhere.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Directory {
    /// The services, by name.
    pub services: HashMap<String, Service>,
    /// The base URL of the services set without one.
    pub fallback: Option<String>,
}

impl Directory {
    /// The service whose base URL `endpoint` is at (the URL itself, or a path under
    /// it), with its name; of two, the one whose URL is the longer. A state machine's
    /// `http:invoke` is called so, and gated.
    #[must_use]
    pub fn serving(&self, endpoint: &str) -> Option<(&str, &Service)> {
        self.services
            .iter()
            .filter_map(|(name, service)| {
                let base = service.base_url(name, self.fallback.as_deref())?;
                let base = base.trim_end_matches('/');
                let at = !base.is_empty()
                    && endpoint
                        .strip_prefix(base)
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
                at.then_some((base.len(), name.as_str(), service))
            })
            .max_by_key(|(length, name, _)| (*length, *name))
            .map(|(_, name, service)| (name, service))
    }
}

/// A secret sent in a header.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credential {
    /// Where it is kept.
    pub secret: SecretRef,
    /// The header it goes in.
    #[serde(default = "authorization")]
    pub header: String,
    /// Written before it: `Bearer ` when the header is `Authorization`, nothing
    /// otherwise, unless given.
    #[serde(default)]
    pub prefix: Option<String>,
}

fn authorization() -> String {
    "Authorization".to_owned()
}

impl Credential {
    /// The header's value for the secret `value`.
    #[must_use]
    pub fn header_value(&self, value: &str) -> String {
        let prefix = self.prefix.as_deref().unwrap_or(
            if self.header.eq_ignore_ascii_case("authorization") {
                "Bearer "
            } else {
                ""
            },
        );
        format!("{prefix}{value}")
    }
}

/// Where a secret is kept: `secretsmanager:<name or ARN>`, `ssm:<parameter name>`
/// (a SecureString), or `env:<variable>` (for local use).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SecretRef {
    /// A Secrets Manager secret's string.
    SecretsManager(String),
    /// A Parameter Store parameter, decrypted.
    Ssm(String),
    /// An environment variable of the agent's process.
    Env(String),
}

impl SecretRef {
    /// Reads `text`.
    ///
    /// # Errors
    /// A text of no known kind, or with no name.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (kind, name) = text.split_once(':').unwrap_or((text, ""));
        if name.is_empty() {
            return Err(format!(
                "'{text}': expected secretsmanager:<name>, ssm:<parameter> or env:<variable>"
            ));
        }
        let name = name.to_owned();
        match kind {
            "secretsmanager" => Ok(Self::SecretsManager(name)),
            "ssm" => Ok(Self::Ssm(name)),
            "env" => Ok(Self::Env(name)),
            _ => Err(format!(
                "'{text}': '{kind}' is not secretsmanager, ssm or env"
            )),
        }
    }
}

impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SecretsManager(name) => write!(f, "secretsmanager:{name}"),
            Self::Ssm(name) => write!(f, "ssm:{name}"),
            Self::Env(name) => write!(f, "env:{name}"),
        }
    }
}

impl<'de> Deserialize<'de> for SecretRef {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A service as written: its URL alone, or in full.
#[derive(Deserialize)]
#[serde(untagged)]
enum Written {
    Url(String),
    Full(Box<Full>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Full {
    /// Empty: the local mock services' (only locally).
    #[serde(default)]
    url: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    credential: Option<Credential>,
    #[serde(default)]
    sigv4: Option<SigV4>,
    #[serde(default)]
    max_concurrency: Option<u32>,
    #[serde(default)]
    rate: Option<RateFile>,
    #[serde(default)]
    key: Option<String>,
}

/// The limit of service `name`, if its settings give one.
fn limit_of(
    name: &str,
    max_concurrency: Option<u32>,
    rate: Option<RateFile>,
    key: Option<String>,
) -> Result<Option<Limit>, String> {
    if max_concurrency.is_none() && rate.is_none() && key.is_none() {
        return Ok(None);
    }
    let written = LimitFile {
        max_concurrency,
        rate,
        key,
    };
    written
        .check()
        .map(Some)
        .map_err(|(field, message)| format!("{name}.{field}: {message}"))
}

/// Whether `name` may name an HTTP header (a token of RFC 9110).
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Refuses a header that HTTP cannot carry, naming where it is.
fn check_header(service: &str, name: &str, value: Option<&str>) -> Result<(), String> {
    if !is_header_name(name) {
        return Err(format!("{service}: '{name}' is not a header name"));
    }
    if value.is_some_and(|v| v.bytes().any(|b| b.is_ascii_control() && b != b'\t')) {
        return Err(format!(
            "{service}: the header {name} has a control character"
        ));
    }
    Ok(())
}

/// Reads the services from their JSON.
///
/// # Errors
/// What is wrong, naming the service and the field.
pub fn parse(json: &str) -> Result<HashMap<String, Service>, String> {
    let written: BTreeMap<String, serde_json::Value> = serde_json::from_str(json)
        .map_err(|e| format!("expected a JSON object of service name to URL or settings: {e}"))?;
    written
        .into_iter()
        .map(|(name, value)| {
            let service = match serde_json::from_value::<Written>(value.clone()) {
                Ok(Written::Url(url)) => Service::at(url),
                Ok(Written::Full(full)) => Service {
                    limit: limit_of(&name, full.max_concurrency, full.rate, full.key)?,
                    timeout: full
                        .timeout
                        .map(|t| {
                            humantime::parse_duration(&t)
                                .map_err(|e| format!("{name}.timeout: '{t}': {e}"))
                        })
                        .transpose()?,
                    url: full.url,
                    headers: full.headers,
                    credential: full.credential,
                    sigv4: full.sigv4,
                },
                // Untagged enums say only that nothing matched: read it in full for the reason.
                Err(_) => {
                    let reason = serde_json::from_value::<Full>(value)
                        .err()
                        .map_or_else(|| "invalid".to_owned(), |e| e.to_string());
                    return Err(format!("{name}: {reason}"));
                }
            };
            for (header, value) in &service.headers {
                check_header(&name, header, Some(value))?;
            }
            if let Some(credential) = &service.credential {
                check_header(&name, &credential.header, credential.prefix.as_deref())?;
                if service.sigv4.is_some()
                    && credential.header.eq_ignore_ascii_case("authorization")
                {
                    return Err(format!(
                        "{name}: the credential and sigv4 would both write Authorization; \
                         give the credential another header"
                    ));
                }
            }
            Ok((name, service))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_is_a_url_or_its_settings_and_errors_name_the_service() {
        let services = parse(
            r#"{"drone": "https://d.example.com",
                "package": {"url": "https://p.example.com", "headers": {"X-Tenant": "acme"},
                            "timeout": "5s",
                            "credential": {"secret": "secretsmanager:prod/key", "header": "X-Api-Key"}}}"#,
        )
        .expect("valid");
        assert_eq!(services["drone"].url, "https://d.example.com");
        assert_eq!(services["drone"].credential, None);
        let package = &services["package"];
        assert_eq!(package.timeout, Some(Duration::from_secs(5)));
        assert_eq!(package.headers["X-Tenant"], "acme");
        let credential = package.credential.as_ref().expect("a credential");
        assert_eq!(
            credential.secret,
            SecretRef::SecretsManager("prod/key".into())
        );
        assert_eq!(credential.header_value("k"), "k");
        let bearer = Credential {
            secret: SecretRef::Ssm("/p".into()),
            header: authorization(),
            prefix: None,
        };
        assert_eq!(bearer.header_value("t"), "Bearer t");
        assert_eq!(package.limit, None);
        let limited = parse(
            r#"{"drone": {"url": "https://d.example.com", "max_concurrency": 3, "rate": 20,
                          "key": "input.customer_id"},
                "mock": {"max_concurrency": 1}}"#,
        )
        .expect("valid");
        let limit = limited["drone"].limit.as_ref().expect("a limit");
        assert_eq!(
            limit.to_string(),
            "3 at once, 20/s (burst 20), per input.customer_id"
        );
        assert_eq!(limited["mock"].url, "", "the local mock services'");
        let signed = parse(
            r#"{"api": {"url": "https://a.execute-api.eu-west-1.amazonaws.com",
                        "sigv4": {"service": "execute-api", "region": "eu-west-1"}}}"#,
        )
        .expect("valid");
        assert_eq!(
            signed["api"].sigv4,
            Some(SigV4 {
                service: "execute-api".into(),
                region: "eu-west-1".into()
            })
        );

        for (json, expected) in [
            (
                r#"{"p": {"url": "u", "credential": {"secret": "vault:x"}}}"#,
                "p: ",
            ),
            (r#"{"p": {"url": "u", "timeout": "soon"}}"#, "p.timeout"),
            (
                r#"{"p": {"url": "u", "retries": 3}}"#,
                "unknown field `retries`",
            ),
            (r#"{"p": 3}"#, "p: "),
            (
                r#"{"p": {"url": "u", "sigv4": {"service": "execute-api", "region": "r"}, "credential": {"secret": "env:K"}}}"#,
                "both write Authorization",
            ),
            (
                r#"{"p": {"url": "u", "headers": {"X Tenant": "a"}}}"#,
                "p: 'X Tenant' is not a header name",
            ),
            (
                r#"{"p": {"url": "u", "headers": {"X-Tenant": "a\nb"}}}"#,
                "control character",
            ),
            (
                r#"{"p": {"url": "u", "credential": {"secret": "env:K", "header": ""}}}"#,
                "not a header name",
            ),
            ("[]", "expected a JSON object"),
            (
                r#"{"p": {"url": "u", "max_concurrency": 0}}"#,
                "p.max_concurrency: must be at least 1",
            ),
            (
                r#"{"p": {"url": "u", "key": "input.c"}}"#,
                "p.max_concurrency: a limit needs max_concurrency, rate or both",
            ),
        ] {
            let error = parse(json).expect_err(json);
            assert!(error.contains(expected), "{json}: {error}");
        }
    }

    #[test]
    fn an_endpoint_is_at_the_service_whose_url_it_starts_with_the_longest_first() {
        let services = parse(
            r#"{"api": "https://api.example.com", "v2": "https://api.example.com/v2/",
                "mock": {"max_concurrency": 1}}"#,
        )
        .expect("valid");
        let directory = Directory {
            services,
            fallback: Some("http://127.0.0.1:9000/".to_owned()),
        };
        let at = |endpoint: &str| directory.serving(endpoint).map(|(name, _)| name);
        assert_eq!(at("https://api.example.com"), Some("api"));
        assert_eq!(at("https://api.example.com/v1/orders"), Some("api"));
        assert_eq!(at("https://api.example.com/v2/orders"), Some("v2"));
        assert_eq!(at("https://api.example.com/v2"), Some("v2"));
        assert_eq!(at("https://api.example.com.evil.net/x"), None);
        assert_eq!(at("http://127.0.0.1:9000/mock/scan"), Some("mock"));
        assert_eq!(at("http://127.0.0.1:9000/other/scan"), None);
    }
}
