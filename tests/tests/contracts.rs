//! The contracts a caller and an agent rely on, over the in-memory backend on a
//! manual clock: a task written is accepted, whatever its messages' sends did or a
//! wait for its end could read; each queue a scheduler reads takes only the messages
//! meant for it; a submission is checked wherever it enters; a wait holds no request
//! for a task nobody submitted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sas_api::{self as api, ApiRequest, Caller};
use sas_core::app::{App, HandleError, Ports};
use sas_core::clock::Clock;
use sas_core::ports::{OutgoingMessage, QueueError, Queues};
use sas_domain::ids::{Owner, QueueName, TaskId};
use sas_domain::messages::{AgentResponse, Buffered, Operation, Outcome, SchedulerMessage};
use sas_domain::submission::Submission;
use sas_domain::task::WorkflowRef;
use sas_domain::time::Timestamp;
use sas_domain::workflow::Registry;
use sas_testkit::memory::Memory;
use sas_tests::{Buffering, delivery_input};
use serde_json::{Value, json};

#[path = "contracts/stepfunctions.rs"]
mod stepfunctions;

/// Queues whose scheduler queue refuses every send while `down`.
struct SchedulerQueueDown {
    memory: Arc<Memory>,
    scheduler: QueueName,
    down: AtomicBool,
}

#[async_trait::async_trait]
impl Queues for SchedulerQueueDown {
    async fn send(
        &self,
        queue: &QueueName,
        messages: &[OutgoingMessage],
    ) -> Result<(), QueueError> {
        if *queue == self.scheduler && self.down.load(Ordering::SeqCst) {
            return Err(QueueError::new(queue, "unavailable"));
        }
        self.memory.send(queue, messages).await
    }
}

/// A `POST /tasks?wait=` without an id, queued, whose task cannot be read in the
/// wait is answered 202, as without the wait, not 503: a caller told to send it again
/// would make a second task.
#[tokio::test]
async fn a_submission_whose_wait_cannot_read_its_task_is_accepted() {
    let world = Buffering::new();
    let app = world.app("submission");
    world.memory.refuse_reads(true);
    let body = json!({"workflow": "drone-delivery", "input": delivery_input()}).to_string();
    let post = request("POST", "/tasks", Some("wait=1s"), body.as_bytes());
    let response = api::handle(&app, post).await;
    assert_eq!(response.status, 202, "{}", response.body);
    let location = response.location.expect("its Location");
    assert_eq!(world.memory.messages(&world.ingest).len(), 1, "queued once");
    let read = api::handle(&app, request("GET", &location, None, b"")).await;
    assert_eq!(
        read.status, 503,
        "the wait could not read it: {}",
        read.body
    );
}

/// One request to the API, as anyone.
fn request<'a>(
    method: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    body: &'a [u8],
) -> ApiRequest<'a> {
    ApiRequest {
        caller: &Caller::Anyone,
        method,
        path,
        query,
        body,
        target: None,
        trace: api::TraceHeaders::default(),
    }
}

