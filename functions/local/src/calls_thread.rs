//! The agents' calls on a thread of their own: each call (its request built, sent,
//! and its answer read, over a connection this thread keeps) runs on a runtime with
//! one thread beside the process's workers, which only hand it the request and take
//! back its result.
//!
//! At 64 clients the one worker thread was what bounded the process, and a fifth of
//! its time went to sending requests to the services (loopback TCP runs the
//! receiver's side in the sender's system call). With the calls off it, 64 clients
//! ran 3-11% more tasks a second with direct ingestion (medians of four sets of
//! alternating pairs) and about as many buffered, and the p50 at 1 client stayed
//! within 2% (BENCHMARKS.md, "Tried and kept").

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use sas_core::ports::{RemoteCall, RemoteError, RemoteRequest};

/// Makes `remote`'s calls on its own thread, which stops when this is dropped.
pub(crate) struct CallsThread {
    remote: Arc<dyn RemoteCall>,
    calls: Handle,
    /// Dropped with this, it ends the thread's runtime, and any call still on it.
    _stop: oneshot::Sender<()>,
}

impl CallsThread {
    /// Starts the thread.
    ///
    /// # Errors
    /// When the thread or its runtime cannot be made.
    pub(crate) fn start(remote: Arc<dyn RemoteCall>) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let calls = runtime.handle().clone();
        calls.spawn(keep_a_timer_near());
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("sas-calls".into())
            .spawn(move || {
                // Either way the sender went: this is dropped.
                let _ = runtime.block_on(stopped);
            })?;
        Ok(Self {
            remote,
            calls,
            _stop: stop,
        })
    }
}

#[async_trait]
impl RemoteCall for CallsThread {
    async fn call(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        let (remote, request) = (Arc::clone(&self.remote), request.clone());
        let mut call = Aborting(self.calls.spawn(async move { remote.call(&request).await }));
        match (&mut call.0).await {
            Ok(result) => result,
            // A call that panicked panics here, as it would have on this thread.
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(_) => Err(RemoteError::Transient(
                "the process is stopping: the call was not finished".to_owned(),
            )),
        }
    }
}

/// How far ahead the thread's runtime always has a timer.
const NEAR: Duration = Duration::from_secs(1);

/// Keeps a timer at most [`NEAR`] ahead on this runtime. Tokio wakes its driver
/// (an `eventfd` write, and one more turn of `epoll_wait`) whenever a timer is set
/// that expires before every other; each call sets one, its timeout, usually
/// minutes ahead. Behind this timer, a call's is set without either: a wake-up a
/// second instead of one a call.
async fn keep_a_timer_near() {
    loop {
        tokio::time::sleep(NEAR).await;
    }
}

/// A call on the calls' thread, aborted there if its caller lets go of it first, as
/// a call on the caller's own thread would have been dropped with its future.
struct Aborting<T>(JoinHandle<T>);

impl<T> Drop for Aborting<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use sas_domain::messages::{Method, Payload};

    use super::*;

    /// Answers with the name of the thread it was called on; service `panics` panics,
    /// and `hangs` never answers, and tells `dropped` when its call is let go.
    #[derive(Default)]
    struct ThreadName {
        dropped: Arc<tokio::sync::Notify>,
    }

    /// Tells its `Notify` when dropped.
    struct Told(Arc<tokio::sync::Notify>);

    impl Drop for Told {
        fn drop(&mut self) {
            self.0.notify_one();
        }
    }

    #[async_trait]
    impl RemoteCall for ThreadName {
        async fn call(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
            match request.service.as_str() {
                "panics" => panic!("a call that panics"),
                "hangs" => {
                    let _told = Told(Arc::clone(&self.dropped));
                    std::future::pending().await
                }
                _ => Ok(Value::from(std::thread::current().name().unwrap_or(""))),
            }
        }
    }

    fn request(service: &str) -> RemoteRequest {
        RemoteRequest {
            service: service.into(),
            method: Method::Post,
            path: "/".into(),
            idempotency_key: "t/1/step".into(),
            payload: Payload::of(&serde_json::json!({})).expect("JSON"),
            timeout: Duration::from_secs(5),
            trace: None,
        }
    }

    #[tokio::test]
    async fn a_call_is_made_on_the_calls_thread_and_its_panic_comes_back() {
        let calls = CallsThread::start(Arc::new(ThreadName::default())).expect("the thread");
        let answer = calls.call(&request("svc")).await.expect("an answer");
        assert_eq!(answer, Value::from("sas-calls"));

        let panicked = tokio::spawn(async move { calls.call(&request("panics")).await }).await;
        assert!(panicked.expect_err("the call panicked").is_panic());
    }

    /// A call whose caller lets go of it (a timeout, a stop) is let go on the calls'
    /// thread too, as it was when it ran on the caller's: nothing is sent for it later.
    #[tokio::test]
    async fn a_call_let_go_by_its_caller_is_let_go_on_the_calls_thread() {
        let remote = ThreadName::default();
        let dropped = Arc::clone(&remote.dropped);
        let calls = CallsThread::start(Arc::new(remote)).expect("the thread");
        let hangs = request("hangs");
        let waited = tokio::time::timeout(Duration::from_millis(50), calls.call(&hangs)).await;
        assert!(waited.is_err(), "the call never answers");
        let let_go = tokio::time::timeout(Duration::from_secs(5), dropped.notified());
        assert!(let_go.await.is_ok(), "the call still runs on its thread");
    }
}
