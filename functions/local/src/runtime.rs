//! The four actors in one process over the embedded backend: the queues'
//! consumers play the part of Lambda's event-source mappings (receive a batch,
//! handle each message, delete the handled ones, leave the failed ones to be
//! redelivered and dead-lettered), and a timer plays EventBridge's schedule.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use sas_aws_tasks::AwsTasks;
use sas_core::app::{App, MessageError, Ports, QueueNames};
use sas_core::clock::Clock;
use sas_core::contain::{self, Panicked};
use sas_core::offload::OffloadingQueues;
use sas_core::ports::{
    Chain, Consumer, Delivery, NoMetrics, OutgoingMessage, Payloads, QueueError, Queues,
};
use sas_core::step_caller::{Answers, StepCaller};
use sas_credentials::AwsCredentials;
use sas_domain::ids::QueueName;
use sas_domain::messages::{AgentResponse, SchedulerMessage};
use sas_domain::resilience::BreakerSettings;
use sas_domain::services::{Directory, Service};
use sas_domain::trace::TraceContext;
use sas_domain::workflow::Registry;
use sas_embedded::{DirectoryPayloads, Durability, Embedded, QueueSettings};
use sas_http_remote::{HttpRemote, LocalCredentials};
use sas_telemetry::Telemetry;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use tracing::{error, warn};

use crate::calls_thread::CallsThread;

/// Messages received at once, as an SQS event-source mapping's batch.
const BATCH: usize = 10;

/// How the local system is set up.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the databases live.
    pub data_dir: PathBuf,
    /// Extra workflow definitions, beside the built-in ones.
    pub workflows_dir: Option<PathBuf>,
    /// What each commit waits for.
    pub durability: Durability,
    /// How often the supervisor sweeps; `None` to sweep only when asked.
    pub supervisor_interval: Option<Duration>,
    /// Messages the scheduler handles at once, per queue.
    pub scheduler_concurrency: usize,
    /// Buffered submissions the scheduler creates at once: the rate tasks enter the
    /// store, the backlog left in the ingest queue rather than among live leases.
    pub ingest_concurrency: usize,
    /// Requests the agents handle at once (levels the load on remote services).
    pub agent_concurrency: usize,
    /// Receives after which a message is dead-lettered.
    pub max_receive_count: u32,
    /// Remote services by agent name: base URLs, headers, credentials (`env:` secrets).
    pub services: HashMap<String, Service>,
    /// The base URL of services not in `services`: `<base>/<agent>`.
    pub services_fallback: Option<String>,
    /// How a submission is taken: written at once, or queued and created by the
    /// scheduler at the rate the store takes.
    pub ingestion: Ingestion,
}

/// How a submission is taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Ingestion {
    /// The task is written before the answer.
    #[default]
    Direct,
    /// The request is checked and queued (committed) before the answer; a scheduler
    /// creates the task from the `ingest` queue.
    Buffered,
}

/// The running actors.
pub struct System {
    /// Submission, scheduler, supervisor and operator actions.
    pub app: Arc<App>,
    /// The agents' work: calls of the steps' remote services.
    pub step_caller: Arc<StepCaller>,
    /// The embedded backend.
    pub backend: Arc<Embedded>,
    /// The pattern's queues.
    pub queues: QueueNames,
    /// The queue of buffered submissions (drained in direct ingestion too).
    pub ingest: QueueName,
    /// Where tasks' traces are exported, when the `OTEL_*` settings ask for it, and
    /// the task that sends them every `OTEL_BSP_SCHEDULE_DELAY`.
    telemetry: Option<(Arc<Telemetry>, JoinHandle<()>)>,
    stop: watch::Sender<bool>,
    workers: Vec<JoinHandle<()>>,
}

fn queue(name: &str) -> anyhow::Result<QueueName> {
    QueueName::parse(name).with_context(|| format!("queue name {name}"))
}

