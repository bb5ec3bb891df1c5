//! The harness of the end-to-end scenarios: the local system (API server, queue
//! consumers, agents, mock services) on a fresh embedded backend, with a manual
//! clock, the supervisor swept on demand, and helpers to drive and observe it.
//! Beside it: [`aws`] (a moto stack and the functions' handlers fed real-shaped
//! events), [`ministack`] (the SAM template deployed with IAM enforced), [`local`]
//! (the `sas-local` binary), [`otlp`] (a receiver of exported spans) and [`sim`] (the
//! seeded simulation). It depends on every crate of the workspace; only `sas-tools`
//! depends on it.

pub mod aws;
mod binaries;
pub mod local;
pub mod ministack;
pub mod otlp;
pub mod sim;
mod step_functions;
pub mod tokens;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sas_core::app::{App, FiringReport, Ports, QueueNames, SweepReport};
use sas_core::clock::Clock as _;
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::messages::{Buffered, SchedulerMessage};
use sas_domain::submission::Submission;
use sas_domain::task::WorkflowRef;
use sas_domain::time::Timestamp;
use sas_domain::workflow::Registry;
use sas_embedded::{Depth, Durability};
use sas_local::auth::Authentication;
use sas_local::{Config, Ingestion, Running, Settings};
use sas_testkit::ManualClock;
use sas_testkit::memory::Memory;
use serde_json::{Value, json};

/// How long a test waits for the system to settle before it gives up.
const PATIENCE: Duration = Duration::from_secs(20);

