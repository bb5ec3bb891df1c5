//! Steps run in order: claims, dispatch, field mappings and paths, answers kept
//! or refused, duplicates and stale messages.

use super::*;

#[test]
fn a_task_created_claimed_is_submitted_and_claimed_in_one_write() {
    let workflow = drone();
    let now = Timestamp(0);
    let (pending, submitted_order, _) = submit(&workflow, submission(true), now);
    let run = on_run(&pending, &workflow, &submitted_order, "s1", now);
    let (task, order, effects) = submit_claimed(&workflow, submission(true), "s1", now);
    let mut claimed = run.next.expect("claimed");
    assert_ne!(
        task.callback_key, claimed.callback_key,
        "each task's secret is its own"
    );
    claimed.callback_key.clone_from(&task.callback_key);
    assert_eq!(task, claimed, "the same task as a submission then a Run");
    assert_eq!(order, submitted_order);
    assert_eq!(told(&effects), [TaskState::Pending, TaskState::Processing]);
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Schedule { .. })),
        "no Run message"
    );
    let deadlines: Vec<_> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Deadline { at, .. } => Some(*at),
            _ => None,
        })
        .collect();
    assert_eq!(
        deadlines,
        [task.complete_by.expect("a lease")],
        "the first step's lease only"
    );
    assert_eq!(task.deadline, task.complete_by);
    let dispatched: Vec<_> = effects
        .iter()
        .filter(|e| matches!(e, Effect::Dispatch(_)))
        .collect();
    assert_eq!(dispatched.len(), 1, "the first step sent");
}

#[test]
fn a_task_created_claimed_sends_its_first_request_again_with_a_token_it_signs() {
    let text = r#"{"name": "called-back", "version": 1, "input": {},
        "steps": [{"name": "pickup", "agent": "drone", "call": "/pickups",
                   "callback": {"timeout": "30m"}}]}"#;
    let workflow = Workflow::parse("called-back.json", text).expect("valid");
    let (task, _, effects) = submit_claimed(&workflow, submission(true), "s1", Timestamp(0));
    let first = effects
        .iter()
        .find_map(|e| match e {
            Effect::Dispatch(request) => Some(request),
            _ => None,
        })
        .expect("the first request");

    let again = creation_again(&workflow, submission(true), &task).expect("unmoved");
    assert_eq!(told(&again), [], "the caller is not told again");
    let [Effect::Dispatch(resent), Effect::Deadline { .. }] = again.as_slice() else {
        panic!("the request and its deadline message: {again:?}");
    };
    assert_eq!(resent, first, "the very request it sent");
    let token = resent.payload.value()["callback_token"]
        .as_str()
        .and_then(crate::callback::Token::parse)
        .expect("a token");
    assert!(token.is_signed_for(&task), "a token the task accepts");
}

#[test]
fn a_step_with_a_field_mapping_sends_only_those_fields_and_its_undo_its_own_result() {
    let text = r#"{"name":"mapped","version":1,
        "input":{"customer_id":"string","pickup":"string","dropoff":"string","weight_kg":"number"},
        "steps":[
          {"name":"quote","agent":"q","call":"/quote"},
          {"name":"book","agent":"b","call":"PUT /book","compensation":"DELETE /book",
           "fields":{"from":"input.pickup","quote":"results.quote.price","booking":"results.book.id"}},
          {"name":"pay","agent":"p","call":"/pay"}]}"#;
    let workflow = Workflow::parse("mapped.json", text).expect("valid");
    let now = Timestamp(0);
    let (task, order, quote) = run_to(&workflow, 0, now);
    assert_eq!(
        quote.payload.value()["input"],
        *order.input,
        "a step without a mapping is sent everything"
    );
    let quoted = Outcome::Succeeded {
        output: json!({"price": 12}),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&quote, quoted), now);
    let book = dispatched(&decision)[0].clone();
    assert_eq!(
        book.payload.value(),
        json!({"task_id": "t1", "step": "book",
               "fields": {"from": "a", "quote": 12, "booking": null}}),
        "only the mapped fields: not the input's other fields, not the results"
    );
    let task = decision.next.expect("recorded");
    let booked = Outcome::Succeeded {
        output: json!({"id": "bk-9"}),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&book, booked), now);
    let pay = dispatched(&decision)[0].clone();
    let task = decision.next.expect("recorded");
    let refused = Outcome::Failed {
        error: "card declined".into(),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&pay, refused), now);
    assert_eq!((book.method, book.path.as_str()), (Method::Put, "/book"));
    let undo = dispatched(&decision)[0];
    assert_eq!(undo.operation, Operation::Compensate);
    assert_eq!(
        (undo.method, undo.path.as_str()),
        (Method::Delete, "/book"),
        "the compensation's own method"
    );
    assert_eq!(quote.method, Method::Post, "a POST unless named");
    assert_eq!(
        undo.payload.value()["fields"],
        json!({"from": "a", "quote": 12, "booking": "bk-9"}),
        "the compensation sees the step's own result"
    );
}

