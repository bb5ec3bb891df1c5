//! The state store's key that seals owners' listing cursors.

use async_trait::async_trait;

use super::StoreError;

/// The bytes of the key that seals owners' listing cursors ([`CursorKeyStore::cursor_key`]).
pub type CursorKey = [u8; 32];

/// The one key of a deployment that seals owners' listing cursors.
#[async_trait]
pub trait CursorKeyStore: Send + Sync {
    /// The key that seals owners' listing cursors, one for the whole deployment:
    /// `drawn` (at random, by the caller) when none is kept yet, kept from then on;
    /// else the one kept first. Every process of a deployment gets the same, restart
    /// after restart.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] or [`StoreError::Corrupt`].
    async fn cursor_key(&self, drawn: CursorKey) -> Result<CursorKey, StoreError>;
}
