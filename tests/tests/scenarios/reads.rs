//! How the scheduler reads a task: carried sealed in its requests and given back in
//! their answers, or read again consistently when an eventually consistent read is stale.

use std::sync::Arc;
use std::time::Duration;

use sas_core::app::{App, Handled, Ports, QueueNames};
use sas_core::ports::TaskStore;
use sas_domain::decide::{Resubmit, Verdict};
use sas_domain::ids::{QueueName, TaskId};
use sas_domain::messages::{
    AgentRequest, AgentResponse, Buffered, Operation, Outcome as MessageOutcome, SchedulerMessage,
};
use sas_domain::submission::Submission;
use sas_domain::task::{Actor, Order, Request, StepState, Task, TaskState, WorkflowRef};
use sas_domain::time::Timestamp;
use sas_domain::workflow::Registry;
use sas_testkit::ManualClock;
use sas_testkit::memory::Memory;
use sas_tests::{delivery_input, step_states};
use serde_json::{Value, json};

/// `message` handled by `app`'s scheduler, from the queue it comes by.
async fn handled_by(app: &App, message: SchedulerMessage) -> Handled {
    let body = serde_json::to_string(&message).expect("json");
    let queue = match message {
        SchedulerMessage::Response(_) => "agent-responses",
        _ => "scheduler",
    };
    app.on_scheduler_message(queue, &body)
        .await
        .expect("handled")
}

/// The task as stored, with its order, for a test's own checks.
async fn stored(memory: &Memory, id: &TaskId) -> (Task, Order) {
    memory
        .task_with_order(id)
        .await
        .expect("read")
        .expect("task")
}

#[tokio::test]
async fn a_stale_read_is_read_again_consistently_before_a_message_is_dropped_or_an_action_refused()
{
    let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
    let (memory, names) = sas_tests::in_memory(&clock, None);
    let store = &memory;
    let app = App::new(
        Ports::of(&memory, Arc::clone(&clock) as _),
        Arc::new(Registry::built_in()),
        names,
        "scheduler-1".into(),
    );
    let id = TaskId::parse("lagged").expect("id");
    let submission = Submission::new(id.clone(), delivery_input());
    app.submit("drone-delivery", submission)
        .await
        .expect("submitted");
    let created = stored(store, &id).await;
    let handle = |message| handled_by(&app, message);
    let response = |task: &Task| {
        SchedulerMessage::Response(AgentResponse {
            task_id: id.clone(),
            run: task.run,
            step: task.running_steps().next().expect("a step runs"),
            attempt: 1,
            operation: Operation::Call,
            outcome: MessageOutcome::Succeeded { output: json!({}) },
            sealed_task: None,
            task_created_at: None,
            output_apart: false,
        })
    };

    // A replica without the task yet: the Run is not dropped as for an unknown task.
    store.lag(None);
    let before = store.reads();
    let claimed = handle(SchedulerMessage::Run {
        task_id: id.clone(),
    })
    .await;
    assert_eq!(claimed, Handled::Decided(Verdict::Claimed));
    assert_eq!(
        store.reads(),
        [before[0] + 1, before[1] + 1],
        "read again, consistently"
    );

    // A replica from before the claim: the first step's answer is not taken for a
    // stale one.
    let (task, _) = stored(store, &id).await;
    store.lag(Some(created));
    let before = store.reads();
    assert_eq!(
        handle(response(&task)).await,
        Handled::Decided(Verdict::Recorded)
    );
    assert_eq!(store.reads(), [before[0] + 1, before[1] + 1]);

    // An up-to-date replica: one read, eventually consistent, for the next answer.
    let (task, _) = stored(store, &id).await;
    let before = store.reads();
    assert_eq!(
        handle(response(&task)).await,
        Handled::Decided(Verdict::Recorded)
    );
    assert_eq!(
        store.reads(),
        [before[0], before[1] + 1],
        "no consistent read"
    );
    let (task, _) = stored(store, &id).await;
    assert_eq!(
        task.steps
            .iter()
            .filter(|s| s.state == StepState::Processed)
            .count(),
        2
    );

    // The same answer again: dropped as stale, on a consistent read.
    let again = response(&task);
    let before = store.reads();
    let SchedulerMessage::Response(mut duplicate) = again else {
        unreachable!()
    };
    duplicate.step -= 1;
    assert_eq!(
        handle(SchedulerMessage::Response(duplicate)).await,
        Handled::Decided(Verdict::StaleResponse)
    );
    assert_eq!(store.reads(), [before[0] + 1, before[1] + 1]);

    // A step failing for good ends the task in Error; an operator's resubmission on a
    // replica from before that is not refused as of a task still running.
    let (running, order) = stored(store, &id).await;
    let SchedulerMessage::Response(mut failed) = response(&running) else {
        unreachable!()
    };
    failed.outcome = MessageOutcome::Failed {
        error: "no such customer".into(),
    };
    handle(SchedulerMessage::Response(failed)).await;
    // The package it created is undone.
    let (compensating, _) = stored(store, &id).await;
    let undone = SchedulerMessage::Response(AgentResponse {
        task_id: id.clone(),
        run: compensating.run,
        step: 1,
        attempt: compensating.steps[1].attempt,
        operation: Operation::Compensate,
        outcome: MessageOutcome::Succeeded { output: json!({}) },
        sealed_task: None,
        task_created_at: None,
        output_apart: false,
    });
    handle(undone).await;
    let (ended, _) = stored(store, &id).await;
    assert_eq!(ended.state, TaskState::Error, "{ended:?}");
    store.lag(Some((running, order)));
    let resubmit = Resubmit {
        request: Request {
            by: Actor::Operator,
            at: Timestamp(1_800_000_001_000),
            batch: None,
        },
        input: None,
    };
    let resubmitted = app.resubmit(&id, resubmit).await.expect("not refused");
    assert_eq!(resubmitted.run, ended.run + 1);
}

