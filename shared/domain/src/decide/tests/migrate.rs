//! Moves onto another version: a running task carried on, a new step run when its
//! turn comes, and each move that cannot be made safe refused, naming the step.

use std::collections::BTreeMap;

use super::*;

const CHECK: &str = r#"{"name": "check-account", "agent": "account", "call": "/accounts/check", "read_only": true}"#;
const PACKAGE: &str = r#"{"name": "create-package", "agent": "package", "call": "/packages", "compensation": "/packages/cancel"}"#;
const DRONE: &str = r#"{"name": "schedule-drone", "agent": "drone", "call": "/drones/schedule", "compensation": "/drones/cancel"}"#;

/// Version `version` of the workflow `moving`, with these steps.
fn version(version: u32, steps: &[&str]) -> Workflow {
    Workflow::parse(
        "moving.json",
        &format!(
            r#"{{"name": "moving", "version": {version}, "description": "d",
                "input": {{"customer_id": "string"}}, "steps": [{}]}}"#,
            steps.join(",")
        ),
    )
    .expect("valid")
}

fn v1() -> Workflow {
    version(1, &[CHECK, PACKAGE, DRONE])
}

/// A task of v1 whose package step is out (its request, too).
fn packaging() -> (Task, Order, AgentRequest) {
    let workflow = v1();
    let submission = crate::submission::Submission::new(
        TaskId::parse("t1").expect("id"),
        json!({"customer_id": "c"}),
    );
    let (task, order, _) = submit(&workflow, submission, Timestamp(0));
    let claim = on_run(&task, &workflow, &order, "s1", Timestamp(0));
    let task = claim.next.clone().expect("claimed");
    let checked = respond(dispatched(&claim)[0], ok());
    let decision = on_response(&task, &workflow, &order, &checked, Timestamp(0));
    let request = dispatched(&decision)[0].clone();
    assert_eq!(request.step_name, "create-package");
    (decision.next.expect("recorded"), order, request)
}

fn moving(renamed: &[(&str, &str)]) -> Move {
    Move {
        request: operator(None),
        renamed: renamed
            .iter()
            .map(|(from, to)| ((*from).to_owned(), (*to).to_owned()))
            .collect::<BTreeMap<_, _>>(),
    }
}

