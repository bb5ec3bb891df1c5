//! Definitions loaded, refused with errors that name the file, the step and the
//! field, and the values a step names.

use super::*;
use crate::messages::Method;

#[test]
fn built_in_workflows_load() {
    let registry = Registry::built_in();
    let drone = registry.latest("drone-delivery").expect("drone delivery");
    let names: Vec<_> = drone.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "check-account",
            "create-package",
            "check-transport",
            "schedule-drone",
            "create-delivery"
        ]
    );
    assert!(
        drone.steps[3]
            .call()
            .expect("a call")
            .compensation
            .is_some()
    );
    assert!(
        drone.steps[1]
            .call()
            .expect("a call")
            .compensation
            .is_some()
    );
    assert_eq!(
        registry
            .latest("order-processing")
            .expect("order")
            .steps
            .len(),
        1
    );
}

fn parse_error(text: &str) -> String {
    Workflow::parse("wf.json", text)
        .expect_err("invalid")
        .to_string()
}

#[test]
fn a_workflows_or_a_steps_name_over_64_bytes_is_refused_naming_it() {
    let long = "n".repeat(65);
    let workflow = |name: &str, step: &str| {
        format!(
            r#"{{"name":"{name}","version":1,"steps":[{{"name":"{step}","agent":"x","call":"/a"}}]}}"#
        )
    };
    assert!(Workflow::parse("wf.json", &workflow(&long[..64], &long[..64])).is_ok());
    assert!(parse_error(&workflow(&long, "a")).contains("name: must be 1 to 64"));
    let step = parse_error(&workflow("w", &long));
    assert!(step.contains("must be 1 to 64 bytes long"), "{step}");
}

/// A workflow with input `order_id` and steps `a`, then `b` with `fields`.
fn mapped(fields: &str) -> String {
    format!(
        r#"{{"name":"w","version":1,"input":{{"order_id":"string"}},"steps":[
            {{"name":"a","agent":"x","call":"/a"}},
            {{"name":"b","agent":"y","call":"/b","compensation":"/b/undo","fields":{fields}}}]}}"#
    )
}

