//! The key that seals owners' listing cursors ([`CursorKeyStore`]), drawn by the
//! first process that needed it.

use async_trait::async_trait;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;

use sas_core::ports::{CursorKey, CursorKeyStore, StoreError};

use super::DynamoStore;
use super::requests::key;

#[async_trait]
impl CursorKeyStore for DynamoStore {
    async fn cursor_key(&self, drawn: CursorKey) -> Result<CursorKey, StoreError> {
        let kept = async || -> Result<Option<CursorKey>, StoreError> {
            let Some(item) = self.item("SECRET#cursor", "SECRET").await? else {
                return Ok(None);
            };
            item.get("secret")
                .and_then(|v| v.as_b().ok())
                .and_then(|secret| CursorKey::try_from(secret.as_ref()).ok())
                .map(Some)
                .ok_or_else(|| StoreError::Corrupt("a cursor key that is not 32 bytes".into()))
        };
        if let Some(key) = kept().await? {
            return Ok(key);
        }
        let mut item = key("SECRET#cursor".to_owned(), "SECRET".to_owned());
        item.insert("secret".to_owned(), AttributeValue::B(Blob::new(drawn)));
        match self.put_new(item).await {
            Ok(()) => Ok(drawn),
            Err(StoreError::Conflict) => kept().await?.ok_or_else(|| {
                StoreError::Corrupt("the cursor key, there a moment ago, is gone".into())
            }),
            Err(error) => Err(error),
        }
    }
}
