//! The supervisor and the scheduler where the records they read are not what they
//! expect: tasks that keep failing, and a workflow file edited without a version
//! bump. Over the in-memory backend, on a manual clock.

use std::sync::Arc;
use std::time::Duration;

use sas_core::app::{App, Ports, QueueNames, Recovery};
use sas_core::clock::Clock;
use sas_core::ports::TaskStore;
use sas_domain::decide::{self, Verdict};
use sas_domain::ids::TaskId;
use sas_domain::messages::{AgentRequest, AgentResponse, Outcome, SchedulerMessage};
use sas_domain::submission::Submission;
use sas_domain::task::WorkflowRef;
use sas_domain::time::Timestamp;
use sas_domain::workflow::{Registry, Workflow};
use sas_testkit::ManualClock;
use sas_testkit::memory::Memory;
use sas_tests::{delivery_input, in_memory};
use serde_json::json;

struct World {
    memory: Arc<Memory>,
    clock: Arc<ManualClock>,
    names: QueueNames,
}

impl World {
    fn new() -> Self {
        let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
        let (memory, names) = in_memory(&clock, None);
        Self {
            memory,
            clock,
            names,
        }
    }

    /// An actor over this world's backend, knowing the workflows of `registry`.
    fn app(&self, registry: Registry, instance: &str) -> App {
        let ports = Ports::of(&self.memory, Arc::clone(&self.clock) as _);
        App::new(
            ports,
            Arc::new(registry),
            self.names.clone(),
            instance.into(),
        )
    }

    fn agent_requests(&self) -> Vec<AgentRequest> {
        self.memory
            .messages(&self.names.agent_requests)
            .iter()
            .map(|m| serde_json::from_str(&m.body).expect("an agent request"))
            .collect()
    }
}

fn built_ins() -> Registry {
    Registry::built_in()
}

fn submission(id: &str) -> Submission {
    Submission::new(TaskId::parse(id).expect("id"), delivery_input())
}

#[tokio::test]
async fn a_pass_reaches_every_expired_task_when_a_hundred_and_fifty_keep_failing() {
    let world = World::new();
    let app = world.app(built_ins(), "supervisor");
    let drone = app.workflows().latest("drone-delivery").expect("drone");
    // Tasks whose workflow is known nowhere: every recovery of them fails. Their
    // leases end first, so a pass that read the soonest again and again would see
    // only them.
    for n in 0..150 {
        let (mut task, order, _) =
            decide::submit(&drone, submission(&format!("stuck-{n}")), world.clock.now());
        task.workflow = WorkflowRef {
            name: "withdrawn".into(),
            version: 1,
        };
        world.memory.create(&task, &order).await.expect("created");
    }
    world.clock.advance(Duration::from_secs(1));
    app.submit("drone-delivery", submission("behind-them"))
        .await
        .expect("submitted");
    world
        .clock
        .advance(drone.pickup_timeout + Duration::from_secs(1));

    let report = tokio::time::timeout(Duration::from_secs(60), app.sweep(100))
        .await
        .expect("the pass ends")
        .expect("the pass reads the leases");
    assert_eq!(report.get(&Recovery::Failed), Some(&150), "{report:?}");
    assert_eq!(
        report.get(&Recovery::Decided(Verdict::SentAgain)),
        Some(&1),
        "{report:?}"
    );
    let again = app.sweep(100).await.expect("a second pass");
    assert_eq!(
        again.get(&Recovery::Failed),
        Some(&150),
        "each once a pass: {again:?}"
    );
    assert_eq!(
        again.get(&Recovery::Decided(Verdict::SentAgain)),
        None,
        "its new lease is live"
    );
}

#[tokio::test]
async fn a_pass_over_a_backlog_reads_each_expired_lease_once() {
    const BACKLOG: usize = 2_000;
    const BATCH: usize = 50;
    let world = World::new();
    let app = world.app(built_ins(), "supervisor");
    let drone = app.workflows().latest("drone-delivery").expect("drone");
    // Half recoverable, half failing at every recovery (their workflow known nowhere),
    // interleaved: an outage's backlog.
    for n in 0..BACKLOG {
        let (mut task, order, _) =
            decide::submit(&drone, submission(&format!("t-{n}")), world.clock.now());
        if n % 2 == 0 {
            task.workflow = WorkflowRef {
                name: "withdrawn".into(),
                version: 1,
            };
        }
        world.memory.create(&task, &order).await.expect("created");
        world.clock.advance(Duration::from_millis(1));
    }
    world
        .clock
        .advance(drone.pickup_timeout + Duration::from_secs(1));

    let report = app.sweep(BATCH).await.expect("the pass reads the leases");
    assert_eq!(
        (
            report.get(&Recovery::Failed),
            report.get(&Recovery::Decided(Verdict::SentAgain))
        ),
        (Some(&(BACKLOG / 2)), Some(&(BACKLOG / 2))),
        "every expired task once: {report:?}"
    );
    assert_eq!(
        world.memory.expired_reads(),
        BACKLOG,
        "one pass reads each expired lease once, not its batch again and again"
    );
}

