//! A Step Functions state machine's execution from the command line: its status,
//! output and error (`sas tasks show`), and its state graph and path (`sas tasks
//! execution`).

use sas_tests::Harness;
use serde_json::json;

/// A Step Functions state machine's execution (`tests/workflows/greet.asl.json`), as
/// `sas tasks show` prints it: its status, its output, and a failed one's error and
/// cause in Step Functions' words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_a_state_machines_execution_from_the_command_line() {
    let harness = Harness::start(5).await;
    for (id, input) in [
        ("greet-ada", json!({"name": "Ada"})),
        ("greet-nobody", json!({})),
    ] {
        let body = json!({"workflow": "greet", "input": input}).to_string();
        let (status, _, answer) = harness
            .call("PUT", &format!("/tasks/{id}"), Some(body.as_bytes()))
            .await;
        assert!(status < 300, "{status}: {answer}");
    }
    harness.settle_in("greet-ada", "Processed").await;
    harness.settle_in("greet-nobody", "Error").await;
    let shown = harness.sas_ok(&["tasks", "show", "greet-ada"]).await;
    assert!(shown.contains("execution: SUCCEEDED"), "{shown}");
    assert!(
        shown.contains(r#"output: {"greeting":"HELLO, ADA!"}"#),
        "{shown}"
    );
    let shown = harness.sas_ok(&["tasks", "show", "greet-nobody"]).await;
    assert!(shown.contains("execution: FAILED"), "{shown}");
    assert!(shown.contains("error: NoName"), "{shown}");
    assert!(shown.contains("cause: the input names nobody"), "{shown}");
}

/// The same executions as `sas tasks execution` draws them: each state indented by
/// its layer from the start, its visits and how its last went, the path taken, each
/// visited state's last input and output, and where a failed one failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_follows_a_state_machines_path_from_the_command_line() {
    let harness = Harness::start(5).await;
    for (id, input) in [
        ("greet-ana", json!({"name": "Ana"})),
        ("greet-none", json!({})),
    ] {
        let body = json!({"workflow": "greet", "input": input}).to_string();
        let (status, _, answer) = harness
            .call("PUT", &format!("/tasks/{id}"), Some(body.as_bytes()))
            .await;
        assert!(status < 300, "{status}: {answer}");
    }
    harness.settle_in("greet-ana", "Processed").await;
    harness.settle_in("greet-none", "Error").await;
    let drawn = harness.sas_ok(&["tasks", "execution", "greet-ana"]).await;
    let row = |name: &str| {
        drawn
            .lines()
            .find(|line| line.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no row for {name}: {drawn}"))
            .to_owned()
    };
    assert!(
        drawn.starts_with("greet-ana  greet v1  SUCCEEDED"),
        "{drawn}"
    );
    assert!(row("Named?").contains("succeeded") && row("Named?").contains("Greet, NoName"));
    let indent = |line: String| line.len() - line.trim_start().len();
    assert_eq!(
        indent(row("Shout")),
        indent(row("Named?")) + 4,
        "Shout is two layers in: {drawn}"
    );
    assert!(row("NoName").contains("not visited"), "{drawn}");
    assert!(drawn.contains("path: Named? → Greet → Shout"), "{drawn}");
    assert!(
        drawn.contains("Shout (Pass)\n  input: {\"greeting\":\"Hello, Ana!\"}\n  output: {\"greeting\":\"HELLO, ANA!\"}"),
        "{drawn}"
    );
    let events = drawn
        .split_once("events, the latest first:\n")
        .map(|(_, events)| events)
        .unwrap_or_else(|| panic!("no events: {drawn}"));
    let kinds: Vec<Vec<&str>> = (events.lines().skip(1))
        .map(|line| line.split_whitespace().take(3).collect())
        .collect();
    assert_eq!(kinds.len(), 8, "{drawn}");
    assert_eq!(kinds[0], ["8", "ExecutionSucceeded", "-"], "{drawn}");
    assert_eq!(kinds[4], ["4", "PassStateEntered", "Greet"], "{drawn}");
    let drawn = harness.sas_ok(&["tasks", "execution", "greet-none"]).await;
    assert!(drawn.contains("FAILED"), "{drawn}");
    assert!(drawn.contains("path: Named? → NoName"), "{drawn}");
    assert!(
        drawn.contains("error: NoName: the input names nobody"),
        "{drawn}"
    );
    let (success, _, err) = harness.sas(&["tasks", "execution", "nobody-here"]).await;
    assert!(!success && err.contains("nobody-here"), "{err}");
}
