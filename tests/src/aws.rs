//! The AWS side of the harness: a moto server started for the test (and stopped
//! with it), the stack the functions need created in it under unique names, and a
//! loop that plays Lambda's event-source mappings, feeding the function handlers
//! real-shaped events built from the fixtures under `tests/fixtures`.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use aws_lambda_events::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_types::SdkConfig;
pub use sas_aws::table::create_table;
use sas_core::app::App;
use sas_core::ports::{Consumer, NoMetrics};
use sas_core::step_caller::StepCaller;
use sas_domain::ids::QueueName;
use sas_domain::trace::TraceContext;
use sas_lambda::config::Config;
pub use sas_lambda::emulator::{self, QueuePolicy, create_queue, queue_arn};
use sas_lambda::events::{self, Sends};
use sas_lambda::sqs::{Sqs, queue_name};
use sas_mock_services::MockServices;
pub use sas_testkit::moto::{Moto, free_port};
use serde_json::Value;

/// The bucket of the values stored apart.
pub const PAYLOAD_BUCKET: &str = "sas-payloads";

/// The directory of the repository.
pub fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// How a [`Stack`] is set up beyond its defaults ([`Stack::with`]).
#[derive(Default)]
pub struct StackOptions {
    /// Lease ends in the expiry index rounded up to it, in seconds (the functions'
    /// default is 60; zero finds expired leases at once).
    pub lease_bucket_seconds: u64,
    /// Buffered ingestion (`IngestionMode` BUFFERED: the API sends a submission to
    /// the ingest queue, where the scheduler creates its task). The ingest queue is
    /// there, and drained, in either mode, as in a deployed stack.
    pub buffered: bool,
    /// The services' settings beside their URLs: `{"drone": {"max_concurrency": 50}}`.
    pub limits: Value,
    /// The workflow definitions' directory, in place of `tests/workflows`.
    pub workflows: Option<PathBuf>,
    /// Agents given a URL at the remote services besides those of the built-in
    /// workflows.
    pub agents: Vec<String>,
}

/// The remote services of the built-in workflows' agents, each at `base/<agent>`.
#[must_use]
pub fn service_urls(base: &str) -> HashMap<String, String> {
    [
        "account",
        "package",
        "transport",
        "drone",
        "delivery",
        "order",
        "orders",
        "payment",
        "notification",
    ]
    .iter()
    .map(|a| ((*a).to_owned(), format!("{base}/{a}")))
    .collect()
}

/// A fixture's JSON.
///
/// # Panics
/// When the fixture is missing or not JSON.
#[must_use]
pub fn fixture(name: &str) -> Value {
    let path = repository().join("tests/fixtures").join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

/// API Gateway's event (HTTP API, payload 2.0) for a request with this method, path
/// (and query) and body, from no one in particular.
#[must_use]
pub fn api_event(method: &str, path: &str, body: Option<&Value>) -> Value {
    let mut event = fixture("apigw-v2-request.json");
    event["rawPath"] = path.split('?').next().unwrap_or(path).into();
    event["rawQueryString"] = path.split_once('?').map_or("", |(_, q)| q).into();
    event["requestContext"]["http"]["method"] = method.into();
    event["requestContext"]["http"]["path"] = event["rawPath"].clone();
    event["body"] = body.map_or(Value::Null, |b| b.to_string().into());
    event
}

/// The whole stack in the emulator, and the functions built on it as Lambda would.
pub struct Stack {
    /// The emulator (stopped with the stack).
    pub moto: Moto,
    /// The SDK configuration.
    pub sdk: SdkConfig,
    /// The functions' configuration.
    pub config: Config,
    /// The submission, scheduler and supervisor functions' actor.
    pub app: Arc<App>,
    /// The agent function's actor.
    pub step_caller: Arc<StepCaller>,
    /// SQS, for the event-source mapping loop and the checks.
    pub sqs: Arc<Sqs>,
    /// The queue that receives the alert topic's messages.
    pub alert_inbox: QueueName,
    /// The dead-letter queues by the name of their queue.
    pub dead_letters: HashMap<String, QueueName>,
    invocations: Mutex<BTreeMap<&'static str, Invocations>>,
    /// Whether an agent outside the harness answers the agent-request queue.
    agents_elsewhere: AtomicBool,
}

/// A function's invocations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Invocations {
    /// Times invoked.
    pub invocations: u64,
    /// Records (SQS messages, HTTP requests, scheduled events) handled.
    pub records: u64,
    /// Time spent in the handler.
    pub time: Duration,
}