/// A store, its queues, and a scheduler whose agents' requests carry their tasks
/// sealed, as on DynamoDB.
fn carrying_tasks() -> (Arc<Memory>, QueueNames, App, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
    let (memory, names) = sas_tests::in_memory(&clock, None);
    let app = scheduler(&memory, &names, &clock, "scheduler-1").with_sealed_tasks(true);
    (memory, names, app, clock)
}

/// A scheduler `instance` over `store`, its queues `names`, reading `clock`.
fn scheduler(
    store: &Arc<Memory>,
    names: &QueueNames,
    clock: &Arc<ManualClock>,
    instance: &str,
) -> App {
    App::new(
        Ports::of(store, Arc::clone(clock) as _),
        Arc::new(Registry::built_in()),
        names.clone(),
        instance.into(),
    )
}

/// The agents' requests sent, in order.
fn requests(store: &Memory, names: &QueueNames) -> Vec<AgentRequest> {
    store
        .messages(&names.agent_requests)
        .iter()
        .map(|sent| serde_json::from_str(&sent.body).expect("a request"))
        .collect()
}

/// Submits task `id` of `workflow` to `app` and runs it: the requests that sent.
async fn started(
    (app, store, names): (&App, &Memory, &QueueNames),
    id: &str,
    workflow: &str,
    input: Value,
) -> Vec<AgentRequest> {
    let id = TaskId::parse(id).expect("id");
    let sent = requests(store, names).len();
    app.submit(workflow, Submission::new(id.clone(), input))
        .await
        .expect("submitted");
    handled_by(app, SchedulerMessage::Run { task_id: id }).await;
    requests(store, names).split_off(sent)
}

/// The last agent's request sent.
fn last_request(store: &Memory, names: &QueueNames) -> AgentRequest {
    requests(store, names).pop().expect("a request")
}

/// A success answering `request`, giving back `sealed_task`.
fn answer(request: &AgentRequest, sealed_task: Option<String>) -> SchedulerMessage {
    answer_with(
        request,
        MessageOutcome::Succeeded { output: json!({}) },
        sealed_task,
    )
}

/// `outcome` answering `request`, giving back `sealed_task`.
fn answer_with(
    request: &AgentRequest,
    outcome: MessageOutcome,
    sealed_task: Option<String>,
) -> SchedulerMessage {
    SchedulerMessage::Response(AgentResponse {
        sealed_task,
        ..AgentResponse::answering(request.clone(), outcome)
    })
}

/// A task created claimed from a buffered submission carries itself in its first
/// request, as a step's write does: the first answer is recorded without a read.
#[tokio::test]
async fn a_task_created_claimed_carries_itself_in_its_first_request() {
    let (store, names, app, _) = carrying_tasks();
    let app = app.with_ingestion(QueueName::parse("ingest").expect("a queue"));
    app.register_workflows().await.expect("registered");
    let drone = Registry::built_in()
        .latest("drone-delivery")
        .expect("drone-delivery");
    let submit = SchedulerMessage::Submit(Buffered {
        workflow: WorkflowRef {
            name: drone.name.as_str().into(),
            version: drone.version,
        },
        submission: Submission::new(TaskId::parse("buffered").expect("id"), delivery_input()),
        accepted_at: Timestamp(0),
    });
    let body = serde_json::to_string(&submit).expect("json");
    assert_eq!(
        app.on_scheduler_message("ingest", &body)
            .await
            .expect("handled"),
        Handled::Created
    );
    let first = last_request(&store, &names);
    assert_eq!(first.step, 0);
    let sealed = first
        .sealed_task
        .clone()
        .expect("the task sealed in its creation's request");

    let before = store.reads();
    assert_eq!(
        handled_by(&app, answer(&first, Some(sealed))).await,
        Handled::Decided(Verdict::Recorded)
    );
    assert_eq!(store.reads(), before, "recorded without a read");
    assert_eq!(
        last_request(&store, &names).step,
        1,
        "the next step requested"
    );
}