/// A `POST /tasks` without an id whose task is written but whose Run message the
/// queue refuses is answered 202, not 503: a caller told to send it again would
/// make a second task. The pickup lease has the supervisor send the message.
#[tokio::test]
async fn a_task_written_is_accepted_though_its_message_was_not_sent() {
    let world = Buffering::new();
    let queues = Arc::new(SchedulerQueueDown {
        memory: Arc::clone(&world.memory),
        scheduler: world.names.scheduler.clone(),
        down: AtomicBool::new(true),
    });
    let app = world.direct_over(
        Ports {
            queues: Arc::clone(&queues) as _,
            ..world.ports()
        },
        "submission",
    );
    let body = json!({"workflow": "drone-delivery", "input": delivery_input()}).to_string();
    let response = api::handle(&app, request("POST", "/tasks", None, body.as_bytes())).await;
    assert_eq!(response.status, 202, "{}", response.body);
    assert!(response.location.is_some(), "its Location");
    assert_eq!(world.memory.tasks().len(), 1, "one task");
    assert!(world.memory.messages(&world.names.scheduler).is_empty());

    queues.down.store(false, Ordering::SeqCst);
    let pickup = Registry::built_in()
        .latest("drone-delivery")
        .expect("drone")
        .pickup_timeout;
    world.clock.advance(pickup);
    app.sweep(10).await.expect("swept");
    let sent = world.memory.messages(&world.names.scheduler);
    assert!(
        sent.iter().any(|m| m.body.contains(r#""type":"run""#)),
        "the supervisor sent it: {sent:?}"
    );
}

fn submit_message(notify: Option<&str>) -> String {
    let buffered = Buffered {
        workflow: WorkflowRef {
            name: "drone-delivery".into(),
            version: Registry::built_in()
                .latest("drone-delivery")
                .expect("drone")
                .version,
        },
        submission: Submission {
            notify: notify.map(|q| QueueName::parse(q).expect("queue")),
            ..Submission::new(TaskId::parse("planted").expect("id"), delivery_input())
        },
        accepted_at: Timestamp(1_800_000_000_000),
    };
    serde_json::to_string(&buffered.as_message()).expect("json")
}

/// Each of a scheduler's queues takes only its own messages: an agent, which may
/// answer on the response queue, cannot create a task there (for any owner, with
/// any input) nor move one with a Run; the scheduler's queue takes no responses;
/// a buffered submission is checked again where it enters, the ingest queue.
#[tokio::test]
async fn each_queue_takes_only_the_messages_meant_for_it() {
    let world = Buffering::new();
    let app = world.app("scheduler-1");
    let refused = |handled: Result<_, HandleError>| matches!(handled, Err(HandleError::Refused(_)));

    let submit = submit_message(None);
    let on_responses = app
        .on_scheduler_message(world.names.agent_responses.as_str(), &submit)
        .await;
    assert!(refused(on_responses), "a submission among the responses");
    let run = serde_json::to_string(&SchedulerMessage::Run {
        task_id: TaskId::parse("planted").expect("id"),
    })
    .expect("json");
    let on_responses = app
        .on_scheduler_message(world.names.agent_responses.as_str(), &run)
        .await;
    assert!(refused(on_responses), "a Run among the responses");
    let response = serde_json::to_string(&SchedulerMessage::Response(AgentResponse {
        task_id: TaskId::parse("planted").expect("id"),
        run: 1,
        step: 0,
        attempt: 1,
        operation: Operation::Call,
        outcome: Outcome::Succeeded { output: json!({}) },
        sealed_task: None,
        task_created_at: None,
        output_apart: false,
    }))
    .expect("json");
    let on_scheduler = app
        .on_scheduler_message(world.names.scheduler.as_str(), &response)
        .await;
    assert!(refused(on_scheduler), "a response on the scheduler's queue");
    let elsewhere = app.on_scheduler_message("somewhere-else", &run).await;
    assert!(refused(elsewhere), "a queue the scheduler does not read");
    assert!(world.memory.tasks().is_empty(), "no task created");

    for notify in ["scheduler", "agent-requests-dlq"] {
        let own_queue = app
            .on_scheduler_message(world.ingest.as_str(), &submit_message(Some(notify)))
            .await;
        assert!(refused(own_queue), "notifications to the system's {notify}");
    }
    assert!(world.memory.tasks().is_empty(), "no task created");
    let created = app
        .on_scheduler_message(world.ingest.as_str(), &submit)
        .await
        .expect("created");
    assert_eq!(created.as_str(), "created");
    let tasks: Vec<Value> = world
        .memory
        .tasks()
        .iter()
        .map(|t| json!(t.id.as_str()))
        .collect();
    assert_eq!(tasks, [json!("planted")]);
}

fn get(path: &str) -> ApiRequest<'_> {
    request("GET", path, Some("wait=20s"), b"")
}

/// A wait on an id nobody submitted is answered at once, not held for its whole
/// wait reading the store four times a second (anyone could hold every request
/// the API may serve with it); a wait on a buffered submission this process
/// accepted waits for its creation. On paused time: the waits are measured on
/// the runtime's clock.
#[tokio::test(start_paused = true)]
async fn a_wait_on_an_unknown_id_is_answered_at_once_and_on_an_accepted_one_waits() {
    let world = Buffering::new();
    let app = world.app("scheduler-1");
    let started = tokio::time::Instant::now();
    let response = api::handle(&app, get("/tasks/nobody")).await;
    assert_eq!(response.status, 404, "{}", response.body);
    assert_eq!(started.elapsed(), Duration::ZERO, "answered at once");

    let body = json!({"workflow": "drone-delivery", "input": delivery_input()}).to_string();
    let submit = request("PUT", "/tasks/on-its-way", None, body.as_bytes());
    assert_eq!(api::handle(&app, submit).await.status, 202);
    let [message] = world
        .memory
        .messages(&world.ingest)
        .try_into()
        .expect("queued");
    let started = tokio::time::Instant::now();
    let created_later = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        app.on_scheduler_message(world.ingest.as_str(), &message.body)
            .await
            .expect("created");
    };
    let (response, ()) = tokio::join!(api::handle(&app, get("/tasks/on-its-way")), created_later);
    assert_eq!(response.status, 200, "{}", response.body);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited for its creation: {:?}",
        started.elapsed()
    );
}

