//! The listings' conformance ([`TaskListing`]): pages of a state, and the cursors
//! between them; tasks found by an attribute.

use std::collections::BTreeSet;

use sas_core::ports::{StateStore, StoreError, TaskListing};
use sas_domain::task::{Task, TaskState};
use sas_domain::time::Timestamp;
use serde_json::json;

/// The pages of a state cover it, each task once, and go on from the cursor after any
/// of its tasks; a cursor the store did not give is refused. The state paged through
/// is Pending, as the tasks the tests before left it.
pub(super) async fn the_pages_cover_a_state_each_task_once(store: &dyn TaskListing) {
    let listed = store.list(TaskState::Pending, 2, None).await.expect("page");
    assert_eq!(listed.tasks.len(), 2);
    let rest = store
        .list(TaskState::Pending, 2, listed.next.as_deref())
        .await
        .expect("page 2");
    let all: BTreeSet<_> = listed
        .tasks
        .iter()
        .chain(&rest.tasks)
        .map(|t| t.id.to_string())
        .collect();
    let pending = ["cw", "late-a", "late-b", "later"].map(String::from).into();
    assert_eq!(all, pending, "the pages cover the state, each task once");
    assert_eq!(rest.next, None);
    // A page cut after its first task goes on from the cursor after it.
    assert_eq!(
        listed.after.len(),
        listed.tasks.len(),
        "a cursor after each task"
    );
    let after_first = store
        .list(TaskState::Pending, 3, Some(&listed.after[0]))
        .await
        .expect("the page after the first task");
    let ids = |page: &[Task]| page.iter().map(|t| t.id.to_string()).collect::<Vec<_>>();
    assert_eq!(
        ids(&after_first.tasks),
        ids(&[&listed.tasks[1..], &rest.tasks[..]].concat()),
        "the tasks after the first, in order"
    );
    for state in [TaskState::Pending, TaskState::Error] {
        assert!(
            matches!(
                store.list(state, 2, Some("not-a-cursor")).await,
                Err(StoreError::InvalidCursor(_))
            ),
            "a cursor the store did not give is refused ({state:?})"
        );
    }
    let too_long = format!("1.{}", "a".repeat(2000));
    assert!(
        matches!(
            store.list(TaskState::Error, 2, Some(&too_long)).await,
            Err(StoreError::InvalidCursor(_))
        ),
        "a cursor whose id no task could have is refused, not sent to the store"
    );
    assert!(
        store
            .list(TaskState::Error, 10, None)
            .await
            .expect("page")
            .tasks
            .is_empty()
    );
}

/// Tasks are found by an attribute's value, page after page, each once, those with
/// another value not: indexed as the core indexes them, before their records'
/// writes.
pub(super) async fn tasks_are_found_by_their_attributes(store: &dyn StateStore) {
    for (id, customer) in [
        ("attr-1", "c-9"),
        ("attr-2", "c-8"),
        ("attr-3", "c-9"),
        ("attr-4", "c-9"),
    ] {
        let (mut task, order) = super::new_task(id, Timestamp(5_000));
        task.attributes.insert("customer".into(), json!(customer));
        let changed = [("customer".to_owned(), customer.to_owned())];
        store
            .index_attributes(&task, &changed)
            .await
            .expect("indexed");
        store.create(&task, &order).await.expect("created");
    }
    let mut found = Vec::new();
    let mut after = None;
    for _ in 0..20 {
        let page = (store.with_attribute("customer", "c-9", 2, after.as_deref()))
            .await
            .expect("a page");
        assert!(page.tasks.len() <= 2, "a page of 2 at most");
        found.extend(page.tasks.iter().map(|t| t.id.to_string()));
        after = page.next;
        if after.is_none() {
            break;
        }
    }
    found.sort();
    assert_eq!(
        found,
        ["attr-1", "attr-3", "attr-4"],
        "each once, c-8's not"
    );
    assert!(matches!(
        store
            .with_attribute("customer", "c-9", 2, Some("nonsense"))
            .await,
        Err(StoreError::InvalidCursor(_))
    ));
}