/// Asks `probe` every 20 ms until it answers `Ok`, for [`PATIENCE`] at most.
///
/// # Panics
/// When it has not answered `Ok` by then, with `gave_up` of its last answer.
async fn patiently<T, E>(
    mut probe: impl AsyncFnMut() -> Result<T, E>,
    gave_up: impl FnOnce(E) -> String,
) -> T {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match probe().await {
            Ok(found) => return found,
            Err(seen) if tokio::time::Instant::now() >= deadline => panic!("{}", gave_up(seen)),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The in-memory backend on `clock`, with the pattern's three queues (a visibility
/// timeout of 30 s; with `dead_letter_after`, a `<queue>-dlq` after that many receives).
#[must_use]
pub fn in_memory(
    clock: &Arc<ManualClock>,
    dead_letter_after: Option<u32>,
) -> (Arc<sas_testkit::memory::Memory>, sas_core::app::QueueNames) {
    let queue = |name: &str| QueueName::parse(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    let memory = Arc::new(sas_testkit::memory::Memory::new(Arc::clone(clock) as _));
    let names = sas_core::app::QueueNames {
        scheduler: queue("scheduler"),
        agent_requests: queue("agent-requests"),
        agent_responses: queue("agent-responses"),
    };
    for name in [
        &names.scheduler,
        &names.agent_requests,
        &names.agent_responses,
    ] {
        let dead_letter = dead_letter_after.map(|after| (after, queue(&format!("{name}-dlq"))));
        memory.create_queue(name, Duration::from_secs(30), dead_letter);
    }
    (memory, names)
}

pub use binaries::function_binary;
pub use sas_testkit::delivery_input;

/// The local system under test.
pub struct Harness {
    /// The clock every actor reads.
    pub clock: Arc<ManualClock>,
    /// The running system.
    pub running: Running,
    /// One HTTP client for all its calls: a client's start (its root certificates)
    /// takes a tenth of a second in a debug build.
    pub http: reqwest::Client,
    /// Where the API listens.
    pub api: String,
    /// Where the mock services listen: `<url>/<service>/<operation>` calls one.
    pub mock: String,
    /// The system's data directory: its database and the values kept apart.
    pub data: tempfile::TempDir,
}

impl Harness {
    /// Starts the system with the test workflows, the supervisor swept only by
    /// [`Harness::sweep`], and messages dead-lettered after `max_receive_count`.
    ///
    /// # Panics
    /// When the system cannot start.
    pub async fn start(max_receive_count: u32) -> Self {
        Self::start_with(max_receive_count, Authentication::Open).await
    }

    /// [`Harness::start`], with callers known by `authentication`.
    ///
    /// # Panics
    /// When the system cannot start.
    pub async fn start_with(max_receive_count: u32, authentication: Authentication) -> Self {
        Self::start_as(max_receive_count, authentication, Ingestion::Direct).await
    }

    /// [`Harness::start`], in buffered ingestion: a submission is queued, and the
    /// scheduler creates its task.
    ///
    /// # Panics
    /// When the system cannot start.
    pub async fn start_buffered(max_receive_count: u32) -> Self {
        Self::start_as(max_receive_count, Authentication::Open, Ingestion::Buffered).await
    }

    /// [`Harness::start`], with the services' settings `services` (as `SAS_SERVICES`
    /// has them: the mock services, limited, say).
    ///
    /// # Panics
    /// When the settings are not valid, or the system cannot start.
    pub async fn start_with_services(services: &str) -> Self {
        let services = sas_domain::services::parse(services).expect("valid services");
        Self::start_configured(5, Authentication::Open, Ingestion::Direct, services).await
    }

    async fn start_as(
        max_receive_count: u32,
        authentication: Authentication,
        ingestion: Ingestion,
    ) -> Self {
        Self::start_configured(max_receive_count, authentication, ingestion, HashMap::new()).await
    }

    async fn start_configured(
        max_receive_count: u32,
        authentication: Authentication,
        ingestion: Ingestion,
        services: HashMap<String, sas_domain::services::Service>,
    ) -> Self {
        let data = tempfile::tempdir().expect("temporary directory");
        let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
        let config = Config {
            api_addr: ([127, 0, 0, 1], 0).into(),
            mock_addr: Some(([127, 0, 0, 1], 0).into()),
            mock_durable: true,
            authentication: Arc::new(authentication),
            place: Default::default(),
            settings: Settings {
                data_dir: data.path().to_path_buf(),
                workflows_dir: Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("workflows")),
                durability: Durability::Process,
                supervisor_interval: None,
                scheduler_concurrency: 8,
                ingest_concurrency: 4,
                agent_concurrency: 16,
                max_receive_count,
                services,
                services_fallback: None,
                ingestion,
            },
        };
        let running = sas_local::start(config, Arc::clone(&clock) as _)
            .await
            .expect("system starts");
        let api = format!("http://{}", running.api);
        let mock = format!("http://{}", running.mock.expect("mock services"));
        Self {
            clock,
            running,
            http: reqwest::Client::new(),
            api,
            mock,
            data,
        }
    }

    /// Sends a request to the API; returns the status, the Location header and the JSON body.
    ///
    /// # Panics
    /// When the server does not answer with JSON.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> (u16, Option<String>, Value) {
        self.call_as(None, method, path, body).await
    }

    /// [`Harness::call`], with `token` as the bearer token.
    ///
    /// # Panics
    /// When the server does not answer with JSON.
    pub async fn call_as(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> (u16, Option<String>, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = self.http.request(method, format!("{}{path}", self.api));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_vec());
        }
        let response = request.send().await.expect("the API answers");
        let status = response.status().as_u16();
        let location = response
            .headers()
            .get("location")
            .map(|l| l.to_str().expect("ascii").to_owned());
        (
            status,
            location,
            response.json().await.expect("a JSON body"),
        )
    }

    /// The operator's view of the services (`GET /operator/services`, of `key` when
    /// given) once `seen` holds of it.
    ///
    /// # Panics
    /// When it does not within the harness's patience.
    pub async fn services_when(&self, key: Option<&str>, seen: impl Fn(&Value) -> bool) -> Value {
        let path = key.map_or_else(
            || "/operator/services".to_owned(),
            |key| format!("/operator/services?key={key}"),
        );
        patiently(
            async || {
                let (status, _, view) = self.call("GET", &path, None).await;
                if status == 200 && seen(&view) {
                    Ok(view)
                } else {
                    Err(view)
                }
            },
            |view| format!("the services never showed what was awaited: {view:#}"),
        )
        .await
    }

    /// Runs `sas` against its API as a person runs it: its exit status, standard output
    /// and error.
    ///
    /// # Panics
    /// When `sas` cannot be run, or prints what is not UTF-8.
    pub async fn sas(&self, arguments: &[&str]) -> (bool, String, String) {
        let output = tokio::process::Command::new(function_binary("sas"))
            .args(arguments)
            .env("SAS_API", &self.api)
            .env_remove("SAS_TOKEN")
            .env_remove("SAS_SIGV4_REGION")
            .output()
            .await
            .expect("sas runs");
        (
            output.status.success(),
            String::from_utf8(output.stdout).expect("UTF-8"),
            String::from_utf8(output.stderr).expect("UTF-8"),
        )
    }

    /// [`Harness::sas`], which must succeed: its standard output.
    ///
    /// # Panics
    /// When it fails.
    pub async fn sas_ok(&self, arguments: &[&str]) -> String {
        let (success, out, err) = self.sas(arguments).await;
        assert!(success, "sas {arguments:?} failed: {err}{out}");
        out
    }

    /// Submits a task by PUT.
    pub async fn put_task(&self, id: &str, body: &Value) -> (u16, Value) {
        let (status, _, body) = self
            .call(
                "PUT",
                &format!("/tasks/{id}"),
                Some(body.to_string().as_bytes()),
            )
            .await;
        (status, body)
    }

    /// A task's state as the API shows it.
    pub async fn task(&self, id: &str) -> Value {
        self.call("GET", &format!("/tasks/{id}"), None).await.2
    }

    /// Waits until the task satisfies `done`.
    ///
    /// # Panics
    /// When it does not within the harness's patience.
    pub async fn wait_for(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        patiently(
            async || {
                let task = self.task(id).await;
                if done(&task) { Ok(task) } else { Err(task) }
            },
            |task| format!("task {id} never became {what}: {task:#}"),
        )
        .await
    }

    /// Waits until the task is in `state` and no message of the pattern is queued or in
    /// flight (delayed messages count as queued).
    pub async fn settle_in(&self, id: &str, state: &str) -> Value {
        self.wait_for(id, state, |t| t["state"] == state).await;
        let queues = &self.running.system.queues;
        patiently(
            async || {
                let mut idle = true;
                for queue in [
                    &queues.scheduler,
                    &queues.agent_requests,
                    &queues.agent_responses,
                ] {
                    idle &= self.depth(queue).await == Depth::default();
                }
                if idle { Ok(()) } else { Err(()) }
            },
            |()| "the queues never emptied".to_owned(),
        )
        .await;
        self.task(id).await
    }

    /// A queue's depth.
    pub async fn depth(&self, queue: &QueueName) -> Depth {
        self.running
            .system
            .backend
            .depth(queue)
            .await
            .expect("depth")
    }

    /// Moves the clock on.
    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Runs the supervisor once.
    pub async fn sweep(&self) -> SweepReport {
        self.running.system.app.sweep(100).await.expect("sweep")
    }

    /// Submits `count` refunds of approved-refund straight to the app, `refund-<i>` of
    /// customer `c-<i % customers>` for an amount of `10 * (i % 7)`, each to start in a
    /// year: they wait Pending, their search attributes kept from their input.
    ///
    /// # Panics
    /// When a submission is refused.
    pub async fn waiting_refunds(&self, count: usize, customers: usize) {
        let app = &self.running.system.app;
        let refunds = (app.workflows().latest("approved-refund")).expect("the test workflow");
        for i in 0..count {
            let input = json!({"order_id": format!("o-{i}"),
                "customer_id": format!("c-{}", i % customers), "amount": 10 * (i % 7)});
            let id = TaskId::parse(format!("refund-{i}")).expect("an id");
            let submission = Submission {
                start_at: Some(self.clock.now().plus(Duration::from_secs(365 * 86_400))),
                ..Submission::new(id, input)
            };
            app.submit_on(Arc::clone(&refunds), submission)
                .await
                .expect("submitted");
        }
    }

    /// Fires the schedules once, as the supervisor's sweep does.
    pub async fn fire_schedules(&self) -> FiringReport {
        (self.running.system.app.fire_schedules())
            .await
            .expect("schedules read")
    }

    /// Ends the running step's lease, `budget` long, once `service` has had `calls`
    /// calls, and runs the supervisor. A lease is ended only once the agent has
    /// called: a request the agent takes after its complete-by is not sent, and the
    /// fault meant for it would meet the next call instead.
    pub async fn end_lease(&self, service: &str, calls: u64, budget: Duration) {
        while self.calls(service).await < calls {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.advance(budget + Duration::from_millis(1));
        self.sweep().await;
    }

    /// Leaves a task of `drone-delivery-quick` with its delivery late past the step's
    /// threshold (its three calls hanging, applied, answered after their 500 ms): the
    /// task ends in Error with the delivery not undone.
    pub async fn leave_the_quick_delivery_late(&self, id: &str, input: &Value) {
        self.faults("delivery", json!({ "hang_ms": 3000, "times": 3 }))
            .await;
        self.put_task(
            id,
            &json!({ "workflow": "drone-delivery-quick", "input": input }),
        )
        .await;
        for calls in 1..=3 {
            self.end_lease("delivery", calls, Duration::from_millis(500))
                .await;
            if calls == 2 {
                // The threshold's extended wait before the last retry.
                self.advance(Duration::from_secs(5));
            }
        }
        self.settle_in(id, "Error").await;
    }

    /// The messages of a notification queue, taking them, in the order of the task's
    /// versions (a queue keeps no order between the actors posting to it).
    pub async fn notifications(&self, queue: &str) -> Vec<Value> {
        let (_, _, updates) = self
            .call("GET", &format!("/local/queues/{queue}"), None)
            .await;
        let mut updates = updates["messages"].as_array().expect("messages").clone();
        updates.sort_by_key(|m| m["version"].as_u64().expect("version"));
        updates
    }

    /// Takes the notifications of `queue` until one is `what` (`found`), and returns
    /// it: a notification is sent after the write it tells of, so a task may be seen
    /// changed a moment before it.
    pub async fn notified(&self, queue: &str, what: &str, found: impl Fn(&Value) -> bool) -> Value {
        let mut told = Vec::new();
        patiently(
            async || {
                told.extend(self.notifications(queue).await);
                told.iter()
                    .find(|n| found(n))
                    .cloned()
                    .ok_or_else(|| told.clone())
            },
            |told| format!("{queue} was never told {what}: {told:?}"),
        )
        .await
    }

    /// Sets a mock service's faults.
    pub async fn faults(&self, service: &str, faults: Value) {
        let response = self
            .http
            .put(format!("{}/faults/{service}", self.mock))
            .body(faults.to_string())
            .send()
            .await
            .expect("mock answers");
        assert!(
            response.status().is_success(),
            "faults rejected: {}",
            response.text().await.unwrap_or_default()
        );
    }

    /// Clears a mock service's faults.
    pub async fn clear_faults(&self, service: &str) {
        let response = self
            .http
            .delete(format!("{}/faults/{service}", self.mock))
            .send()
            .await
            .expect("mock answers");
        assert!(response.status().is_success());
    }

    /// Has `service` refuse its next call for good (a 422), then answer again.
    pub async fn refuse_once(&self, service: &str) {
        self.faults(service, json!({ "permanent_error_rate": 1.0, "times": 1 }))
            .await;
    }

    /// The side effects the mock services applied, by (service, operation): the
    /// calls made with each key.
    pub async fn effects(&self) -> Vec<Value> {
        let body: Value = self.mock_get("/effects").await;
        body["effects"].as_array().expect("effects").clone()
    }

    /// The effects applied for a task, as (service, operation, calls), sorted.
    pub async fn effects_of(&self, task: &str) -> Vec<(String, String, u64)> {
        let mut effects: Vec<_> = self
            .effects()
            .await
            .into_iter()
            .filter(|e| {
                e["idempotency_key"]
                    .as_str()
                    .is_some_and(|k| k.starts_with(&format!("{task}/")))
            })
            .map(|e| {
                let text = |f: &str| e[f].as_str().expect("text").to_owned();
                (
                    text("service"),
                    text("operation"),
                    e["calls"].as_u64().expect("calls"),
                )
            })
            .collect();
        effects.sort();
        effects
    }

    /// The requests each mock service received.
    pub async fn calls(&self, service: &str) -> u64 {
        self.mock_get("/calls").await["calls"][service]
            .as_u64()
            .unwrap_or(0)
    }

    /// The most calls `service` had in progress at once, as the mock services saw.
    pub async fn peak_concurrency(&self, service: &str) -> u64 {
        self.mock_get("/calls").await["concurrency"][service]["peak"]
            .as_u64()
            .unwrap_or(0)
    }

    async fn mock_get(&self, path: &str) -> Value {
        let response = self
            .http
            .get(format!("{}{path}", self.mock))
            .send()
            .await
            .expect("mock answers");
        response.json().await.expect("JSON")
    }
}

/// A drone delivery's steps once undone before its delivery: the package and the drone
/// compensated, the checks as they were, the delivery never made.
pub const UNDONE_BEFORE_THE_DELIVERY: [&str; 5] = [
    "Processed",
    "Compensated",
    "Processed",
    "Compensated",
    "Pending",
];

/// A drone delivery's steps once its delivery step has failed for good: the package and
/// the drone compensated, the checks as they were.
pub const UNDONE_AFTER_THE_DELIVERY_FAILED: [&str; 5] = [
    "Processed",
    "Compensated",
    "Processed",
    "Compensated",
    "Error",
];

/// Service `name` of the operator's view of the services (`GET /operator/services`);
/// null when it is not there.
#[must_use]
pub fn service<'v>(view: &'v Value, name: &str) -> &'v Value {
    static MISSING: Value = Value::Null;
    view["services"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["service"] == name)
        .unwrap_or(&MISSING)
}

