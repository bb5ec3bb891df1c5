//! The values stored apart ([`Payloads`]) in a directory beside the database: one
//! file a value, named by its hash, written whole to a file of its own and renamed
//! into place, so that a value is there whole or not at all; fsynced, file and
//! directory, before the write is answered where commits are ([`Durability::Full`]).
//! One directory for every scope: a local task is never deleted, nor are its values,
//! so the same value in two scopes is kept once.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use async_trait::async_trait;

use sas_core::ports::{PayloadError, Payloads};
use sas_domain::payload::ValueScope;

use crate::Durability;

/// A directory of values.
pub struct DirectoryPayloads {
    dir: PathBuf,
    durability: Durability,
}

impl DirectoryPayloads {
    /// The values in `dir`, created if it is not there.
    ///
    /// # Errors
    /// When the directory cannot be created.
    pub fn open(dir: &Path, durability: Durability) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
            durability,
        })
    }

    /// The file of the value `sha256`; an error for a name that is not a hash.
    fn file(&self, sha256: &str) -> Result<PathBuf, PayloadError> {
        let sha256 = PayloadError::unless_hash(sha256)?;
        Ok(self.dir.join(&sha256[..2]).join(sha256))
    }
}

/// Writes `text` to `file` through a file of its own renamed into place; with
/// `sync`, the file and its directory flushed first.
fn write_whole(file: &Path, text: &[u8], sync: bool) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut temporary = tempfile::NamedTempFile::new_in(dir)?;
    temporary.write_all(text)?;
    if sync {
        temporary.as_file().sync_all()?;
    }
    temporary.persist(file).map_err(|error| error.error)?;
    if sync {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn failed(error: impl std::error::Error + Send + Sync + 'static) -> PayloadError {
    PayloadError(Box::new(error))
}

#[async_trait]
impl Payloads for DirectoryPayloads {
    async fn put(&self, _: &ValueScope, sha256: &str, text: Vec<u8>) -> Result<(), PayloadError> {
        let file = self.file(sha256)?;
        if tokio::fs::try_exists(&file).await.unwrap_or(false) {
            return Ok(());
        }
        let sync = self.durability == Durability::Full;
        tokio::task::spawn_blocking(move || write_whole(&file, &text, sync))
            .await
            .map_err(failed)?
            .map_err(failed)
    }

    async fn get(&self, _: &ValueScope, sha256: &str) -> Result<Option<Vec<u8>>, PayloadError> {
        match tokio::fs::read(self.file(sha256)?).await {
            Ok(text) => Ok(Some(text)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(failed(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_value_is_read_back_whole_and_a_name_that_is_not_a_hash_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let payloads = DirectoryPayloads::open(dir.path(), Durability::Full).expect("open");
        let text = b"{\"large\": true}".to_vec();
        let scope = ValueScope::Upload;
        let reference = sas_core::offload::store_apart(&payloads, &scope, text.clone())
            .await
            .expect("stored");
        let read = sas_core::offload::fetch(&payloads, &scope, &reference).await;
        assert_eq!(read.expect("read"), text);
        let unknown = payloads.get(&scope, &"0".repeat(64)).await;
        assert!(unknown.expect("read").is_none());
        assert!(payloads.get(&scope, "../state.db").await.is_err());
    }
}
