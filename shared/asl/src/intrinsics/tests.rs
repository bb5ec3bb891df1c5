use serde_json::{Value, json};

use super::{Function, MAX_NESTING, call, evaluate, is_intrinsic, parse, random_unit};
use crate::Failure;

fn run_with(text: &str, input: &Value) -> Result<Value, Failure> {
    let call = parse(text).map_err(Failure::runtime)?;
    let context = json!({"Execution": {"Name": "exec-1"}, "Map": {"Item": {"Value": "v"}}});
    let variables = |name: &str| (name == "greeting").then(|| json!("hi"));
    evaluate(&call, input, &context, &variables)
}

fn run(text: &str) -> Result<Value, Failure> {
    run_with(text, &json!({"l": [1, 2, 3, 4, 5]}))
}

fn refused(text: &str, function: &str) {
    assert_eq!(
        run(text),
        Err(Failure::runtime(format!("Invalid arguments in {function}"))),
        "{text}"
    );
}

#[test]
fn recognises_and_parses_calls() {
    assert!(is_intrinsic("States.Format('x')"));
    assert!(!is_intrinsic("$.States"));
    let parsed = parse("States.Array( 1 ,'a', $.b , States.UUID() )");
    assert_eq!(parsed.map(|call| call.function()), Ok(Function::Array));
    assert_eq!(Function::from_name("States.UUID"), Some(Function::Uuid));
    assert_eq!(Function::from_name("States.Nope"), None);
}

#[test]
fn refuses_what_a_definition_cannot_hold() {
    for text in [
        "States.Nope(1)",
        "States.Format",
        "States.Format()",
        "States.UUID(1)",
        "States.Hash('a')",
        "States.MathRandom(1, 2, 3, 4)",
        "States.Array(1,)",
        "States.Array(1",
        "States.Array(1) x",
        "States.Array('a)",
        "States.Array(tru)",
        "States.Array(+1)",
        "States.Array($.a b)",
        "States.Array($.)",
        // Only \' \{ \} \\ are escapes.
        r#"States.Format('say \"hi\"')"#,
        r"States.Format('a\nb')",
    ] {
        assert!(parse(text).is_err(), "{text}");
    }
    let nested = |depth: usize| format!("{}1{}", "States.Array(".repeat(depth), ")".repeat(depth));
    assert!(parse(&nested(MAX_NESTING)).is_ok());
    assert!(parse(&nested(MAX_NESTING + 1)).is_err());
}

#[test]
fn arguments_from_literals_paths_and_calls() {
    let input = json!({"a": {"b": [1, 2]}, "s": "x"});
    assert_eq!(
        run_with(
            "States.Array('it\\'s', -1.5, true, null, $.a.b[1], $$.Execution.Name, $greeting, States.ArrayLength($.a.b), $.a.b[*])",
            &input
        ),
        Ok(json!([
            "it's",
            -1.5,
            true,
            null,
            2,
            "exec-1",
            "hi",
            2,
            [1, 2]
        ]))
    );
    assert_eq!(run("States.Array()"), Ok(json!([])));
    assert_eq!(
        run_with("States.Array($.missing)", &input).map_err(|failure| failure.error),
        Err("States.Runtime".to_owned())
    );
    assert!(run("States.Array($nobody)").is_err());
}

#[test]
fn format() {
    let input =
        json!({"n": 1, "f": 1.1, "none": null, "o": {"k": [1, "x"], "e": {}}, "t": "{} and {}"});
    let format = |text| run_with(text, &input);
    assert_eq!(
        format("States.Format('n={}, f={}', $.n, $.f)"),
        Ok(json!("n=1, f=1.1"))
    );
    assert_eq!(format("States.Format('{}', $.none)"), Ok(json!("null")));
    assert_eq!(
        format("States.Format('{}', $.o)"),
        Ok(json!("{k=[1, x], e={}}"))
    );
    assert_eq!(format("States.Format($.t, 'a', 2)"), Ok(json!("a and 2")));
    assert_eq!(format(r"States.Format('\{\} {}', 'x')"), Ok(json!("{} x")));
    assert_eq!(format("States.Format('plain')"), Ok(json!("plain")));
    for text in [
        "States.Format('{} {}', 1)",
        "States.Format('{}', 1, 2)",
        "States.Format('a {', 1)",
        "States.Format('{{}}', 1)",
        "States.Format('}')",
        "States.Format($.n)",
    ] {
        assert_eq!(
            format(text),
            Err(Failure::runtime("Invalid arguments in States.Format")),
            "{text}"
        );
    }
}

