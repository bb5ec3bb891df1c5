use serde_json::{Value, json};

use super::{PathError, Root, explain, is_reference_path, is_valid, place, select};

fn no_variables(_: &str) -> Option<Value> {
    None
}

fn get(path: &str, input: &Value) -> Result<Value, PathError> {
    select(
        path,
        input,
        &json!({"Execution": {"Name": "run"}}),
        &no_variables,
    )
}

fn why(path: &str, input: &Value) -> Option<String> {
    explain(path, input, &json!({}), &no_variables)
}

#[test]
fn definite_paths_select_one_value() {
    let input = json!({"a": {"b": [10, {"c": null}]}, "x-y": 1, "k l": 2, "q\\\"r": 3});
    assert_eq!(get("$", &input), Ok(input.clone()));
    assert_eq!(get("$.a.b[0]", &input), Ok(json!(10)));
    assert_eq!(get("$.a.b[-1].c", &input), Ok(Value::Null));
    assert_eq!(get("$['a']['b'][1]", &input), Ok(json!({"c": null})));
    assert_eq!(get("$.a.['b'][0]", &input), Ok(json!(10)));
    assert_eq!(get("$.x-y", &input), Ok(json!(1)));
    assert_eq!(get("$['k l']", &input), Ok(json!(2)));
    assert_eq!(get(r#"$["k l"]"#, &input), Ok(json!(2)));
    // A backslash in brackets stays part of the name.
    assert_eq!(get(r#"$['q\"r']"#, &input), Ok(json!(3)));
}

#[test]
fn definite_paths_that_select_nothing_fail() {
    let input = json!({"a": {"b": "text"}, "list": [1], "none": null});
    for path in [
        "$.missing",
        "$.a.c",
        "$.a.b.c",
        "$.list[3]",
        "$.list.x",
        "$.none[0]",
        "$.a.sum()",
    ] {
        assert_eq!(get(path, &input), Err(PathError::NoMatch), "{path}");
    }
}

#[test]
fn jayway_reasons_for_selecting_nothing() {
    let input = json!({"a": {"b": "text"}, "list": [1], "none": null});
    let reason = |path| why(path, &input);
    assert_eq!(
        reason("$.nope"),
        Some("No results for path: $['nope']".to_owned())
    );
    assert_eq!(
        reason("$.nope.deeper.still"),
        Some("Missing property in path $['nope']".to_owned())
    );
    assert_eq!(
        reason("$.a.c"),
        Some("No results for path: $['a']['c']".to_owned())
    );
    assert_eq!(
        reason("$.list[5]"),
        Some("No results for path: $['list'][5]".to_owned())
    );
    assert_eq!(
        reason("$.a.b.c"),
        Some(
            "Expected to find an object with property ['c'] in path $['a']['b'] but found 'string'"
                .to_owned()
        )
    );
    assert_eq!(
        reason("$.a[0]"),
        Some(
            "Filter: [0] can only be applied to arrays. Current context is: {\"b\":\"text\"}"
                .to_owned()
        )
    );
    assert_eq!(
        reason("$.none[0]"),
        Some("The path $['none'] is null".to_owned())
    );
    assert_eq!(reason("$.a"), None);
    assert_eq!(reason("$.a[*].x"), None);
}

#[test]
fn indefinite_paths_select_an_array() {
    let input = json!({
        "items": [{"v": 1, "s": 0}, {"v": 2, "s": 1}, {"v": 3, "s": 0}, 7],
        "obj": {"p": 1, "q": 2}
    });
    assert_eq!(get("$.items[*].v", &input), Ok(json!([1, 2, 3])));
    assert_eq!(
        get("$.items[1:3]", &input),
        Ok(json!([{"v": 2, "s": 1}, {"v": 3, "s": 0}]))
    );
    assert_eq!(get("$.items[:1].v", &input), Ok(json!([1])));
    assert_eq!(get("$.items[-1:]", &input), Ok(json!([7])));
    assert_eq!(get("$.items[0,2].v", &input), Ok(json!([1, 3])));
    assert_eq!(get("$.obj.*", &input), Ok(json!([1, 2])));
    assert_eq!(get("$..v", &input), Ok(json!([1, 2, 3])));
    assert_eq!(get("$.items[?(@.s == 0)].v", &input), Ok(json!([1, 3])));
    assert_eq!(
        get("$.items[?(@.v > 1 && @.s == 0)]", &input),
        Ok(json!([{"v": 3, "s": 0}]))
    );
    // Filters match objects only, and test an object itself.
    assert_eq!(get("$.items[?(@ == 7)]", &input), Ok(json!([])));
    assert_eq!(
        get("$.obj[?(@.p == 1)]", &input),
        Ok(json!([{"p": 1, "q": 2}]))
    );
    assert_eq!(get("$..[?(@.s == 1)].v", &input), Ok(json!([2])));
}

#[test]
fn indefinite_paths_over_nothing_select_an_empty_array() {
    let input = json!({});
    for path in [
        "$[*]",
        "$.a.items[*]",
        "$.items[1:]",
        "$.items[:1].v",
        "$..x",
        "$.a[?(@.b)]",
    ] {
        assert_eq!(get(path, &input), Ok(json!([])), "{path}");
    }
}

#[test]
fn a_last_union_of_names_gathers_one_object() {
    let input = json!({"a": 1, "b": 2, "c": 3, "list": [{"a": 1}, {"b": 2}]});
    assert_eq!(get("$['a','c','z']", &input), Ok(json!({"a": 1, "c": 3})));
    assert_eq!(
        get("$.list[*]['a','b']", &input),
        Ok(json!([{"a": 1}, {"b": 2}]))
    );
}

#[test]
fn context_and_variables() {
    let context = json!({"Map": {"Item": {"Value": {"id": 4}}}});
    let variables = |name: &str| (name == "x").then(|| json!({"y": [5]}));
    let read = |path| select(path, &json!({}), &context, &variables);
    assert_eq!(read("$$.Map.Item.Value.id"), Ok(json!(4)));
    assert_eq!(read("$$"), Ok(context.clone()));
    assert_eq!(read("$x"), Ok(json!({"y": [5]})));
    assert_eq!(read("$x.y[0]"), Ok(json!(5)));
    assert_eq!(read("$x.z"), Err(PathError::NoMatch));
    assert!(matches!(read("$nope"), Err(PathError::Invalid(_))));
    assert_eq!(
        super::Path::parse("$x.y").map(|path| path.root().clone()),
        Ok(Root::Variable("x".to_owned()))
    );
}

#[test]
fn validity() {
    for path in [
        "$",
        "$$",
        "$.a",
        "$.a-b.c_d",
        "$['a b'].c",
        "$.abc.['def ghi']",
        "$[0]",
        "$.a[*]",
        "$..a",
        "$.a[1:]",
        "$.a[?(@.b >= 5)]",
        "$var.a[2]",
    ] {
        assert!(is_valid(path), "{path}");
    }
    for path in [
        "",
        "a",
        "$.",
        "$..",
        "$.a.",
        "$.a b",
        "$[",
        "$['a'",
        "$['a']x",
        "$[a]",
        "$[1:2:3]",
        "$.a[?(@.b =~ /x/)]",
        "$[?((((((((((((((((((((((((((((((((((@.a))))))))))))))))))))))))))))))))))]",
    ] {
        assert!(!is_valid(path), "{path}");
    }
}

#[test]
fn reference_paths() {
    for path in ["$", "$.a.b", "$['a'][0]", "$.a[-1]", "$var.a"] {
        assert!(is_reference_path(path), "{path}");
    }
    for path in [
        "$.a[*]",
        "$..a",
        "$.a[0:1]",
        "$['a','b']",
        "$.a[?(@.b)]",
        "nope",
    ] {
        assert!(!is_reference_path(path), "{path}");
    }
}

#[test]
fn place_sets_a_field_creating_objects() {
    let input = json!({"keep": 1, "a": {"old": true}});
    assert_eq!(place(input.clone(), "$", json!(9)), Ok(json!(9)));
    assert_eq!(
        place(input.clone(), "$.a.b.c", json!(2)),
        Ok(json!({"keep": 1, "a": {"old": true, "b": {"c": 2}}}))
    );
    assert_eq!(
        place(input, "$.keep", json!("new")),
        Ok(json!({"keep": "new", "a": {"old": true}}))
    );
    assert_eq!(
        place(json!({"l": [1, 2]}), "$.l[1]", json!(5)),
        Ok(json!({"l": [1, 5]}))
    );
}

#[test]
fn place_through_a_non_object_fails() {
    for (target, path) in [
        (json!({"a": "text"}), "$.a.b"),
        (json!([1]), "$.a"),
        (json!({"l": [1]}), "$.l[3]"),
        (json!({}), "$.a[*]"),
        (json!({}), "$$.a"),
    ] {
        let failure = place(target, path, json!(0));
        assert!(
            failure
                .as_ref()
                .is_err_and(|failure| failure.error == "States.Runtime"
                    && failure.cause.starts_with(&format!("Invalid path '{path}'"))),
            "{path}: {failure:?}"
        );
    }
}