#[test]
fn a_path_that_cannot_be_filled_fails_its_operation_for_good() {
    let text = r#"{"name":"paths","version":1,"input":{"order":"string"},
        "steps":[
          {"name":"create","agent":"p","call":"/packages","compensation":"DELETE /packages/{results.create.id}"},
          {"name":"ship","agent":"s","call":"PUT /shipments/{results.create.id}"}]}"#;
    let workflow = Workflow::parse("paths.json", text).expect("valid");
    let now = Timestamp(0);
    let (task, order, create) = run_to(&workflow, 0, now);
    assert_eq!(create.path, "/packages");
    let no_id = Outcome::Succeeded {
        output: json!({"created": true}),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&create, no_id), now);
    let task = decision.next.clone().expect("recorded");
    assert_eq!(
        task.steps[1].state,
        StepState::Error,
        "the shipment cannot be addressed: failed without a call"
    );
    assert_eq!(
        task.error.as_deref(),
        Some("step 'ship' failed: path: {results.create.id} has no value")
    );
    assert_eq!(
        task.steps[0].state,
        StepState::CompensationFailed,
        "nor can the package's cancellation: left for a person, with an alert"
    );
    assert_eq!(task.state, TaskState::Error);
    assert!(dispatched(&decision).is_empty(), "nothing sent");

    let (task, order, create) = run_to(&workflow, 0, now);
    let with_id = Outcome::Succeeded {
        output: json!({"id": "pk-1"}),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&create, with_id), now);
    let ship = dispatched(&decision)[0];
    assert_eq!(
        (ship.method, ship.path.as_str()),
        (Method::Put, "/shipments/pk-1")
    );
}

#[test]
fn a_request_its_workflow_would_make_too_large_fails_without_a_call() {
    use crate::limits::{MAX_PATH, MAX_TASK_DATA};
    let text = r#"{"name":"large","version":1,"input":{"order":"string"},
        "steps":[
          {"name":"big","agent":"b","call":"/big"},
          {"name":"copies","agent":"c","call":"/c",
           "fields":{"a":"results.big.text","b":"results.big.text","c":"results.big.text","d":"results.big.text"}},
          {"name":"addressed","agent":"a","call":"/a/{results.big.text}"}]}"#;
    let workflow = Workflow::parse("large.json", text).expect("valid");
    let now = Timestamp(0);
    // An answer within a step's limit, which four copies take over a request's.
    let big = Outcome::Succeeded {
        output: json!({"text": "x".repeat(MAX_TASK_DATA / 4)}),
    };
    let (task, order, first) = run_to(&workflow, 0, now);
    let decision = on_response(&task, &workflow, &order, &respond(&first, big), now);
    let task = decision.next.clone().expect("recorded");
    assert!(dispatched(&decision).is_empty(), "nothing sent");
    assert_eq!(task.steps[1].state, StepState::Error);
    let error = task.error.as_deref().expect("error");
    assert!(
        error.starts_with("step 'copies' failed: fields:")
            && error.ends_with(&format!("over the {MAX_TASK_DATA} a request may carry")),
        "{error}"
    );

    let long = Outcome::Succeeded {
        output: json!({"text": "y".repeat(MAX_PATH)}),
    };
    let single = Workflow::parse("long.json", &text.replace(
        r#"{"name":"copies","agent":"c","call":"/c",
           "fields":{"a":"results.big.text","b":"results.big.text","c":"results.big.text","d":"results.big.text"}},"#,
        "",
    ))
    .expect("valid");
    let (task, order, first) = run_to(&single, 0, now);
    let decision = on_response(&task, &single, &order, &respond(&first, long), now);
    let task = decision.next.expect("recorded");
    assert_eq!(
        task.error.as_deref(),
        Some(
            format!(
                "step 'addressed' failed: path: {} bytes, over the {MAX_PATH} a path may have",
                MAX_PATH + 3
            )
            .as_str()
        )
    );
}