#[tokio::test]
async fn tasks_run_the_definition_they_started_with_when_its_file_changes_without_a_new_version() {
    let world = World::new();
    let submitter = world.app(built_ins(), "submission");
    submitter
        .submit("drone-delivery", submission("kept"))
        .await
        .expect("submitted");

    // The same name and version, edited: two steps, the first calling elsewhere.
    let edited = built_ins();
    let original = edited.latest("drone-delivery").expect("drone");
    let mut source: serde_json::Value = serde_json::from_str(&original.source).expect("json");
    source["steps"] = json!([
        { "name": "check-account", "agent": "account", "call": "/accounts/verify" },
        { "name": "create-delivery", "agent": "delivery", "call": "/deliveries" }
    ]);
    let changed = Registry::default();
    changed
        .add(Workflow::parse("edited.json", &source.to_string()).expect("a valid definition"))
        .expect("added");
    let scheduler = world.app(changed, "scheduler");

    let run = serde_json::to_string(&SchedulerMessage::Run {
        task_id: TaskId::parse("kept").expect("id"),
    })
    .expect("json");
    scheduler
        .on_scheduler_message("scheduler", &run)
        .await
        .expect("claimed");
    let requests = world.agent_requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        (requests[0].step_name.as_str(), requests[0].path.as_str()),
        ("check-account", "/accounts/check"),
        "the stored definition, not the edited file"
    );

    // Through every step: the task has five, as its definition.
    let mut answered = 0;
    while let Some(request) = world.agent_requests().pop() {
        let response = SchedulerMessage::Response(AgentResponse::answering(
            request.clone(),
            Outcome::Succeeded { output: json!({}) },
        ));
        for stored in world.memory.messages(&world.names.agent_requests) {
            world
                .memory
                .drop_message(&world.names.agent_requests, stored.id);
        }
        scheduler
            .on_scheduler_message(
                "agent-responses",
                &serde_json::to_string(&response).expect("json"),
            )
            .await
            .expect("recorded");
        answered += 1;
        assert!(answered <= 5, "at most the five steps");
    }
    let task = scheduler
        .task(&TaskId::parse("kept").expect("id"))
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(task.state.as_str(), "Processed");
    assert_eq!(answered, 5);
}

#[tokio::test]
async fn a_repeated_submission_does_not_cut_the_supervisors_retry_delay_short() {
    let world = World::new();
    let app = world.app(built_ins(), "all");
    let drone = app.workflows().latest("drone-delivery").expect("drone");
    let id = TaskId::parse("waiting").expect("id");
    app.submit("drone-delivery", submission("waiting"))
        .await
        .expect("submitted");
    let runs = || world.memory.messages(&world.names.scheduler).len();
    assert_eq!(runs(), 1);
    app.submit("drone-delivery", submission("waiting"))
        .await
        .expect("the same again");
    assert_eq!(
        runs(),
        2,
        "while it may never have been sent, it is sent again"
    );

    // Claimed, its first step times out up to the threshold: the supervisor sends it
    // back to Pending with a delayed Run (the extended wait before its last try).
    let run = serde_json::to_string(&SchedulerMessage::Run {
        task_id: id.clone(),
    })
    .expect("json");
    app.on_scheduler_message("scheduler", &run)
        .await
        .expect("claimed");
    let threshold = drone.steps[0]
        .call()
        .expect("a call")
        .supervision
        .failure_threshold;
    for failure in 1..=threshold {
        world
            .clock
            .advance(drone.steps[0].call().expect("a call").complete_by);
        app.sweep(10).await.expect("swept");
        if failure < threshold {
            app.on_scheduler_message("scheduler", &run)
                .await
                .expect("claimed again");
        }
    }
    let task = app.task(&id).await.expect("read").expect("exists");
    assert_eq!(
        task.state.as_str(),
        "Pending",
        "waiting out the extended wait"
    );
    let before = runs();
    app.submit("drone-delivery", submission("waiting"))
        .await
        .expect("the same again");
    assert_eq!(runs(), before, "no Run that would skip the wait");
}