/// Where reads are billed, an agent's request carries its task as written, sealed,
/// and its response gives it back: the scheduler records the answer without reading
/// the task. The same answer again, its sealed task now behind the store, loses its
/// write and is dropped on a consistent read; a sealed task that does not open is
/// ignored, and the task read.
#[tokio::test]
async fn a_response_giving_back_its_sealed_task_is_recorded_without_reading_the_task() {
    let (store, names, app, _) = carrying_tasks();
    let store = &store;
    let id = TaskId::parse("sealed").expect("id");
    let handle = |message| handled_by(&app, message);
    let last_request = || last_request(store, &names);
    started(
        (&app, store, &names),
        "sealed",
        "drone-delivery",
        delivery_input(),
    )
    .await;
    let first = last_request();
    let sealed = first
        .sealed_task
        .clone()
        .expect("the task sealed in its request");
    assert!(!sealed.contains("Sydney"), "opaque to the agent: {sealed}");

    let before = store.reads();
    assert_eq!(
        handle(answer(&first, Some(sealed.clone()))).await,
        Handled::Decided(Verdict::Recorded)
    );
    assert_eq!(store.reads(), before, "recorded without a read");
    let second = last_request();
    assert_eq!(second.step, 1, "the next step requested");

    // The same answer again: its task is a write behind.
    let requests = store.messages(&names.agent_requests).len();
    assert_eq!(
        handle(answer(&first, Some(sealed))).await,
        Handled::Decided(Verdict::StaleResponse)
    );
    assert_eq!(
        store.reads()[0],
        before[0] + 2,
        "read consistently: whether its write had landed, then to decide again"
    );
    assert_eq!(
        store.messages(&names.agent_requests).len(),
        requests,
        "nothing requested again"
    );

    // A sealed task that does not open: the task is read.
    let mut forged = second.sealed_task.clone().expect("sealed").into_bytes();
    forged[20] = if forged[20] == b'A' { b'B' } else { b'A' };
    let before = store.reads();
    assert_eq!(
        handle(answer(
            &second,
            Some(String::from_utf8(forged).expect("text"))
        ))
        .await,
        Handled::Decided(Verdict::Recorded)
    );
    assert_eq!(
        store.reads(),
        [before[0], before[1] + 1],
        "read as without one"
    );
    let (task, _) = stored(store, &id).await;
    assert_eq!(
        step_states(&serde_json::to_value(&task).expect("json"))[..3],
        ["Processed", "Processed", "Processing"]
    );
}

/// A request carries its task only when it is the task's only call out, and the
/// task fits: parallel branches' requests carry none (all but the first response
/// would decide from a task moved on), nor does a task too large to seal; and a
/// process that does not carry tasks (the embedded store's) opens none it is given.
#[tokio::test]
async fn a_task_is_carried_only_by_its_only_call_out_when_it_fits_and_where_tasks_are_carried() {
    let (store, names, app, clock) = carrying_tasks();
    let start = |id, workflow, input| started((&app, &store, &names), id, workflow, input);
    let carried = |requests: &[AgentRequest]| -> Vec<bool> {
        requests.iter().map(|r| r.sealed_task.is_some()).collect()
    };

    assert_eq!(
        carried(&start("alone", "drone-delivery", delivery_input()).await),
        [true]
    );
    let mut large = delivery_input();
    large["note"] = json!(
        (0..6_000)
            .map(|_| fastrand::alphanumeric())
            .collect::<String>()
    );
    assert_eq!(
        carried(&start("large", "drone-delivery", large).await),
        [false]
    );
    // The parallel delivery's first step is two checks, sent together.
    let branches = start("branches", "drone-delivery-parallel", delivery_input()).await;
    assert_eq!(carried(&branches), [false, false]);

    let alone = last_request_of(&store, &names, "alone");
    let not_carrying = scheduler(&store, &names, &clock, "scheduler-2");
    let before = store.reads();
    handled_by(&not_carrying, answer(&alone, alone.sealed_task.clone())).await;
    assert_eq!(store.reads()[1], before[1] + 1, "read, not opened");
}