/// The states of a task's steps, in order.
#[must_use]
pub fn step_states(task: &Value) -> Vec<String> {
    task["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s["state"].as_str().expect("state").to_owned())
        .collect()
}

/// The states a task's status notifications told, in the order of its
/// versions. Notifications are at least once: a version may come twice, and
/// always names the same state.
///
/// # Panics
/// When a notification is of another task, lacks a version or state, or two
/// of one version name different states.
pub fn notified_states<'a>(
    task_id: &str,
    updates: impl IntoIterator<Item = &'a Value>,
) -> Vec<String> {
    let mut states = std::collections::BTreeMap::new();
    for update in updates {
        assert_eq!(update["task_id"], task_id, "{update}");
        let version = update["version"].as_u64().expect("a version");
        let state = update["state"].as_str().expect("a state").to_owned();
        if let Some(earlier) = states.insert(version, state.clone()) {
            assert_eq!(earlier, state, "version {version} names one state");
        }
    }
    states.into_values().collect()
}

/// A step of a task as the API shows it, by name.
///
/// # Panics
/// When the task has no such step.
#[must_use]
pub fn step<'a>(task: &'a Value, name: &str) -> &'a Value {
    task["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no step {name} in {task}"))
}

/// The message buffered ingestion queues for submission `id` accepted with the
/// workflow and input of `like`, a task's view.
///
/// # Panics
/// When `like` has no workflow's name and version, or `id` is not a task's id.
#[must_use]
pub fn accepted_submission(id: &str, like: &Value) -> String {
    let version = like["workflow"]["version"].as_u64().expect("a version");
    let message = SchedulerMessage::Submit(Buffered {
        workflow: WorkflowRef {
            name: like["workflow"]["name"].as_str().expect("a name").into(),
            version: u32::try_from(version).expect("a version"),
        },
        submission: Submission::new(TaskId::parse(id).expect("an id"), like["input"].clone()),
        accepted_at: Timestamp(0),
    });
    serde_json::to_string(&message).expect("JSON")
}