/// A hundred clients waiting on one task's end at once each get its end, not the
/// task as it was: past the 64 waits a process once held, a wait was answered at
/// once, its client asked again at once, and 128 clients of the bench ran a third
/// as many tasks a second as 64 (polling the server instead of waiting on it).
#[tokio::test(start_paused = true)]
async fn a_hundred_waits_at_once_each_wait_for_the_end() {
    let world = Buffering::new();
    let app = world.direct_over(world.ports(), "submission");
    let body = json!({"workflow": "drone-delivery", "input": delivery_input()}).to_string();
    let submit = request("PUT", "/tasks/awaited", None, body.as_bytes());
    assert_eq!(api::handle(&app, submit).await.status, 202);
    let waits =
        futures_util::future::join_all((0..100).map(|_| api::handle(&app, get("/tasks/awaited"))));
    let ended_later = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let id = TaskId::parse("awaited").expect("id");
        let mut task = app.task(&id).await.expect("read").expect("stored");
        task.state = sas_domain::task::TaskState::Error;
        task.version += 1;
        sas_core::ports::TaskStore::update(world.memory.as_ref(), &task)
            .await
            .expect("ended");
    };
    let (answers, ()) = tokio::join!(waits, ended_later);
    let before_the_end = answers
        .iter()
        .filter(|answer| {
            let task: Value = serde_json::from_str(&answer.body).expect("JSON");
            task["state"] != "Error"
        })
        .count();
    assert_eq!(before_the_end, 0, "of 100 waits, answered before the end");
}

/// A notification queue the functions may not post to (IAM grants only the queues
/// named with `NotificationQueuePrefix`) is refused at submission, naming the rule,
/// not accepted and then never notified.
#[tokio::test]
async fn a_notification_queue_the_functions_cannot_post_to_is_refused_at_submission() {
    let world = Buffering::new();
    let app = world
        .direct_over(world.ports(), "submission")
        .with_notification_prefix("sas-notify-".into());
    let submit = |notify: &str| {
        json!({"workflow": "drone-delivery", "input": delivery_input(), "notify": notify})
            .to_string()
    };
    let post = |body: &str| {
        let body = body.to_owned();
        let app = &app;
        async move { api::handle(app, request("POST", "/tasks", None, body.as_bytes())).await }
    };
    let refused = post(&submit("my-updates")).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    let error: Value = serde_json::from_str(&refused.body).expect("JSON");
    assert_eq!(error["error"]["field"], "notify");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("sas-notify-")),
        "{error}"
    );
    assert!(world.memory.tasks().is_empty(), "nothing created");
    assert_eq!(post(&submit("sas-notify-my-updates")).await.status, 202);
}