/// The last request sent for task `id`.
fn last_request_of(store: &Memory, names: &QueueNames, id: &str) -> AgentRequest {
    requests(store, names)
        .into_iter()
        .rev()
        .find(|request| request.task_id.as_str() == id)
        .expect("a request of the task")
}

/// A task cancelled while its call is out: the answer gives back the task as it was
/// before the cancel, whose write is then refused; the answer is decided from the
/// task as it is, cancelled, and the cancel holds.
#[tokio::test]
async fn an_answer_giving_back_its_task_from_before_a_cancel_does_not_undo_the_cancel() {
    let (store, names, app, _) = carrying_tasks();
    let id = TaskId::parse("cancelled").expect("id");
    let out = started(
        (&app, &store, &names),
        "cancelled",
        "drone-delivery",
        delivery_input(),
    )
    .await
    .pop()
    .expect("a request");
    let request = Request {
        by: Actor::Owner,
        at: Timestamp(1_800_000_000_500),
        batch: None,
    };
    app.cancel(&id, request).await.expect("cancelled");

    handled_by(&app, answer(&out, out.sealed_task.clone())).await;
    let (task, _) = stored(&store, &id).await;
    assert!(task.cancelled.is_some(), "the cancel holds: {task:?}");
    assert_eq!(task.state, TaskState::Error, "nothing done is left to undo");
    assert_eq!(task.steps[0].state, StepState::Processed);
}

/// An id used again once its task was removed (a DynamoDB TTL) names another task,
/// whose versions repeat the first's: a response giving back the first task, sealed,
/// must not write it over the second (its owner, its creation, its history), nor
/// answer the second's request of the same run, step and attempt, sealed or not.
#[tokio::test]
async fn a_sealed_task_of_an_id_used_before_does_not_write_over_the_task_using_it_now() {
    let (store, names, app, clock) = carrying_tasks();
    let id = TaskId::parse("reused").expect("id");
    let start = || {
        started(
            (&app, &store, &names),
            "reused",
            "drone-delivery",
            delivery_input(),
        )
    };
    start().await;
    let old = last_request(&store, &names);
    let old_sealed = old.sealed_task.clone().expect("sealed");
    let first_created = stored(&store, &id).await.0.created_at;

    store.remove_task(&id);
    clock.advance(Duration::from_secs(86_400));
    start().await;
    let now_created = stored(&store, &id).await.0.created_at;
    assert_ne!(now_created, first_created);

    assert_eq!(
        handled_by(&app, answer(&old, Some(old_sealed))).await,
        Handled::Decided(Verdict::StaleResponse),
        "the answer of a request of the task before"
    );
    assert_eq!(
        handled_by(&app, answer(&old, None)).await,
        Handled::Decided(Verdict::StaleResponse),
        "told apart by its task's creation, without the task sealed too"
    );
    let (task, _) = stored(&store, &id).await;
    assert_eq!(
        task.created_at, now_created,
        "the task using the id now is kept, not the one before"
    );
    assert_eq!(
        task.steps[0].state,
        StepState::Processing,
        "its own request still awaited"
    );
}

/// A read that is not consistent may find an edited resubmission's task and the
/// order before it (two items): the step is then sent with the input the
/// resubmission replaced, unless the order is read again.
#[tokio::test]
async fn a_task_read_with_the_order_its_resubmission_replaced_is_read_again() {
    let (store, names, app, _) = carrying_tasks();
    let id = TaskId::parse("edited").expect("id");
    let first = started(
        (&app, &store, &names),
        "edited",
        "drone-delivery",
        delivery_input(),
    )
    .await
    .pop()
    .expect("a request");
    let failed = MessageOutcome::Failed {
        error: "no such account".into(),
    };
    handled_by(&app, answer_with(&first, failed, None)).await;
    let (_, old_order) = stored(&store, &id).await;
    let mut edited = delivery_input();
    edited["customer_id"] = json!("c-edited");
    let resubmit = Resubmit {
        request: Request {
            by: Actor::Operator,
            at: Timestamp(1_800_000_001_000),
            batch: None,
        },
        input: Some(edited),
    };
    app.resubmit(&id, resubmit).await.expect("resubmitted");
    let (task, order) = stored(&store, &id).await;
    assert!(
        old_order.predates(&task) && !order.predates(&task),
        "the order before is behind the task, the order now is not"
    );

    store.lag(Some((task, old_order)));
    handled_by(&app, SchedulerMessage::Run { task_id: id }).await;
    let sent = last_request(&store, &names);
    assert_eq!(sent.run, 2);
    let payload = serde_json::to_string(&sent.payload).expect("json");
    assert!(
        payload.contains("c-edited"),
        "sent with the input of its run: {payload}"
    );
}