impl Stack {
    /// Starts moto and creates a table, the four queues with their dead-letter
    /// queues, and the alert topic with a queue subscribed to it; remote services
    /// are at `services/<agent>`.
    ///
    /// # Panics
    /// When the emulator cannot be started or refuses.
    pub async fn start(services: &str, policy: QueuePolicy) -> Self {
        Self::on(Moto::start(), services, policy, 0).await
    }

    /// The stack on a moto server already started, lease ends in the expiry index
    /// rounded up to `lease_bucket_seconds` (the functions' default is 60; zero finds
    /// expired leases at once).
    ///
    /// # Panics
    /// When the emulator refuses.
    pub async fn on(
        moto: Moto,
        services: &str,
        policy: QueuePolicy,
        lease_bucket_seconds: u64,
    ) -> Self {
        let options = StackOptions {
            lease_bucket_seconds,
            ..StackOptions::default()
        };
        Self::with(moto, services, policy, &options).await
    }

    /// [`Stack::on`], set up as `options` say.
    ///
    /// # Panics
    /// When the emulator refuses.
    pub async fn with(
        moto: Moto,
        services: &str,
        policy: QueuePolicy,
        options: &StackOptions,
    ) -> Self {
        let StackOptions {
            lease_bucket_seconds,
            buffered,
            limits,
            workflows,
            agents,
        } = options;
        let sdk = emulator::sdk(&moto.endpoint);
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        let sqs_client = aws_sdk_sqs::Client::new(&sdk);
        let sns = aws_sdk_sns::Client::new(&sdk);
        create_table(&dynamodb, "sas-state").await;
        // The values stored apart: moto takes an unsigned CreateBucket.
        let bucket = reqwest::Client::new()
            .put(format!("{}/{PAYLOAD_BUCKET}", moto.endpoint))
            .send()
            .await
            .expect("moto answers");
        assert!(
            bucket.status().is_success(),
            "the bucket: {}",
            bucket.status()
        );
        let mut urls = HashMap::new();
        let mut dead_letters = HashMap::new();
        for name in [
            "sas-scheduler",
            "sas-agent-requests",
            "sas-agent-responses",
            "sas-ingest",
        ] {
            let (url, dead_letter_url) = create_queue(&sqs_client, name, policy).await;
            dead_letters.insert(name.to_owned(), queue_name(&dead_letter_url).expect("name"));
            urls.insert(name, url);
        }
        let topic = sns
            .create_topic()
            .name("sas-alerts")
            .send()
            .await
            .expect("topic");
        let topic_arn = topic.topic_arn().expect("arn").to_owned();
        let (inbox_url, _) = create_queue(&sqs_client, "sas-alert-inbox", policy).await;
        let inbox_arn = queue_arn(&sqs_client, &inbox_url).await;
        sns.subscribe()
            .topic_arn(&topic_arn)
            .protocol("sqs")
            .endpoint(inbox_arn)
            .send()
            .await
            .expect("subscription");
        let mut service_urls = service_urls(services);
        for agent in agents {
            service_urls.insert(agent.clone(), format!("{services}/{agent}"));
        }
        let mut service_urls = serde_json::json!(service_urls);
        for (name, limit) in limits.as_object().into_iter().flatten() {
            let mut settings = limit.clone();
            settings["url"] = service_urls[name].clone();
            service_urls[name] = settings;
        }
        let lookup = |name: &str| -> Option<String> {
            match name {
                "TABLE_NAME" => Some("sas-state".into()),
                "SCHEDULER_QUEUE_URL" => Some(urls["sas-scheduler"].clone()),
                "AGENT_REQUEST_QUEUE_URL" => Some(urls["sas-agent-requests"].clone()),
                "AGENT_RESPONSE_QUEUE_URL" => Some(urls["sas-agent-responses"].clone()),
                "ALERT_TOPIC_ARN" => Some(topic_arn.clone()),
                "PAYLOAD_BUCKET" => Some(PAYLOAD_BUCKET.into()),
                "SERVICE_URLS" => Some(service_urls.to_string()),
                "LEASE_SHARDS" => Some("4".into()),
                "LEASE_BUCKET_SECONDS" => Some(lease_bucket_seconds.to_string()),
                "INGEST_QUEUE_URL" => Some(urls["sas-ingest"].clone()),
                "INGESTION" => Some(if *buffered { "BUFFERED" } else { "DIRECT" }.into()),
                _ => None,
            }
        };
        let mut config = Config::from_lookup(lookup).expect("configuration");
        config.workflows_dir = Some(
            workflows
                .clone()
                .unwrap_or_else(|| repository().join("tests/workflows")),
        );
        let app = sas_aws::app(&config, &sdk, "test").expect("the app");
        let step_caller =
            sas_agent::step_caller(&config, &sdk, Arc::new(NoMetrics)).expect("the step caller");
        let sqs = Arc::new(Sqs::new(
            &sdk,
            [(queue_name(&inbox_url).expect("name"), inbox_url.clone())],
        ));
        Self {
            moto,
            sdk,
            config,
            app: Arc::new(app),
            step_caller: Arc::new(step_caller),
            sqs,
            alert_inbox: queue_name(&inbox_url).expect("name"),
            dead_letters,
            invocations: Mutex::new(BTreeMap::new()),
            agents_elsewhere: AtomicBool::new(false),
        }
    }

