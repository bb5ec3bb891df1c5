//! The second line of defence against bad input: a panic while handling one request
//! or one message is caught where it happened, counted, and turned into that one
//! request's or message's failure, so that the process, and the other records of its
//! batch, go on. None is expected: every parser refuses what it cannot read.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt as _;

use crate::ports::Metrics;

/// The metric a caught panic counts, by the function's name (its alarm's metric).
pub const PANICS: &str = "Panics";

/// A panic caught while handling one request or message.
#[derive(Debug, thiserror::Error)]
#[error("the handler panicked: {message}")]
pub struct Panicked {
    /// What the panic said, when it said it as text.
    pub message: String,
}

/// Runs `handling` (built by `start`, which may panic too), catching a panic: it is
/// logged, counted in [`PANICS`] with `what` (`"record"`, `"request"`) as the
/// dimension, and returned as [`Panicked`].
///
/// The state a panic interrupts is the handler's own (its task's write is a
/// conditional one, and the message comes again): nothing shared is left half
/// changed, so catching it is sound.
///
/// # Errors
/// [`Panicked`], when it panicked.
pub async fn caught<F, T>(
    metrics: &dyn Metrics,
    what: &'static str,
    start: impl FnOnce() -> F,
) -> Result<T, Panicked>
where
    F: Future<Output = T>,
{
    let outcome = match std::panic::catch_unwind(AssertUnwindSafe(start)) {
        Ok(handling) => AssertUnwindSafe(handling).catch_unwind().await,
        Err(panic) => Err(panic),
    };
    outcome.map_err(|panic| {
        let panicked = Panicked {
            message: panic_message(panic.as_ref()),
        };
        tracing::error!(error = %panicked, what, "a panic was caught; only this {what} failed");
        metrics.count(PANICS, ("Handling", what), 1);
        panicked
    })
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(not text)".to_owned())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::ports::{Dimension, Unit};

    #[derive(Default)]
    struct Counted(Mutex<Vec<(&'static str, String, u64)>>);

    impl Metrics for Counted {
        fn put(&self, name: &'static str, dimensions: &[Dimension<'_>], value: u64, _: Unit) {
            let mut counted = self.0.lock().expect("not poisoned");
            counted.push((name, dimensions[0].1.to_owned(), value));
        }
    }

    #[tokio::test]
    async fn a_panic_before_or_after_an_await_is_caught_counted_and_named() {
        let metrics = Counted::default();
        let before = caught(&metrics, "record", || -> std::future::Ready<()> {
            panic!("at the start")
        });
        assert_eq!(before.await.expect_err("panicked").message, "at the start");
        let after = caught(&metrics, "request", || async {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let byte = 7;
            panic!("after a wait: {byte}")
        });
        let panicked: Result<(), _> = after.await;
        assert_eq!(panicked.expect_err("panicked").message, "after a wait: 7");
        let fine = caught(&metrics, "record", || async { 42 }).await;
        assert_eq!(fine.expect("no panic"), 42);
        let counted = metrics.0.lock().expect("not poisoned").clone();
        assert_eq!(
            counted,
            [
                (PANICS, "record".to_owned(), 1),
                (PANICS, "request".to_owned(), 1)
            ]
        );
    }
}