#[test]
fn a_task_runs_its_steps_in_order_to_processed() {
    let workflow = drone();
    let now = Timestamp(1_000);
    let (task, order, effects) = submit(&workflow, submission(true), now);
    assert_eq!(
        (task.state, task.version, task.locked_by.as_deref()),
        (TaskState::Pending, 1, None)
    );
    assert_eq!(
        task.complete_by,
        Some(now.plus(workflow.pickup_timeout)),
        "a pickup lease"
    );
    assert!(matches!(effects[0], Effect::Schedule { .. }));
    assert!(
        matches!(&effects[1], Effect::Notify { outbound, .. } if outbound.notification.state == TaskState::Pending)
    );

    let claim = on_run(&task, &workflow, &order, "s1", now);
    let mut task = claim.next.clone().expect("claimed");
    assert_eq!(
        (task.state, task.locked_by.as_deref(), task.version),
        (TaskState::Processing, Some("s1"), 2)
    );
    let mut request = dispatched(&claim)[0].clone();
    let mut order_seen = vec![];
    loop {
        order_seen.push(request.step_name.clone());
        assert_eq!(
            request.idempotency_key,
            format!("t1/1/{}", request.step_name)
        );
        assert_eq!(
            task.complete_by,
            Some(request.complete_by),
            "the task's lease is the step's"
        );
        let decision = on_response(&task, &workflow, &order, &respond(&request, ok()), now);
        task = decision.next.clone().expect("recorded");
        match dispatched(&decision).first() {
            Some(next) => request = (*next).clone(),
            None => break,
        }
    }
    let names: Vec<_> = workflow.steps.iter().map(|s| s.name.clone()).collect();
    assert_eq!(order_seen, names);
    let task = notifications_sent(&task, &outboxed(&task), now)
        .next
        .expect("notifications sent");
    assert_eq!(
        (task.state, task.locked_by.clone(), task.complete_by),
        (TaskState::Processed, None, None)
    );
    assert!(
        task.steps
            .iter()
            .all(|s| s.state == StepState::Processed && s.attempt == 1)
    );
}

#[test]
fn duplicate_and_stale_messages_change_nothing() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, request) = run_to(&workflow, 1, now);
    assert_eq!(
        on_run(&task, &workflow, &order, "s2", now).next,
        None,
        "a second claim"
    );
    let previous = AgentRequest {
        step: 0,
        step_name: "check-account".into(),
        attempt: 1,
        ..request.clone()
    };
    assert_eq!(
        on_response(&task, &workflow, &order, &respond(&previous, ok()), now).next,
        None,
        "a duplicate response"
    );
    let old_attempt = AgentRequest {
        attempt: 0,
        ..request.clone()
    };
    assert_eq!(
        on_response(&task, &workflow, &order, &respond(&old_attempt, ok()), now).next,
        None
    );
    let old_run = AgentRequest { run: 0, ..request };
    assert_eq!(
        on_response(&task, &workflow, &order, &respond(&old_run, ok()), now).next,
        None
    );
}

