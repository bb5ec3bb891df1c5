//! The records of one SQS batch, handled at once, whose sends go together
//! ([`SendGate`]).

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

tokio::task_local! {
    /// The SQS batch whose record is being handled, when there is one.
    pub(super) static GATE: Arc<SendGate>;
}

/// The records of one SQS batch, handled at once: a record's send waits until every
/// record still at work is sending too, and then they all go together. Without it,
/// the first record to send would go alone and the rest in the next request: about
/// twice the SendMessageBatch calls. A record's send waits, at most, for the slowest
/// record of its batch to reach its own send or its end.
pub struct SendGate {
    records: usize,
    state: Mutex<GateState>,
    open: Notify,
}

#[derive(Default)]
struct GateState {
    /// Records waiting at the gate.
    sending: usize,
    /// Records handled.
    finished: usize,
    /// How often the gate has opened.
    openings: u64,
}

impl SendGate {
    /// A gate for a batch of `records`.
    #[must_use]
    pub fn new(records: usize) -> Arc<Self> {
        Arc::new(Self {
            records,
            state: Mutex::default(),
            open: Notify::new(),
        })
    }

    /// Handles one record of the batch, its sends through the gate.
    pub async fn handle<F: Future>(self: &Arc<Self>, handling: F) -> F::Output {
        let _finished = Finished(Arc::clone(self));
        GATE.scope(Arc::clone(self), handling).await
    }

    fn state(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens the gate when every record not yet handled is waiting at it.
    fn open_if_all_wait(&self, state: &mut GateState) {
        if state.sending > 0 && state.sending + state.finished >= self.records {
            state.sending = 0;
            state.openings += 1;
            self.open.notify_waiters();
        }
    }

    /// Waits until every record not yet handled is sending too.
    pub(super) async fn pass(&self) {
        let opened = self.open.notified();
        tokio::pin!(opened);
        opened.as_mut().enable();
        {
            let mut state = self.state();
            let openings = state.openings;
            state.sending += 1;
            self.open_if_all_wait(&mut state);
            if state.openings != openings {
                return;
            }
        }
        opened.await;
    }
}

/// Counts a record handled, however its handling ends.
struct Finished(Arc<SendGate>);

impl Drop for Finished {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.finished += 1;
        self.0.open_if_all_wait(&mut state);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{GATE, SendGate};

    #[tokio::test]
    async fn the_sends_of_a_batch_wait_for_every_record_still_at_work() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let gate = SendGate::new(4);
        let arrived = AtomicUsize::new(0);
        let arrived = &arrived;
        // Three records send after work of different lengths, one ends without a send.
        let record = |work: u64, sends: bool| {
            let gate = Arc::clone(&gate);
            async move {
                gate.handle(async move {
                    tokio::time::sleep(Duration::from_millis(work)).await;
                    if !sends {
                        return None;
                    }
                    arrived.fetch_add(1, Ordering::SeqCst);
                    GATE.with(Arc::clone).pass().await;
                    Some(arrived.load(Ordering::SeqCst))
                })
                .await
            }
        };
        let passed = futures_util::future::join_all([
            record(1, true),
            record(30, true),
            record(5, false),
            record(15, true),
        ])
        .await;
        assert_eq!(
            passed,
            [Some(3), Some(3), None, Some(3)],
            "none passed before the last sender arrived"
        );
        assert_eq!(gate.state().openings, 1);

        // Outside a batch, a send does not wait.
        assert!(GATE.try_with(|_| ()).is_err());
    }
}
