//! The queues and the alert channel as the simulation's actors see them: sends
//! interleaved, crashing, delayed and failing; alerts not published.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sas_core::ports::{AlertError, Alerts, OutgoingMessage, QueueError, Queues};
use sas_domain::ids::QueueName;
use sas_domain::messages::Alert;
use sas_testkit::memory::Memory;

use super::CALLERS;
use super::world::Shared;

/// The queues as the actors see them: sends interleaved, crashing before or after,
/// and delayed at random (which reorders them).
pub(super) struct FaultyQueues {
    pub(super) inner: Arc<Memory>,
    pub(super) world: Shared,
}

#[async_trait]
impl Queues for FaultyQueues {
    async fn send(
        &self,
        queue: &QueueName,
        messages: &[OutgoingMessage],
    ) -> Result<(), QueueError> {
        self.world.interleave().await;
        let failed = || QueueError::new(queue, "simulated crash");
        if queue.as_str() == CALLERS && self.world.fault("notification send failed", 0.2) {
            self.world.note(format!("  a send to {queue} failed"));
            return Err(failed());
        }
        if self.world.fault("crash before a send", 0.03) {
            self.world.note(format!("  crash before a send to {queue}"));
            return Err(failed());
        }
        let mut delayed = messages.to_vec();
        for message in &mut delayed {
            if self.world.fault("message delayed", 0.1) {
                let extra = Duration::from_millis(self.world.world().random.u64(1..20_000));
                message.delay += extra;
            }
        }
        self.inner.send(queue, &delayed).await?;
        if self.world.fault("crash after a send", 0.03) {
            self.world.note(format!("  crash after a send to {queue}"));
            return Err(failed());
        }
        Ok(())
    }
}

/// The operators' alert channel: down at times, or the function dies before it
/// publishes (the same to the operator: no alert).
pub(super) struct FaultyAlerts {
    pub(super) inner: Arc<Memory>,
    pub(super) world: Shared,
}

#[async_trait]
impl Alerts for FaultyAlerts {
    async fn raise(&self, alert: &Alert) -> Result<(), AlertError> {
        self.world.interleave().await;
        if self.world.fault("alert not published", 0.2) {
            self.world
                .note(format!("  alert for {} not published", alert.task_id));
            return Err(AlertError("simulated publish failure".into()));
        }
        self.inner.raise(alert).await
    }
}
