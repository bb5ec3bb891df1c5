//! Repairs: a patched input or output, a restart from a step; what runs again, what
//! is undone first, under which keys, and what is refused.

use std::collections::BTreeMap;

use super::*;

/// A delivery whose steps name what they send: a check, two steps undone by their
/// compensations, and a notice that nothing undoes.
fn mapped() -> Workflow {
    Workflow::parse(
        "fix.json",
        r#"{"name": "fix", "version": 1, "description": "d",
            "input": {"customer_id": "string", "dropoff": "string"},
            "steps": [
              {"name": "check-account", "agent": "account", "call": "/accounts/check",
               "read_only": true, "fields": {"customer": "input.customer_id"}},
              {"name": "create-package", "agent": "package", "call": "/packages",
               "compensation": "/packages/cancel", "fields": {"customer": "input.customer_id"}},
              {"name": "schedule-drone", "agent": "drone", "call": "/drones/schedule",
               "compensation": "/drones/cancel",
               "fields": {"to": "input.dropoff", "package": "results.create-package.id"}},
              {"name": "notify", "agent": "mail", "call": "/mail",
               "fields": {"to": "input.customer_id"}}
            ]}"#,
    )
    .expect("valid")
}

fn new_task(workflow: &Workflow) -> (Task, Order) {
    let submission = crate::submission::Submission {
        notify: Some(QueueName::parse("mine").expect("queue")),
        ..crate::submission::Submission::new(
            TaskId::parse("t1").expect("id"),
            json!({"customer_id": "c", "dropoff": "nowhere"}),
        )
    };
    let (task, order, _) = submit(workflow, submission, Timestamp(0));
    (task, order)
}

/// Runs `task` from a claim, answering each call with `answer(step)`, until it stops.
fn run(
    task: &Task,
    workflow: &Workflow,
    order: &Order,
    answer: impl Fn(&AgentRequest) -> Outcome,
) -> (Task, Vec<AgentRequest>) {
    let mut decision = on_run(task, workflow, order, "s1", Timestamp(0));
    let mut task = decision.next.clone().expect("claimed");
    let mut sent = Vec::new();
    while let Some(request) = dispatched(&decision).first().map(|r| (*r).clone()) {
        let outcome = answer(&request);
        sent.push(request.clone());
        decision = on_response(
            &task,
            workflow,
            order,
            &respond(&request, outcome),
            Timestamp(0),
        );
        task = decision.next.clone().expect("recorded");
    }
    (task, sent)
}

fn package_id(request: &AgentRequest) -> Outcome {
    Outcome::Succeeded {
        output: json!({"id": format!("p-{}", request.idempotency_key)}),
    }
}

/// A task whose drone step was refused for its address: in Error, its package
/// undone.
fn refused_drop_off(workflow: &Workflow) -> (Task, Order) {
    let (task, order) = new_task(workflow);
    let (task, _) = run(&task, workflow, &order, |request| {
        match request.step_name.as_str() {
            "schedule-drone" if request.operation == Operation::Call => Outcome::Failed {
                error: "no such address".into(),
            },
            _ => package_id(request),
        }
    });
    assert_eq!(task.state, TaskState::Error);
    (task, order)
}

fn repair_of(input: Option<Value>, outputs: &[(&str, Value)], from: Option<&str>) -> Repair {
    Repair {
        request: operator(None),
        input,
        outputs: outputs
            .iter()
            .map(|(step, patch)| ((*step).to_owned(), patch.clone()))
            .collect::<BTreeMap<_, _>>(),
        from: from.map(str::to_owned),
        reason: Some("wrong drop-off".into()),
        entered_with: None,
    }
}

/// The keys of the calls and compensations sent, in order.
fn calls(sent: &[AgentRequest]) -> Vec<String> {
    sent.iter().map(|r| r.idempotency_key.clone()).collect()
}

