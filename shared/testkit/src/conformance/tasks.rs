//! The tasks' conformance ([`TaskStore`]): creations, conditional writes and
//! transactions.

use sas_core::ports::{StoreError, TaskStore};
use sas_domain::ids::TaskId;
use sas_domain::task::{EarlierInput, Order, TaskState};
use sas_domain::time::Timestamp;

use super::{changed, new_task};

pub(super) async fn conditional_writes_and_transactions(store: &dyn TaskStore) {
    let (task, order) = new_task("cw", Timestamp(1_000));
    store.create(&task, &order).await.expect("created");
    let other_order = Order {
        task_id: task.id.clone(),
        input: std::sync::Arc::new(serde_json::json!({"other": true})),
        earlier: Vec::new(),
    };
    assert!(
        matches!(
            store.create(&task, &other_order).await,
            Err(StoreError::Conflict)
        ),
        "the id is taken"
    );
    let (stored, stored_order) = store
        .task_with_order(&task.id)
        .await
        .expect("read")
        .expect("there");
    assert_eq!(
        (stored, stored_order),
        (task.clone(), order.clone()),
        "the failed creation changed nothing"
    );

    let first = changed(&task, |t| t.locked_by = Some("s1".into()));
    let second = changed(&task, |t| t.locked_by = Some("s2".into()));
    let (a, b) = tokio::join!(store.update(&first), store.update(&second));
    assert!(
        a.is_ok() != b.is_ok(),
        "exactly one racing write wins: {a:?} {b:?}"
    );
    let winner = if a.is_ok() { first } else { second };
    assert_eq!(
        store.task(&task.id).await.expect("read"),
        Some(winner.clone())
    );
    let stale = changed(&task, |t| t.failure_count = 9);
    assert!(
        matches!(store.update(&stale).await, Err(StoreError::Conflict)),
        "a stale version loses"
    );
    let stale_move = changed(&task, |t| t.state = TaskState::Processing);
    assert!(
        matches!(store.update(&stale_move).await, Err(StoreError::Conflict)),
        "a stale version loses, whether or not it changes the state"
    );
    assert!(
        matches!(
            store.update_with_order(&stale, &other_order).await,
            Err(StoreError::Conflict)
        ),
        "a stale version loses, and its order data with it"
    );
    let edited_order = Order {
        earlier: vec![EarlierInput {
            until_run: 1,
            input: serde_json::Value::clone(&order.input),
        }],
        ..other_order
    };
    let resubmitted = changed(&winner, |t| t.run = 2);
    store
        .update_with_order(&resubmitted, &edited_order)
        .await
        .expect("the task and its order data written");
    assert_eq!(
        store.task_with_order(&task.id).await.expect("read"),
        Some((resubmitted, edited_order)),
        "both changed"
    );
    assert_eq!(
        store
            .task(&TaskId::parse("nobody").expect("id"))
            .await
            .expect("read"),
        None
    );
}
