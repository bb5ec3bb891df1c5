//! Operator alerts.

use async_trait::async_trait;

use sas_domain::messages::Alert;

use super::Cause;

/// Why an alert could not be raised.
#[derive(Debug, thiserror::Error)]
#[error("cannot raise alert")]
pub struct AlertError(#[source] pub Cause);

/// Operator alerts (SNS in AWS).
#[async_trait]
pub trait Alerts: Send + Sync {
    /// Raises an alert.
    ///
    /// # Errors
    /// [`AlertError`] when the alert channel fails.
    async fn raise(&self, alert: &Alert) -> Result<(), AlertError>;
}