#[test]
fn json_conversions() {
    assert_eq!(
        run("States.StringToJson('{\"a\": [1]}')"),
        Ok(json!({"a": [1]}))
    );
    assert_eq!(run("States.StringToJson(' ')"), Ok(Value::Null));
    assert_eq!(run("States.StringToJson('-0')"), Ok(json!(0)));
    assert_eq!(run("States.StringToJson('1.5')"), Ok(json!(1.5)));
    refused("States.StringToJson('{')", "States.StringToJson");
    refused("States.StringToJson(1)", "States.StringToJson");
    let input = json!({"o": {"b": "x", "a": [1, null]}});
    assert_eq!(
        run_with("States.JsonToString($.o)", &input),
        Ok(json!("{\"b\":\"x\",\"a\":[1,null]}"))
    );
    assert_eq!(run("States.JsonToString('s')"), Ok(json!("\"s\"")));
    assert_eq!(
        run_with(
            "States.JsonMerge($.o, States.StringToJson('{\"b\": 2}'), false)",
            &input
        ),
        Ok(json!({"b": 2, "a": [1, null]}))
    );
    refused(
        "States.JsonMerge(States.StringToJson('{}'), States.StringToJson('{}'), true)",
        "States.JsonMerge",
    );
    refused(
        "States.JsonMerge(States.Array(), States.StringToJson('{}'), false)",
        "States.JsonMerge",
    );
}

#[test]
fn arrays() {
    let input = json!({"l": [1, 2, 3, 4, 5], "d": [1, {"a": 1, "b": 2}, 1, {"b": 2, "a": 1}, "1"]});
    let array = |text| run_with(text, &input);
    assert_eq!(
        array("States.ArrayPartition($.l, 2)"),
        Ok(json!([[1, 2], [3, 4], [5]]))
    );
    assert_eq!(
        array("States.ArrayPartition($.l, 2.9)"),
        Ok(json!([[1, 2], [3, 4], [5]]))
    );
    assert_eq!(
        array("States.ArrayPartition(States.Array(), 3)"),
        Ok(json!([]))
    );
    assert_eq!(
        array("States.ArrayContains($.d, States.StringToJson('{\"b\":2,\"a\":1}'))"),
        Ok(json!(true))
    );
    assert_eq!(array("States.ArrayContains($.l, '1')"), Ok(json!(false)));
    assert_eq!(array("States.ArrayGetItem($.l, 4)"), Ok(json!(5)));
    assert_eq!(array("States.ArrayGetItem($.l, 1.7)"), Ok(json!(2)));
    assert_eq!(
        array("States.ArrayGetItem(States.Array(), 9)"),
        Ok(Value::Null)
    );
    assert_eq!(array("States.ArrayLength($.d)"), Ok(json!(5)));
    assert_eq!(
        array("States.ArrayUnique($.d)"),
        Ok(json!([1, {"a": 1, "b": 2}, "1"]))
    );
    for text in [
        "States.ArrayPartition($.l, 0)",
        "States.ArrayPartition($.l, 0.6)",
        "States.ArrayPartition('l', 1)",
        "States.ArrayPartition($.l, '2')",
    ] {
        refused(text, "States.ArrayPartition");
    }
    for text in [
        "States.ArrayGetItem($.l, 5)",
        "States.ArrayGetItem($.l, -1)",
        "States.ArrayGetItem($.l, '1')",
    ] {
        refused(text, "States.ArrayGetItem");
    }
    refused("States.ArrayLength('abc')", "States.ArrayLength");
}

#[test]
fn array_range() {
    assert_eq!(
        run("States.ArrayRange(1, 9, 2)"),
        Ok(json!([1, 3, 5, 7, 9]))
    );
    assert_eq!(run("States.ArrayRange(0, 10, 3)"), Ok(json!([0, 3, 6, 9])));
    assert_eq!(run("States.ArrayRange(5, 1, -2)"), Ok(json!([5, 3, 1])));
    assert_eq!(run("States.ArrayRange(5, 1, 1)"), Ok(json!([])));
    assert_eq!(run("States.ArrayRange(3, 3, -1)"), Ok(json!([3])));
    assert_eq!(
        run("States.ArrayRange(1.4, 5.6, 2.2)"),
        Ok(json!([1, 3, 5]))
    );
    let thousand = run("States.ArrayRange(1, 1000, 1)");
    assert_eq!(
        thousand.map(|items| items.as_array().map(Vec::len)),
        Ok(Some(1000))
    );
    refused("States.ArrayRange(1, 1001, 1)", "States.ArrayRange");
    refused("States.ArrayRange(1, 10, 0.5)", "States.ArrayRange");
    refused("States.ArrayRange('a', 10, 1)", "States.ArrayRange");
    refused(
        "States.ArrayRange(-9223372036854775808, 9223372036854775807, 1)",
        "States.ArrayRange",
    );
}

