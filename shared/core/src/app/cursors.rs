//! An owner's listing cursors, sealed.
//!
//! An owner's page is gathered from the store's pages of every owner's tasks
//! ([`App::list`](super::App::list)), so the store's cursor after the last task a
//! page read may name another owner's task: its id, its creation, its owner's tag.
//! An owner is given its cursors padded to a multiple of [`PADDED`] bytes, encrypted
//! and signed (XChaCha20-Poly1305, a random 192-bit nonce each) with the deployment's
//! key ([`CursorKeyStore::cursor_key`](crate::ports::CursorKeyStore::cursor_key)),
//! and bound to the owner and the state listed: a caller learns nothing from one (not
//! even the length of another's id, but for its bucket), cannot make one, and can use
//! only its own.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, Generate, Key, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use crate::ports::{CursorKey, StateStore, StoreError};
use sas_domain::ids::Owner;
use sas_domain::task::TaskState;

/// A sealed cursor's text is padded to a multiple of this many bytes.
const PADDED: usize = 128;

/// The byte that ends a cursor's text before its padding (zeros).
const END: u8 = 0x80;

/// The deployment's key, which seals and opens owners' cursors, and the tasks
/// carried in agents' requests ([`sealed`](super::sealed)).
pub(super) struct Seal(XChaCha20Poly1305);

impl Seal {
    /// The deployment's seal: its key as `store` keeps it, one drawn here if it keeps
    /// none yet.
    pub(super) async fn of(store: &dyn StateStore) -> Result<Self, StoreError> {
        let drawn = Key::<XChaCha20Poly1305>::try_generate()
            .map_err(|e| StoreError::Unavailable(format!("no key drawn: {e}").into()))?;
        let key = store.cursor_key(drawn.into()).await?;
        Ok(Self::with_key(&key))
    }

    pub(super) fn with_key(key: &CursorKey) -> Self {
        Self(XChaCha20Poly1305::new(&(*key).into()))
    }

    /// `cursor`, a store's, sealed for `owner`'s listing of `state`: URL-safe text.
    pub(super) fn seal(
        &self,
        owner: &Owner,
        state: TaskState,
        cursor: &str,
    ) -> Result<String, StoreError> {
        let mut padded = cursor.as_bytes().to_vec();
        padded.push(END);
        padded.resize(padded.len().next_multiple_of(PADDED), 0);
        self.seal_bytes(&padded, &bound_to(owner, state))
    }

    /// The store's cursor `sealed` holds, if this deployment sealed it for `owner`'s
    /// listing of `state`.
    ///
    /// # Errors
    /// [`StoreError::InvalidCursor`] for any other text.
    pub(super) fn open(
        &self,
        owner: &Owner,
        state: TaskState,
        sealed: &str,
    ) -> Result<String, StoreError> {
        let invalid = || StoreError::InvalidCursor(sealed.to_owned());
        let mut padded = self
            .open_bytes(sealed, &bound_to(owner, state))
            .ok_or_else(invalid)?;
        let end = padded.iter().rposition(|&b| b != 0).ok_or_else(invalid)?;
        if padded[end] != END {
            return Err(invalid());
        }
        padded.truncate(end);
        String::from_utf8(padded).map_err(|_| invalid())
    }
}

impl super::App {
    /// The deployment's seal, read (or drawn) once a process.
    pub(super) async fn deployment_seal(&self) -> Result<&Seal, StoreError> {
        self.seal
            .get_or_try_init(|| Seal::of(self.store.as_ref()))
            .await
    }
}