impl System {
    /// Opens the backend, creates the queues and starts the consumers and the supervisor.
    ///
    /// # Errors
    /// When the data directory, the database or a workflow definition is unusable.
    pub async fn start(settings: Settings, clock: Arc<dyn Clock>) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&settings.data_dir).with_context(|| {
            format!(
                "cannot create data directory {}",
                settings.data_dir.display()
            )
        })?;
        let backend = Arc::new(
            Embedded::open(
                &settings.data_dir.join("state.db"),
                Arc::clone(&clock),
                settings.durability,
            )
            .context("cannot open the embedded backend")?,
        );
        let queues = QueueNames {
            scheduler: queue("scheduler")?,
            agent_requests: queue("agent-requests")?,
            agent_responses: queue("agent-responses")?,
        };
        let workflows = Arc::new(workflows(settings.workflows_dir.as_deref())?);
        workflows.limit_services(Directory {
            services: settings.services.clone(),
            fallback: settings.services_fallback.clone(),
        });
        // An agent holds its request for up to the step's complete-by time; the
        // request must stay invisible at least that long.
        let longest_step = workflows
            .all()
            .iter()
            .flat_map(|w| w.steps.iter().filter_map(|s| Some(s.call()?.complete_by)))
            .max()
            .unwrap_or_default();
        // Drained in either mode: submissions a buffered run accepted are created
        // after a restart in direct ingestion.
        let ingest = queue("ingest")?;
        let thirty = Duration::from_secs(30);
        let created = [
            (&queues.scheduler, thirty, false),
            (&queues.agent_responses, thirty, false),
            (&queues.agent_requests, longest_step + thirty, false),
            // A buffered submission is acknowledged once its message is committed.
            (&ingest, thirty, true),
        ];
        for (name, visibility, committed_sends) in created {
            let dead_letter = queue(&format!("{name}-dlq"))?;
            let settings = QueueSettings {
                visibility_timeout: visibility,
                max_receive_count: Some(settings.max_receive_count),
                dead_letter: Some(dead_letter),
                committed_sends,
            };
            backend.create_queue(name, settings).await?;
        }
        let ports = Ports::of(&backend, Arc::clone(&clock));
        let payloads: Arc<dyn Payloads> = Arc::new(
            DirectoryPayloads::open(&settings.data_dir.join("payloads"), settings.durability)
                .context("cannot open the directory of large values")?,
        );
        let telemetry = Telemetry::from_env("sas-local")
            .map_err(anyhow::Error::msg)?
            .map(Arc::new);
        let mut app = App::new(
            ports,
            workflows,
            queues.clone(),
            format!("local-{}", std::process::id()),
        );
        if let Some(telemetry) = &telemetry {
            app = app.with_spans(Arc::clone(telemetry) as _);
        }
        let app = app
            .with_dead_letters(Arc::clone(&backend) as _)
            .with_payloads(Arc::clone(&payloads))
            .with_submissions_claimed(claims_now(&backend, &queues, settings.agent_concurrency));
        let app = Arc::new(match settings.ingestion {
            Ingestion::Buffered => app.with_ingestion(ingest.clone()),
            Ingestion::Direct => app.draining(ingest.clone()),
        });
        app.register_workflows()
            .await
            .context("a stored workflow version differs from its file; bump its version")?;
        let services = Arc::new(HttpRemote::new(
            settings.services.clone(),
            settings.services_fallback.clone(),
            Arc::new(LocalCredentials),
        ));
        let environment = |name: &str| std::env::var(name).ok();
        // The AWS services a state machine's Tasks name, with the environment's
        // credentials (any, for an emulator).
        let aws_sdk = sas_aws_tasks::local_sdk(environment);
        let remote = Arc::new(AwsTasks::new(
            &aws_sdk,
            environment,
            Arc::new(AwsCredentials::new(&aws_sdk)),
            services,
        ));
        let remote = CallsThread::start(remote).context("cannot start the calls' thread")?;
        let step_caller = StepCaller::new(
            Arc::new(remote),
            Arc::clone(&backend) as _,
            clock,
            queues.agent_responses.clone(),
            BreakerSettings::default(),
            u64::from(std::process::id()),
        )
        .with_payloads(Arc::clone(&payloads) as _)
        .answering_to(Arc::new(AnswersInPlace {
            app: Arc::clone(&app),
            queue: queues.agent_responses.clone(),
            queues: Arc::new(OffloadingQueues::new(Arc::clone(&backend) as _, payloads)),
        }));
        let step_caller = Arc::new(match &telemetry {
            Some(telemetry) => step_caller.with_spans(Arc::clone(telemetry) as _),
            None => step_caller,
        });
        let (stop, stopped) = watch::channel(false);
        let telemetry = telemetry.map(|telemetry| {
            let exports = telemetry.flush_every();
            (telemetry, exports)
        });
        let mut system = Self {
            app,
            step_caller,
            backend,
            queues,
            ingest,
            telemetry,
            stop,
            workers: Vec::new(),
        };
        system.start_workers(&settings, &stopped);
        Ok(system)
    }

    fn start_workers(&mut self, settings: &Settings, stopped: &watch::Receiver<bool>) {
        let sources = [
            (&self.queues.scheduler, settings.scheduler_concurrency),
            (&self.queues.agent_responses, settings.scheduler_concurrency),
        ];
        let ingest = (&self.ingest, settings.ingest_concurrency);
        for (source, concurrency) in sources.into_iter().chain([ingest]) {
            let app = Arc::clone(&self.app);
            let queue = source.to_string();
            // A burst of buffered submissions waits in the ingest queue while the
            // agents have requests enough: among their requests, each would go
            // before the calls that hold a limited service's slots.
            let room: Room = if source == &self.ingest {
                let agents_free =
                    claims_now(&self.backend, &self.queues, settings.agent_concurrency);
                Some(Arc::new(agents_free))
            } else {
                None
            };
            self.workers.push(tokio::spawn(consume(
                Arc::clone(&self.backend) as _,
                source.clone(),
                concurrency,
                room,
                stopped.clone(),
                move |body, _| {
                    let (app, queue) = (Arc::clone(&app), queue.clone());
                    async move { app.on_scheduler_message(&queue, &body).await.map(drop) }
                },
            )));
        }
        let step_caller = Arc::clone(&self.step_caller);
        self.workers.push(tokio::spawn(consume(
            Arc::clone(&self.backend) as _,
            self.queues.agent_requests.clone(),
            settings.agent_concurrency,
            None,
            stopped.clone(),
            move |body, trace: Option<TraceContext>| {
                let step_caller = Arc::clone(&step_caller);
                async move {
                    step_caller
                        .on_request(&body, trace.as_ref())
                        .await
                        .map(drop)
                }
            },
        )));
        if let Some(interval) = settings.supervisor_interval {
            let app = Arc::clone(&self.app);
            let mut stopped = stopped.clone();
            self.workers.push(tokio::spawn(async move {
                let mut ticks = tokio::time::interval(interval);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = ticks.tick() => {}
                        _ = stopped.changed() => return,
                    }
                    if let Err(e) = app.sweep(1000).await {
                        error!(error = %Chain(&e), "supervisor sweep failed");
                    }
                    if let Err(e) = app.fire_schedules().await {
                        error!(error = %Chain(&e), "supervisor could not read the schedules");
                    }
                }
            }));
        }
    }

    /// Stops the consumers and the supervisor, letting in-flight handlers finish
    /// their current message.
    pub async fn stop(mut self) {
        self.stop_workers().await;
        if let Some((telemetry, exports)) = self.telemetry.take() {
            exports.abort();
            telemetry.flush().await;
        }
    }

    async fn stop_workers(&mut self) {
        let _ = self.stop.send(true);
        for worker in std::mem::take(&mut self.workers) {
            let _ = worker.await;
        }
    }
}