/// A `parcel-order` of `parcels` parcels, each shipped by a `ship-parcel` child.
#[must_use]
pub fn parcel_order(id: &str, parcels: usize) -> Value {
    let parcels: Vec<Value> = (0..parcels)
        .map(|n| json!({ "id": format!("p{n}"), "dropoff": format!("door {n}"), "weight_kg": 1.5 }))
        .collect();
    json!({
        "workflow": "parcel-order",
        "input": { "order_id": id, "customer_id": "c-1", "parcels": parcels },
    })
}

/// Every child task step `step` of task `id` started, through
/// `GET /tasks/{id}/children`, page by page of `limit`: `get` sends each page's
/// request (the path) and answers its status and body.
///
/// # Panics
/// When a page is not a 200 with its tasks.
pub async fn all_children(
    id: &str,
    step: &str,
    limit: usize,
    get: impl AsyncFn(String) -> (u16, Value),
) -> Vec<Value> {
    let mut all = Vec::new();
    let mut after = String::new();
    loop {
        let (status, page) = get(format!(
            "/tasks/{id}/children?step={step}&limit={limit}{after}"
        ))
        .await;
        assert_eq!(status, 200, "{page}");
        all.extend(page["tasks"].as_array().expect("tasks").iter().cloned());
        match page["next"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => return all,
        }
    }
}

