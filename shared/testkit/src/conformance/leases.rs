//! The lease index's conformance ([`LeaseIndex`](sas_core::ports::LeaseIndex)): a pass
//! over the expired leases reads those expired only, each once.

use std::collections::BTreeSet;

use sas_core::ports::{ExpiredCursor, StateStore};
use sas_domain::limits::MAX_DELAY;
use sas_domain::task::{Task, TaskState};
use sas_domain::time::Timestamp;

use super::{changed, new_task};

pub(super) async fn the_sweep_reads_expired_leases_only(store: &dyn StateStore) {
    for (id, lease) in [("late-b", 2_000), ("late-a", 1_000), ("later", 50_000)] {
        let (task, order) = new_task(id, Timestamp(0));
        let task = Task {
            complete_by: Some(Timestamp(lease)),
            ..task
        };
        store.create(&task, &order).await.expect("created");
    }
    // Leases further off than a deadline message can be delayed, which none watches:
    // swept once one can reach their end, not at it.
    let reach = i64::try_from(MAX_DELAY.as_millis()).expect("minutes");
    for (id, lease) in [("far-near", 9_000 + reach), ("far", 11_000 + reach)] {
        let (task, order) = new_task(id, Timestamp(0));
        let task = Task {
            state: TaskState::Processing,
            complete_by: Some(Timestamp(lease)),
            deadline: None,
            ..task
        };
        store.create(&task, &order).await.expect("created");
    }
    let (done, order) = new_task("done", Timestamp(0));
    store.create(&done, &order).await.expect("created");
    let finished = changed(&done, |t| {
        t.state = TaskState::Processed;
        t.complete_by = None;
    });
    store.update(&finished).await.expect("finished");

    let start = ExpiredCursor::default();
    let expired = store
        .expired(Timestamp(10_000), 10, &start)
        .await
        .expect("sweep");
    assert!(expired.unreadable.is_empty());
    let ids: Vec<_> = expired.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        ["late-a", "late-b", "far-near"],
        "expired leases, and a long one within a message's reach, soonest first"
    );
    let one = store
        .expired(Timestamp(10_000), 1, &start)
        .await
        .expect("sweep");
    assert!(
        one.tasks.len() <= 1 && one.next.is_some(),
        "the limit holds, and the pass goes on: {one:?}"
    );
}

/// A pass, page after page from where the last stopped, reads each expired lease once:
/// its reads grow with the leases, not with their square over the page.
pub(super) async fn a_pass_reads_each_expired_lease_once(store: &dyn StateStore) {
    const EXPIRED: usize = 25;
    const PAGE: usize = 4;
    // Ending in threes at once (a page ends among leases that end together), all before
    // the other tests' leases, which are live at `now`.
    let now = Timestamp(999);
    let mut expected = BTreeSet::new();
    for n in 0..EXPIRED {
        let (task, order) = new_task(&format!("pass-{n:02}"), Timestamp(0));
        let lease = 100 + i64::try_from(n / 3).expect("small") * 100;
        let task = Task {
            complete_by: Some(Timestamp(lease)),
            ..task
        };
        store.create(&task, &order).await.expect("created");
        expected.insert(task.id.to_string());
    }
    let mut read = Vec::new();
    let mut cursor = ExpiredCursor::default();
    for pages in 1.. {
        assert!(pages <= 2 * EXPIRED, "the pass ends");
        let page = store.expired(now, PAGE, &cursor).await.expect("a page");
        assert!(
            page.tasks.len() <= PAGE,
            "a page reads at most its limit: {}",
            page.tasks.len()
        );
        assert!(page.tasks.is_sorted_by_key(Task::sweep_at), "soonest first");
        read.extend(page.tasks.iter().map(|t| t.id.to_string()));
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert_eq!(
        read.len(),
        EXPIRED,
        "each expired lease read once in a pass: {read:?}"
    );
    assert_eq!(
        read.into_iter().collect::<BTreeSet<_>>(),
        expected,
        "every expired lease"
    );
}
