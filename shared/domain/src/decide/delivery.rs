//! What a task owes others once written: its caller's notifications (its outbox)
//! and an operator's alert, each kept in the task until known delivered.

use std::time::Duration;

use crate::callback::Token;
use crate::ids::QueueName;
use crate::messages::{Alert, CallbackWait, Notification};
use crate::task::{Outbound, Task, Waiting};
use crate::time::Timestamp;

use super::change::Change;
use super::{Decision, Effect, Verdict};

/// How long an alert may stay unpublished before the supervisor raises it again; then
/// as long as it has been waiting (the waits double), up to [`MAX_ALERT_REDELIVERY`].
pub const ALERT_REDELIVERY: Duration = Duration::from_secs(60);

/// The longest wait before an unpublished alert is raised again.
pub const MAX_ALERT_REDELIVERY: Duration = Duration::from_secs(3600);

/// How long a notification not known sent is sent again before it is dropped.
pub const MAX_NOTIFICATION_AGE: Duration = Duration::from_secs(24 * 3600);

/// The most notifications a task keeps unsent; past it, the oldest is dropped.
pub const MAX_OUTBOX: usize = 32;

impl Change {
    /// Tells the caller the task's state, as this change writes it.
    pub(crate) fn notify(&mut self) {
        if let Some(queue) = self.task.notify.clone() {
            let error = self.task.error.clone();
            self.tell(queue, error);
        }
    }

    /// Tells `queue` the task's state as this change writes it, with `error`: the
    /// notification is written in the task's outbox with the change, and sent once
    /// it is written. A change tells a queue once, of the state it writes: one that
    /// passes through a state (Compensating on its way to Error, with nothing to undo)
    /// tells only where it ends, so that a version names one notification.
    pub(crate) fn tell(&mut self, queue: QueueName, error: Option<String>) {
        let outbound = Outbound {
            queue,
            notification: Notification {
                task_id: self.task.id.to_local(),
                state: self.task.state,
                version: self.task.version,
                error,
                at: self.now,
                callbacks: callback_waits(&self.task),
                repair: self.repair.clone(),
            },
        };
        let same = |other: &Outbound| {
            other.queue == outbound.queue
                && other.notification.version == outbound.notification.version
        };
        self.effects
            .retain(|effect| !matches!(effect, Effect::Notify { outbound, .. } if same(outbound)));
        let outbox = &mut self.task.outbox;
        outbox.retain(|other| !same(other));
        if outbox.len() >= MAX_OUTBOX {
            outbox.remove(0);
        }
        outbox.push(outbound.clone());
        self.effects.push(Effect::Notify {
            task_id: self.task.id.clone(),
            outbound,
        });
    }

    /// Sends again the notifications not known sent, but for those that could not be
    /// for [`MAX_NOTIFICATION_AGE`] (their queue gone, say), which are dropped.
    pub(crate) fn notify_again(&mut self) {
        let now = self.now;
        self.task
            .outbox
            .retain(|outbound| outbound.notification.at.until(now) < MAX_NOTIFICATION_AGE);
        for outbound in &self.task.outbox {
            self.effects.push(Effect::Notify {
                task_id: self.task.id.clone(),
                outbound: outbound.clone(),
            });
        }
    }

    /// Keeps a lease on a task with something to deliver since `since` (an alert, a
    /// notification), for the supervisor to deliver it again when the lease expires:
    /// after a minute, then after as long as it has waited, up to an hour.
    pub(crate) fn hold_for_delivery(&mut self, since: Timestamp) {
        let wait = since
            .until(self.now)
            .clamp(ALERT_REDELIVERY, MAX_ALERT_REDELIVERY);
        self.task.complete_by = Some(self.now.plus(wait));
    }
}

/// Once `alert` is published: the task keeps it no longer, nor the lease that
/// would have it raised again. Nothing to do when it was cleared already (a
/// duplicate publication, or the task resubmitted meanwhile).
#[must_use]
pub fn alert_published(task: &Task, alert: &Alert, now: Timestamp) -> Decision {
    if task.pending_alert.as_ref() != Some(alert) {
        return Decision::ignore(Verdict::AlertClearedAlready);
    }
    let mut change = Change::of(task, now);
    change.task.pending_alert = None;
    change.task.complete_by = None;
    change.done(Verdict::AlertPublished)
}

/// Once `sent` (queues and versions of notifications) are sent: the task keeps them
/// no longer, nor, once it has ended with nothing else to deliver, its lease.
#[must_use]
pub fn notifications_sent(task: &Task, sent: &[(QueueName, u64)], now: Timestamp) -> Decision {
    let is_sent = |outbound: &Outbound| {
        sent.iter().any(|(queue, version)| {
            *queue == outbound.queue && *version == outbound.notification.version
        })
    };
    if !task.outbox.iter().any(is_sent) {
        return Decision::ignore(Verdict::NotificationsClearedAlready);
    }
    let mut change = Change::of(task, now);
    change.task.outbox.retain(|outbound| !is_sent(outbound));
    if task.state.is_final() && task.pending_alert.is_none() {
        change.task.complete_by = None;
    }
    change.done(Verdict::NotificationsSent)
}

/// The steps of `task` that wait for their callback, with their tokens.
#[must_use]
pub fn callback_waits(task: &Task) -> Vec<CallbackWait> {
    task.steps
        .iter()
        .enumerate()
        .filter_map(|(index, step)| match step.waiting {
            Some(Waiting::Callback { until, after_call }) => Some(CallbackWait {
                step: step.name.to_string(),
                token: Token::issue(task, index, after_call)?,
                until,
            }),
            _ => None,
        })
        .collect()
}
