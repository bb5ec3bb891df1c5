//! Callback tokens: the capability to end one wait of one step.
//!
//! A token names its task, run, step and attempt, signed (HMAC-SHA-256) with the
//! task's own secret ([`Task::callback_key`]), drawn at random when the task was
//! created and never shown: it cannot be guessed or forged, and it is bound to the
//! wait it was made for. Nothing is stored per token: a retry's new attempt of a wait
//! makes a new token, and the old one, still well signed, finds its wait over. A
//! call that waits for its callback is the exception ([`Token::issue`]).

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
    /// The step's attempt that waits; 0 for every attempt of a call under one
    /// idempotency key.
    pub attempt: u32,
    signature: Vec<u8>,
}

impl Token {
    /// The token of the wait of `task`'s step `step` for its callback, now; `None`
    /// for a task created before tasks had a secret.
    ///
    /// A step that calls its service first (`after_call`) has one token for every
    /// attempt of its call under one idempotency key: a service deduplicates calls by
    /// their key, and keeps the token of the first it took, so a retry must carry
    /// that one. A new token per attempt would be one the service never keeps, and a
    /// new key per attempt would have the service act twice. A wait that calls
    /// nothing has a token per attempt, told to whoever acts on it: a retry waits
    /// under a new one.
    #[must_use]
    pub fn issue(task: &Task, step: usize, after_call: bool) -> Option<String> {
        let (run, attempt) = wait_of(task, step, after_call)?;
        let mac = signer(task, step, run, attempt)?;
        Some(format!(
            "{}.{run}.{step}.{attempt}.{}",
            URL_SAFE_NO_PAD.encode(task.id.as_str()),
            URL_SAFE_NO_PAD.encode(&mac.finalize().into_bytes()[..SIGNATURE_BYTES]),
        ))
    }

    /// Whether it is the token of the current wait of its step of `task`
    /// ([`Self::issue`]), whether it is signed aside.
    #[must_use]
    pub fn is_current(&self, task: &Task, after_call: bool) -> bool {
        wait_of(task, self.step, after_call) == Some((self.run, self.attempt))
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

/// The run and the attempt that name the wait of `task`'s step `step` for its
/// callback ([`Token::issue`]): a call's, its key's run and no attempt; a state
/// machine's call, its key's run and the execution's attempt (a visit's, or a retry
/// of it: each a call of its own, with its own token, as in Step Functions).
fn wait_of(task: &Task, step: usize, after_call: bool) -> Option<(u32, u32)> {
    let record = task.steps.get(step)?;
    Some(if after_call {
        let attempt = task.machine.as_ref().map_or(0, |run| run.attempts);
        (record.key_run_in(task.run), attempt)
    } else {
        (task.run, record.attempt)
    })
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