#[test]
fn an_answer_too_large_to_keep_is_oversized_and_compensated_with_the_steps_before() {
    use crate::limits::{MAX_STEP_OUTPUT, MAX_TASK_DATA, output_refusal};
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, request) = run_to(&workflow, 3, now);
    assert_eq!(request.step_name, "schedule-drone");
    // Far over what a record or a message holds: kept, the record's store keeps it apart.
    let large = on_response(
        &task,
        &workflow,
        &order,
        &respond(&request, output_of(4 * 1024 * 1024)),
        now,
    );
    let kept = large.next.expect("recorded");
    assert_eq!(kept.steps[3].state, StepState::Processed, "kept");

    // The limits, by size: a value, and a task's values together.
    assert_eq!(output_refusal(MAX_STEP_OUTPUT, 0), None, "at the limit");
    let over = output_refusal(MAX_STEP_OUTPUT + 1, 0).expect("over");
    assert!(
        over.contains(&format!("{} bytes", MAX_STEP_OUTPUT + 1)),
        "{over}"
    );
    let together = output_refusal(MAX_STEP_OUTPUT, MAX_TASK_DATA - MAX_STEP_OUTPUT + 1);
    assert!(together.is_some_and(|e| e.contains("a task may carry")));

    // What the agent could not keep (over the limit, or not JSON) is compensated.
    let unusable = Outcome::Unusable {
        error: format!("the answer is over the {MAX_STEP_OUTPUT} bytes a step's output may have"),
    };
    let over = on_response(&task, &workflow, &order, &respond(&request, unusable), now);
    let refused = over.next.clone().expect("recorded");
    assert_eq!(
        refused.steps[3].state,
        StepState::Compensating,
        "Unusable, and its compensation sent at once"
    );
    assert_eq!(refused.steps[3].output, None, "not kept");
    assert_eq!(refused.state, TaskState::Compensating);
    let undo = dispatched(&over);
    assert_eq!(
        (undo[0].step_name.as_str(), undo[0].operation),
        ("schedule-drone", Operation::Compensate),
        "its effect is in place: undone first"
    );
}

#[test]
fn an_agents_error_is_kept_cut_to_what_a_task_keeps() {
    let workflow = drone();
    let now = Timestamp(0);
    let (task, order, request) = run_to(&workflow, 1, now);
    let long = Outcome::Failed {
        error: "é".repeat(100 * 1024),
    };
    let decision = on_response(&task, &workflow, &order, &respond(&request, long), now);
    let task = decision.next.expect("recorded");
    let kept = task.steps[1].error.as_deref().expect("the step's error");
    assert!(kept.len() <= limits::MAX_ERROR_TEXT + 16, "{}", kept.len());
    assert!(kept.ends_with("[cut]"));
    let reason = task.error.as_deref().expect("the task's error");
    assert!(
        reason.len() <= limits::MAX_ERROR_TEXT + 64,
        "{}",
        reason.len()
    );
}

#[test]
fn the_fingerprint_tells_a_repeat_from_a_different_request() {
    let a = submission(false);
    let mut b = submission(false);
    assert_eq!(a.fingerprint("w"), b.fingerprint("w"));
    // The map it was first written from kept its keys in their names' order.
    let mut stored = json!({"workflow": "w", "input": a.input, "notify": a.notify});
    stored.sort_all_objects();
    assert_eq!(
        a.fingerprint("w"),
        crate::sha256_hex(stored.to_string()),
        "the digest of the JSON map it was first written from: stored tasks' still match"
    );
    b.input["weight_kg"] = json!(3);
    assert_ne!(a.fingerprint("w"), b.fingerprint("w"));
    assert_ne!(a.fingerprint("w"), a.fingerprint("v"));
}