#[test]
fn a_steps_fields_name_the_input_or_a_result_of_this_step_or_one_before() {
    let workflow = Workflow::parse(
        "wf.json",
        &mapped(r#"{"order":"input.order_id","drone":"results.a.drone.id","mine":"results.b.id"}"#),
    )
    .expect("valid");
    let fields = workflow.steps[1]
        .call()
        .expect("a call")
        .fields
        .as_ref()
        .expect("fields");
    assert_eq!(fields["order"], FieldSource::Input("order_id".into()));
    assert_eq!(fields["drone"].to_string(), "results.a.drone.id");
    let a = serde_json::json!({"drone": {"id": 7}});
    let results = Results::from([("a", &a)]);
    let input = serde_json::json!({"order_id": "o-1", "secret": "s"});
    assert_eq!(fields["order"].value(&input, &results), "o-1");
    assert_eq!(fields["drone"].value(&input, &results), 7);
    assert_eq!(
        fields["mine"].value(&input, &results),
        Value::Null,
        "a result not there yet is null"
    );
    assert_eq!(
        workflow.steps[0].call().expect("a call").fields,
        None,
        "no mapping: everything is sent"
    );

    for (fields, expected) in [
        (
            r#"{"x":"input.customer"}"#,
            "wf.json: step 'b': fields.x: 'input.customer': the input has no field 'customer' (it declares: order_id)",
        ),
        (
            r#"{"x":"results.c.id"}"#,
            "wf.json: step 'b': fields.x: 'results.c.id': 'c' is not this step or a step before it",
        ),
        (
            r#"{"x":"results.a"}"#,
            "wf.json: step 'b': fields.x: 'results.a': must be input.<field> or results.<step>.<field>",
        ),
        (
            r#"{"x":"order_id"}"#,
            "wf.json: step 'b': fields.x: 'order_id': must be input.<field> or results.<step>.<field>",
        ),
    ] {
        assert_eq!(parse_error(&mapped(fields)), expected);
    }
}

#[test]
fn a_path_names_values_of_the_input_and_results_filled_and_encoded_when_sent() {
    let text = mapped(r#"{}"#).replace(
        r#""compensation":"/b/undo""#,
        r#""compensation":"DELETE /drones/{results.b.id}/for/{input.order_id}""#,
    );
    let workflow = Workflow::parse("wf.json", &text).expect("valid");
    let undo = workflow.steps[1]
        .call()
        .expect("a call")
        .compensation
        .as_ref()
        .expect("compensation");
    let b = serde_json::json!({"id": "d 7/x"});
    let results = Results::from([("b", &b)]);
    let input = serde_json::json!({"order_id": 42});
    assert_eq!(
        undo.fill(&input, &results).as_deref(),
        Ok("/drones/d%207%2Fx/for/42"),
        "each value a path segment"
    );
    let none = Results::new();
    assert_eq!(
        undo.fill(&input, &none),
        Err("path: {results.b.id} has no value".to_owned())
    );
    for value in ["", ".", ".."] {
        let b = serde_json::json!({"id": value});
        assert_eq!(
            undo.fill(&input, &Results::from([("b", &b)])),
            Err(format!(
                "path: {{results.b.id}} is '{value}', which names no single resource"
            )),
            "no request leaves its path"
        );
    }
    let b = serde_json::json!({"id": "%2e%2e"});
    assert_eq!(
        undo.fill(&input, &Results::from([("b", &b)])).as_deref(),
        Ok("/drones/%252e%252e/for/42"),
        "an encoded dot is text, encoded again"
    );

    for (call, expected) in [
        (
            "/a/{results.b.id}",
            "call: {results.b.id}: a call has no result of its own yet (its compensation has)",
        ),
        (
            "/a/{input.nope}",
            "call: 'input.nope': the input has no field 'nope' (it declares: order_id)",
        ),
        (
            "/a/{input.order_id",
            "call: '{input.order_id' has a '{' without its '}'",
        ),
        ("/a/x}", "call: '/a/x}' has a '}' without its '{'"),
    ] {
        let text = mapped(r#"{}"#).replace(r#""call":"/b""#, &format!(r#""call":"{call}""#));
        assert_eq!(parse_error(&text), format!("wf.json: step 'b': {expected}"));
    }
}

#[test]
fn an_operation_is_a_post_unless_a_method_is_named() {
    let text = r#"{"name":"w","version":1,"steps":[
        {"name":"a","agent":"x","call":"PUT /packages","compensation":"DELETE /packages/1"},
        {"name":"b","agent":"y","call":"/b"}]}"#;
    let workflow = Workflow::parse("wf.json", text).expect("valid");
    let a = &workflow.steps[0];
    assert_eq!(
        (
            a.call().expect("a call").call.method,
            a.call().expect("a call").call.path.as_str()
        ),
        (Method::Put, "/packages")
    );
    let undo = a
        .call()
        .expect("a call")
        .compensation
        .as_ref()
        .expect("compensation");
    assert_eq!(
        (undo.method, undo.to_string().as_str()),
        (Method::Delete, "DELETE /packages/1")
    );
    assert_eq!(
        workflow.steps[1].call().expect("a call").call.method,
        Method::Post
    );
    assert_eq!(
        workflow.steps[1].call().expect("a call").call.to_string(),
        "/b",
        "written as the file has it"
    );
    let text = r#"{"name":"w","version":1,"steps":[{"name":"a","agent":"x","call":"GET /a"}]}"#;
    assert_eq!(
        parse_error(text),
        "wf.json: step 'a': call: 'GET' is not a method (POST, PUT, PATCH or DELETE)"
    );
    let text = r#"{"name":"w","version":1,"steps":[{"name":"a","agent":"x","call":"PUT a"}]}"#;
    assert_eq!(
        parse_error(text),
        "wf.json: step 'a': call: must be a path starting with '/', after a method if any"
    );
}