    /// The queue of a configured URL.
    #[must_use]
    pub fn queue(url: &str) -> QueueName {
        queue_name(url).expect("queue name")
    }

    /// Plays API Gateway: the fixture request with this method, path and body.
    pub async fn http(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.http_to(&self.app, method, path, body).await
    }

    /// [`Stack::http`], answered by `app`: a submission function in a process of
    /// its own, which shares nothing with the others but the table and the queues.
    pub async fn http_to(
        &self,
        app: &App,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        self.http_event(app, api_event(method, path, body)).await
    }

    /// Plays API Gateway with `event` (an [`api_event`], its headers perhaps set),
    /// answered by `app`.
    pub async fn http_event(&self, app: &App, event: Value) -> (u16, Value) {
        let started = std::time::Instant::now();
        let request: ApiGatewayV2httpRequest =
            serde_json::from_value(event).expect("an API Gateway v2 event");
        // Boxed, as Lambda's runtime boxes a handler's future: the API's nests the
        // whole of a request's work, large in a debug build for a test thread's stack.
        let response = Box::pin(events::http(app, &self.config.authentication, request)).await;
        self.count("submission", 1, started.elapsed());
        let body = match response.body {
            Some(aws_lambda_events::encodings::Body::Text(text)) => {
                serde_json::from_str(&text).expect("JSON body")
            }
            other => panic!("unexpected body {other:?}"),
        };
        (u16::try_from(response.status_code).expect("status"), body)
    }

    /// Plays EventBridge Scheduler: the supervisor on the fixture's scheduled event.
    pub async fn supervise(&self) -> Value {
        let event = fixture("eventbridge-scheduled.json");
        let started = std::time::Instant::now();
        let report = events::supervise(&self.app, self.config.supervisor_batch, event)
            .await
            .expect("sweep");
        self.count("supervisor", 1, started.elapsed());
        report
    }

    /// Counts an invocation of `function` with `records` records, that took `time`.
    fn count(&self, function: &'static str, records: usize, time: Duration) {
        let mut invocations = self
            .invocations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = invocations.entry(function).or_default();
        entry.invocations += 1;
        entry.records += records as u64;
        entry.time += time;
    }

