//! An owner's listing cursors, sealed.
//!
//! An owner's page is gathered from the store's pages of every owner's tasks
//! ([`App::list`](super::App::list)), so the store's cursor after the last task a
//! page read may name another owner's task: its id, its creation, its owner's tag.
//! An owner is given its cursors encrypted and signed (AES-256-GCM, a random nonce
//! each) with the deployment's key ([`StateStore::cursor_key`]), bound to the owner
//! and the state listed: a caller learns nothing from one, cannot make one, and can
//! use only its own.

use aws_lc_rs::aead::{AES_256_GCM, Aad, NONCE_LEN, Nonce, RandomizedNonceKey};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::ports::{CursorKey, StateStore, StoreError};
use sas_domain::ids::Owner;
use sas_domain::task::TaskState;

/// The key that seals and opens owners' cursors.
pub(super) struct CursorSeal(RandomizedNonceKey);

impl CursorSeal {
    /// The deployment's seal: its key as `store` keeps it, one drawn here if it keeps
    /// none yet.
    pub(super) async fn of(store: &dyn StateStore) -> Result<Self, StoreError> {
        let mut drawn = CursorKey::default();
        aws_lc_rs::rand::fill(&mut drawn)
            .map_err(|_| StoreError::Unavailable("no randomness to draw a key from".into()))?;
        let key = store.cursor_key(drawn).await?;
        RandomizedNonceKey::new(&AES_256_GCM, &key)
            .map(Self)
            .map_err(|_| StoreError::Corrupt("the cursor key is not an AES-256 key".into()))
    }

    /// `cursor`, a store's, sealed for `owner`'s listing of `state`: URL-safe text.
    pub(super) fn seal(
        &self,
        owner: &Owner,
        state: TaskState,
        cursor: &str,
    ) -> Result<String, StoreError> {
        let mut sealed = cursor.as_bytes().to_vec();
        let nonce = self
            .0
            .seal_in_place_append_tag(bound_to(owner, state), &mut sealed)
            .map_err(|_| StoreError::Unavailable("a cursor could not be sealed".into()))?;
        let mut text = nonce.as_ref().to_vec();
        text.append(&mut sealed);
        Ok(URL_SAFE_NO_PAD.encode(text))
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
        let bytes = URL_SAFE_NO_PAD.decode(sealed).map_err(|_| invalid())?;
        let (nonce, ciphertext) = bytes.split_at_checked(NONCE_LEN).ok_or_else(invalid)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| invalid())?;
        let mut opened = ciphertext.to_vec();
        let cursor = self
            .0
            .open_in_place(nonce, bound_to(owner, state), &mut opened)
            .map_err(|_| invalid())?;
        String::from_utf8(cursor.to_vec()).map_err(|_| invalid())
    }
}

/// What a sealed cursor is bound to: an owner's listing of one state.
fn bound_to(owner: &Owner, state: TaskState) -> Aad<String> {
    Aad::from(format!("{}\n{owner}", state.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal() -> CursorSeal {
        CursorSeal(RandomizedNonceKey::new(&AES_256_GCM, &[7; 32]).expect("key"))
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
        assert!(!sealed.contains("t-001"), "{sealed}");
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
}