impl Seal {
    /// `plain` encrypted and signed, bound to `aad`, under a random nonce: URL-safe
    /// text of the nonce and the ciphertext.
    pub(super) fn seal_bytes(&self, plain: &[u8], aad: &str) -> Result<String, StoreError> {
        let nonce = XNonce::try_generate()
            .map_err(|e| StoreError::Unavailable(format!("no nonce drawn: {e}").into()))?;
        let sealed = self
            .0
            .encrypt(
                &nonce,
                Payload {
                    msg: plain,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| StoreError::Unavailable("nothing could be sealed".into()))?;
        let mut text = nonce.to_vec();
        text.extend(sealed);
        Ok(URL_SAFE_NO_PAD.encode(text))
    }

    /// The bytes `sealed` holds, if this key sealed them bound to `aad`.
    pub(super) fn open_bytes(&self, sealed: &str, aad: &str) -> Option<Vec<u8>> {
        let bytes = URL_SAFE_NO_PAD.decode(sealed).ok()?;
        let (nonce, ciphertext) = bytes.split_at_checked(size_of::<XNonce>())?;
        let nonce = XNonce::try_from(nonce).ok()?;
        self.0
            .decrypt(
                &nonce,
                Payload {
                    msg: ciphertext,
                    aad: aad.as_bytes(),
                },
            )
            .ok()
    }
}

/// What a sealed cursor is bound to: an owner's listing of one state.
fn bound_to(owner: &Owner, state: TaskState) -> String {
    format!("{}\n{owner}", state.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal() -> Seal {
        Seal::with_key(&[7; 32])
    }

    /// The bytes a sealed cursor's text decodes to.
    fn decoded(sealed: &str) -> Vec<u8> {
        URL_SAFE_NO_PAD.decode(sealed).expect("base64")
    }

    fn owner(name: &str) -> Owner {
        Owner::new(name).expect("owner")
    }

    #[test]
    fn a_sealed_cursor_opens_for_its_owner_and_state_only() {
        let seal = seal();
        let cursor = "001764320000000.ab12~t-001";
        let sealed = seal
            .seal(&owner("me"), TaskState::Error, cursor)
            .expect("sealed");
        let bytes = decoded(&sealed);
        assert!(
            !bytes.windows(cursor.len()).any(|w| w == cursor.as_bytes())
                && !bytes.windows(5).any(|w| w == b"t-001"),
            "the cursor is in what it was sealed to: {sealed}"
        );
        assert!(
            sealed
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "URL-safe: {sealed}"
        );
        assert_eq!(
            seal.open(&owner("me"), TaskState::Error, &sealed)
                .expect("opened"),
            cursor
        );
        for (who, state) in [("other", TaskState::Error), ("me", TaskState::Pending)] {
            assert!(matches!(
                seal.open(&owner(who), state, &sealed),
                Err(StoreError::InvalidCursor(_))
            ));
        }
    }

    #[test]
    fn anything_but_a_sealed_cursor_is_refused() {
        let seal = seal();
        let sealed = seal
            .seal(&owner("me"), TaskState::Error, "001764320000000.t-001")
            .expect("sealed");
        let mut tampered = sealed.clone().into_bytes();
        tampered[20] = if tampered[20] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).expect("text");
        for text in [
            "",
            "short",
            "001764320000000.t-001",
            "not base64!",
            &tampered,
        ] {
            assert!(
                matches!(
                    seal.open(&owner("me"), TaskState::Error, text),
                    Err(StoreError::InvalidCursor(_))
                ),
                "{text}"
            );
        }
    }

    #[test]
    fn the_same_cursor_sealed_twice_reads_differently() {
        let seal = seal();
        let once = seal
            .seal(&owner("me"), TaskState::Error, "c")
            .expect("sealed");
        let twice = seal
            .seal(&owner("me"), TaskState::Error, "c")
            .expect("sealed");
        assert_ne!(once, twice);
    }

    #[test]
    fn cursors_of_different_lengths_seal_to_the_same_within_a_bucket() {
        let seal = seal();
        let sealed = |cursor: &str| {
            seal.seal(&owner("me"), TaskState::Error, cursor)
                .expect("sealed")
        };
        let (short, long) = ("1".repeat(10), "1".repeat(PADDED - 1));
        assert_eq!(sealed(&short).len(), sealed(&long).len());
        assert!(sealed(&"1".repeat(PADDED)).len() > sealed(&long).len());
        for cursor in [short, long] {
            assert_eq!(
                seal.open(&owner("me"), TaskState::Error, &sealed(&cursor))
                    .expect("opened"),
                cursor
            );
        }
    }
}
