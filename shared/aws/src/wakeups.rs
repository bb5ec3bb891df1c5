//! Schedules' wake-ups on EventBridge Scheduler: one schedule of its own for each of
//! the project's, in the stack's schedule group, invoking the supervisor function with
//! `{"schedule": NAME}` at each wake-up ([`Cadence::wake_up`]); the supervisor then
//! starts the runs that have come.
//!
//! [`Cadence::wake_up`]: sas_domain::schedule::Cadence::wake_up

use async_trait::async_trait;
use aws_sdk_scheduler::Client;
use aws_sdk_scheduler::types::{FlexibleTimeWindow, FlexibleTimeWindowMode, ScheduleState, Target};
use aws_types::SdkConfig;
use serde_json::json;

use sas_core::ports::{WakeupError, Wakeups};
use sas_domain::schedule::Schedule;
use sas_lambda::config::WakeupTarget;
use sas_lambda::sdk::{SdkClient, sdk_client};

/// Wake-ups as EventBridge Scheduler schedules.
pub struct EventBridgeWakeups {
    client: SdkClient<Client>,
    target: WakeupTarget,
}

impl EventBridgeWakeups {
    /// Wake-ups in `target`'s group, invoking its function under its role.
    #[must_use]
    pub fn new(sdk: &SdkConfig, target: WakeupTarget) -> Self {
        Self {
            client: sdk_client(sdk, Client::new),
            target,
        }
    }
}

fn failed(error: impl std::error::Error + Send + Sync + 'static) -> WakeupError {
    WakeupError(Box::new(error))
}

#[async_trait]
impl Wakeups for EventBridgeWakeups {
    async fn set(&self, schedule: &Schedule) -> Result<(), WakeupError> {
        let cadence = schedule.cadence().map_err(failed)?;
        let target = Target::builder()
            .arn(&self.target.function_arn)
            .role_arn(&self.target.role_arn)
            .input(json!({ "schedule": schedule.name }).to_string())
            .build()
            .map_err(failed)?;
        let window = FlexibleTimeWindow::builder()
            .mode(FlexibleTimeWindowMode::Off)
            .build()
            .map_err(failed)?;
        let state = if schedule.state.paused {
            ScheduleState::Disabled
        } else {
            ScheduleState::Enabled
        };
        // Both requests take the same description of the schedule.
        macro_rules! described {
            ($request:expr) => {
                $request
                    .group_name(&self.target.group)
                    .name(&schedule.name)
                    .schedule_expression(cadence.wake_up())
                    .schedule_expression_timezone(&schedule.spec.time_zone)
                    .flexible_time_window(window.clone())
                    .target(target.clone())
                    .state(state.clone())
            };
        }
        // Replaced where it is there, created where it is not.
        match described!(self.client.update_schedule()).send().await {
            Ok(_) => Ok(()),
            Err(error)
                if error
                    .as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                let created = described!(self.client.create_schedule()).send().await;
                created.map(drop).map_err(failed)
            }
            Err(error) => Err(failed(error)),
        }
    }

    async fn remove(&self, name: &str) -> Result<(), WakeupError> {
        let deleted = (self.client.delete_schedule())
            .group_name(&self.target.group)
            .name(name)
            .send()
            .await;
        match deleted {
            Err(error)
                if !error
                    .as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                Err(failed(error))
            }
            _ => Ok(()),
        }
    }
}
