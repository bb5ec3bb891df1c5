//! How many expiry shards may hold leases: the most any process of the deployment
//! has written leases into, kept in the table ([`DynamoStore::shards`]).

use std::sync::atomic::Ordering;

use sas_core::ports::StoreError;
use sas_lambda::config::MAX_LEASE_SHARDS;

use super::DynamoStore;
use super::requests::{key, n};

/// The key of the item that keeps the most expiry shards written into
/// ([`DynamoStore::shards`]).
const SHARDS: (&str, &str) = ("SETTINGS#lease-shards", "SETTINGS");

impl DynamoStore {
    /// The expiry shards that may hold leases: the most that any process of this
    /// deployment has written leases into, kept in the table, raised to this
    /// process's `LEASE_SHARDS` before it writes a lease. A `LeaseShards` lowered on
    /// a running stack would otherwise leave the leases in the shards above its new
    /// count where no sweep reads them: tasks nobody would recover. Read once a
    /// process, as the count only grows; [`DynamoStore::shards_now`] reads it again.
    pub(super) async fn shards(&self) -> Result<u32, StoreError> {
        let known = || match self.shards.load(Ordering::Relaxed) {
            0 => None,
            known => Some(known),
        };
        if let Some(known) = known() {
            return Ok(known);
        }
        let _first = self.first_shards_read.lock().await;
        match known() {
            Some(known) => Ok(known),
            None => self.shards_now().await,
        }
    }

    /// [`DynamoStore::shards`], read from the table now: a sweep's pass starts from
    /// it, so that a process that read it before a deployment with more shards
    /// reads their leases too.
    pub(super) async fn shards_now(&self) -> Result<u32, StoreError> {
        let ours = self.settings.lease_shards.max(1);
        let kept = self.kept_shards().await?;
        let widest = if kept >= ours {
            kept
        } else {
            let mut item = key(SHARDS.0.to_owned(), SHARDS.1.to_owned());
            item.insert("most".to_owned(), n(ours));
            match self.put_over(item, Some(("most", "<", n(ours)))).await {
                Ok(()) => ours,
                // Raised meanwhile, by a process with more.
                Err(StoreError::Conflict) => self.kept_shards().await?.max(ours),
                Err(error) => return Err(error),
            }
        };
        self.shards.fetch_max(widest, Ordering::Relaxed);
        Ok(widest)
    }

    /// The expiry shards a listing reads: [`DynamoStore::shards`]'s, without raising
    /// the table's count to this process's. Only a process that writes a lease
    /// needs to, and a listing writes nothing (the API's read function may not):
    /// shards above the count the table keeps hold no lease yet.
    pub(super) async fn shards_to_list(&self) -> Result<u32, StoreError> {
        if let known @ 1.. = self.shards.load(Ordering::Relaxed) {
            return Ok(known);
        }
        let (kept, ours) = (self.kept_shards().await?, self.settings.lease_shards.max(1));
        // Known now only if it covers this process's: a write's raise is still due.
        if kept >= ours {
            self.shards.fetch_max(kept, Ordering::Relaxed);
        }
        Ok(kept.max(ours))
    }

    /// The most expiry shards the table keeps as written into (0 before any lease).
    async fn kept_shards(&self) -> Result<u32, StoreError> {
        let Some(item) = self.item(SHARDS.0, SHARDS.1).await? else {
            return Ok(0);
        };
        item.get("most")
            .and_then(|v| v.as_n().ok())
            .and_then(|most| most.parse().ok())
            .filter(|most| (1..=MAX_LEASE_SHARDS).contains(most))
            .ok_or_else(|| {
                StoreError::Corrupt(
                    format!(
                        "{}'s `most` is not a count of expiry shards, 1 to {MAX_LEASE_SHARDS}: \
                         set it to the most LeaseShards ever deployed",
                        SHARDS.0
                    )
                    .into(),
                )
            })
    }
}