#[test]
fn a_patched_drop_off_runs_again_what_reads_it_and_keeps_the_check() {
    let workflow = mapped();
    let (task, order) = refused_drop_off(&workflow);
    let patch = repair_of(Some(json!({"dropoff": "12 High St"})), &[], None);
    let plan = plan_repair(&task, &workflow, &order, &patch).expect("planned");
    assert_eq!(plan.kept, ["check-account"]);
    assert_eq!(
        plan.run_again,
        ["create-package", "schedule-drone", "notify"]
    );
    assert!(plan.undone_first.is_empty() && plan.same_key.is_empty());

    let decision = repair(&task, &workflow, &order, patch, Timestamp(5)).expect("repaired");
    assert_eq!(decision.verdict, Verdict::Repaired);
    let order = decision.order.clone().expect("the input is edited");
    assert_eq!(order.input["dropoff"], "12 High St");
    assert_eq!(order.earlier[0].input["dropoff"], "nowhere");
    let task = decision.next.expect("written");
    assert_eq!((task.state, task.run), (TaskState::Pending, 2));
    let note = task.resubmissions[0].repair.as_ref().expect("noted");
    assert_eq!(note.reason.as_deref(), Some("wrong drop-off"));
    assert_eq!(note.patch["input"]["dropoff"], "12 High St");
    assert!(
        task.history
            .iter()
            .any(|e| matches!(e.what(), crate::task::Happened::Repaired { run: 2, .. }))
    );
    let (task, sent) = run(&task, &workflow, &order, package_id);
    assert_eq!(task.state, TaskState::Processed);
    assert_eq!(
        calls(&sent),
        ["t1/2/create-package", "t1/2/schedule-drone", "t1/2/notify"],
        "the check is not called again"
    );
    assert_eq!(sent[1].payload.value()["fields"]["to"], "12 High St");
}

#[test]
fn a_corrected_output_is_what_the_steps_after_it_read_once_they_are_undone() {
    let workflow = mapped();
    let (task, order) = new_task(&workflow);
    let (task, _) = run(&task, &workflow, &order, package_id);
    assert_eq!(task.state, TaskState::Processed);
    let patch = repair_of(None, &[("create-package", json!({"id": "p-right"}))], None);
    let plan = plan_repair(&task, &workflow, &order, &patch).expect("planned");
    assert_eq!(plan.patched, ["create-package"]);
    assert_eq!(plan.kept, ["check-account", "notify"]);
    assert_eq!(plan.undone_first, ["schedule-drone"]);
    assert_eq!(plan.run_again, ["schedule-drone"]);

    let decision = repair(&task, &workflow, &order, patch, Timestamp(5)).expect("repaired");
    assert!(decision.order.is_none(), "the input is as it was");
    let task = decision.next.expect("written");
    assert_eq!(task.state, TaskState::Compensating);
    assert_eq!(task.rewind, ["schedule-drone"]);
    let told = task.outbox.last().expect("the caller is told");
    assert_eq!(told.notification.state, TaskState::Compensating);
    let repaired = told.notification.repair.as_ref().expect("of the repair");
    assert_eq!(repaired.request.by, crate::task::Actor::Operator);

    let (task, sent) = run(&task, &workflow, &order, package_id);
    assert_eq!(
        calls(&sent),
        ["t1/1/schedule-drone/compensate", "t1/2/schedule-drone"]
    );
    assert_eq!(sent[1].payload.value()["fields"]["package"], "p-right");
    assert_eq!(task.state, TaskState::Processed);
    assert!(task.rewind.is_empty());
    assert_eq!(
        task.steps[1].output.as_deref(),
        Some(&json!({"id": "p-right"}))
    );
}

#[test]
fn a_restart_from_a_middle_step_undoes_what_came_after_it_in_reverse() {
    let workflow = mapped();
    let (task, order) = new_task(&workflow);
    let (task, _) = run(&task, &workflow, &order, package_id);
    let patch = repair_of(None, &[], Some("create-package"));
    let plan = plan_repair(&task, &workflow, &order, &patch).expect("planned");
    assert_eq!(plan.kept, ["check-account"]);
    assert_eq!(plan.undone_first, ["create-package", "schedule-drone"]);
    assert_eq!(plan.same_key, ["notify"], "nothing undoes the notice");

    let task = repair(&task, &workflow, &order, patch, Timestamp(5))
        .expect("repaired")
        .next
        .expect("written");
    let (task, sent) = run(&task, &workflow, &order, package_id);
    assert_eq!(
        calls(&sent),
        [
            "t1/1/schedule-drone/compensate",
            "t1/1/create-package/compensate",
            "t1/2/create-package",
            "t1/2/schedule-drone",
            "t1/1/notify",
        ],
        "undone in reverse, run again in order, the notice under the key it had"
    );
    assert_eq!(task.state, TaskState::Processed);
}

#[test]
fn a_compensation_that_fails_in_a_restart_fails_the_task_and_undoes_all() {
    let workflow = mapped();
    let (task, order) = new_task(&workflow);
    let (task, _) = run(&task, &workflow, &order, package_id);
    let patch = repair_of(None, &[], Some("schedule-drone"));
    let task = repair(&task, &workflow, &order, patch, Timestamp(5))
        .expect("repaired")
        .next
        .expect("written");
    let (task, sent) = run(&task, &workflow, &order, |request| {
        match (request.step_name.as_str(), request.operation) {
            ("schedule-drone", Operation::Compensate) => Outcome::Failed {
                error: "drone gone".into(),
            },
            _ => package_id(request),
        }
    });
    assert_eq!(
        calls(&sent),
        [
            "t1/1/schedule-drone/compensate",
            "t1/1/create-package/compensate"
        ]
    );
    assert_eq!(task.state, TaskState::Error);
    assert!(task.rewind.is_empty());
    assert!(
        (task.error.as_deref()).is_some_and(|e| e.contains("compensation failed")),
        "{:?}",
        task.error
    );
    assert_eq!(task.steps[2].state, StepState::CompensationFailed);
}

