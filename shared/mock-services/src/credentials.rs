//! The keys a service requires, in the order set, and each call's check: the key
//! it presented told current, stale or unknown, never recorded itself.

use std::collections::HashMap;
use std::sync::PoisonError;

use serde::{Deserialize, Serialize};

use crate::MockServices;

/// What a service that requires a key made of a call's `X-Api-Key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The key it requires now: the call went on.
    Accepted,
    /// A key it required before and no longer takes (rotated): refused with 401.
    RefusedStale,
    /// No key, or one it never required: refused with 401.
    RefusedUnknown,
}

/// A call to a service that requires a key, as the service saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialCheck {
    /// The call's idempotency key.
    pub idempotency_key: String,
    /// Which of the keys the service has required the call presented: 1 for the first
    /// `api_key` set on it, 2 for the one after (its rotation), and so on; none when it
    /// presented none of them. The key itself is never recorded.
    pub presented: Option<usize>,
    /// What the service made of it.
    pub verdict: Verdict,
}

/// The keys a service has required, in the order set, and its calls' checks in the
/// order received.
#[derive(Default)]
pub(crate) struct Credentials {
    pub(crate) keys: Vec<String>,
    checks: Vec<CredentialCheck>,
}

impl MockServices {
    /// The checks of the keys of the calls to each service that required one, in the
    /// order the calls were received.
    #[must_use]
    pub fn credential_checks(&self) -> HashMap<String, Vec<CredentialCheck>> {
        self.credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(service, credentials)| (service.clone(), credentials.checks.clone()))
            .collect()
    }
}

impl MockServices {
    /// Checks the key `given` of a call of `service` with idempotency key `key`
    /// against the one it requires, and records what it made of it; whether the call
    /// may go on.
    pub(crate) fn check_credential(
        &self,
        service: &str,
        required: &str,
        given: Option<&str>,
        key: &str,
    ) -> bool {
        let mut all = self
            .credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let credentials = all.entry(service.to_owned()).or_default();
        let presented = given.and_then(|given| credentials.keys.iter().position(|k| k == given));
        let verdict = match (given, presented) {
            (Some(given), _) if given == required => Verdict::Accepted,
            (_, Some(_)) => Verdict::RefusedStale,
            (_, None) => Verdict::RefusedUnknown,
        };
        credentials.checks.push(CredentialCheck {
            idempotency_key: key.to_owned(),
            presented: presented.map(|index| index + 1),
            verdict,
        });
        verdict == Verdict::Accepted
    }
}

#[cfg(test)]
mod tests {
    use super::Verdict;
    use crate::{Faults, MockServices};

    /// A service that requires a key records each call's: the current key taken, a
    /// rotated one refused as stale, none or another refused as unknown; the keys
    /// numbered in the order set, never recorded themselves.
    #[test]
    fn a_service_tells_a_stale_key_from_an_unknown_one() {
        let data = tempfile::tempdir().expect("directory");
        let mock = MockServices::open(&data.path().join("mock.db"), 1, false).expect("mock");
        let keyed = |key: &str| Faults {
            api_key: Some(key.into()),
            ..Faults::default()
        };
        mock.set_faults("drone", keyed("k1"));
        assert!(mock.check_credential("drone", "k1", Some("k1"), "t/0"));
        mock.set_faults("drone", keyed("k2"));
        mock.set_faults("drone", keyed("k2"));
        assert!(!mock.check_credential("drone", "k2", Some("k1"), "t/1"));
        assert!(mock.check_credential("drone", "k2", Some("k2"), "t/1"));
        assert!(!mock.check_credential("drone", "k2", Some("other"), "t/2"));
        assert!(!mock.check_credential("drone", "k2", None, "t/2"));
        let checks = &mock.credential_checks()["drone"];
        let seen: Vec<(&str, Option<usize>, Verdict)> = checks
            .iter()
            .map(|c| (c.idempotency_key.as_str(), c.presented, c.verdict))
            .collect();
        assert_eq!(
            seen,
            [
                ("t/0", Some(1), Verdict::Accepted),
                ("t/1", Some(1), Verdict::RefusedStale),
                ("t/1", Some(2), Verdict::Accepted),
                ("t/2", None, Verdict::RefusedUnknown),
                ("t/2", None, Verdict::RefusedUnknown),
            ]
        );
        let serialized = serde_json::to_string(checks).expect("JSON");
        assert!(
            !serialized.contains("k1") && !serialized.contains("k2"),
            "{serialized}"
        );
    }
}