#[test]
fn a_running_task_moves_on_and_runs_the_new_versions_added_step_in_its_turn() {
    const RECEIPT: &str =
        r#"{"name": "send-receipt", "agent": "mail", "call": "/receipts", "read_only": true}"#;
    let (from, to) = (v1(), version(2, &[CHECK, PACKAGE, DRONE, RECEIPT]));
    let (task, order, out) = packaging();
    let plan = plan_move(&task, (&from, &to), &order, &moving(&[])).expect("planned");
    assert_eq!(plan.new, ["send-receipt"]);
    assert_eq!(plan.moved.len(), 3);
    assert_eq!(plan.moved[1].state, StepState::Processing);

    let decision =
        move_task(&task, (&from, &to), &order, moving(&[]), Timestamp(1)).expect("moved");
    assert_eq!(decision.verdict, Verdict::Moved);
    let task = decision.next.expect("written");
    assert_eq!(task.workflow.version, 2);
    assert!(task.history.iter().any(|e| matches!(
        e.what(),
        crate::task::Happened::Moved {
            from_version: 1,
            to_version: 2,
            ..
        }
    )));
    // The answer of the call that was out when it moved is taken on version 2.
    let decision = on_response(&task, &to, &order, &respond(&out, ok()), Timestamp(2));
    let (task, _, effects) = answer_all(
        decision.next.clone().expect("recorded"),
        &to,
        &order,
        decision,
    );
    let called: Vec<_> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Dispatch(r) => Some(r.idempotency_key.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(called, ["t1/1/schedule-drone", "t1/1/send-receipt"]);
    assert_eq!(task.state, TaskState::Processed);
}

#[test]
fn a_move_that_cannot_be_made_safe_is_refused_naming_the_step() {
    let (task, order, _) = packaging();
    let refused = |to: &Workflow, renamed: &[(&str, &str)]| match plan_move(
        &task,
        (&v1(), to),
        &order,
        &moving(renamed),
    ) {
        Err(Refused::CannotMove(why)) => why,
        other => panic!("refused, not {other:?}"),
    };
    const OTHER_PACKAGE: &str = r#"{"name": "create-package", "agent": "parcels", "call": "/packages", "compensation": "/packages/cancel"}"#;
    const NEW_FIRST: &str =
        r#"{"name": "check-fraud", "agent": "fraud", "call": "/fraud", "read_only": true}"#;
    const BOOK: &str = r#"{"name": "book-package", "agent": "package", "call": "/packages", "compensation": "/packages/cancel"}"#;
    for (to, renamed, says) in [
        (
            version(2, &[CHECK, DRONE]),
            vec![],
            "step 'create-package' is Processing: version 2 has no step 'create-package'",
        ),
        (
            version(2, &[CHECK, OTHER_PACKAGE, DRONE]),
            vec![],
            "step 'create-package' is a call (/packages); version 2's 'create-package' is a call (/packages): it does other work",
        ),
        (
            version(2, &[NEW_FIRST, CHECK, PACKAGE, DRONE]),
            vec![],
            "step 'create-package' is at work as step 2 of 3",
        ),
        (
            version(2, &[CHECK, NEW_FIRST, PACKAGE, DRONE]),
            vec![],
            "step 'create-package' is at work",
        ),
        (
            version(2, &[CHECK, BOOK, DRONE]),
            vec![("create-package", "book-package")],
            "step 'create-package' is at work as step 2 of 3: it keeps its place and its name",
        ),
    ] {
        let why = refused(&to, &renamed);
        assert!(why.contains(says), "'{says}' in '{why}'");
    }
    // In Error, nothing at work: a new step before the check, which ran, is refused.
    let (failed, order) = failed();
    let to = version(2, &[NEW_FIRST, CHECK, PACKAGE, DRONE]);
    assert_eq!(
        plan_move(&failed, (&v1(), &to), &order, &moving(&[])),
        Err(Refused::CannotMove(
            "step 'check-fraud' is new in version 2 and comes before 'check-account', which has started: it cannot run in its place".into()
        ))
    );
    assert_eq!(
        plan_move(
            &task,
            (&v1(), &version(2, &[CHECK, PACKAGE, DRONE])),
            &order,
            &moving(&[("fly", "x")])
        ),
        Err(Refused::NoSuchStep("fly".into()))
    );
    let strict = Workflow::parse(
        "moving.json",
        &format!(r#"{{"name": "moving", "version": 2, "description": "d", "input": {{"customer_id": "string", "region": "string"}}, "steps": [{CHECK}, {PACKAGE}, {DRONE}]}}"#),
    )
    .expect("valid");
    assert!(matches!(
        plan_move(&task, (&v1(), &strict), &order, &moving(&[])),
        Err(Refused::CannotMove(why)) if why.contains("input.region")
    ));
}

/// A task of v1 whose package step was refused: in Error, its check Processed.
fn failed() -> (Task, Order) {
    let from = v1();
    let (task, order, out) = packaging();
    let refused = Outcome::Failed {
        error: "no packages today".into(),
    };
    let decision = on_response(&task, &from, &order, &respond(&out, refused), Timestamp(0));
    let (task, _, _) = answer_all(
        decision.next.clone().expect("failing"),
        &from,
        &order,
        decision,
    );
    assert_eq!(task.state, TaskState::Error);
    (task, order)
}

#[test]
fn a_failed_task_moved_to_a_version_with_a_renamed_step_runs_it_on_resubmission() {
    let from = v1();
    let (task, order) = failed();
    const BOOK: &str = r#"{"name": "book-package", "agent": "package", "call": "/bookings", "compensation": "/bookings/cancel"}"#;
    let to = version(2, &[CHECK, BOOK, DRONE]);
    let renamed = moving(&[("create-package", "book-package")]);
    let task = move_task(&task, (&from, &to), &order, renamed, Timestamp(1))
        .expect("moved")
        .next
        .expect("written");
    assert_eq!(
        task.steps.iter().map(|s| &*s.name).collect::<Vec<_>>(),
        ["check-account", "book-package", "schedule-drone"]
    );
    let task = resubmit(&task, &to, &order, again(), Timestamp(2))
        .expect("resubmitted")
        .next
        .expect("written");
    let claim = on_run(&task, &to, &order, "s1", Timestamp(2));
    let request = dispatched(&claim)[0];
    assert_eq!(
        (request.path.as_str(), request.idempotency_key.as_str()),
        ("/bookings", "t1/2/book-package"),
        "the check is kept; the renamed step runs as version 2 has it"
    );
}