/// The agents' answers, handed to this process's scheduler as values as they are
/// made, where the agents of the deployed stack send them to the agent-response
/// queue: the answer's write is then the agent's, and no message is written, read and
/// deleted between them, nor the answer encoded and parsed. An answer the scheduler
/// cannot apply now (its task's write failed, or it refused it) goes to the
/// agent-response queue after all, as before: it is applied from there, or ends in
/// the queue's dead-letter queue, and the service is not called again for it. The
/// queue's consumer stays, for those and for the answers a database of an earlier
/// version holds.
struct AnswersInPlace {
    app: Arc<App>,
    /// The agent-response queue, its bodies too large for a message stored apart.
    queue: QueueName,
    queues: Arc<dyn Queues>,
}

#[async_trait::async_trait]
impl Answers for AnswersInPlace {
    async fn answer(
        &self,
        answer: AgentResponse,
        trace: Option<TraceContext>,
    ) -> Result<(), QueueError> {
        let answer = SchedulerMessage::Response(answer);
        if let Err(error) = self.app.on_answer_in_place(&answer).await {
            warn!(queue = %self.queue, error = %Chain(&error), "an answer not applied at once: it goes through its queue");
            let message = OutgoingMessage {
                trace,
                ..OutgoingMessage::json(&answer, Duration::ZERO)
            };
            self.queues.send(&self.queue, &[message]).await?;
        }
        Ok(())
    }
}