/// Stores a task `id` of `owner` in Error, each step's output `output`.
async fn in_error(
    world: &Buffering,
    id: TaskId,
    owner: Option<&Owner>,
    output: Option<&Arc<Value>>,
) {
    let workflow = Registry::built_in()
        .latest("drone-delivery")
        .expect("drone");
    let submission = Submission {
        owner: owner.cloned(),
        ..Submission::new(id, delivery_input())
    };
    let (mut task, order, _) = sas_domain::decide::submit(&workflow, submission, world.clock.now());
    task.state = sas_domain::task::TaskState::Error;
    task.complete_by = None;
    for step in &mut task.steps {
        step.output = output.cloned();
    }
    sas_core::ports::TaskStore::create(world.memory.as_ref(), &task, &order)
        .await
        .expect("created");
}

/// `GET /tasks?{query}` as `caller`.
async fn list_as(app: &App, caller: &Caller, query: &str) -> api::ApiResponse {
    api::handle(
        app,
        ApiRequest {
            caller,
            ..request("GET", "/tasks", Some(query), b"")
        },
    )
    .await
}

/// Pages through the tasks in Error as `caller`, a hundred a page at most, asking
/// for the next page until there is none: the tasks' ids in the order listed, each
/// answer checked to fit an API Gateway answer, and the most tasks of the store one
/// request read.
async fn page_through(world: &Buffering, app: &App, caller: &Caller) -> (Vec<String>, usize) {
    let (mut listed, mut most_read) = (Vec::new(), 0);
    let mut after: Option<String> = None;
    for _ in 0..50 {
        let query = match &after {
            Some(cursor) => format!("state=Error&limit=100&after={cursor}"),
            None => "state=Error&limit=100".to_owned(),
        };
        let before = world.memory.listed();
        let response = list_as(app, caller, &query).await;
        most_read = most_read.max(world.memory.listed() - before);
        assert_eq!(response.status, 200, "{}", response.body);
        assert!(
            response.body.len() <= api::MAX_ANSWER_BYTES,
            "{} bytes",
            response.body.len()
        );
        let page: Value = serde_json::from_str(&response.body).expect("JSON");
        listed.extend(
            page["tasks"]
                .as_array()
                .expect("tasks")
                .iter()
                .map(|t| t["id"].as_str().expect("id").to_owned()),
        );
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => return (listed, most_read),
        }
    }
    panic!("the listing never ended: {listed:?}");
}

/// The ids `large-00` to `large-39`.
fn large_ids() -> Vec<String> {
    (0..40).map(|n| format!("large-{n:02}")).collect()
}

/// Stores 40 tasks in Error, `large-00` to `large-39`, of `owner`, each step's output
/// 60 KiB: 12 MB together, more than one answer may hold.
async fn large_tasks(world: &Buffering, owner: Option<&Owner>) {
    let output = Arc::new(json!({"blob": "x".repeat(60 * 1024)}));
    for id in large_ids() {
        let id = TaskId::parse(id).expect("id");
        let id = match owner {
            Some(owner) => TaskId::scoped(owner, &id),
            None => id,
        };
        in_error(world, id, owner, Some(&output)).await;
    }
}

/// A listing page of large tasks (each step's output tens of KiB) is answered within
/// what a Lambda function may send API Gateway (6 MB), shorter and with a cursor to
/// the rest, and the pages together list each task once.
#[tokio::test]
async fn a_listing_of_large_tasks_fits_an_answer_and_lists_each_once() {
    let world = Buffering::new();
    let app = world.direct_over(world.ports(), "submission");
    large_tasks(&world, None).await;
    let (listed, _) = page_through(&world, &app, &Caller::Anyone).await;
    assert_eq!(listed, large_ids(), "each once, in order");
}

