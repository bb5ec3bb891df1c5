//! The simulated remote services: idempotent by key, with transient and permanent
//! errors, hangs past the deadline, outages and limits on calls at once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use sas_core::clock::Clock;
use sas_core::ports::{RemoteCall, RemoteError, RemoteRequest};
use sas_domain::ids::CHILD_SEPARATOR;
use sas_domain::machine::LAMBDA_AGENT;
use sas_domain::time::Timestamp;
use sas_testkit::ManualClock;
use serde_json::{Value, json};

use super::world::Shared;

/// A remote effect, as the simulated services applied it.
#[derive(Debug, Clone)]
pub(super) struct Applied {
    pub(super) task: String,
    pub(super) step: String,
    pub(super) compensation: bool,
}

/// The remote services: idempotent by key, with transient and permanent errors,
/// hangs past the deadline and outages.
pub(super) struct SimRemote {
    pub(super) world: Shared,
    pub(super) clock: Arc<ManualClock>,
    /// Effects applied, by (service, key).
    pub(super) applied: Mutex<BTreeMap<(String, String), Applied>>,
    /// Steps whose call fails for good, by (task, step).
    pub(super) doomed: Mutex<BTreeSet<(String, String)>>,
    /// Calls refused for good, by (service, key): the same key gets the same answer
    /// (a call of an earlier run, delivered again after a resubmission, is refused
    /// again, not applied).
    pub(super) refused: Mutex<BTreeSet<(String, String)>>,
    /// Services down until the instant given.
    pub(super) outages: Mutex<HashMap<String, Timestamp>>,
    /// The callback tokens of the calls applied, in the order they came.
    pub(super) tokens: Mutex<Vec<String>>,
    /// The services limited to so many calls at once, and the calls each has in
    /// progress, by idempotency key (a request delivered twice at once is one call,
    /// twice): never more.
    pub(super) limits: HashMap<String, u32>,
    pub(super) in_flight: Mutex<HashMap<String, HashMap<String, u32>>>,
}

/// A call in progress at a simulated service, counted while it lives.
struct InFlight<'a> {
    remote: &'a SimRemote,
    service: String,
    key: String,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut all = self
            .remote
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let calls = all.entry(self.service.clone()).or_default();
        if let Some(count) = calls.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                calls.remove(&self.key);
            }
        }
    }
}

impl SimRemote {
    pub(super) fn applied(&self) -> MutexGuard<'_, BTreeMap<(String, String), Applied>> {
        self.applied.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a call of `service` under `key` in progress, checking its limit.
    fn enter(&self, service: &str, key: &str) -> InFlight<'_> {
        let mut all = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let calls = all.entry(service.to_owned()).or_default();
        *calls.entry(key.to_owned()).or_default() += 1;
        let now = calls.len();
        if let Some(limit) = self
            .limits
            .get(service)
            .filter(|limit| now > **limit as usize)
        {
            drop(all);
            self.world.violation(format!(
                "service {service} had {now} calls at once, over its limit of {limit}"
            ));
        }
        InFlight {
            remote: self,
            service: service.to_owned(),
            key: key.to_owned(),
        }
    }

    pub(super) fn tokens(&self) -> Vec<String> {
        self.tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl RemoteCall for SimRemote {
    async fn call(&self, request: &RemoteRequest) -> Result<Value, RemoteError> {
        let _in_flight = self.enter(&request.service, &request.idempotency_key);
        self.world.interleave().await;
        let payload = request.payload.value();
        let Called {
            task,
            state,
            step,
            invoked,
        } = Called::of(request, &payload);
        let compensation = request.idempotency_key.ends_with("/compensate");
        let now = self.clock.now();
        if self
            .outages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&request.service)
            .is_some_and(|until| now < *until)
        {
            return Err(RemoteError::Transient("outage".into()));
        }
        if self.world.fault("remote outage", 0.005) {
            let until = now.plus(Duration::from_secs(self.world.world().random.u64(1..120)));
            self.outages
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(request.service.clone(), until);
            return Err(RemoteError::Transient("outage".into()));
        }
        if self.world.fault("remote transient error", 0.08) {
            return Err(RemoteError::Transient("503".into()));
        }
        let doomed = self
            .doomed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&(task.clone(), state));
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        let answered = (request.service.clone(), request.idempotency_key.clone());
        if refused.contains(&answered) || (doomed && !compensation) {
            refused.insert(answered);
            return Err(RemoteError::Permanent("refused".into()));
        }
        // A key answers as it first did: one applied is never refused after.
        if task.contains(CHILD_SEPARATOR)
            && !compensation
            && !self.applied().contains_key(&answered)
            && self.world.fault("a child's call refused for good", 0.02)
        {
            refused.insert(answered);
            return Err(RemoteError::Permanent("refused".into()));
        }
        drop(refused);
        if invoked
            && !self.applied().contains_key(&answered)
            && self.world.fault("a function's error", 0.05)
        {
            // The function failed before it did anything: the state's Retry or Catch
            // takes it.
            let error = json!({"errorType": "Flaky", "errorMessage": "a function's error"});
            return Ok(json!({"payload": error.to_string(), "function_error": "Unhandled"}));
        }
        if compensation
            && self
                .world
                .fault("remote permanent error on a compensation", 0.01)
        {
            return Err(RemoteError::Permanent("cannot undo".into()));
        }
        self.applied()
            .entry((request.service.clone(), request.idempotency_key.clone()))
            .or_insert(Applied {
                task,
                step,
                compensation,
            });
        // A function's payload is text: its token is read from it.
        let invoked_with = match invoked {
            true => serde_json::from_str(payload["payload"].as_str().unwrap_or_default())
                .unwrap_or_default(),
            false => Value::Null,
        };
        let token = [&payload, &invoked_with]
            .into_iter()
            .find_map(|sent| sent["callback_token"].as_str());
        if let Some(token) = token {
            // The service may call back from now on.
            self.tokens
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(token.to_owned());
        }
        if self.world.fault("remote hang past the deadline", 0.04) {
            // The effect is applied; the answer comes after the call's whole time.
            self.clock
                .advance(request.timeout + Duration::from_millis(1));
            return Err(RemoteError::Transient("timed out".into()));
        }
        let answer = json!({ "id": request.idempotency_key });
        Ok(match invoked {
            true => json!({ "payload": answer.to_string() }),
            false => answer,
        })
    }
}

/// What a call is of: its task, its step (a state machine's: its state and visit),
/// and whether it invokes a function (a state machine's Task).
struct Called {
    task: String,
    /// The step's name (a state machine's state).
    state: String,
    /// The step the effect is counted for: a state machine's visit of its state
    /// (`STATE#VISIT`), whose key is its own.
    step: String,
    invoked: bool,
}

impl Called {
    fn of(request: &RemoteRequest, payload: &Value) -> Self {
        if request.service != LAMBDA_AGENT {
            let field = |name: &str| payload[name].as_str().unwrap_or_default().to_owned();
            return Self {
                task: field("task_id"),
                state: field("step"),
                step: field("step"),
                invoked: false,
            };
        }
        // A function's payload names no task: the key does (`TASK/RUN/STATE#VISIT`).
        let mut parts = request.idempotency_key.splitn(3, '/');
        let task = parts.next().unwrap_or_default().to_owned();
        let step = parts.nth(1).unwrap_or_default().to_owned();
        let state = step.split('#').next().unwrap_or_default().to_owned();
        Self {
            task,
            state,
            step,
            invoked: true,
        }
    }
}
