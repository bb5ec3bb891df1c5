//! The operator console, used as a person uses it: headless Chromium, driven over
//! WebDriver, on the local system. Screenshots of each step are kept under the
//! test's output (`target/tmp/console/`).

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use sas_tests::{Harness, delivery_input};
use serde_json::{Value, json};

#[path = "console/machines.rs"]
mod machines;
#[path = "console/repairs.rs"]
mod repairs;
#[path = "console/schedules.rs"]
mod schedules;
#[path = "console/search.rs"]
mod search;

/// How long the page may take to show what is awaited.
const PATIENCE: Duration = Duration::from_secs(30);

/// A program the test needs: from the variable `variable`, or on the PATH.
fn program(variable: &str, name: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(variable) {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "the console test needs Chromium and its WebDriver: `apt-get install chromium \
                 chromium-driver` (tests/run installs them when it runs as root), or set \
                 SAS_CHROMIUM and SAS_CHROMEDRIVER; `{name}` is not on the PATH"
            )
        })
}

/// chromedriver on 127.0.0.1, stopped when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        // Its own process group, so that the browsers it starts go with it, even when
        // a failed test never closes its session.
        let child = Command::new(program("SAS_CHROMEDRIVER", "chromedriver"))
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while reqwest::get(format!("{url}/status")).await.is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "chromedriver never answered"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self { child, url }
    }

    async fn browser(&self) -> Client {
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": program("SAS_CHROMIUM", "chromium"),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1000"],
            },
        });
        let serde_json::Value::Object(capabilities) = capabilities else {
            unreachable!("an object")
        };
        ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .expect("a browser session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
    }
}

/// Where the screenshots go.
fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console");
    std::fs::create_dir_all(&dir).expect("the screenshots' directory");
    dir
}

async fn screenshot(browser: &Client, name: &str) {
    let png = browser.screenshot().await.expect("a screenshot");
    let path = screenshots().join(name);
    std::fs::write(&path, png).expect("the screenshot written");
    println!("screenshot: {}", path.display());
}