#[test]
fn errors_name_the_file_the_step_and_the_field() {
    let step = r#"{"name":"a","agent":"x","call":"/a","retry":{"attempts":0}}"#;
    let text = format!(r#"{{"name":"w","version":1,"steps":[{step}]}}"#);
    assert_eq!(
        parse_error(&text),
        "wf.json: step 'a': retry.attempts: must be at least 1"
    );

    let text = r#"{"name":"w","version":1,"steps":[{"name":"b","agent":"x","call":"/a","complete_by":"soon"}]}"#;
    let message = parse_error(text);
    assert!(
        message.starts_with("wf.json: step 'b': complete_by: 'soon' is not a duration"),
        "{message}"
    );

    let text =
        r#"{"name":"w","version":1,"steps":[{"name":"c","agent":"x","call":"/a","colour":1}]}"#;
    assert!(
        parse_error(text).contains("step 'c'"),
        "{}",
        parse_error(text)
    );

    let text = r#"{"name":"w","steps":[]}"#;
    assert!(
        parse_error(text).contains("missing field `version`"),
        "{}",
        parse_error(text)
    );

    let text = r#"{"name":"w","version":1,"steps":[{"name":"d","agent":"x","call":"/a"},{"name":"d","agent":"y","call":"/b"}]}"#;
    assert_eq!(
        parse_error(text),
        "wf.json: step 'd': name: is used by another step"
    );

    assert!(parse_error("{").starts_with("wf.json: (document): EOF"));
}

#[test]
fn a_version_cannot_change_without_a_bump() {
    let registry = Registry::default();
    let v1 = r#"{"name":"w","version":1,"steps":[{"name":"a","agent":"x","call":"/a"}]}"#;
    let v1_changed = r#"{"name":"w","version":1,"steps":[{"name":"a","agent":"x","call":"/b"}]}"#;
    let v2 = r#"{"name":"w","version":2,"steps":[{"name":"a","agent":"x","call":"/b"}]}"#;
    registry
        .add(Workflow::parse("1", v1).expect("valid"))
        .expect("new");
    registry
        .add(Workflow::parse("1", v1).expect("valid"))
        .expect("same content");
    assert!(matches!(
        registry.add(Workflow::parse("1b", v1_changed).expect("valid")),
        Err(RegistryError::Changed { .. })
    ));
    registry
        .add(Workflow::parse("2", v2).expect("valid"))
        .expect("bumped");
    assert_eq!(registry.latest("w").expect("w").version, 2);
    assert_eq!(
        registry.version("w", 1).expect("kept").steps[0]
            .call()
            .expect("a call")
            .call
            .path,
        "/a"
    );
}

#[test]
fn input_fields_are_checked_by_name_and_type() {
    let registry = Registry::built_in();
    let drone = registry.latest("drone-delivery").expect("drone");
    let error = drone
        .validate_input(&serde_json::json!({}))
        .expect_err("missing");
    assert_eq!(error.field, "input.customer_id");
    let error = drone
        .validate_input(
            &serde_json::json!({"customer_id": 7, "pickup": "a", "dropoff": "b", "weight_kg": 1}),
        )
        .expect_err("mistyped");
    assert_eq!(
        error.to_string(),
        "input.customer_id: must be of type \"string\""
    );
}

#[test]
fn an_array_fields_items_are_checked_when_typed() {
    let text = r#"{"name": "parcels", "version": 1,
        "input": {"parcels": "array<object>", "tags": "array<string>", "weights": "array<number>", "any": "array"},
        "steps": [{"name": "a", "agent": "s", "call": "/a"}]}"#;
    let workflow = Workflow::parse("parcels.json", text).expect("valid");
    let input = |parcels: Value, tags: Value| serde_json::json!({"parcels": parcels, "tags": tags, "weights": [1, 2.5], "any": [1, "x"]});
    assert!(
        workflow
            .validate_input(&input(
                serde_json::json!([{"id": 1}, {}]),
                serde_json::json!([])
            ))
            .is_ok()
    );
    for (parcels, tags, field, kind) in [
        (
            serde_json::json!([{"id": 1}, 2]),
            serde_json::json!([]),
            "input.parcels",
            "array<object>",
        ),
        (
            serde_json::json!({"id": 1}),
            serde_json::json!([]),
            "input.parcels",
            "array<object>",
        ),
        (
            serde_json::json!([]),
            serde_json::json!(["a", 1]),
            "input.tags",
            "array<string>",
        ),
    ] {
        let error = workflow
            .validate_input(&input(parcels, tags))
            .expect_err("mistyped");
        assert_eq!(
            error.to_string(),
            format!("{field}: must be of type \"{kind}\"")
        );
    }
    assert!(
        parse_error(&text.replace("array<string>", "array<colour>")).contains("input.tags"),
        "an item type it does not know is refused, naming the field"
    );
}

