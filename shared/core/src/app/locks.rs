//! Locks that keep this process's changes of one record one at a time.

use std::hash::{DefaultHasher, Hash, Hasher};

/// Locks that keep this process's changes of one record (a gate, a task) one at a
/// time, striped: a record takes the lock its key hashes to, so that no record needs
/// a lock of its own (a few share one).
pub(super) struct Striped<const N: usize>([tokio::sync::Mutex<()>; N]);

impl<const N: usize> Default for Striped<N> {
    fn default() -> Self {
        Self(std::array::from_fn(|_| tokio::sync::Mutex::new(())))
    }
}

impl<const N: usize> Striped<N> {
    /// The lock of the record `key` names.
    pub(super) fn of(&self, key: &(impl Hash + ?Sized)) -> &tokio::sync::Mutex<()> {
        let stripe = stable_hash(key) % N as u64;
        &self.0[usize::try_from(stripe).unwrap_or_default()]
    }
}

/// A stable hash of `value` (the same in every run: a simulation replays).
pub(super) fn stable_hash(value: &(impl Hash + ?Sized)) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}
