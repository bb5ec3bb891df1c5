//! A Step Functions state machine's task in the console: its state graph, the path
//! taken, a state's last input and output, its event history; and the state machines
//! with their published versions and aliases.

use fantoccini::Locator;
use sas_tests::Harness;
use serde_json::{Value, json};

use super::{Driver, click, screenshot, task_page, wait_text};

/// A Step Functions state machine's task (`tests/workflows/greet.asl.json`) drawn as
/// its state graph: each state colored by how its last visit went, the path taken,
/// and a state's last input and output on a click; a failed one's error where it
/// failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_a_state_machines_graph_its_path_and_a_states_input_and_output() {
    let harness = Harness::start(5).await;
    for (id, input) in [
        ("graph-ana", json!({"name": "Ana"})),
        ("graph-none", json!({})),
    ] {
        harness
            .put_task(id, &json!({"workflow": "greet", "input": input}))
            .await;
    }
    harness.settle_in("graph-ana", "Processed").await;
    harness.settle_in("graph-none", "Error").await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    let console = format!("http://{}/", harness.running.api);

    task_page(&browser, &console, "graph-ana", "Processed").await;
    let path = wait_text(&browser, "#execution-path", |t| !t.is_empty()).await;
    assert_eq!(path, "Named? → Greet → Shout");
    let visited = |name: &str| format!(".machine .state[data-state='{name}']");
    for (name, how) in [
        ("Named?", "succeeded"),
        ("Greet", "succeeded"),
        ("Shout", "succeeded"),
        ("NoName", "not_visited"),
    ] {
        let node = browser
            .find(Locator::Css(&visited(name)))
            .await
            .unwrap_or_else(|e| panic!("no state {name} drawn: {e}"));
        let shown = node.attr("data-visited").await.expect("its visit");
        assert_eq!(shown.as_deref(), Some(how), "{name}");
    }
    click(&browser, &visited("Greet")).await;
    wait_text(&browser, "#state-name", |t| t.starts_with("Greet")).await;
    let input = wait_text(&browser, "#state-detail .state-input", |t| !t.is_empty()).await;
    let output = wait_text(&browser, "#state-detail .state-output", |t| !t.is_empty()).await;
    assert_eq!(
        serde_json::from_str::<Value>(&input).ok(),
        Some(json!({"name": "Ana"}))
    );
    assert_eq!(
        serde_json::from_str::<Value>(&output).ok(),
        Some(json!({"greeting": "Hello, Ana!"}))
    );
    // Its events as Step Functions lists them, the latest first.
    let latest = wait_text(&browser, "#event-history tbody tr .event-type", |t| {
        !t.is_empty()
    })
    .await;
    assert_eq!(latest, "ExecutionSucceeded");
    let rows = browser
        .find_all(Locator::Css("#event-history tbody tr"))
        .await
        .expect("the events");
    let mut listed = Vec::new();
    for row in rows {
        let text = |css: &'static str| {
            let row = row.clone();
            async move {
                row.find(Locator::Css(css))
                    .await
                    .expect(css)
                    .text()
                    .await
                    .expect("text")
            }
        };
        listed.push((text(".event-type").await, text(".event-state").await));
    }
    assert_eq!(listed.len(), 8, "{listed:?}");
    assert_eq!(
        listed[4],
        ("PassStateEntered".to_owned(), "Greet".to_owned()),
        "{listed:?}"
    );
    screenshot(&browser, "machine-1-succeeded.png").await;

    task_page(&browser, &console, "graph-none", "Error").await;
    wait_text(&browser, "#execution-path", |t| t == "Named? → NoName").await;
    let error = wait_text(&browser, "#state-error", |t| !t.is_empty()).await;
    assert_eq!(error, "NoName: the input names nobody");
    let failed = browser
        .find(Locator::Css(&visited("NoName")))
        .await
        .expect("NoName drawn");
    assert_eq!(
        failed
            .attr("data-visited")
            .await
            .expect("its visit")
            .as_deref(),
        Some("failed")
    );
    screenshot(&browser, "machine-2-failed.png").await;
}

/// A state machine created, published twice and aliased through Step Functions' API,
/// listed in the console with its versions and its alias's routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_the_state_machines_their_versions_and_aliases() {
    let harness = Harness::start(5).await;
    let operation = async |name: &str, body: Value| harness.step_functions(name, &body).await;
    let api = format!("http://{}/", harness.running.api);
    let said = |text: &str| {
        json!({"StartAt": "Say", "States": {"Say": {"Type": "Pass", "Result": text, "End": true}}})
            .to_string()
    };
    let made = operation(
        "CreateStateMachine",
        json!({"name": "routed", "definition": said("v1"), "roleArn": "r", "publish": true}),
    )
    .await;
    let machine = made["stateMachineArn"].as_str().expect("an ARN").to_owned();
    let update = json!({"stateMachineArn": machine, "definition": said("v2"), "publish": true});
    operation("UpdateStateMachine", update).await;
    let routes = json!([
        {"stateMachineVersionArn": format!("{machine}:1"), "weight": 80},
        {"stateMachineVersionArn": format!("{machine}:2"), "weight": 20},
    ]);
    let alias = json!({"name": "live", "routingConfiguration": routes});
    operation("CreateStateMachineAlias", alias).await;

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser
        .goto(&format!("{api}#/machines"))
        .await
        .expect("the machines' page");
    let row = "#machines tr[data-machine='routed']";
    let versions = wait_text(&browser, &format!("{row} .versions"), |t| !t.is_empty()).await;
    assert_eq!(versions, "v2, v1", "newest first");
    let aliases = wait_text(&browser, &format!("{row} .aliases"), |t| !t.is_empty()).await;
    assert_eq!(aliases, "live → v1 80%, v2 20%");
    let shipped = wait_text(
        &browser,
        "#machines tr[data-machine='greet'] .versions",
        |t| !t.is_empty(),
    )
    .await;
    assert_eq!(shipped, "none published", "a shipped machine is listed too");
    screenshot(&browser, "machines-1-listed.png").await;
}