/// Waits until the element at `css` shows text for which `done` holds; its text.
async fn wait_text(browser: &Client, css: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let text = match browser.find(Locator::Css(css)).await {
            Ok(element) => element.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if done(&text) {
            return text;
        }
        if tokio::time::Instant::now() >= deadline {
            let page = browser.source().await.unwrap_or_default();
            panic!("'{css}' never showed what was awaited; it shows '{text}'. The page:\n{page}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Clicks the element at `css`, found again if the page re-renders it between its
/// finding and the click (a stale element), within the patience.
async fn click(browser: &Client, css: &str) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let clicked = match browser.find(Locator::Css(css)).await {
            Ok(element) => element.click().await.map(drop),
            Err(error) => Err(error),
        };
        match clicked {
            Ok(()) => return,
            Err(error) if tokio::time::Instant::now() >= deadline => {
                panic!("'{css}' could not be clicked: {error}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Types `text` into the field at `css` as a person does: clicks it, selects what it
/// holds and types over it. The page draws itself again every two seconds unless a
/// field has the focus, so a field found before its click may be gone: found again.
async fn type_into(browser: &Client, css: &str, text: &str) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let typed = async {
            let field = browser.find(Locator::Css(css)).await?;
            field.click().await?;
            field
                .send_keys(&(Key::Control + "a" + &Key::Null + text))
                .await?;
            field.prop("value").await
        };
        match typed.await {
            Ok(Some(value)) if value == text => return,
            outcome if tokio::time::Instant::now() >= deadline => {
                panic!("'{css}' could not be typed into: {outcome:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The console's page of `workflow`, once it shows `expected`: its text.
async fn workflow_page(browser: &Client, console: &str, workflow: &str, expected: &str) -> String {
    browser
        .goto(&format!("{console}#/workflows"))
        .await
        .expect("the workflows");
    let css = format!(".workflow[data-workflow='{workflow}']");
    wait_text(browser, &css, |t| t.contains(expected)).await
}

/// The console's page of task `id`, once it shows the task in `state`.
async fn task_page(browser: &Client, console: &str, id: &str, state: &str) {
    browser
        .goto(&format!("{console}#/task/{id}"))
        .await
        .expect("the task's page");
    wait_text(browser, "#task-state", |t| t == state).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_finds_a_failed_task_sees_it_undone_and_resubmits_it_to_processed() {
    let harness = Harness::start(5).await;
    harness.refuse_once("delivery").await;
    let task = json!({ "workflow": "drone-delivery-quick", "input": delivery_input() });
    let mut told = task.clone();
    told["notify"] = json!("refused-delivery-updates");
    harness.put_task("refused-delivery", &told).await;
    harness.settle_in("refused-delivery", "Error").await;
    for id in ["delivered-1", "delivered-2"] {
        harness.put_task(id, &task).await;
        harness.settle_in(id, "Processed").await;
    }

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    let console = format!("http://{}/", harness.running.api);
    browser.goto(&console).await.expect("the console opens");

    // The tasks in Error are listed first; the failed one is there.
    let row = "tr[data-task-id='refused-delivery']";
    wait_text(&browser, row, |t| t.contains("create-delivery")).await;
    screenshot(&browser, "1-tasks-in-error.png").await;
    click(&browser, row).await;

    // Its page: the delivery failed, the package and the drone were undone.
    wait_text(&browser, "#task-id", |t| t == "refused-delivery").await;
    wait_text(&browser, "#task-state", |t| t == "Error").await;
    for (step, state) in [
        ("create-package", "Compensated"),
        ("schedule-drone", "Compensated"),
        ("create-delivery", "Error"),
    ] {
        let css = format!("#steps tr[data-step='{step}']");
        wait_text(&browser, &css, |t| t.contains(state)).await;
    }
    let notifications = wait_text(&browser, "#notifications", |t| t.contains("Error")).await;
    let mut told = Vec::new();
    for state in browser
        .find_all(Locator::Css("#notifications .told"))
        .await
        .expect("the notifications")
    {
        told.push(
            state
                .attr("data-state")
                .await
                .expect("a state")
                .unwrap_or_default(),
        );
    }
    assert!(
        notifications.contains("refused-delivery-updates")
            && told == ["Pending", "Processing", "Compensating", "Error"],
        "the caller was told each state: {notifications}"
    );
    let undone = browser
        .find_all(Locator::Css("g.bar[data-operation='compensate']"))
        .await
        .expect("the timeline");
    assert_eq!(undone.len(), 2, "two compensations on the timeline");
    screenshot(&browser, "2-failed-task-undone.png").await;

    // Resubmitted from the page, it runs again and the page shows it Processed.
    click(&browser, "#resubmit").await;
    wait_text(&browser, "#task-state", |t| t == "Processed").await;
    let task = harness.task("refused-delivery").await;
    assert_eq!(
        (task["state"].as_str(), task["run"].as_u64()),
        (Some("Processed"), Some(2))
    );
    screenshot(&browser, "3-resubmitted-processed.png").await;

    // The workflow, drawn as its steps with their budgets and compensations.
    let flow = workflow_page(&browser, &console, "drone-delivery-quick", "schedule-drone").await;
    assert!(flow.contains("undo: /drones/cancel"), "{flow}");
    assert!(flow.contains("budget 500ms"), "{flow}");
    screenshot(&browser, "4-workflows.png").await;
    browser.close().await.expect("the browser closes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_with_parallel_checks_shows_each_steps_branch() {
    let harness = Harness::start(5).await;
    let task = json!({ "workflow": "drone-delivery-parallel", "input": delivery_input() });
    harness.put_task("both-checks", &task).await;
    harness.settle_in("both-checks", "Processed").await;

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    let console = format!("http://{}/", harness.running.api);
    task_page(&browser, &console, "both-checks", "Processed").await;
    for (step, branch) in [
        ("check-account", "checks ‖ branch 1"),
        ("check-transport", "checks ‖ branch 2"),
    ] {
        let css = format!("#steps tr[data-step='{step}']");
        wait_text(&browser, &css, |t| t.contains(branch)).await;
    }
    let package = wait_text(&browser, "#steps tr[data-step='create-package']", |t| {
        t.contains("Processed")
    })
    .await;
    assert!(!package.contains('‖'), "on the main line: {package}");
    let mut stripes = Vec::new();
    for stripe in browser
        .find_all(Locator::Css(".timeline svg rect title"))
        .await
        .expect("the timeline")
    {
        let text = stripe.html(true).await.expect("a title");
        if text.contains("branch") {
            stripes.push(text);
        }
    }
    assert_eq!(
        stripes,
        ["checks, branch 1", "checks, branch 2"],
        "one stripe per branch's row"
    );
    screenshot(&browser, "5-parallel-checks.png").await;

    let flow = workflow_page(
        &browser,
        &console,
        "drone-delivery-parallel",
        "check-transport",
    )
    .await;
    assert!(flow.contains("checks ‖ branch 2"), "{flow}");
    browser.close().await.expect("the browser closes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_delivery_left_in_place_is_shown_not_undone() {
    let harness = Harness::start(5).await;
    harness
        .leave_the_quick_delivery_late("late-delivery", &delivery_input())
        .await;

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    let console = format!("http://{}/", harness.running.api);
    task_page(&browser, &console, "late-delivery", "Error").await;
    let shown = wait_text(&browser, "#not-undone", |t| t.contains("create-delivery")).await;
    assert!(
        shown.contains("same idempotency key"),
        "the operator is told what a resubmission does: {shown}"
    );
    screenshot(&browser, "6-not-undone.png").await;
    browser.close().await.expect("the browser closes");
}

/// An order of `parcels` parcels, each shipped by a child task.
fn parcel_order(parcels: usize) -> Value {
    let parcels: Vec<_> = (0..parcels)
        .map(|n| json!({ "id": format!("p{n}"), "dropoff": format!("door {n}"), "weight_kg": 1.5 }))
        .collect();
    json!({
        "workflow": "parcel-order",
        "input": { "order_id": "o-1", "customer_id": "c-1", "parcels": parcels },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_shows_its_parcels_progress_lists_them_and_opens_one_and_its_parent() {
    let harness = Harness::start(5).await;
    harness.put_task("order-9", &parcel_order(3)).await;
    harness.settle_in("order-9", "Processed").await;

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    let console = format!("http://{}/", harness.running.api);
    task_page(&browser, &console, "order-9", "Processed").await;

    // The map's step: its progress, every parcel shipped.
    let map = "#steps tr[data-step='deliver-each']";
    let progress = wait_text(&browser, map, |t| t.contains("succeeded")).await;
    assert!(
        progress.contains("3 succeeded · 0 failed · 0 running · 3 total"),
        "{progress}"
    );
    let shipped = browser
        .find(Locator::Css(&format!("{map} .children-bar .c-ok")))
        .await
        .expect("the bar's succeeded part")
        .attr("style")
        .await
        .expect("its style");
    assert_eq!(shipped.as_deref(), Some("width:100%"), "all shipped");
    let check = wait_text(&browser, "#steps tr[data-step='check-account']", |t| {
        t.contains("Processed")
    })
    .await;
    assert!(!check.contains("children"), "a call has none: {check}");
    let spans = browser
        .find_all(Locator::Css("g.bar[data-operation='children']"))
        .await
        .expect("the timeline");
    assert_eq!(spans.len(), 1, "the map's span on the timeline");
    screenshot(&browser, "7-map-progress.png").await;

    // One click to its children, each a child task of ship-parcel, by item.
    click(&browser, &format!("{map} a.button")).await;
    let listed = wait_text(&browser, "#children", |t| {
        t.contains("order-9~deliver-each~2")
    })
    .await;
    for n in 0..3 {
        let css = format!("#children tr[data-task-id='order-9~deliver-each~{n}']");
        let row = wait_text(&browser, &css, |t| t.contains("Processed")).await;
        assert!(
            row.starts_with(&n.to_string()) && row.contains("ship-parcel"),
            "item {n}: {row}"
        );
    }
    assert_eq!(listed.matches("ship-parcel").count(), 3, "{listed}");
    let counts = wait_text(&browser, "#children-progress", |t| t.contains("3 total")).await;
    assert!(counts.contains("3 succeeded"), "{counts}");
    screenshot(&browser, "8-children.png").await;

    // A child opens like any task, and names its parent, which opens in turn.
    click(
        &browser,
        "#children tr[data-task-id='order-9~deliver-each~1']",
    )
    .await;
    wait_text(&browser, "#task-id", |t| t == "order-9~deliver-each~1").await;
    wait_text(&browser, "#task-state", |t| t == "Processed").await;
    let parent = wait_text(&browser, "#parent", |t| t.contains("order-9")).await;
    assert_eq!(parent, "order-9 · step deliver-each, item 1");
    wait_text(&browser, "#steps tr[data-step='schedule-drone']", |t| {
        t.contains("Processed")
    })
    .await;
    screenshot(&browser, "9-child.png").await;
    click(&browser, "#parent a.mono").await;
    wait_text(&browser, "#task-id", |t| t == "order-9").await;
    // Back on the child, its step lists it among its siblings, from its own item.
    browser.back().await.expect("back to the child");
    wait_text(&browser, "#parent", |t| t.contains("item 1")).await;
    click(&browser, "#parent a:not(.mono)").await;
    let siblings = wait_text(&browser, "#children", |t| t.contains("deliver-each~1")).await;
    assert!(
        !siblings.contains("deliver-each~0") && siblings.contains("deliver-each~2"),
        "{siblings}"
    );

    // The workflows: a map and the child workflow it runs.
    let flow = workflow_page(&browser, &console, "parcel-order", "deliver-each").await;
    assert!(
        flow.contains("map: ship-parcel over input.parcels"),
        "{flow}"
    );
    assert!(
        flow.contains("20 at a time · 0 failures tolerated"),
        "{flow}"
    );
    let scroll =
        "document.querySelector(\".workflow[data-workflow='parcel-order']\").scrollIntoView()";
    browser
        .execute(scroll, vec![])
        .await
        .expect("scrolled to the order");
    screenshot(&browser, "10-map-workflow.png").await;
    let parcel = workflow_page(&browser, &console, "ship-parcel", "schedule-drone").await;
    assert!(parcel.contains("undo: /drones/cancel"), "{parcel}");
    browser.close().await.expect("the browser closes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orders_children_are_listed_fifty_a_page() {
    let harness = Harness::start(5).await;
    harness.put_task("big-order", &parcel_order(52)).await;
    // Children ending together race to be counted by their parent: the end of one
    // that loses goes back to the scheduler's queue until its visibility timeout
    // (30 s) passes, which the harness's clock, standing still, reaches only when
    // moved on. It is moved on whenever the order has stopped changing.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut seen = Value::Null;
    loop {
        let order = harness.task("big-order").await;
        if order["state"] == "Processed" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{order:#}");
        if order["version"] == seen {
            harness.advance(Duration::from_secs(31));
        }
        seen = order["version"].clone();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    harness.settle_in("big-order", "Processed").await;

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    let console = format!("http://{}/", harness.running.api);
    browser
        .goto(&format!("{console}#/children/big-order/deliver-each"))
        .await
        .expect("the order's children");
    let first = wait_text(&browser, "#children", |t| {
        t.contains("big-order~deliver-each~49")
    })
    .await;
    let items = |page: &str| page.matches("big-order~deliver-each~").count();
    assert_eq!(items(&first), 50, "{first}");
    assert!(!first.contains("~50"), "{first}");
    let click_enabled = async |css: &str| {
        let button = browser.find(Locator::Css(css)).await.expect(css);
        assert_eq!(
            button.attr("disabled").await.expect("its state"),
            None,
            "{css} is enabled"
        );
        button.click().await.expect("clicked");
    };
    click_enabled("#next").await;
    let second = wait_text(&browser, "#children", |t| {
        t.contains("big-order~deliver-each~51")
    })
    .await;
    assert_eq!(items(&second), 2, "{second}");
    let last = browser
        .find(Locator::Css("#next"))
        .await
        .expect("the next page's button");
    assert!(
        last.attr("disabled").await.expect("its state").is_some(),
        "no page after"
    );
    click_enabled("#first").await;
    wait_text(&browser, "#children", |t| {
        t.contains("big-order~deliver-each~0 ")
    })
    .await;
    browser.close().await.expect("the browser closes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_pauses_resumes_and_approves_a_refund_and_rejects_another() {
    let harness = Harness::start(5).await;
    let refund = |amount: u32| {
        json!({ "workflow": "refund",
                "input": { "order_id": "o-1", "customer_id": "c-1", "amount": amount } })
    };
    for id in ["refund-approved", "refund-rejected"] {
        harness.put_task(id, &refund(500)).await;
        harness
            .wait_for(id, "waiting for its approval", |t| {
                sas_tests::step(t, "approve")["waiting"]["for"] == "callback"
            })
            .await;
    }
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    let console = format!("http://{}/", harness.running.api);
    task_page(&browser, &console, "refund-approved", "Processing").await;
    let approve = "#steps tr[data-step='approve']";
    wait_text(&browser, approve, |t| {
        t.contains("waits for its callback until")
    })
    .await;

    click(&browser, "#pause").await;
    wait_text(&browser, "#paused", |t| t.starts_with("by operator")).await;
    screenshot(&browser, "waits-1-paused.png").await;
    click(&browser, "#resume").await;
    wait_text(&browser, "#pause", |t| t == "Pause").await;

    type_into(
        &browser,
        &format!("{approve} .output"),
        r#"{"approved_by": "the console"}"#,
    )
    .await;
    screenshot(&browser, "waits-2-approving.png").await;
    click(&browser, &format!("{approve} .approve")).await;
    wait_text(&browser, "#task-state", |t| t == "Processed").await;
    wait_text(&browser, approve, |t| t.contains("Processed")).await;
    let task = harness.task("refund-approved").await;
    assert_eq!(
        sas_tests::step(&task, "approve")["output"],
        json!({ "approved_by": "the console" })
    );

    task_page(&browser, &console, "refund-rejected", "Processing").await;
    wait_text(&browser, approve, |t| t.contains("waits for its callback")).await;
    type_into(&browser, &format!("{approve} .reason"), "no receipt").await;
    click(&browser, &format!("{approve} .reject")).await;
    wait_text(&browser, "#task-state", |t| t == "Error").await;
    wait_text(&browser, approve, |t| t.contains("no receipt")).await;
    screenshot(&browser, "waits-3-rejected.png").await;
    assert_eq!(
        harness.calls("payment").await,
        1,
        "the approved refund paid, the rejected one not"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_a_limited_services_calls_in_flight_and_waiting() {
    let harness =
        Harness::start_with_services(r#"{"drone": {"max_concurrency": 1, "rate": 20}}"#).await;
    harness.faults("drone", json!({ "latency_ms": 5000 })).await;
    for i in 0..3 {
        let body = json!({ "workflow": "drone-delivery", "input": delivery_input() });
        harness.put_task(&format!("limited-{i}"), &body).await;
    }
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    let console = format!("http://{}/", harness.running.api);
    browser
        .goto(&format!("{console}#/services"))
        .await
        .expect("the services");
    let drone = "#services tr[data-limit='service:drone']";
    wait_text(&browser, &format!("{drone} .in-flight"), |t| t == "1 / 1").await;
    wait_text(&browser, &format!("{drone} .waiting"), |t| t == "2").await;
    let row = wait_text(&browser, drone, |t| t.contains("20/s")).await;
    assert!(row.contains("its settings"), "{row}");
    screenshot(&browser, "services-1-limited.png").await;
    let account = wait_text(&browser, "#services tr[data-service='account']", |t| {
        !t.is_empty()
    })
    .await;
    assert!(account.contains("not limited"), "{account}");

    let per_customer = "#services tr[data-limit='step:one-delivery-per-customer/create-delivery']";
    let row = wait_text(&browser, per_customer, |t| t.contains("name a key")).await;
    assert!(row.contains("per input.customer_id"), "{row}");
    type_into(&browser, "#service-key", "c-1").await;
    click(&browser, "#service-key-show").await;
    wait_text(&browser, &format!("{per_customer} .in-flight"), |t| {
        t == "0 / 1"
    })
    .await;
    screenshot(&browser, "services-2-keyed.png").await;
    for i in 0..3 {
        harness
            .settle_in(&format!("limited-{i}"), "Processed")
            .await;
    }
}
