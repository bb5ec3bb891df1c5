//! Identifiers that cannot hold an invalid value.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a string is not a valid identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be 1 to {max} characters of A-Z, a-z, 0-9, '-' or '_'")]
pub struct InvalidId {
    max: usize,
}

fn validate(value: &str, max: usize) -> Result<(), InvalidId> {
    let valid = !value.is_empty()
        && value.len() <= max
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if valid {
        Ok(())
    } else {
        Err(InvalidId { max })
    }
}

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident, $max:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates `value`.
            ///
            /// # Errors
            /// [`InvalidId`] when it is empty, too long, or has other characters than
            /// letters, digits, '-' and '_'.
            pub fn parse(value: impl Into<String>) -> Result<Self, InvalidId> {
                let value = value.into();
                validate(&value, $max)?;
                Ok(Self(value))
            }

            /// The identifier as text.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidId;
            fn try_from(value: String) -> Result<Self, InvalidId> {
                Self::parse(value)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "pattern": concat!("^[A-Za-z0-9_-]{1,", stringify!($max), "}$"),
                })
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

identifier!(
    /// A task's identifier: chosen by the client (PUT, or `id` in a POST) or generated.
    TaskId,
    64
);

identifier!(
    /// The name of a queue: the pattern's queues and callers' notification queues.
    QueueName,
    80
);

impl TaskId {
    /// A new random identifier, for a submission that did not name one.
    #[must_use]
    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().simple().to_string())
    }
}

/// A stable 32-bit FNV-1a hash of `text`: the same on every machine and version,
/// for spreading keys over partitions and naming things after them.
#[must_use]
pub fn stable_hash(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5, |hash, b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_accept_url_safe_text_and_reject_the_rest() {
        assert!(TaskId::parse("order-42_A").is_ok());
        for bad in ["", "a/b", "a b", "é", &"x".repeat(65)] {
            assert!(TaskId::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(TaskId::generate().as_str().len(), 32);
    }
}