#[test]
fn a_repair_that_would_act_twice_or_cannot_apply_is_refused_naming_why() {
    let workflow = mapped();
    let (task, order) = new_task(&workflow);
    let running = on_run(&task, &workflow, &order, "s1", Timestamp(0))
        .next
        .expect("claimed");
    let refused = |task: &Task, repair: Repair| plan_repair(task, &workflow, &order, &repair);
    assert_eq!(
        refused(&running, repair_of(None, &[], Some("notify"))),
        Err(Refused::NotRepairable(TaskState::Processing))
    );
    let (done, _) = run(&task, &workflow, &order, package_id);
    assert_eq!(
        refused(
            &done,
            repair_of(Some(json!({"customer_id": "d"})), &[], None)
        ),
        Err(Refused::ChangedInPlace(vec!["notify".into()])),
        "the notice would go out again with another address"
    );
    assert_eq!(
        refused(
            &done,
            repair_of(Some(json!({"dropoff": "nowhere"})), &[], None)
        ),
        Err(Refused::NothingToRunAgain)
    );
    assert_eq!(
        refused(&done, repair_of(None, &[], Some("fly"))),
        Err(Refused::NoSuchStep("fly".into()))
    );
    assert!(matches!(
        refused(&done, repair_of(Some(json!([{"op": "remove", "path": "/nope"}])), &[], None)),
        Err(Refused::Patch(what, _)) if what == "input"
    ));
    assert!(matches!(
        refused(&done, repair_of(Some(json!({"dropoff": 7})), &[], None)),
        Err(Refused::Input(_))
    ));
    assert_eq!(
        refused(
            &done,
            repair_of(None, &[("notify", json!({}))], Some("schedule-drone"))
        ),
        Err(Refused::RunsAgain("notify".into()))
    );
    let (failed, _) = refused_drop_off(&workflow);
    assert_eq!(
        refused(
            &failed,
            repair_of(None, &[("create-package", json!({}))], None)
        ),
        Err(Refused::RunsAgain("create-package".into())),
        "an undone step runs again: its output would not be kept"
    );
}

#[test]
fn a_json_patch_edits_the_input_and_a_failed_step_given_its_output_is_done() {
    let workflow = mapped();
    let (task, order) = refused_drop_off(&workflow);
    let patch = repair_of(
        Some(json!([{"op": "replace", "path": "/dropoff", "value": "Dock 4"}])),
        &[],
        None,
    );
    let decision = repair(&task, &workflow, &order, patch, Timestamp(5)).expect("repaired");
    assert_eq!(decision.order.expect("edited").input["dropoff"], "Dock 4");

    // The drone was booked by hand: its output given, the task goes on after it.
    let by_hand = repair_of(None, &[("schedule-drone", json!({"drone": "d-7"}))], None);
    let plan = plan_repair(&task, &workflow, &order, &by_hand).expect("planned");
    assert_eq!(plan.patched, ["schedule-drone"]);
    assert_eq!(plan.run_again, ["create-package", "notify"]);
}

#[test]
fn a_restart_calls_again_under_its_key_a_step_nothing_undoes_that_a_patch_would_change() {
    let workflow = drone();
    let (task, order, _) = submit(&workflow, submission(true), Timestamp(0));
    let (task, _) = run(&task, &workflow, &order, package_id);
    assert_eq!(task.state, TaskState::Processed);
    let plan = plan_repair(
        &task,
        &workflow,
        &order,
        &repair_of(None, &[], Some("schedule-drone")),
    )
    .expect("a restart is planned");
    assert_eq!(plan.undone_first, ["schedule-drone"]);
    assert_eq!(
        plan.same_key,
        ["create-delivery"],
        "it reads the drone's new result, but a restart asks it again under its key"
    );
    let patch = repair_of(None, &[("check-transport", json!({"zone": 2}))], None);
    assert_eq!(
        plan_repair(&task, &workflow, &order, &patch),
        Err(Refused::ChangedInPlace(vec!["create-delivery".into()])),
        "a patch that changes what it reads would have it act twice"
    );
}
