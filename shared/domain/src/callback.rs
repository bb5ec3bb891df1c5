//! Callback tokens: the capability to end one wait of one step.
//!
//! A token names its task, run, step and attempt, signed (HMAC-SHA-256) with the
//! task's own secret ([`Task::callback_key`]), drawn at random when the task was
//! created and never shown: it cannot be guessed or forged, and it is bound to the
//! wait it was made for. Nothing is stored per token: a retry's new attempt makes a
//! new token, and the old one, still well signed, finds its wait over.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::ids::TaskId;
use crate::task::Task;

/// The bytes of a token's signature: 128 bits.
const SIGNATURE_BYTES: usize = 16;

/// A callback token, read from its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The task.
    pub task: TaskId,
    /// Its run when the wait began.
    pub run: u32,
    /// The step, by index.
    pub step: usize,
    /// The step's attempt that waits.
    pub attempt: u32,
    signature: Vec<u8>,
}

impl Token {
    /// The token for attempt `attempt` of `task`'s step `step`, in its current run;
    /// `None` for a task created before tasks had a secret.
    #[must_use]
    pub fn issue(task: &Task, step: usize, attempt: u32) -> Option<String> {
        let mac = signer(task, step, task.run, attempt)?;
        Some(format!(
            "{}.{}.{step}.{attempt}.{}",
            URL_SAFE_NO_PAD.encode(task.id.as_str()),
            task.run,
            URL_SAFE_NO_PAD.encode(&mac.finalize().into_bytes()[..SIGNATURE_BYTES]),
        ))
    }

    /// The token `text` is, if it has a token's shape; whether it is genuine is for
    /// [`Self::is_signed_for`] to say, once its task is read.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('.');
        let task = URL_SAFE_NO_PAD.decode(parts.next()?).ok()?;
        let task = TaskId::parse(std::str::from_utf8(&task).ok()?).ok()?;
        let run = parts.next()?.parse().ok()?;
        let step = parts.next()?.parse().ok()?;
        let attempt = parts.next()?.parse().ok()?;
        let signature = URL_SAFE_NO_PAD.decode(parts.next()?).ok()?;
        if parts.next().is_some() || signature.len() != SIGNATURE_BYTES {
            return None;
        }
        Some(Self {
            task,
            run,
            step,
            attempt,
            signature,
        })
    }

    /// Whether `task` (the one it names) signed it: compared in constant time.
    #[must_use]
    pub fn is_signed_for(&self, task: &Task) -> bool {
        task.id == self.task
            && signer(task, self.step, self.run, self.attempt)
                .is_some_and(|mac| mac.verify_truncated_left(&self.signature).is_ok())
    }
}

/// The MAC of a wait, keyed with the task's secret; `None` without one.
fn signer(task: &Task, step: usize, run: u32, attempt: u32) -> Option<Hmac<Sha256>> {
    if task.callback_key.is_empty() {
        return None;
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(task.callback_key.as_bytes()).ok()?;
    mac.update(format!("{}\n{run}\n{step}\n{attempt}", task.id.as_str()).as_bytes());
    Some(mac)
}

/// A new task's secret: 122 bits from the operating system's generator (a random
/// UUID), as many as a token's signature holds, and no more bytes than needed in a
/// record written at every step.
#[must_use]
pub fn new_key() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
