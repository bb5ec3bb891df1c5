//! The listings' conformance ([`TaskListing`]): pages of a state, and the cursors
//! between them.

use std::collections::BTreeSet;

use sas_core::ports::{StoreError, TaskListing};
use sas_domain::task::{Task, TaskState};

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
