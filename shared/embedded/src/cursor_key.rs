//! The key that seals owners' listing cursors ([`CursorKeyStore`]), kept by the
//! first caller.

use async_trait::async_trait;

use sas_core::ports::{CursorKey, CursorKeyStore, StoreError};

use crate::Embedded;
use crate::schema::{execute, query_row, unavailable};

#[async_trait]
impl CursorKeyStore for Embedded {
    async fn cursor_key(&self, drawn: CursorKey) -> Result<CursorKey, StoreError> {
        self.write(move |c| {
            execute(
                c,
                "INSERT INTO secrets (name, value) VALUES ('cursor_key', ?1)
                 ON CONFLICT (name) DO NOTHING",
                [drawn.as_slice()],
            )
            .map_err(unavailable)?;
            let kept: Vec<u8> = query_row(
                c,
                "SELECT value FROM secrets WHERE name = 'cursor_key'",
                [],
                |row| row.get(0),
            )
            .map_err(unavailable)?;
            CursorKey::try_from(kept).map_err(|kept| {
                StoreError::Corrupt(format!("a cursor key of {} bytes", kept.len()).into())
            })
        })
        .await
    }
}