#[test]
fn a_parallel_steps_branches_wait_for_what_it_waits_for_and_the_next_step_for_every_branch() {
    let registry = Registry::built_in();
    let drone = registry
        .latest("drone-delivery-parallel")
        .expect("the parallel drone delivery");
    let by_name = |name: &str| drone.steps.iter().find(|s| s.name == name).expect("a step");
    let names: Vec<_> = drone.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "check-account",
            "check-transport",
            "create-package",
            "schedule-drone",
            "create-delivery"
        ]
    );
    assert!(by_name("check-account").after.is_empty());
    assert!(by_name("check-transport").after.is_empty());
    assert_eq!(by_name("create-package").after, [0, 1]);
    assert_eq!(by_name("schedule-drone").after, [2]);
    let branch = |index| {
        vec![Branch {
            parallel: "checks".into(),
            branch: index,
        }]
    };
    assert_eq!(by_name("check-account").within, branch(0));
    assert_eq!(by_name("check-transport").within, branch(1));
    assert!(by_name("create-package").within.is_empty());
}

/// A workflow whose second step is `parallel`, its branches as given.
fn with_branches(branches: &str) -> String {
    format!(
        r#"{{"name": "wf", "version": 1, "input": {{"order_id": "string"}}, "steps": [
            {{"name": "a", "agent": "s", "call": "/a"}},
            {{"name": "p", "parallel": {branches}}},
            {{"name": "z", "agent": "s", "call": "/z", "fields": {{"b": "results.b.id", "c": "results.c.id"}}}}
        ]}}"#
    )
}

#[test]
fn nested_branches_wait_in_order_and_a_step_after_them_may_name_any_of_their_results() {
    let text = with_branches(
        r#"[[{"name": "b", "agent": "s", "call": "/b"},
             {"name": "q", "parallel": [[{"name": "c", "agent": "s", "call": "/c", "fields": {"a": "results.a.id"}}],
                                        [{"name": "d", "agent": "s", "call": "/d"}]]}],
            [{"name": "e", "agent": "s", "call": "/e"}]]"#,
    );
    let workflow = Workflow::parse("wf.json", &text).expect("valid");
    let after: Vec<_> = workflow
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.after.clone()))
        .collect();
    assert_eq!(
        after,
        [
            ("a", vec![]),
            ("b", vec![0]),
            ("c", vec![1]),
            ("d", vec![1]),
            ("e", vec![0]),
            ("z", vec![2, 3, 4]),
        ]
    );
    let within: Vec<_> = workflow.steps[2]
        .within
        .iter()
        .map(|b| (b.parallel.as_str(), b.branch))
        .collect();
    assert_eq!(within, [("p", 0), ("q", 0)]);
}

#[test]
fn a_parallel_step_is_refused_naming_the_step_and_the_field() {
    let call = r#"{"name": "b", "agent": "s", "call": "/b"}"#;
    for (branches, expected) in [
        (
            format!("[[{call}], []]"),
            "step 'p': parallel[1]: a branch must have at least one step",
        ),
        (
            "[]".to_owned(),
            "step 'p': parallel: must list at least one branch",
        ),
        (
            format!(r#"[[{call}], [{{"name": "b", "agent": "s", "call": "/c"}}]]"#),
            "step 'b': name: is used by another step",
        ),
        (
            format!(
                r#"[[{call}], [{{"name": "c", "agent": "s", "call": "/c", "fields": {{"x": "results.b.id"}}}}]]"#
            ),
            "step 'c': fields.x:",
        ),
        (
            format!(
                r#"[[{call}], [{{"name": "c", "agent": "s", "call": "/c", "colour": "red"}}]]"#
            ),
            "step 'c': colour: unknown field",
        ),
        (
            format!(r#"[[{call}], [{{"name": "c", "call": "/c"}}]]"#),
            "step 'c': agent: a step names the service it calls",
        ),
    ] {
        let error = parse_error(&with_branches(&branches));
        assert!(error.contains(expected), "{branches}: {error}");
    }
    let settled = r#"{"name": "wf", "version": 1, "steps": [
        {"name": "p", "read_only": false, "parallel": [[{"name": "b", "agent": "s", "call": "/b"}]]}]}"#;
    assert!(
        parse_error(settled).contains("step 'p': read_only: a parallel step calls nothing"),
        "a setting of a call is refused even when it says the default: {}",
        parse_error(settled)
    );
    let called = r#"{"name": "wf", "version": 1, "steps": [
        {"name": "p", "agent": "s", "parallel": [[{"name": "b", "agent": "s", "call": "/b"}]]}]}"#;
    assert!(
        parse_error(called).contains(
            "step 'p': agent: a parallel step calls nothing and starts nothing itself: its branches' steps do"
        ),
        "{}",
        parse_error(called)
    );
    let mapped = r#"{"name": "wf", "version": 1, "steps": [
        {"name": "p", "workflow": "kid", "parallel": [[{"name": "b", "agent": "s", "call": "/b"}]]}]}"#;
    assert!(
        parse_error(mapped)
            .contains("step 'p': workflow: a parallel step calls nothing and starts nothing"),
        "{}",
        parse_error(mapped)
    );
}