/// Whether a direct submission is created claimed now, and buffered submissions are
/// taken from the ingest queue: while the agents' queue holds fewer than twice the
/// requests they take at once. Past that, a burst waits Pending in the scheduler's
/// queue (or in the ingest queue), where no lease runs, not among the agents'
/// requests, where its first step's lease would run out waiting.
fn claims_now(
    backend: &Arc<Embedded>,
    queues: &QueueNames,
    agent_concurrency: usize,
) -> impl Fn() -> bool + Send + Sync + 'static {
    let (backend, requests) = (Arc::clone(backend), queues.agent_requests.clone());
    move || backend.held(&requests) < 2 * agent_concurrency
}

/// Whether what a queue's messages lead to has room for more now; `None`: always.
type Room = Option<Arc<dyn Fn() -> bool + Send + Sync>>;

/// How often a consumer waiting for room looks again.
const ROOM_RECHECK: Duration = Duration::from_millis(2);

/// Consumes a queue like an event-source mapping: batches of up to [`BATCH`],
/// at most `concurrency` messages in flight, a message deleted once handled and
/// left for redelivery (and in the end the dead-letter queue) when its handler fails.
async fn consume<H, F, E>(
    consumer: Arc<dyn Consumer>,
    queue: QueueName,
    concurrency: usize,
    room: Room,
    mut stopped: watch::Receiver<bool>,
    handler: H,
) where
    H: Fn(String, Option<TraceContext>) -> F + Send + Sync + 'static,
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: MessageError,
{
    let slots = Arc::new(Semaphore::new(concurrency.max(1)));
    let handler = Arc::new(handler);
    'consuming: while !*stopped.borrow() {
        let Ok(first) = Arc::clone(&slots).acquire_owned().await else {
            break;
        };
        while room.as_ref().is_some_and(|room| !room()) {
            tokio::select! {
                () = tokio::time::sleep(ROOM_RECHECK) => {}
                _ = stopped.changed() => break 'consuming,
            }
        }
        let free = slots.available_permits() + 1;
        let batch = tokio::select! {
            received = consumer.receive(&queue, free.min(BATCH), Duration::from_millis(100)) => received,
            _ = stopped.changed() => break,
        };
        let batch = batch.unwrap_or_else(|e| {
            error!(%queue, error = %Chain(&e), "receive failed");
            Vec::new()
        });
        let mut permits = vec![first];
        for _ in 1..batch.len() {
            match Arc::clone(&slots).acquire_owned().await {
                Ok(permit) => permits.push(permit),
                Err(_) => return,
            }
        }
        for (message, permit) in batch.into_iter().zip(permits) {
            let (consumer, handler, queue) =
                (Arc::clone(&consumer), Arc::clone(&handler), queue.clone());
            tokio::spawn(async move {
                handle(consumer.as_ref(), &queue, message, handler.as_ref()).await;
                drop(permit);
            });
        }
    }
    // Wait for the handlers in flight.
    let _ = slots
        .acquire_many(u32::try_from(concurrency.max(1)).unwrap_or(u32::MAX))
        .await;
}

