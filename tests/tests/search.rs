//! Tasks found by what they are about, end to end on the local system as an operator
//! finds them through the API and `sas`: 100,000 refunds, each with its customer and
//! amount kept as search attributes, found by two of them, the index examining only
//! the customer's; by state, workflow and version, time and error text; and searches
//! refused with a 400 naming the parameter.

use sas_tests::Harness;
use serde_json::{Value, json};

const TASKS: usize = 100_000;
const CUSTOMERS: usize = 1_000;

async fn search(harness: &Harness, query: &str) -> (u16, Value) {
    let (status, _, body) = harness
        .call("GET", &format!("/operator/search?{query}"), None)
        .await;
    (status, body)
}

fn ids(page: &Value) -> Vec<String> {
    (page["tasks"].as_array().expect("tasks").iter())
        .map(|t| t["id"].as_str().expect("an id").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_are_found_by_two_attributes_among_100000_the_index_examining_one_customers() {
    let harness = Harness::start(5).await;
    harness.waiting_refunds(TASKS, CUSTOMERS).await;
    // Customer c-7's refunds are i = 7, 1007, 2007, ...; of those, an amount of 30 is
    // i % 7 == 3.
    let expected: Vec<String> = (0..TASKS)
        .filter(|i| i % CUSTOMERS == 7 && i % 7 == 3)
        .map(|i| format!("refund-{i}"))
        .collect();
    let mut found = Vec::new();
    let mut query = "attribute.customer=c-7&attribute.amount=30&limit=10".to_owned();
    let mut examined = 0;
    loop {
        let (status, page) = search(&harness, &query).await;
        assert_eq!(status, 200, "{page}");
        examined += page["examined"].as_u64().expect("examined");
        found.extend(ids(&page));
        match page["next"].as_str() {
            Some(next) => {
                query = format!("attribute.customer=c-7&attribute.amount=30&limit=10&after={next}")
            }
            None => break,
        }
    }
    found.sort_by_key(|id| id[7..].parse::<usize>().expect("a number"));
    assert_eq!(found, expected);
    assert_eq!(
        examined,
        (TASKS / CUSTOMERS) as u64,
        "the index examined customer c-7's refunds alone"
    );

    let printed = harness
        .sas_ok(&[
            "tasks",
            "find",
            "--where",
            "customer=c-7",
            "--where",
            "amount=30",
            "--all",
        ])
        .await;
    assert!(printed.contains(&format!(" {} ", expected[0])), "{printed}");
    let summary = format!("({} found, {} examined)", expected.len(), TASKS / CUSTOMERS);
    assert!(printed.contains(&summary), "{printed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_by_state_workflow_time_and_error_and_the_searches_refused() {
    let harness = Harness::start(5).await;
    harness.waiting_refunds(10, CUSTOMERS).await;
    let (status, page) = search(
        &harness,
        "state=Pending&workflow=approved-refund&workflow=approved-refund&limit=100",
    )
    .await;
    assert_eq!((status, ids(&page).len()), (200, 10), "{page}");
    assert_eq!(
        page["tasks"][0]["attributes"],
        json!({"customer": "c-0", "amount": 0})
    );
    let (_, page) = search(
        &harness,
        "state=Pending&from=2027-01-15T08:00:00Z&to=2027-01-15T08:00:01Z",
    )
    .await;
    assert_eq!(
        ids(&page).len(),
        10,
        "created at the harness's start: {page}"
    );
    let (_, page) = search(&harness, "state=Pending&from=2027-01-15T08:00:01Z").await;
    assert_eq!(ids(&page).len(), 0, "{page}");
    let (_, page) = search(&harness, "state=Pending&error=refused").await;
    assert_eq!(ids(&page).len(), 0, "none failed: {page}");
    let (_, page) = search(&harness, "attribute.customer=c-3&workflow=refund").await;
    assert_eq!(ids(&page).len(), 0, "another workflow's: {page}");
    let version = harness.task("refund-0").await["workflow"]["version"]
        .as_u64()
        .expect("a version");
    let (_, page) = search(
        &harness,
        &format!("state=Pending&workflow=approved-refund&version={version}"),
    )
    .await;
    assert_eq!(ids(&page).len(), 10, "{page}");
    let next = version + 1;
    let (_, page) = search(&harness, &format!("state=Pending&version={next}")).await;
    assert_eq!(ids(&page).len(), 0, "another version's: {page}");
    let version = version.to_string();
    let printed = harness
        .sas_ok(&[
            "tasks",
            "find",
            "--state",
            "Pending",
            "--workflow",
            "approved-refund",
            "--workflow-version",
            &version,
        ])
        .await;
    assert!(printed.contains("(10 found, "), "{printed}");

    for (query, field) in [
        ("workflow=approved-refund", "attribute"),
        ("attribute.Customer=c-1", "attribute.Customer"),
        ("state=Done", "state"),
        ("state=Error&from=yesterday", "from"),
        ("state=Error&version=two", "version"),
        ("state=Error&limit=0", "limit"),
        ("state=Error&colour=red", "colour"),
        ("attribute.customer=c-1&after=nonsense", "after"),
    ] {
        let (status, answer) = search(&harness, query).await;
        assert_eq!(status, 400, "{query}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{query}: {answer}");
    }
}

/// A bulk action takes the tasks whose search attributes it names, listed from the
/// index of one of them: customer c-1's five refunds of twenty paused through the API,
/// then customer c-3's refund of 40 through `sas pause-all --where`; a filter naming
/// no attribute's name is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_action_takes_the_tasks_whose_attributes_it_names() {
    let harness = Harness::start(5).await;
    harness.waiting_refunds(20, 4).await;
    let body = json!({"batch": "c-1", "state": "Pending", "attributes": {"customer": "c-1"}});
    let body = body.to_string();
    let (status, _, report) = harness
        .call("POST", "/operator/bulk/pause", Some(body.as_bytes()))
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        [&report["examined"], &report["matched"], &report["taken"]],
        [&json!(5), &json!(5), &json!(5)],
        "the index lists customer c-1's alone: {report}"
    );
    let printed = harness
        .sas_ok(&[
            "pause-all",
            "--batch",
            "c-3",
            "--state",
            "Pending",
            "--where",
            "customer=c-3",
            "--where",
            "amount=40",
        ])
        .await;
    // Listed from the index of the first attribute by name: the refunds of 40.
    assert!(
        printed.contains("3 examined, 1 matched, 1 paused"),
        "{printed}"
    );
    let mut paused = Vec::new();
    for i in 0..20 {
        if !harness.task(&format!("refund-{i}")).await["paused"].is_null() {
            paused.push(i);
        }
    }
    assert_eq!(paused, [1, 5, 9, 11, 13, 17]);

    let body = br#"{"batch": "b", "attributes": {"Customer": "c-1"}}"#;
    let (status, _, answer) = harness
        .call("POST", "/operator/bulk/pause", Some(body))
        .await;
    assert_eq!(
        (status, &answer["error"]["field"]),
        (400, &json!("attributes")),
        "{answer}"
    );
}
