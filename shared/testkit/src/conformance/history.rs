//! The executions' histories' conformance ([`ExecutionHistory`]): each write's events
//! kept with it, read a page at a time in either order.

use sas_core::ports::{ExecutionHistory, HistoryPage, StateStore};
use sas_domain::decide::{on_run, submit};
use sas_domain::ids::TaskId;
use sas_domain::submission::Submission;
use sas_domain::time::Timestamp;
use sas_domain::workflow::Workflow;
use serde_json::json;

/// Every event id of a history read in pages of `size`, in `reverse` order or not.
async fn paged(store: &dyn ExecutionHistory, id: &TaskId, size: usize, reverse: bool) -> Vec<u64> {
    let (mut ids, mut after) = (Vec::new(), None);
    loop {
        let page = HistoryPage {
            after,
            limit: size,
            reverse,
        };
        let events = store.history(id, page).await.expect("a page");
        assert!(events.len() <= size, "a page holds at most its limit");
        let Some(last) = events.last() else {
            return ids;
        };
        after = Some(last.id);
        ids.extend(events.iter().map(|event| event.id));
    }
}

/// A loop's execution, written over several writes, reads back whole, in order, a
/// page at a time either way.
pub(super) async fn histories_are_kept_with_their_writes_and_paged(store: &dyn StateStore) {
    let machine = json!({
        "StartAt": "Loop",
        "States": {
            "Loop": {"Type": "Pass", "Parameters": {"n.$": "States.MathAdd($.n, 1)"}, "Next": "Again?"},
            "Again?": {"Type": "Choice", "Choices": [{"Variable": "$.n", "NumericLessThan": 120, "Next": "Loop"}],
                       "Default": "Done"},
            "Done": {"Type": "Succeed"}
        }
    });
    let workflow = Workflow::parse("loop.asl.json", &machine.to_string()).expect("a machine");
    let id = TaskId::parse("history-loop").expect("id");
    let (mut task, order, _) = submit(
        &workflow,
        Submission::new(id.clone(), json!({"n": 0})),
        Timestamp(0),
    );
    store.create(&task, &order).await.expect("created");
    let mut writes = 0;
    while !task.state.is_final() {
        writes += 1;
        assert!(writes < 50, "the loop ends");
        task = on_run(&task, &workflow, &order, "s1", Timestamp(writes))
            .next
            .expect("moved on");
        store.update(&task).await.expect("written");
    }
    assert!(
        writes > 1,
        "the loop's history is written over several writes"
    );
    let all = store
        .history(
            &id,
            HistoryPage {
                after: None,
                limit: 10_000,
                reverse: false,
            },
        )
        .await
        .expect("the history");
    let count = all.len() as u64;
    let ids: Vec<u64> = all.iter().map(|event| event.id).collect();
    assert_eq!(
        ids,
        (1..=count).collect::<Vec<_>>(),
        "every event, once, in order"
    );
    assert_eq!(all[0].event["type"], "ExecutionStarted");
    assert_eq!(all[all.len() - 1].event["type"], "ExecutionSucceeded");
    assert_eq!(
        paged(store, &id, 7, false).await,
        ids,
        "pages of 7 cover it in order"
    );
    let mut reversed = ids.clone();
    reversed.reverse();
    assert_eq!(paged(store, &id, 7, true).await, reversed, "and in reverse");
    let nobody = TaskId::parse("no-history").expect("id");
    let none = HistoryPage {
        after: None,
        limit: 10,
        reverse: false,
    };
    assert!(store.history(&nobody, none).await.expect("read").is_empty());
}