#[test]
fn a_condition_reading_a_result_not_surely_there_is_refused_naming_the_step() {
    let workflow = |steps: &str| {
        format!(r#"{{"name":"w","version":1,"input":{{"amount":"number"}},"steps":[{steps}]}}"#)
    };
    let later = workflow(
        r#"{"name":"a","agent":"x","call":"/a","when":"results['b'].ok"},
           {"name":"b","agent":"x","call":"/b"}"#,
    );
    assert_eq!(
        parse_error(&later),
        "wf.json: step 'a': when: 'results['b'].ok' reads the result of 'b', which is not a step done before this one"
    );
    let sibling = workflow(
        r#"{"name":"p","parallel":[
             [{"name":"x","agent":"x","call":"/x"}],
             [{"name":"y","agent":"x","call":"/y","when":"results.x.ok"}]]}"#,
    );
    assert!(
        parse_error(&sibling).contains("'results.x.ok' reads the result of 'x'"),
        "a branch beside it: {}",
        parse_error(&sibling)
    );
    let before = workflow(
        r#"{"name":"a","agent":"x","call":"/a"},
           {"name":"p","parallel":[[{"name":"x","agent":"x","call":"/x"}]]},
           {"name":"b","agent":"x","call":"/b","when":"results['a'].ok && has(results.x.id)"}"#,
    );
    assert!(Workflow::parse("wf.json", &before).is_ok());
}

#[test]
fn a_call_passes_its_own_gate_then_its_services_each_keyed_as_its_limit_says() {
    let registry = Registry::built_in();
    let services = crate::services::parse(
        r#"{"drone": {"url": "https://d.example.com", "max_concurrency": 3, "key": "input.customer_id"}}"#,
    )
    .expect("services");
    registry.limit_services(crate::services::Directory {
        services,
        fallback: None,
    });
    let text = r#"{"name":"limited","version":1,"input":{"customer_id":"string"},"steps":[
        {"name":"book","agent":"drone","call":"/drones","limit":{"rate":2}},
        {"name":"check","agent":"account","call":"/accounts/check"}]}"#;
    let added = registry
        .add(Workflow::parse("limited.json", text).expect("valid"))
        .expect("added");
    let input = serde_json::json!({"customer_id": "c-1"});
    let book = added.steps[0].call().expect("a call");
    let gates: Vec<(String, String)> = book
        .gates("limited", "book", &input, None)
        .into_iter()
        .map(|(gate, limit)| (gate, limit.to_string()))
        .collect();
    assert_eq!(
        gates,
        [
            ("step:limited/book".to_owned(), "2/s (burst 2)".to_owned()),
            (
                "service:drone/c-1".to_owned(),
                "3 at once, per input.customer_id".to_owned()
            )
        ]
    );
    assert!(
        added.steps[1]
            .call()
            .expect("a call")
            .gates("limited", "check", &input, None)
            .is_empty()
    );
    let known = registry.latest("drone-delivery").expect("built in");
    let scheduled = known
        .steps
        .iter()
        .find(|s| s.name == "schedule-drone")
        .and_then(|s| s.call())
        .expect("the drone's call");
    assert!(
        scheduled.service_limit.is_some(),
        "a workflow known before is limited too"
    );

    let misplaced = r#"{"name":"w","version":1,"steps":[{"name":"nap","sleep":"1s","limit":{"max_concurrency":1}}]}"#;
    assert_eq!(
        parse_error(misplaced),
        "wf.json: step 'nap': limit: only a step that calls a service has a limit"
    );
    let zero = r#"{"name":"w","version":1,"steps":[{"name":"a","agent":"x","call":"/a","limit":{"max_concurrency":0}}]}"#;
    assert_eq!(
        parse_error(zero),
        "wf.json: step 'a': limit.max_concurrency: must be at least 1"
    );
}