/// The in-memory backend on a manual clock, with an ingest queue: for the tests that
/// drive the actors by hand, buffering or not.
pub struct Buffering {
    /// The clock every actor reads.
    pub clock: Arc<ManualClock>,
    /// The backend.
    pub memory: Arc<Memory>,
    /// The pattern's queues.
    pub names: QueueNames,
    /// The queue of buffered submissions.
    pub ingest: QueueName,
}

impl Default for Buffering {
    fn default() -> Self {
        Self::new()
    }
}

impl Buffering {
    /// An empty backend, its queues created.
    #[must_use]
    pub fn new() -> Self {
        let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
        let (memory, names) = in_memory(&clock, None);
        let ingest = QueueName::parse("ingest").expect("name");
        memory.create_queue(&ingest, Duration::from_secs(30), None);
        Self {
            clock,
            memory,
            names,
            ingest,
        }
    }

    /// Its clock, backend, pattern's queues and ingest queue.
    #[must_use]
    pub fn parts(&self) -> (&ManualClock, &Arc<Memory>, &QueueNames, &QueueName) {
        (&self.clock, &self.memory, &self.names, &self.ingest)
    }

    /// The backend as every port.
    #[must_use]
    pub fn ports(&self) -> Ports {
        Ports::of(&self.memory, Arc::clone(&self.clock) as _)
    }

    /// The process `instance`, in direct ingestion, over `ports` and the built-in
    /// workflows.
    #[must_use]
    pub fn direct_over(&self, ports: Ports, instance: &str) -> App {
        App::new(
            ports,
            Arc::new(Registry::built_in()),
            self.names.clone(),
            instance.into(),
        )
        .with_deadline_messages(true)
    }

    /// The process `instance`, buffering, over `ports` and `workflows`.
    #[must_use]
    pub fn app_over(&self, ports: Ports, workflows: Registry, instance: &str) -> App {
        App::new(
            ports,
            Arc::new(workflows),
            self.names.clone(),
            instance.into(),
        )
        .with_ingestion(self.ingest.clone())
        .with_deadline_messages(true)
    }

    /// The process `instance`, buffering, over the backend and the built-in workflows.
    #[must_use]
    pub fn app(&self, instance: &str) -> App {
        self.app_over(self.ports(), Registry::built_in(), instance)
    }
}