#[test]
fn encodings_and_hashes() {
    assert_eq!(run("States.Base64Encode('hello')"), Ok(json!("aGVsbG8=")));
    assert_eq!(run("States.Base64Decode('aGVsbG8=')"), Ok(json!("hello")));
    assert_eq!(run("States.Base64Decode('')"), Ok(json!("")));
    // Lenient, as Step Functions decodes: blanks and strangers skipped, padding
    // optional, the text after `=` ignored.
    assert_eq!(run("States.Base64Decode(' aGVs bG8 ')"), Ok(json!("hello")));
    assert_eq!(run("States.Base64Decode('aGk=aGk=')"), Ok(json!("hi")));
    refused("States.Base64Decode(1)", "States.Base64Decode");
    let long = json!({"s": "a".repeat(10_001), "ok": "a".repeat(10_000)});
    assert!(run_with("States.Base64Encode($.ok)", &long).is_ok());
    assert_eq!(
        run_with("States.Base64Encode($.s)", &long),
        Err(Failure::runtime("Invalid arguments in States.Base64Encode"))
    );
    for (algorithm, digest) in [
        ("MD5", "5d41402abc4b2a76b9719d911017c592"),
        ("SHA-1", "aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d"),
        (
            "SHA-256",
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
        ),
        (
            "SHA-384",
            "59e1748777448c69de6b800d7a33bbfb9ff1b463e44354c3553bcdb9c666fa90125a3c79f90397bdf5f6a13de828684f",
        ),
        (
            "SHA-512",
            "9b71d224bd62f3785d96d46ad3ea3d73319bfbc2890caadae2dff72519673ca72323c3d99ba5c11d7c7acc6e14b8c5da0c4663475c2e5c3adef46f73bcdec043",
        ),
    ] {
        assert_eq!(
            run(&format!("States.Hash('hello', '{algorithm}')")),
            Ok(json!(digest))
        );
    }
    assert_eq!(
        run("States.Hash(12, 'MD5')"),
        run("States.Hash('12', 'MD5')")
    );
    refused("States.Hash('hello', 'sha-256')", "States.Hash");
    refused("States.Hash('hello', 5)", "States.Hash");
    assert!(run_with("States.Hash($.s, 'MD5')", &long).is_err());
}

#[test]
fn math() {
    let add = |a: f64, b: f64| run_with("States.MathAdd($.a, $.b)", &json!({"a": a, "b": b}));
    // Each operand rounded half up first.
    assert_eq!(add(1.49, 1.5), Ok(json!(3)));
    assert_eq!(add(-1.5, 0.0), Ok(json!(-1)));
    assert_eq!(add(-2.5, 0.0), Ok(json!(-2)));
    assert_eq!(add(-0.5, 0.5), Ok(json!(1)));
    assert_eq!(run("States.MathAdd(2147483646, 1)"), Ok(json!(2147483647)));
    refused("States.MathAdd(2147483647, 1)", "States.MathAdd");
    refused("States.MathAdd(3000000000, -1)", "States.MathAdd");
    refused("States.MathAdd('1', 1)", "States.MathAdd");
    for _ in 0..20 {
        let value = run("States.MathRandom(-3, 2)")
            .ok()
            .and_then(|value| value.as_i64());
        assert!(
            value.is_some_and(|value| (-3..2).contains(&value)),
            "{value:?}"
        );
    }
    assert_eq!(run("States.MathRandom(1.6, 2.4)"), Ok(json!(1)));
    assert_eq!(
        run("States.MathRandom(0, 1000, 7)"),
        run("States.MathRandom(0, 1000, 7)")
    );
    refused("States.MathRandom(1, 1)", "States.MathRandom");
    refused("States.MathRandom(1, 10, null)", "States.MathRandom");
    assert_eq!(random_unit(Some(3)), random_unit(Some(3)));
    assert!((0.0..1.0).contains(&random_unit(None)));
}

#[test]
fn strings_and_ids() {
    // Every character of the second argument splits; empty pieces are dropped.
    assert_eq!(
        run("States.StringSplit('a,b;;c,', ',;')"),
        Ok(json!(["a", "b", "c"]))
    );
    assert_eq!(run("States.StringSplit(',,', ',')"), Ok(json!([])));
    assert_eq!(run("States.StringSplit(' ', ',')"), Ok(json!([" "])));
    refused("States.StringSplit(1, ',')", "States.StringSplit");
    let id = run("States.UUID()").ok();
    let id = id
        .as_ref()
        .and_then(Value::as_str)
        .and_then(|id| uuid::Uuid::parse_str(id).ok());
    assert_eq!(id.map(|id| id.get_version_num()), Some(4));
}

#[test]
fn call_by_name_for_jsonata() {
    assert_eq!(
        call("States.ArrayPartition", vec![json!([1, 2, 3]), json!(2)]),
        Ok(json!([[1, 2], [3]]))
    );
    assert_eq!(
        call("States.Hash", vec![json!("hello")]),
        Err(Failure::runtime("Invalid arguments in States.Hash"))
    );
    assert!(call("States.Nope", vec![]).is_err());
}