    /// The functions' invocations so far, by function.
    #[must_use]
    pub fn invocations(&self) -> BTreeMap<&'static str, Invocations> {
        self.invocations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Leaves the agent-request queue to an agent outside the harness (another
    /// process, another language): [`Stack::pump`] then feeds only the scheduler.
    pub fn leave_agent_requests(&self) {
        self.agents_elsewhere.store(true, Ordering::SeqCst);
    }

    /// Plays the event-source mappings once: a batch from each queue, as an SQS event
    /// built on the fixture, to its function; the records not reported failed are
    /// deleted. With `twice`, every batch is delivered a second time first, as SQS
    /// may. Returns the records delivered.
    pub async fn pump(&self, twice: bool) -> usize {
        let scheduler = Self::queue(&self.config.scheduler_queue_url);
        let responses = Self::queue(&self.config.agent_response_queue_url);
        let requests = Self::queue(&self.config.agent_request_queue_url);
        let ingest = self.config.ingest_queue_url.as_deref().map(Self::queue);
        let mut delivered = 0;
        for queue in [scheduler, responses].into_iter().chain(ingest) {
            let app = &self.app;
            delivered += self
                .deliver(
                    "scheduler",
                    Sends::Together,
                    &queue,
                    twice,
                    |queue, body, _| async move {
                        app.on_scheduler_message(&queue, &body).await.map(drop)
                    },
                )
                .await;
        }
        if self.agents_elsewhere.load(Ordering::SeqCst) {
            return delivered;
        }
        let step_caller = &self.step_caller;
        delivered
            + self
                .deliver(
                    "agent",
                    Sends::AsReady,
                    &requests,
                    twice,
                    |_, body, trace| async move {
                        step_caller
                            .on_request(&body, trace.as_ref())
                            .await
                            .map(drop)
                    },
                )
                .await
    }

    async fn deliver<H, F, E>(
        &self,
        function: &'static str,
        sends: Sends,
        queue: &QueueName,
        twice: bool,
        handler: H,
    ) -> usize
    where
        H: Fn(String, String, Option<TraceContext>) -> F + Copy,
        F: Future<Output = Result<(), E>>,
        E: std::error::Error + 'static,
    {
        let received = self
            .sqs
            .receive(queue, 10, Duration::ZERO)
            .await
            .expect("receive");
        if received.is_empty() {
            return 0;
        }
        let template: SqsEvent =
            serde_json::from_value(fixture("sqs-event.json")).expect("an SQS event");
        let records: Vec<SqsMessage> = received
            .iter()
            .map(|delivery| {
                let mut record = template.records[0].clone();
                record.message_id = Some(delivery.id.clone());
                record.receipt_handle = Some(delivery.receipt.clone());
                record.body = Some(delivery.body.clone());
                record.attributes.insert(
                    "ApproximateReceiveCount".into(),
                    delivery.receive_count.to_string(),
                );
                record.event_source_arn =
                    Some(format!("arn:aws:sqs:eu-west-1:123456789012:{queue}"));
                if let Some(trace) = &delivery.trace {
                    let attribute = |value: String| {
                        let mut attribute = SqsMessageAttribute::default();
                        attribute.string_value = Some(value);
                        attribute.data_type = Some("String".into());
                        attribute
                    };
                    let traceparent = attribute(trace.traceparent().to_string());
                    record
                        .message_attributes
                        .insert("traceparent".into(), traceparent);
                    if let Some(state) = &trace.state {
                        let tracestate = attribute(state.clone());
                        record
                            .message_attributes
                            .insert("tracestate".into(), tracestate);
                    }
                }
                record
            })
            .collect();
        let mut event = template.clone();
        event.records = records;
        let started = std::time::Instant::now();
        // Boxed, as Lambda's runtime boxes a handler's future: a batch's nests every
        // record's handling, too large for a test thread's stack in a debug build.
        if twice {
            Box::pin(events::sqs_batch(event.clone(), sends, &NoMetrics, handler)).await;
        }
        let response = Box::pin(events::sqs_batch(event, sends, &NoMetrics, handler)).await;
        self.count(function, received.len(), started.elapsed());
        let failed: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        for delivery in &received {
            if !failed.contains(&delivery.id.as_str()) {
                self.sqs
                    .delete(queue, &delivery.receipt)
                    .await
                    .expect("delete");
            }
        }
        received.len()
    }

    /// Pumps until `done` holds for the task, or panics after `patience`.
    pub async fn run_until(
        &self,
        id: &str,
        patience: Duration,
        twice: bool,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let (_, task) = self.http("GET", &format!("/tasks/{id}"), None).await;
            if done(&task) {
                return task;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task {id} did not get there: {task:#}"
            );
            if self.pump(twice).await == 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// The alerts published to the topic so far, each with its SNS message attributes.
    pub async fn alerts(&self) -> Vec<(Value, Value)> {
        let mut alerts = Vec::new();
        for delivery in self
            .sqs
            .receive(&self.alert_inbox, 10, Duration::from_secs(1))
            .await
            .expect("alerts")
        {
            let envelope: Value = serde_json::from_str(&delivery.body).expect("an SNS envelope");
            let message = envelope["Message"].as_str().unwrap_or(&delivery.body);
            let alert = serde_json::from_str(message).expect("an alert");
            alerts.push((alert, envelope["MessageAttributes"].clone()));
        }
        alerts
    }
}

/// Mock remote services on a free port, as the agents' remote services.
pub struct Remote {
    /// The mock services.
    pub mocks: sas_mock_services::Shared,
    /// Their base URL.
    pub url: String,
    _data: tempfile::TempDir,
}

impl Remote {
    /// Starts the mock services; `durable` as [`MockServices::open`] has it.
    ///
    /// # Panics
    /// When they cannot start.
    pub async fn start(durable: bool) -> Self {
        let data = tempfile::tempdir().expect("directory");
        let mocks =
            MockServices::open(&data.path().join("mock.db"), 7, durable).expect("mock services");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("port");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        sas_local::server::spawn(listener, sas_mock_services::router(Arc::clone(&mocks)));
        Self {
            mocks,
            url,
            _data: data,
        }
    }

    /// Calls per (service, operation) for a task's keys.
    ///
    /// # Panics
    /// When the mock services' database fails.
    #[must_use]
    pub fn effects(&self, task: &str) -> Vec<(String, String, u32)> {
        let mut effects: Vec<_> = self
            .mocks
            .effects(None)
            .expect("effects")
            .into_iter()
            .filter(|e| e.idempotency_key.starts_with(&format!("{task}/")))
            .map(|e| (e.service, e.operation, e.calls))
            .collect();
        effects.sort();
        effects
    }
}
