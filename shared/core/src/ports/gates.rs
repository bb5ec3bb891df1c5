//! The state store's gates of flow control: each gate's state and its line.

use async_trait::async_trait;

use sas_domain::flow::{Gate, Waiter};

use super::StoreError;

/// The gates of flow control ([`sas_domain::flow`]): each one's state, versioned, and
/// its line of calls waiting.
#[async_trait]
pub trait GateStore: Send + Sync {
    /// Gate `gate`'s state ([`Gate::default`] for one never written) and the first
    /// `first` calls of its line, in the order of their positions (then their ids).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] or [`StoreError::Corrupt`].
    async fn gate(&self, gate: &str, first: usize) -> Result<(Gate, Vec<Waiter>), StoreError>;

    /// Puts a call in the line of its gate [`Waiter::gate`]; again, in the same place.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn enqueue(&self, waiter: &Waiter) -> Result<(), StoreError>;

    /// Writes gate `name`'s state `gate`, its version one more than the version read
    /// (on condition of that one), and takes `taken` off its line, in one transaction.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when the gate was written since it was read; then
    /// nothing is.
    async fn update_gate(
        &self,
        name: &str,
        gate: &Gate,
        taken: &[Waiter],
    ) -> Result<(), StoreError>;
}