/// A caller with few tasks among many of others' reads at most 200 of them a
/// request (the store lists by state, every owner's together), not five pages of a
/// hundred: its page comes shorter, with a cursor to go on from, and it finds its
/// own in the end.
#[tokio::test]
async fn an_owners_listing_reads_a_bounded_number_of_tasks_a_request() {
    let world = Buffering::new();
    let app = world.direct_over(world.ports(), "submission");
    let (me, other) = (
        Owner::new("me").expect("owner"),
        Owner::new("other").expect("owner"),
    );
    for n in 0..500 {
        let id = TaskId::scoped(&other, &TaskId::parse(format!("t-{n:03}")).expect("id"));
        in_error(&world, id, Some(&other), None).await;
    }
    let mine = TaskId::scoped(&me, &TaskId::parse("z-mine").expect("id"));
    in_error(&world, mine, Some(&me), None).await;
    let caller = Caller::Known {
        owner: me,
        operator: false,
    };
    let (found, read) = page_through(&world, &app, &caller).await;
    assert!(read <= 200, "{read} tasks read for one request");
    assert_eq!(found, ["z-mine"], "its own, and only its own, in the end");
}

/// A forged callback token is refused as no token, whatever its task: one that does
/// not exist, one that does, and one whose record its workflow no longer fits (which
/// a scheduler takes for an outage, 503). Its answer tells nothing of the task.
#[tokio::test]
async fn a_forged_callback_token_tells_nothing_of_the_task_it_names() {
    let world = Buffering::new();
    let app = world.direct_over(world.ports(), "submission");
    in_error(&world, TaskId::parse("exists").expect("id"), None, None).await;
    in_error(&world, TaskId::parse("misfit").expect("id"), None, None).await;
    let mut misfit = world
        .memory
        .tasks()
        .into_iter()
        .find(|t| t.id.as_str() == "misfit")
        .expect("the task");
    misfit.steps.pop();
    misfit.version += 1;
    sas_core::ports::TaskStore::update(world.memory.as_ref(), &misfit)
        .await
        .expect("a step fewer than its workflow's");
    let forged = |id: &str| {
        format!(
            "{}.1.0.1.{}",
            URL_SAFE_NO_PAD.encode(id),
            URL_SAFE_NO_PAD.encode([7u8; 16])
        )
    };

    let mut answers = Vec::new();
    for id in ["absent", "exists", "misfit"] {
        for (path, body) in [
            (
                format!("/callbacks/{}", forged(id)),
                json!({ "output": {} }),
            ),
            (format!("/callbacks/{}/heartbeat", forged(id)), json!({})),
        ] {
            let body = body.to_string();
            let answer = api::handle(&app, request("POST", &path, None, body.as_bytes())).await;
            answers.push((answer.status, answer.body));
        }
    }

    assert!(
        answers.iter().all(|answer| *answer == answers[0]) && answers[0].0 == 404,
        "{answers:#?}"
    );
}

/// A caller's notification queue must be named for it before anything else is
/// checked: a name of one of the system's own queues is refused as any queue not the
/// caller's, so that a guess of one is not confirmed.
#[tokio::test]
async fn a_callers_guess_of_a_system_queue_is_refused_as_any_queue_not_its_own() {
    let world = Buffering::new();
    let app = world.direct_over(world.ports(), "submission");
    let owner = Owner::new("me").expect("owner");
    let id = TaskId::scoped(&owner, &TaskId::parse("guess").expect("id"));
    for notify in ["scheduler", "agent-requests-dlq", "not-mine"] {
        let submission = Submission {
            owner: Some(owner.clone()),
            notify: Some(QueueName::parse(notify).expect("name")),
            ..Submission::new(id.clone(), delivery_input())
        };
        let refused = app
            .submit("drone-delivery", submission)
            .await
            .expect_err("refused");
        assert_eq!(
            refused.to_string(),
            format!(
                "notify: '{notify}' is not one of yours: your queues' names end with '-{}' \
                 (see GET /me)",
                owner.tag()
            )
        );
    }
}