async fn handle<H, F, E>(consumer: &dyn Consumer, queue: &QueueName, message: Delivery, handler: &H)
where
    H: Fn(String, Option<TraceContext>) -> F,
    F: Future<Output = Result<(), E>>,
    E: MessageError,
{
    let handled = contain::caught(&NoMetrics, "record", || {
        handler(message.body, message.trace)
    })
    .await;
    match handled {
        // Logged where it was caught; the message comes again, and in the end goes to
        // the dead-letter queue, as a failed one does.
        Err(Panicked { .. }) => {}
        Ok(Ok(())) => {
            if let Err(e) = consumer.delete(queue, &message.receipt).await {
                warn!(%queue, error = %Chain(&e), "delete failed; the message will be delivered again");
            }
        }
        Ok(Err(e)) if e.is_poison() => {
            error!(%queue, receive_count = message.receive_count, error = %Chain(&e), "poison message; it will go to the dead-letter queue");
        }
        Ok(Err(e)) => {
            warn!(%queue, receive_count = message.receive_count, error = %Chain(&e), "handler failed; the message will be delivered again")
        }
    }
}

/// The built-in workflows, and the `*.json` files of `dir` when given, in the order
/// of their names.
fn workflows(dir: Option<&Path>) -> anyhow::Result<Registry> {
    let mut files = Vec::new();
    if let Some(dir) = dir {
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read the workflows in {}", dir.display()))?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
            .collect();
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            files.push((path.display().to_string(), text));
        }
    }
    Ok(Registry::with_files(files)?)
}

#[cfg(test)]
mod tests {
    use sas_core::clock::WallClock;
    use sas_core::ports::TaskStore;
    use sas_domain::ids::TaskId;
    use sas_domain::submission::Submission;
    use sas_domain::task::TaskState;

    use super::*;

