//! Identifiers that cannot hold an invalid value.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Why a string is not a valid identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be 1 to {max} characters of A-Z, a-z, 0-9, '-' or '_'")]
pub struct InvalidId {
    max: usize,
}

/// Whether `value` is 1 to `max` characters of A-Z, a-z, 0-9, '-' and '_'.
fn is_plain(value: &str, max: usize) -> bool {
    !value.is_empty()
        && value.len() <= max
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn validate(value: &str, max: usize) -> Result<(), InvalidId> {
    if is_plain(value, max) {
        Ok(())
    } else {
        Err(InvalidId { max })
    }
}

/// A client's id, or one scoped to an owner: `<owner tag>.<client's id>`; either
/// followed by a child task's `~<step>~<item>`, once per generation
/// ([`TaskId::child`]).
fn validate_task_id(value: &str, max: usize) -> Result<(), InvalidId> {
    let local = match value.split_once('.') {
        None => Some(value),
        Some((tag, local)) => is_owner_tag(tag).then_some(local),
    };
    let valid = local.is_some_and(|local| {
        let parts: Vec<&str> = local.split(CHILD_SEPARATOR).collect();
        let (client, generations) = parts.split_first().unwrap_or((&"", &[]));
        local.len() <= MAX_CHILD_ID
            && is_plain(client, max)
            && generations.len() % 2 == 0
            && generations.chunks(2).all(|generation| {
                is_plain(generation[0], max)
                    && (1..=10).contains(&generation[1].len())
                    && generation[1].bytes().all(|b| b.is_ascii_digit())
            })
    });
    if valid {
        Ok(())
    } else {
        Err(InvalidId { max })
    }
}

fn is_owner_tag(text: &str) -> bool {
    text.len() == OWNER_TAG_LEN
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What separates a child task's id from its parent's, its step and its item.
pub const CHILD_SEPARATOR: char = '~';

/// The longest id of a task's client part with the generations of children after it.
const MAX_CHILD_ID: usize = 480;

/// The length of an owner's tag: 30 hex digits, 120 bits of SHA-256.
const OWNER_TAG_LEN: usize = 30;

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident, $max:expr, $validate:path, $pattern:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
        #[serde(try_from = "String")]
        pub struct $name(Arc<str>);

        /// Written as its text, borrowed: serde's `into` would copy it at each write.
        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl $name {
            /// Validates `value`.
            ///
            /// # Errors
            /// [`InvalidId`] when it is empty, too long, or has other characters than
            /// letters, digits, '-' and '_'.
            pub fn parse(value: impl Into<String>) -> Result<Self, InvalidId> {
                let value = value.into();
                $validate(&value, $max)?;
                Ok(Self(value.into()))
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
                id.0.to_string()
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "pattern": $pattern,
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
    ///
    /// When the API authenticates its callers, each caller's ids are its own: the
    /// task is stored as `<owner tag>.<client's id>` ([`TaskId::scoped`]), so two
    /// callers may both use `order-1`, and neither can name the other's task.
    TaskId,
    64,
    validate_task_id,
    "^([0-9a-f]{30}\\.)?[A-Za-z0-9_-]{1,64}(~[A-Za-z0-9_-]{1,64}~[0-9]{1,10})*$"
);

identifier!(
    /// The name of a queue: the pattern's queues and callers' notification queues.
    QueueName,
    80,
    validate,
    "^[A-Za-z0-9_-]{1,80}$"
);

impl TaskId {
    /// A new random identifier, for a submission that did not name one.
    #[must_use]
    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().simple().to_string().into())
    }

    /// The id `owner` stores its task `local` under. `local` is the client's id; an
    /// id scoped already is scoped again from its client's part.
    #[must_use]
    pub fn scoped(owner: &Owner, local: &Self) -> Self {
        Self(format!("{}.{}", owner.tag(), local.local()).into())
    }

    /// Whether the id is scoped to an owner (it came from [`TaskId::scoped`]).
    #[must_use]
    pub fn is_scoped(&self) -> bool {
        self.0.contains('.')
    }

    /// The client's part of the id: the id its owner names it by.
    #[must_use]
    pub fn local(&self) -> &str {
        self.0.split_once('.').map_or(&self.0, |(_, local)| local)
    }

    /// The id of the child task that step `step` of this task starts for its item
    /// `item` (0 for a child workflow's one): `<this id>~<step>~<item>`. A step that
    /// starts children has a name fit for an id ([`crate::workflow`] checks it).
    #[must_use]
    pub fn child(&self, step: &str, item: u32) -> Self {
        Self(format!("{self}{CHILD_SEPARATOR}{step}{CHILD_SEPARATOR}{item}").into())
    }

    /// Whether it is a child task's id ([`TaskId::child`]): no client may name one.
    #[must_use]
    pub fn is_child(&self) -> bool {
        self.0.contains(CHILD_SEPARATOR)
    }

    /// The id as its owner names it, without the owner's tag.
    #[must_use]
    pub fn to_local(&self) -> Self {
        Self(self.local().into())
    }
}

/// Who a task belongs to: the principal the API's authentication vouched for (a
/// JWT's `sub`, or an IAM role or user's ARN).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct Owner(String);

impl Owner {
    /// The owner named `principal`; `None` when it is empty.
    #[must_use]
    pub fn new(principal: impl Into<String>) -> Option<Self> {
        let principal = principal.into();
        (!principal.trim().is_empty()).then_some(Self(principal))
    }

    /// The principal, as the authentication named it.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A short, stable and unguessable-from-ids stand-in for the owner, in its tasks'
    /// ids and its notification queues' names: 120 bits of SHA-256, as hex.
    #[must_use]
    pub fn tag(&self) -> String {
        let mut tag = crate::sha256_hex(&self.0);
        tag.truncate(OWNER_TAG_LEN);
        tag
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
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

    #[test]
    fn scoped_ids_keep_owners_apart_and_parse_back() {
        let alice = Owner::new("alice").expect("an owner");
        let bob = Owner::new("bob").expect("an owner");
        let local = TaskId::parse("order-1").expect("an id");
        let (a, b) = (TaskId::scoped(&alice, &local), TaskId::scoped(&bob, &local));
        assert_ne!(a, b);
        assert!(a.is_scoped() && !local.is_scoped());
        assert_eq!((a.local(), b.local()), ("order-1", "order-1"));
        assert_eq!(TaskId::parse(a.as_str()), Ok(a.clone()));
        assert_eq!(TaskId::scoped(&alice, &a), a, "scoping is idempotent");
        assert_eq!(alice.tag().len(), 30);
        for bad in [
            ".x",
            "abc.order-1",
            &format!("{}.", alice.tag()),
            &format!("{}.a.b", alice.tag()),
        ] {
            assert!(TaskId::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(Owner::new(" ").is_none());
    }

    #[test]
    fn child_ids_follow_their_parents_and_parse_back() {
        let owner = Owner::new("alice").expect("an owner");
        let parent = TaskId::scoped(&owner, &TaskId::parse("order-1").expect("an id"));
        let child = parent.child("deliver-each", 17);
        assert_eq!(child.local(), "order-1~deliver-each~17");
        assert!(child.is_child() && !parent.is_child());
        assert_eq!(TaskId::parse(child.as_str()), Ok(child.clone()));
        let grandchild = child.child("ship", 0);
        assert_eq!(TaskId::parse(grandchild.as_str()), Ok(grandchild));
        for bad in ["a~", "a~b", "~b~1", "a~b~1~c", "a~~1"] {
            assert!(TaskId::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