/// An owner's listing cursor tells nothing of others' tasks, though it may stand
/// after one of theirs (its page read only theirs), and it is the owner's own: taken
/// by another process of the deployment, refused to another owner, for another
/// state, or changed by a character.
#[tokio::test]
async fn an_owners_listing_cursor_tells_nothing_of_others_tasks_and_is_its_own() {
    let world = Buffering::new();
    let app = world.direct_over(world.ports(), "submission");
    let (me, other) = (
        Owner::new("me").expect("owner"),
        Owner::new("other").expect("owner"),
    );
    let mut theirs = Vec::new();
    for n in 0..300 {
        let id = TaskId::scoped(&other, &TaskId::parse(format!("t-{n:03}")).expect("id"));
        theirs.push(id.to_string());
        in_error(&world, id, Some(&other), None).await;
    }
    world.clock.advance(Duration::from_secs(1));
    let mine = TaskId::scoped(&me, &TaskId::parse("z-mine").expect("id"));
    in_error(&world, mine, Some(&me), None).await;
    let (caller, them) = (
        Caller::Known {
            owner: me,
            operator: false,
        },
        Caller::Known {
            owner: other.clone(),
            operator: false,
        },
    );
    let page = |response: api::ApiResponse| {
        assert_eq!(response.status, 200, "{}", response.body);
        serde_json::from_str::<Value>(&response.body).expect("JSON")
    };

    let first = page(list_as(&app, &caller, "state=Error&limit=100").await);
    assert_eq!(first["tasks"], json!([]), "its page read only others'");
    let next = first["next"].as_str().expect("a next page").to_owned();
    let sealed = URL_SAFE_NO_PAD.decode(&next).expect("base64");
    for told in theirs.iter().chain([&other.tag()]) {
        let named = |text: &[u8]| text.windows(told.len()).any(|w| w == told.as_bytes());
        assert!(
            !named(next.as_bytes()) && !named(&sealed),
            "{next} names {told}"
        );
    }

    let elsewhere = world.direct_over(world.ports(), "submission-2");
    let second = page(
        list_as(
            &elsewhere,
            &caller,
            &format!("state=Error&limit=100&after={next}"),
        )
        .await,
    );
    assert_eq!(second["tasks"][0]["id"], "z-mine", "{second}");

    let mut changed = next.clone().into_bytes();
    changed[30] = if changed[30] == b'A' { b'B' } else { b'A' };
    let changed = String::from_utf8(changed).expect("text");
    for (who, query) in [
        (&them, format!("state=Error&after={next}")),
        (&caller, format!("state=Pending&after={next}")),
        (&caller, format!("state=Error&after={changed}")),
        (
            &caller,
            format!("state=Error&after=000000000000000.{}", theirs[0]),
        ),
    ] {
        let refused = list_as(&app, who, &query).await;
        assert_eq!(refused.status, 400, "{query}: {}", refused.body);
        assert!(refused.body.contains("not a cursor"), "{}", refused.body);
    }
}

/// An owner's page of large tasks, too large for one answer, is answered shorter and
/// goes on after the last task it shows: nothing is read again, so a request reads no
/// more of the store than one listing may, and each task is listed once, in order.
#[tokio::test]
async fn an_owners_page_of_large_tasks_is_cut_to_fit_without_reading_again() {
    let world = Buffering::new();
    let app = world.direct_over(world.ports(), "submission");
    let (me, other) = (
        Owner::new("me").expect("owner"),
        Owner::new("other").expect("owner"),
    );
    large_tasks(&world, Some(&me)).await;
    for n in 0..150 {
        let id = TaskId::scoped(&other, &TaskId::parse(format!("t-{n:03}")).expect("id"));
        in_error(&world, id, Some(&other), None).await;
    }
    let caller = Caller::Known {
        owner: me,
        operator: false,
    };
    let (found, read) = page_through(&world, &app, &caller).await;
    assert!(read <= 200, "{read} tasks read for one request");
    assert_eq!(found, large_ids(), "each of its own once, in order");
}