    /// A remote service answering `{}` to any call; its base URL.
    async fn remote_service() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        let router = axum::Router::new().fallback(|| async { axum::Json(serde_json::json!({})) });
        tokio::spawn(async move { axum::serve(listener, router).await });
        url
    }

    /// The settings of a system over `data`, whose services answer `{}`.
    async fn settings(data: &Path, ingestion: Ingestion) -> Settings {
        Settings {
            data_dir: data.to_owned(),
            workflows_dir: None,
            durability: Durability::Full,
            supervisor_interval: None,
            scheduler_concurrency: 4,
            ingest_concurrency: 1,
            agent_concurrency: 4,
            max_receive_count: 5,
            services: HashMap::new(),
            services_fallback: Some(remote_service().await),
            ingestion,
        }
    }

    /// A system over `data` whose consumers are stopped: what moves a task is the
    /// test.
    async fn stopped_system_over(data: &Path, ingestion: Ingestion) -> System {
        let mut system = System::start(settings(data, ingestion).await, Arc::new(WallClock))
            .await
            .expect("started");
        system.stop_workers().await;
        system
    }

    /// A system over a fresh directory whose consumers are stopped. Keep the
    /// directory while the system is used.
    async fn stopped_system() -> (System, tempfile::TempDir) {
        let data = tempfile::tempdir().expect("a directory");
        let system = stopped_system_over(data.path(), Ingestion::Direct).await;
        (system, data)
    }

    #[tokio::test]
    async fn submissions_a_buffered_run_accepted_are_created_after_a_restart_in_direct_ingestion() {
        let data = tempfile::tempdir().expect("a directory");
        let id = TaskId::parse("accepted-1").expect("an id");
        {
            let buffered = stopped_system_over(data.path(), Ingestion::Buffered).await;
            let submission = Submission::new(id.clone(), serde_json::json!({ "order_id": "o-1" }));
            buffered
                .app
                .accept("order-processing", submission)
                .await
                .expect("accepted");
        }

        let direct = System::start(
            settings(data.path(), Ingestion::Direct).await,
            Arc::new(WallClock),
        )
        .await
        .expect("started");

        assert!(
            direct.app.is_own_queue(&direct.ingest),
            "no route may take the submissions waiting there"
        );
        let created = async {
            loop {
                if let Some(task) = direct.app.task(&id).await.expect("read") {
                    return task;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let task = tokio::time::timeout(Duration::from_secs(30), created)
            .await
            .expect("the accepted submission's task created");
        assert_eq!(task.id, id);
        direct.stop().await;
    }

    /// The task `id`, submitted to `system` as an order to process.
    async fn submitted(system: &System, id: &str) -> TaskId {
        let id = TaskId::parse(id).expect("an id");
        let submission = Submission::new(id.clone(), serde_json::json!({ "order_id": "o-1" }));
        (system.app.submit("order-processing", submission))
            .await
            .expect("submitted");
        id
    }

    /// Has `system`'s step caller take the one request waiting, and answer it.
    async fn the_request_answered(system: &System) {
        let requests = (system.backend)
            .receive(&system.queues.agent_requests, 10, Duration::ZERO)
            .await
            .expect("received");
        let [request] = requests.as_slice() else {
            panic!("one request expected: {requests:?}");
        };
        system
            .step_caller
            .on_request(&request.body, request.trace.as_ref())
            .await
            .expect("answered");
    }

    #[tokio::test]
    async fn an_agents_answer_is_applied_to_its_task_before_its_handler_returns() {
        let (system, _data) = stopped_system().await;
        let id = submitted(&system, "in-place-1").await;

        the_request_answered(&system).await;

        let task = system.app.task(&id).await.expect("read").expect("the task");
        assert_eq!(task.state, TaskState::Processed);
        assert_eq!(system.backend.held(&system.queues.agent_responses), 0);
    }

    #[tokio::test]
    async fn what_the_scheduler_does_not_apply_at_once_goes_through_the_agent_response_queue() {
        let (system, _data) = stopped_system().await;
        let id = submitted(&system, "in-place-2").await;
        // Its steps are no longer its workflow's: the scheduler refuses to decide on
        // it. The answer is sent on, to end in the queue's dead-letter queue there,
        // not dropped and not failed back to the agent, which would call again.
        let mut task = system.app.task(&id).await.expect("read").expect("the task");
        task.steps.pop();
        task.version += 1;
        system.backend.update(&task).await.expect("rewritten");

        the_request_answered(&system).await;

        let held = (system.backend)
            .receive(&system.queues.agent_responses, 10, Duration::ZERO)
            .await
            .expect("received");
        let [answer] = held.as_slice() else {
            panic!("one answer on the queue expected: {held:?}");
        };
        assert!(answer.body.contains("in-place-2"), "{}", answer.body);
    }

    #[tokio::test]
    async fn a_consumer_takes_no_message_while_what_its_messages_lead_to_has_no_room() {
        let (system, _data) = stopped_system().await;
        let queue = system.queues.scheduler.clone();
        let run = SchedulerMessage::Run {
            task_id: TaskId::parse("room-1").expect("an id"),
        };
        (system
            .backend
            .send(&queue, &[OutgoingMessage::json(&run, Duration::ZERO)]))
        .await
        .expect("sent");
        let open = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let room: Room = {
            let open = Arc::clone(&open);
            Some(Arc::new(move || {
                open.load(std::sync::atomic::Ordering::SeqCst)
            }))
        };
        let (taken, mut handled) = tokio::sync::mpsc::unbounded_channel();
        let (stop, stopped) = watch::channel(false);
        let consumer = tokio::spawn(consume(
            Arc::clone(&system.backend) as _,
            queue,
            4,
            room,
            stopped,
            move |body, _| {
                let taken = taken.clone();
                async move {
                    taken.send(body).expect("the test listens");
                    Ok::<(), sas_core::app::HandleError>(())
                }
            },
        ));

        let early = tokio::time::timeout(Duration::from_millis(300), handled.recv()).await;
        assert!(early.is_err(), "a message taken while there was no room");
        open.store(true, std::sync::atomic::Ordering::SeqCst);
        let body = tokio::time::timeout(Duration::from_secs(5), handled.recv())
            .await
            .expect("the message taken once there was room")
            .expect("a body");
        assert!(body.contains("room-1"), "{body}");

        stop.send(true).expect("the consumer listens");
        consumer.await.expect("the consumer stopped");
    }
}
